//! Memory as a person meets it: a candidate over its limit is out of memory with the size it
//! reached, a task too large for the machine is refused before it runs, with the numbers and what
//! to do, and `--scale` makes a smaller trial of it that says so.

use super::{cudal1, run, FAST_TIMING};
use serde_json::Value;
use std::path::Path;

const SWISH: &str = "tests/suite-cpu/tasks/level1/2_Swish.py";

/// Allocates 4 GiB, 256 MiB at a time, in its first call.
const HOG: &str = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        hoard = [torch.ones(1 << 26) for _ in range(16)]\n        return x * torch.sigmoid(x) + 0 * hoard[0][0]\n";

#[test]
fn a_candidate_over_its_memory_limit_is_out_of_memory_with_the_size_it_reached() {
    let dir = tempfile::tempdir().unwrap();
    let hog = dir.path().join("hog.py");
    std::fs::write(&hog, HOG).unwrap();
    let mut cmd = cudal1(&dir.path().join("m.db"));
    cmd.args(["eval", "--task", SWISH, "--candidate"])
        .arg(&hog)
        .args(["--memory", "1G", "--json"])
        .args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["verdict"].as_str(), v["reason_class"].as_str()),
        (Some("runtime_error"), Some("out_of_memory")),
        "{}",
        v["reason"]
    );
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("ran out of memory while running the correctness checks (the first call, build time: under the load limit): it went over its memory limit of 1.0 GiB (it reached "), "{reason}");
    // The verdict's reason (stored, and what `serve` returns) names no flag; the CLI says it.
    assert!(!reason.contains("--") && !reason.contains("hint"), "{reason}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("hint: `--memory` sets the limit"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A task whose one input is 256 GiB: no machine that runs these tests holds it.
const HUGE: &str = "import torch\nimport torch.nn as nn\n\nbatch_size = 1 << 20\ndim = 1 << 16\n\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n";

fn huge(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let task = dir.join("level1/1_Huge_ReLU.py");
    std::fs::create_dir_all(task.parent().unwrap()).unwrap();
    std::fs::write(&task, HUGE).unwrap();
    let cand = dir.join("cand.py");
    std::fs::write(&cand, HUGE.replace("class Model(", "class ModelNew(")).unwrap();
    (task, cand)
}

#[test]
fn a_task_too_large_for_the_machine_is_refused_and_scale_makes_a_trial_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let (task, cand) = huge(dir.path());
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = cudal1(&dir.path().join("h.db"));
    cmd.env("CUDAL1_WORK_DIR", &work)
        .args(["eval", "--task"])
        .arg(&task)
        .arg("--candidate")
        .arg(&cand)
        .args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let err = super::said(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error: the reference `level1/1_Huge_ReLU` failed while checking that it fits in memory: it needs about 1.5 TiB of memory, the host has "), "{err}");
    assert!(
        err.contains("inputs 256 GiB, outputs 256 GiB (kept twice)")
            && err.contains("\nhint: `--scale 0.25`"),
        "{err}"
    );
    // Refused before anything of that size was made.
    assert!(std::fs::read_dir(&work).unwrap().next().is_none(), "scratch removed");

    // In a batch, the reason (what the store and `serve` keep) names no flag, and the CLI still
    // says what to do.
    let (suite, cands) =
        (dir.path().join("suite/level1"), dir.path().join("cands/level1/1_Huge_ReLU"));
    std::fs::create_dir_all(&suite).unwrap();
    std::fs::create_dir_all(&cands).unwrap();
    std::fs::copy(&task, suite.join("1_Huge_ReLU.py")).unwrap();
    std::fs::copy(&cand, cands.join("cand.py")).unwrap();
    let mut cmd = cudal1(&dir.path().join("h.db"));
    cmd.args(["eval", "--suite"])
        .arg(dir.path().join("suite"))
        .arg("--candidates")
        .arg(dir.path().join("cands"))
        .args(["--json"])
        .args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let lines = super::json_lines(&out);
    let failures = &lines.last().unwrap()["summary"]["reference_failures"];
    let reason = failures[0].as_str().unwrap_or_else(|| panic!("{failures} {err}"));
    assert!(reason.contains("it needs about 1.5 TiB of memory"), "{reason}");
    assert!(!reason.contains("--") && !reason.contains("hint"), "{reason}");
    assert!(err.contains("hint: `--scale 0.25` (or smaller)"), "{err}");

    let mut cmd = cudal1(&dir.path().join("h.db"));
    cmd.args(["eval", "--task"])
        .arg(&task)
        .arg("--candidate")
        .arg(&cand)
        .args(["--scale", "0.0000152587890625", "--json"])
        .args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "correct", "{}", v["reason"]);
    assert_eq!(v["scale"], 0.0000152587890625);
    let scaled = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["class"] == "scaled")
        .expect("marked as scaled");
    assert!(scaled["message"].as_str().unwrap().contains("batch_size 1048576 -> 16"), "{scaled}");

    // A scale that finds nothing to shrink says so.
    let fixed = dir.path().join("level1/2_Fixed.py");
    std::fs::write(&fixed, HUGE.replace("torch.randn(batch_size, dim)", "torch.randn(16, 8)"))
        .unwrap();
    let mut cmd = cudal1(&dir.path().join("h.db"));
    cmd.args(["eval", "--task"])
        .arg(&fixed)
        .arg("--candidate")
        .arg(&cand)
        .args(["--scale", "0.5"])
        .args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no module-level integer gives an input's leading dimension"), "{err}");
}

