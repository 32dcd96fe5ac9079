//! The `cudal1` binary end to end on the CPU: real tasks and candidates, the real Python runner,
//! a real SQLite file.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod adversarial;
mod baselines;
mod browser;
mod cli;
mod engine;
mod judge;
mod layering;
mod memory;
mod optimize;
mod output;
mod own_share;
mod profile;
mod pty;
mod report;
mod serve;
mod steady;
mod train;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The binary with a persistent extension cache (C++ builds are slow) and the given store.
fn cudal1(db: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cudal1"));
    cmd.current_dir(repo())
        .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
        .env("CUDAL1_DB", db);
    cmd
}

fn run(mut cmd: Command) -> Output {
    let out = cmd.output().expect("cudal1 runs");
    if !out.status.success() {
        eprintln!("stderr:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    out
}

/// Stderr without the progress reporter's lines (`[stage] ...`, written where stderr is not a
/// terminal): what the command itself said.
fn said(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !(l.starts_with('[') && l.contains("] ")))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

const FAST_TIMING: [&str; 8] =
    ["--device", "cpu", "--budget", "0.3", "--call-timeout", "5", "--load-timeout", "120"];

/// The keys docs/json.md lists in the table after `<!-- keys: SECTION -->`: (dotted path,
/// whether it is optional).
fn documented(section: &str) -> Vec<(String, bool)> {
    let doc = std::fs::read_to_string(repo().join("docs/json.md")).unwrap();
    let marker = format!("<!-- keys: {section} -->");
    let start =
        doc.find(&marker).unwrap_or_else(|| panic!("docs/json.md has no section `{section}`"));
    doc[start + marker.len()..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let mut cells = row.split('|').skip(1);
            let key = cells.next().unwrap().trim().trim_matches('`').to_owned();
            let optional = cells.next().unwrap_or("").trim().starts_with("*optional*");
            (key, optional)
        })
        .collect()
}

/// Checks the keys of the object at `path` of `value` ("" for the top level) against the keys
/// docs/json.md documents directly below `doc_path` in `sections`: each documented key that is
/// not optional is there, and each key there is documented.
fn assert_documented(value: &Value, path: &str, sections: &[&str], doc_path: &str) {
    let object = path.split('.').filter(|p| !p.is_empty()).fold(value, |v, k| &v[k]);
    let Some(object) = object.as_object() else { panic!("`{path}` is not an object in {value}") };
    let prefix = if doc_path.is_empty() { String::new() } else { format!("{doc_path}.") };
    let keys: Vec<(String, bool)> = sections
        .iter()
        .flat_map(|s| documented(s))
        .filter_map(|(k, optional)| {
            let rest = k.strip_prefix(&prefix)?;
            (!rest.contains('.')).then(|| (rest.to_owned(), optional))
        })
        .collect();
    assert!(!keys.is_empty(), "docs/json.md documents nothing below `{doc_path}` in {sections:?}");
    for (k, optional) in &keys {
        assert!(
            *optional || object.contains_key(k),
            "`{prefix}{k}` is documented but missing from {}",
            Value::Object(object.clone())
        );
    }
    for k in object.keys() {
        assert!(
            keys.iter().any(|(d, _)| d == k),
            "`{prefix}{k}` is in the output but not in docs/json.md ({sections:?})"
        );
    }
}

/// With `--prefetch true` the next candidates' processes are started while one is timed (the
/// default on GPUs): crashes, hangs and build failures beside them change nothing.
#[test]
fn every_verdict_on_the_cpu_suite_matches_its_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = cudal1(&dir.path().join("s.db"));
    cmd.args([
        "eval",
        "--suite",
        "tests/suite-cpu/tasks",
        "--candidates",
        "tests/suite-cpu/candidates",
        "--json",
        "--check-expectations",
    ])
    .args(["--prefetch", "true"])
    .args(FAST_TIMING);
    let out = run(cmd);
    let lines = json_lines(&out);
    let (summary, rows) = lines.split_last().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for r in rows {
        let expected = r["expect"]["verdict"]
            .as_str()
            .unwrap_or_else(|| panic!("{} has no expectation", r["candidate"]));
        assert_eq!(r["verdict"], expected, "{}: {}", r["candidate"], r["reason"]);
        assert!(!r["reason"].as_str().unwrap().is_empty());
        // The phases account for the whole duration, from submission to verdict.
        let phases = r["measurements"]["phases_ms"].as_object().unwrap();
        let sum: f64 = phases.values().map(|v| v.as_f64().unwrap()).sum();
        let duration = r["duration_ms"].as_f64().unwrap();
        assert!(
            (sum - duration).abs() <= 0.01 * duration + 1.0,
            "{}: phases sum to {sum} of {duration}: {phases:?}",
            r["candidate"]
        );
        if r["verdict"] == "correct" {
            let mut names: Vec<&str> = phases.keys().map(String::as_str).collect();
            names.retain(|n| *n != "compile");
            assert_eq!(
                names,
                [
                    "correctness",
                    "device_wait",
                    "first_call",
                    "load",
                    "other",
                    "queue",
                    "reference",
                    "start",
                    "timing",
                    "verdict"
                ],
                "{}",
                r["candidate"]
            );
            assert!(phases["timing"].as_f64().unwrap() > 0.0);
            let s = &r["speedup"];
            assert!(s["ci_low"].as_f64().unwrap() <= s["median"].as_f64().unwrap());
            assert!(s["median"].as_f64().unwrap() <= s["ci_high"].as_f64().unwrap());
        }
        seen.insert(r["verdict"].as_str().unwrap().to_owned());
    }
    let all: Vec<&str> =
        vec!["compile_error", "correct", "exploit", "incorrect", "runtime_error", "timeout"];
    assert_eq!(seen.iter().map(String::as_str).collect::<Vec<_>>(), all);
    assert_eq!(summary["summary"]["counts"]["expectation_mismatches"], 0);
    assert_eq!(summary["summary"]["counts"]["candidates"].as_u64().unwrap() as usize, rows.len());
    assert_eq!(summary["summary"]["candidates"]["count"].as_u64().unwrap() as usize, rows.len());
    assert!(out.status.success());
}

