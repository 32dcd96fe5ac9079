//! `cudal1 baselines` and `eval --baseline` on the CPU: baselines measured through the engine and
//! stored, resumed from the store, CUDA graphs refused on the CPU with a reason, and speedups
//! restated against a stored baseline.

use super::{assert_documented, cudal1, json_lines, run, FAST_TIMING};
use serde_json::Value;

const TASK: &str = "level1/2_Swish";

#[test]
fn baselines_are_measured_stored_resumed_and_restate_eval_speedups() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cudal1.db");
    let baselines = || {
        let mut cmd = cudal1(&db);
        cmd.args([
            "baselines",
            "tests/suite-cpu/tasks",
            "--only",
            TASK,
            "--names",
            "eager,compile-default,cuda-graphs",
            "--json",
        ])
        .args(FAST_TIMING);
        run(cmd)
    };

    let out = baselines();
    assert!(out.status.success(), "a failing baseline is data, not a problem: {:?}", out.status);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 4, "{lines:?}");
    let row = |name: &str| {
        lines
            .iter()
            .find(|r| r["baseline"] == name)
            .unwrap_or_else(|| panic!("no `{name}` row in {lines:?}"))
            .clone()
    };
    for r in &lines[..3] {
        assert_documented(r, "", &["baselines"], "");
        assert_eq!(
            (r["task"].as_str(), r["gpu_class"].as_str(), r["reused"].as_bool()),
            (Some(TASK), Some("cpu"), Some(false))
        );
    }
    let summary = &lines[3];
    assert_documented(summary, "summary", &["baselines-summary"], "summary");
    assert_eq!(
        (
            summary["summary"]["counts"]["measured"].as_u64(),
            summary["summary"]["counts"]["failed"].as_u64()
        ),
        (Some(2), Some(1))
    );

    let eager = row("eager");
    assert_eq!(
        (eager["status"].as_str(), eager["speedup"]["median"].as_f64()),
        (Some("measured"), Some(1.0))
    );
    let eager_ms = eager["reference_ms"].as_f64().unwrap();
    assert!(eager_ms > 0.0 && eager["baseline_ms"].as_f64() == Some(eager_ms), "{eager}");
    assert!(eager["reason"].as_str().unwrap().contains("against itself"), "{eager}");

    let compiled = row("compile-default");
    assert_eq!(
        compiled["status"], "measured",
        "torch.compile (Inductor's C++ backend) works in the sandbox: {compiled}"
    );
    let s = &compiled["speedup"];
    let (median, low, high) = (
        s["median"].as_f64().unwrap(),
        s["ci_low"].as_f64().unwrap(),
        s["ci_high"].as_f64().unwrap(),
    );
    assert!(0.0 < low && low <= median && median <= high, "{compiled}");
    assert!(
        compiled["baseline_ms"].as_f64().unwrap() > 0.0
            && compiled["evaluation_id"].as_i64().is_some(),
        "{compiled}"
    );

    let graphs = row("cuda-graphs");
    assert_eq!((graphs["status"].as_str(), graphs["speedup"].is_null()), (Some("failed"), true));
    assert!(graphs["reason"].as_str().unwrap().contains("need a CUDA device"), "{graphs}");

    // Again: everything from the store, the same numbers, nothing evaluated.
    let again = json_lines(&baselines());
    assert_eq!(again[3]["summary"]["counts"]["reused"], 3, "{again:?}");
    let compiled_again = again.iter().find(|r| r["baseline"] == "compile-default").unwrap();
    assert_eq!(
        (compiled_again["reused"].as_bool(), &compiled_again["speedup"]),
        (Some(true), &compiled["speedup"])
    );

    // A candidate stated against the stored baseline: its speedup over eager divided by the
    // baseline's, with the conservative interval, in the row and in the summary.
    let candidates = dir.path().join("candidates.jsonl");
    let code = std::fs::read_to_string(
        super::repo().join("tests/suite-cpu/candidates/level1/2_Swish/correct.py"),
    )
    .unwrap();
    std::fs::write(&candidates, serde_json::json!({"task": TASK, "code": code}).to_string() + "\n")
        .unwrap();
    let mut cmd = cudal1(&db);
    cmd.args(["eval", "--suite", "tests/suite-cpu/tasks", "--candidates"])
        .arg(&candidates)
        .args(["--baseline", "compile-default", "--json"])
        .args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success(), "{:?}", out.status);
    let lines = json_lines(&out);
    let r = &lines[0];
    assert_eq!(r["verdict"], "correct", "{r}");
    assert_documented(r, "", &["evaluation"], "");
    assert_documented(r, "baseline", &["vs-baseline"], "baseline");
    let c = &r["speedup"];
    let v = &r["baseline"]["speedup"];
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert!(close(v["median"].as_f64().unwrap(), c["median"].as_f64().unwrap() / median), "{r}");
    assert!(close(v["ci_low"].as_f64().unwrap(), c["ci_low"].as_f64().unwrap() / high), "{r}");
    assert!(close(v["ci_high"].as_f64().unwrap(), c["ci_high"].as_f64().unwrap() / low), "{r}");
    assert_eq!(r["baseline"]["baseline_speedup"], compiled["speedup"]);
    let summary: &Value = &lines.last().unwrap()["summary"];
    assert_eq!(summary["baseline"]["name"], "compile-default");
    assert!(
        close(
            summary["baseline"]["tasks"]["geomean_speedup"].as_f64().unwrap(),
            v["median"].as_f64().unwrap()
        ),
        "{summary}"
    );
    assert!(
        close(summary["tasks"]["geomean_speedup"].as_f64().unwrap(), c["median"].as_f64().unwrap()),
        "the eager statistics are unchanged: {summary}"
    );

    // A baseline that was never measured: told what to run, nothing evaluated.
    let mut cmd = cudal1(&db);
    cmd.args(["eval", "--suite", "tests/suite-cpu/tasks", "--candidates"])
        .arg(&candidates)
        .args(["--baseline", "compile-max-autotune"])
        .args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no `compile-max-autotune` baseline on `cpu`") && err.contains("hint: measure them first with `cudal1 baselines SUITE --names compile-max-autotune`"), "{err}");
}
