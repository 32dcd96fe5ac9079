//! Output as people and programs read it: tables that fit the terminal, colours only where
//! wanted, `cudal1 show` and `cudal1 export`, and JSON that matches docs/json.md.

use super::{assert_documented, cudal1, json_lines, repo, run, FAST_TIMING};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Swish with a correct, a crashing and a wrong candidate, and a C++ build that fails.
fn small_batch(root: &Path) -> (PathBuf, PathBuf) {
    let src = repo().join("tests/suite-cpu");
    for (task, cands) in [
        ("2_Swish", vec!["correct.py", "raises_in_forward.py", "nan_output.py"]),
        ("4_Row_Sum", vec!["cpp_compile_error.py"]),
    ] {
        std::fs::create_dir_all(root.join("tasks/level1")).unwrap();
        std::fs::copy(
            src.join(format!("tasks/level1/{task}.py")),
            root.join(format!("tasks/level1/{task}.py")),
        )
        .unwrap();
        let dir = root.join("cands/level1").join(task);
        std::fs::create_dir_all(&dir).unwrap();
        for c in cands {
            std::fs::copy(src.join("candidates/level1").join(task).join(c), dir.join(c)).unwrap();
        }
    }
    (root.join("tasks"), root.join("cands"))
}

#[test]
fn a_batch_reads_well_as_a_table_as_json_in_show_and_in_export() {
    let dir = tempfile::tempdir().unwrap();
    let (tasks, cands) = small_batch(dir.path());
    let db = dir.path().join("o.db");
    let batch = || {
        let mut cmd = cudal1(&db);
        cmd.arg("eval")
            .arg("--suite")
            .arg(&tasks)
            .arg("--candidates")
            .arg(&cands)
            .args(FAST_TIMING)
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE");
        cmd
    };

    // JSON: every row and the summary as docs/json.md says; a failure keeps its own output.
    let mut cmd = batch();
    cmd.arg("--json");
    let lines = json_lines(&run(cmd));
    let (summary, rows) = lines.split_last().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        assert_documented(r, "", &["evaluation"], "");
        assert_documented(r, "measurements", &["measurements"], "measurements");
        if r["measurements"]["timing"].is_object() {
            assert_documented(r, "measurements.timing", &["timing"], "measurements.timing");
        }
    }
    for path in ["summary", "summary.counts", "summary.candidates", "summary.tasks"] {
        let doc = if path == "summary.tasks" { "summary.candidates" } else { path };
        assert_documented(summary, path, &["summary", "counts", "suite"], doc);
    }
    let by = |verdict: &str| {
        rows.iter().find(|r| r["verdict"] == verdict).unwrap_or_else(|| panic!("no {verdict} row"))
    };
    let crashed = by("runtime_error");
    let log = crashed["measurements"]["log_tail"].as_str().unwrap();
    assert!(
        log.contains("Traceback (most recent call last)") && log.contains("x.view(-1, 7, 11, 13)"),
        "{log}"
    );
    let broken = by("compile_error");
    let log = broken["measurements"]["log_tail"].as_str().unwrap();
    assert!(
        log.contains("error: expected") && log.contains("ninja"),
        "the compiler's whole output: {log}"
    );
    let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), ids.iter().collect::<std::collections::BTreeSet<_>>().len(), "{ids:?}");

    // A table in an 80-column terminal fits it, keeps the compiler's error line and has no colour
    // when stdout is not a terminal.
    let mut cmd = batch();
    cmd.env("COLUMNS", "80");
    let out = run(cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    let table: Vec<&str> = text.lines().filter(|l| l.starts_with(['┌', '│', '╞', '└'])).collect();
    assert!(table.len() > 6, "{text}");
    for l in &table {
        assert!(l.chars().count() <= 80, "wider than the terminal: {l}");
    }
    assert!(
        text.contains("error:") && text.contains("expected"),
        "the compile error's first compiler line: {text}"
    );
    assert!(!text.contains('\x1b'), "no colour in a pipe: {text}");
    // Colours when asked for, and never with NO_COLOR.
    let mut cmd = batch();
    cmd.env("CLICOLOR_FORCE", "1");
    assert!(String::from_utf8_lossy(&run(cmd).stdout).contains("\x1b["), "CLICOLOR_FORCE colours");
    let mut cmd = batch();
    cmd.env("CLICOLOR_FORCE", "1").env("NO_COLOR", "1");
    assert!(!String::from_utf8_lossy(&run(cmd).stdout).contains('\x1b'), "NO_COLOR wins");

    // `show` prints one evaluation in full: its traceback, its phases.
    let id = crashed["id"].as_i64().unwrap().to_string();
    let mut cmd = cudal1(&db);
    cmd.args(["show", &id]);
    let out = run(cmd);
    assert!(out.status.success());
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("verdict:    runtime_error (exception)")
            && shown.contains("duration:")
            && shown.contains("reference "),
        "{shown}"
    );
    assert!(shown.contains("    Traceback (most recent call last)"), "{shown}");
    let mut cmd = cudal1(&db);
    cmd.args(["show", &id, "--json"]);
    let stored: Value = serde_json::from_slice(&run(cmd).stdout).unwrap();
    assert_documented(&stored, "", &["evaluation", "stored"], "");
    assert_eq!(stored["measurements"]["log_tail"], crashed["measurements"]["log_tail"]);
    let mut cmd = cudal1(&db);
    cmd.args(["show", "99999"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hint: ids are in the `id` column"));

    // `export`: the batch's rows as JSON lines (as `show --json`) and as CSV.
    let batch_id = summary["summary"]["batch"].as_str().unwrap();
    let mut cmd = cudal1(&db);
    cmd.args(["export", "--batch", batch_id]);
    let exported = json_lines(&run(cmd));
    assert_eq!(exported.len(), 4);
    assert!(exported.contains(&stored));
    let csv = dir.path().join("all.csv");
    let mut cmd = cudal1(&db);
    cmd.args(["export", "--format", "csv", "--out"]).arg(&csv);
    assert!(run(cmd).status.success());
    let csv = std::fs::read_to_string(csv).unwrap();
    assert!(
        csv.starts_with(
            "id,created_at,batch_id,task,task_path,candidate,verdict,reason_class,speedup_median,"
        ),
        "{csv}"
    );
    assert_eq!(csv.matches(",runtime_error,exception,").count(), 1, "{csv}");
    assert!(
        csv.contains("\"the extension does not build:\n"),
        "a reason with line breaks is quoted: {csv}"
    );
    let mut cmd = cudal1(&db);
    cmd.args(["export", "--batch", "nope"]);
    assert_eq!(cmd.output().unwrap().status.code(), Some(2));
}

/// Issue 31: `eval --json` and `show` carry a Triton program's warm-up. The program takes its
/// PyTorch path on the CPU, where no Triton kernel can run; the warm-up call is made all the same.
#[test]
fn show_prints_a_triton_programs_warm_up() {
    let python = ["CUDAL1_TEST_PYTHON", "CUDAL1_PYTHON"]
        .iter()
        .find_map(std::env::var_os)
        .map_or_else(|| repo().join(".venv/bin/python"), PathBuf::from);
    let importable = std::process::Command::new(python)
        .args(["-c", "import triton"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !importable {
        eprintln!("skipped: the interpreter cannot import triton (PyTorch's CUDA wheels bring it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("triton_swish.py");
    std::fs::write(
        &program,
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n\
         @triton.jit\ndef _swish(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    \
         offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    \
         x = tl.load(x_ptr + offsets, mask=offsets < n)\n    \
         tl.store(out_ptr + offsets, x * tl.sigmoid(x), mask=offsets < n)\n\n\n\
         class ModelNew(nn.Module):\n    def forward(self, x):\n        if not x.is_cuda:\n            \
         return x * torch.sigmoid(x)\n        out = torch.empty_like(x)\n        \
         _swish[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)\n        \
         return out\n",
    )
    .unwrap();
    let db = dir.path().join("s.db");
    let mut cmd = cudal1(&db);
    cmd.args(["eval", "--task", "tests/suite-cpu/tasks/level1/2_Swish.py", "--candidate"])
        .arg(&program)
        .args(FAST_TIMING)
        .arg("--json");
    let out = run(cmd);
    assert!(out.status.success());
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["verdict"], "correct", "{e}");
    assert_documented(&e, "measurements", &["measurements"], "measurements");
    let t = &e["measurements"]["triton"];
    assert_eq!(
        (t["kernels"][0].as_str(), t["off_slot"].as_bool()),
        (Some("_swish"), Some(true)),
        "{t}"
    );
    assert!(e["measurements"]["phases_ms"]["triton_warmup"].as_f64().is_some_and(|ms| ms > 0.0));
    let mut cmd = cudal1(&db);
    cmd.args(["show", &e["id"].to_string()]);
    let shown = String::from_utf8_lossy(&run(cmd).stdout).into_owned();
    assert!(
        shown.contains("triton:     warm-up ")
            && shown.contains(" off the timing slot (_swish); kernel binaries compiled: 0 in the warm-up, 0 in the checks, 0 while timed"),
        "{shown}"
    );
}