fn small_suite(root: &Path) -> (PathBuf, PathBuf) {
    let tasks = root.join("tasks/level1");
    let cands = root.join("cands/level1/1_Diagonal_Matmul");
    std::fs::create_dir_all(&tasks).unwrap();
    std::fs::create_dir_all(&cands).unwrap();
    let src = repo().join("tests/suite-cpu");
    std::fs::copy(
        src.join("tasks/level1/1_Diagonal_Matmul.py"),
        tasks.join("1_Diagonal_Matmul.py"),
    )
    .unwrap();
    for c in ["fast.py", "wrong_axis.py", "inplace_returns_input.py", "tensor_subclass.py"] {
        std::fs::copy(src.join("candidates/level1/1_Diagonal_Matmul").join(c), cands.join(c))
            .unwrap();
    }
    (root.join("tasks"), root.join("cands"))
}

fn stored_rows(db: &Path) -> i64 {
    let Ok(conn) = rusqlite::Connection::open(db) else { return 0 };
    conn.query_row("SELECT count(*) FROM evaluations", [], |r| r.get(0)).unwrap_or(0)
}

#[test]
fn a_crashed_batch_resumes_without_redoing_finished_work() {
    let dir = tempfile::tempdir().unwrap();
    let (tasks, cands) = small_suite(dir.path());
    let db = dir.path().join("r.db");
    let batch = |json: bool| {
        let mut cmd = cudal1(&db);
        cmd.arg("eval")
            .arg("--suite")
            .arg(&tasks)
            .arg("--candidates")
            .arg(&cands)
            .args(FAST_TIMING);
        if json {
            cmd.arg("--json");
        }
        cmd
    };
    // Kill the first run as soon as one result is saved.
    let mut child = batch(false).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while stored_rows(&db) < 1 {
        assert!(Instant::now() < deadline, "no result was saved in time");
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait().unwrap();
    let saved = stored_rows(&db);
    assert!(saved >= 1);

    let out = run(batch(true));
    let lines = json_lines(&out);
    let rows = &lines[..lines.len() - 1];
    assert_eq!(rows.len(), 4);
    let reused = rows.iter().filter(|r| r["reused"] == true).count() as i64;
    assert_eq!(reused, saved, "exactly the saved results are reused");
    assert_eq!(stored_rows(&db), 4);

    // --force evaluates everything again.
    let mut cmd = batch(true);
    cmd.arg("--force");
    let lines = json_lines(&run(cmd));
    assert!(lines[..4].iter().all(|r| r["reused"] == false));
}

#[test]
fn a_batch_shows_a_bar_in_a_terminal_and_lines_in_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let (tasks, cands) = small_suite(dir.path());
    let db = dir.path().join("p.db");
    let batch = || {
        let mut cmd = cudal1(&db);
        cmd.arg("eval")
            .arg("--suite")
            .arg(&tasks)
            .arg("--candidates")
            .arg(&cands)
            .args(FAST_TIMING);
        cmd
    };
    // A terminal: the bar over the four candidates, and a line per finished one above it.
    let mut terminal = pty::Terminal::spawn(batch(), 120);
    terminal.child.wait().unwrap();
    terminal.wait_for("reason", Duration::from_secs(10));
    let screen = terminal.screen();
    assert!(screen.contains("/4 evaluate"), "a bar over the batch: {screen}");
    for c in ["fast", "wrong_axis", "inplace_returns_input", "tensor_subclass"] {
        assert!(
            screen.lines().any(|l| l.contains("1_Diagonal_Matmul") && l.contains(c)),
            "a line for {c}: {screen}"
        );
    }

    // A log: JSON alone on stdout, and on stderr plain lines by the log rule, no bar.
    let mut cmd = batch();
    cmd.args(["--json", "--force"]);
    let out = run(cmd);
    assert_eq!(json_lines(&out).len(), 5, "four rows and the summary");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().any(|l| l.starts_with("[evaluate] ")), "a progress line: {err}");
    assert!(!err.contains('\r') && !err.contains("\x1b["), "no bar drawn in a log: {err:?}");
}