/// A batch of the CPU suite's candidates of two tasks, in a suite of their own.
fn small_batch(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let suite = super::repo().join("tests/suite-cpu");
    let (tasks, candidates) = (dir.join("tasks/level1"), dir.join("candidates/level1"));
    for (task, names) in [
        ("1_Diagonal_Matmul", &["fast.py", "wrong_axis.py"][..]),
        ("2_Swish", &["correct.py", "nan_output.py", "raises_in_forward.py"][..]),
    ] {
        std::fs::create_dir_all(&tasks).unwrap();
        std::fs::copy(
            suite.join(format!("tasks/level1/{task}.py")),
            tasks.join(format!("{task}.py")),
        )
        .unwrap();
        std::fs::create_dir_all(candidates.join(task)).unwrap();
        for name in names {
            std::fs::copy(
                suite.join(format!("candidates/level1/{task}/{name}")),
                candidates.join(task).join(name),
            )
            .unwrap();
        }
    }
    (dir.join("tasks"), dir.join("candidates"))
}

/// Each row's verdict by task and candidate, and the summary's counts.
fn verdicts(dir: &Path, db: &str, flags: &[&str]) -> (Vec<(String, String, String)>, Value) {
    let (tasks, candidates) = (dir.join("tasks"), dir.join("candidates"));
    let mut cmd = cudal1(&dir.join(db));
    cmd.args(["eval", "--suite"]).arg(&tasks).arg("--candidates").arg(&candidates);
    cmd.args([
        "--json",
        "--check-expectations",
        "--mode",
        "correctness",
        "--device",
        "cpu",
        "--call-timeout",
        "20",
        "--load-timeout",
        "120",
    ])
    .args(flags);
    let out = run(cmd);
    assert!(out.status.success());
    let lines = super::json_lines(&out);
    let (summary, rows) = lines.split_last().unwrap();
    let mut v: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["verdict"], r["expect"]["verdict"], "{}: {}", r["candidate"], r["reason"]);
            (
                r["task"].as_str().unwrap().to_owned(),
                r["candidate"].as_str().unwrap().to_owned(),
                r["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    (v, summary["summary"]["counts"].clone())
}

#[test]
fn a_batch_that_cannot_all_fit_its_memory_gives_the_verdicts_of_one_lane() {
    let dir = tempfile::tempdir().unwrap();
    small_batch(dir.path());
    let (one_lane, counts) = verdicts(dir.path(), "one.db", &["--lanes", "1"]);
    assert_eq!(one_lane.len(), 5);
    assert_eq!(counts["ran_alone_for_memory"], 0, "{counts}");
    // Each job needs a reference and a candidate process (1 GiB and more): with 1.5 GiB for all,
    // three lanes run one job at a time, the others waiting for memory.
    let (squeezed, counts) =
        verdicts(dir.path(), "squeezed.db", &["--lanes", "3", "--memory-budget", "1536M"]);
    assert_eq!(squeezed, one_lane);
    assert!(counts["waited_for_memory"].as_u64().unwrap() >= 1, "{counts}");
    // With less than one job needs, every job runs alone, rather than never.
    let (alone, counts) =
        verdicts(dir.path(), "alone.db", &["--lanes", "3", "--memory-budget", "600M"]);
    assert_eq!(alone, one_lane);
    assert_eq!(counts["ran_alone_for_memory"], 5, "{counts}");
    assert_eq!(counts["waited_for_memory"], 5, "{counts}");
}