#[test]
fn single_eval_prints_the_promised_json() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = cudal1(&dir.path().join("one.db"));
    cmd.args([
        "eval",
        "--task",
        "tests/suite-cpu/tasks/level1/1_Diagonal_Matmul.py",
        "--candidate",
        "tests/suite-cpu/candidates/level1/1_Diagonal_Matmul/fast.py",
        "--json",
    ])
    .args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "correct", "{}", v["reason"]);
    for k in ["median", "ci_low", "ci_high"] {
        assert!(v["speedup"][k].as_f64().unwrap() > 0.0, "{k}");
    }
    assert!(v["ref_ms"].as_f64().unwrap() > 0.0 && v["candidate_ms"].as_f64().unwrap() > 0.0);
    // The broadcast (O(NM)) beats the dense diagonal product (O(N^2 M)) even on a CPU.
    assert!(v["speedup"]["median"].as_f64().unwrap() > 1.5, "{}", v["speedup"]);
    assert_eq!(v["environment"]["gpu"], Value::Null);
    // On the CPU the host clock is the window, and issue times are recorded for both sides.
    let timing = &v["measurements"]["timing"];
    assert_eq!(timing["window"]["kind"], "host");
    assert!(
        timing["reference_issue_ms"].as_f64().unwrap() > 0.0
            && timing["candidate_issue_ms"].as_f64().unwrap() > 0.0
    );
    assert_eq!(timing["spin_us"], Value::Null);

    // The same evaluation again comes from the store, and says so.
    let mut cmd = cudal1(&dir.path().join("one.db"));
    cmd.args([
        "eval",
        "--task",
        "tests/suite-cpu/tasks/level1/1_Diagonal_Matmul.py",
        "--candidate",
        "tests/suite-cpu/candidates/level1/1_Diagonal_Matmul/fast.py",
    ])
    .args(FAST_TIMING);
    let again = run(cmd);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("(from the store: the same task, candidate and settings were judged before by this version of cudal1 on this class of device; --force evaluates again)"));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains(&format!("id:         {}", v["id"])),
        "the stored row's id"
    );
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = cudal1(&dir.path().join("e.db"));
    cmd.args(["eval", "--task", "no/such/task.py", "--candidate", "x.py"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: cannot read `no/such/task.py`"), "{err}");

    let mut cmd = cudal1(&dir.path().join("e.db"));
    cmd.args(["eval", "--suite", "tests/suite-cpu/tasks", "--candidates", "no/such/dir"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));

    let mut cmd = cudal1(&dir.path().join("e.db"));
    cmd.args(["eval", "--task", "a.py", "--candidate", "b.py", "--window", "event"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--window") && err.contains("gpu") && err.contains("wall"), "{err}");

    // Timing cores named by hand that cannot be used stop the run before anything is evaluated.
    let mut cmd = cudal1(&dir.path().join("e.db"));
    cmd.env("CUDAL1_TIMING_CORES", "x")
        .args(["eval", "--task", "tests/suite-cpu/tasks/level1/1_Diagonal_Matmul.py"])
        .args(["--candidate", "tests/suite-cpu/candidates/level1/1_Diagonal_Matmul/fast.py"])
        .args(FAST_TIMING);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CUDAL1_TIMING_CORES=`x`: `x` is not a core number"), "{err}");
}

#[test]
fn tasks_list_shows_shapes_and_parameter_counts() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cudal1"));
    cmd.current_dir(repo()).args(["tasks", "list", "tests/suite-cpu/tasks", "--json"]);
    let out = run(cmd);
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 8);
    for r in &rows {
        assert_documented(r, "", &["list"], "");
    }
    let linear = rows.iter().find(|r| r["key"] == "level2/1_Linear_ReLU").unwrap();
    assert_eq!(linear["level"], 2);
    assert_eq!(linear["id"], 1);
    assert!(linear["parameters"].as_u64().unwrap() > 0);
    let inputs = linear["inputs"].as_array().unwrap();
    assert!(inputs[0].as_str().unwrap().starts_with("float32["), "{inputs:?}");
    // Sizes come from meta tensors: a [64, 64] float32 input, a [64, 128] output, 8320 parameters.
    assert_eq!(
        (
            linear["input_bytes"].as_u64(),
            linear["output_bytes"].as_u64(),
            linear["parameter_bytes"].as_u64()
        ),
        (Some(64 * 64 * 4), Some(64 * 128 * 4), Some(8320 * 4))
    );
    assert!(
        linear["memory_bytes"].as_u64().unwrap() > 2 * (64 * 64 * 4 + 2 * 64 * 128 * 4 + 8320 * 4),
        "{linear}"
    );
    let diag = rows.iter().find(|r| r["key"] == "level1/1_Diagonal_Matmul").unwrap();
    assert_eq!(diag["parameters"], 0);
}
