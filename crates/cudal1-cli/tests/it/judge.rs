//! Results carry what judged them. `tests/fixtures/store-v7.db` is a store written by cudal1
//! before judges were recorded (schema 7): one `correct` evaluation of the Swish task's correct
//! candidate, made with these very flags. This build opens it, lists its row marked as an older
//! judge's, and judges the candidate again instead of serving that verdict, as it does for a row
//! of its own version made on another class of GPU.

use super::{cudal1, json_lines, repo, run, FAST_TIMING};
use cudal1_store::Store;
use serde_json::Value;

const TASK: &str = "tests/suite-cpu/tasks/level1/2_Swish.py";
const CANDIDATE: &str = "tests/suite-cpu/candidates/level1/2_Swish/correct.py";

fn eval_json(db: &std::path::Path) -> Value {
    let mut cmd = cudal1(db);
    cmd.args(["eval", "--task", TASK, "--candidate", CANDIDATE, "--json"]).args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn verdicts_of_an_older_judge_or_another_gpu_are_judged_again_and_stay_listed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    std::fs::copy(repo().join("crates/cudal1-cli/tests/fixtures/store-v7.db"), &db).unwrap();
    let current = cudal1_eval::judge_version();
    {
        let store = Store::open(&db).unwrap();
        let old = store.all_evaluations().unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(
            (old[0].verdict.as_str(), old[0].key.judge.as_str(), old[0].key.gpu_class.as_str()),
            ("correct", "", "")
        );
        // The same evaluation as this version made it on an H100: a speedup this CPU never showed.
        let mut h100 = old[0].to_new();
        h100.key.judge.clone_from(&current);
        h100.key.gpu_class = "nvidia-h100-80gb-hbm3".into();
        h100.speedup_median = Some(14.0);
        h100.reason = "14x on an H100".into();
        store.insert_evaluation(&h100).unwrap();
    }

    // Neither is this judge's: the candidate is judged again, here.
    let fresh = eval_json(&db);
    assert_eq!(fresh["reused"], false, "a verdict of another judge was served: {fresh}");
    assert_eq!(fresh["verdict"], "correct", "{}", fresh["reason"]);
    assert_eq!(
        (fresh["judge"]["version"].as_str(), fresh["judge"]["gpu_class"].as_str()),
        (Some(current.as_str()), Some("cpu"))
    );
    assert_eq!(fresh["id"], 3);
    // Its own verdict is reused.
    let again = eval_json(&db);
    assert_eq!((&again["reused"], &again["id"]), (&Value::Bool(true), &fresh["id"]));

    // The older rows stay readable, marked with their judges.
    let mut cmd = cudal1(&db);
    cmd.args(["show", "1", "--json"]);
    let out = run(cmd);
    assert!(out.status.success());
    let old: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(old["verdict"], "correct");
    assert_eq!(
        old["judge"],
        serde_json::json!({"version": null, "gpu_class": null, "current": false})
    );
    let mut cmd = cudal1(&db);
    cmd.args(["show", "1"]);
    let text = String::from_utf8_lossy(&run(cmd).stdout).into_owned();
    assert!(
        text.contains("judged by:  an older cudal1, before judges were recorded (never reused"),
        "{text}"
    );

    let mut cmd = cudal1(&db);
    cmd.arg("export");
    let rows = json_lines(&run(cmd));
    let judges: Vec<(Value, Value, Value)> = rows
        .iter()
        .map(|r| {
            (
                r["judge"]["version"].clone(),
                r["judge"]["gpu_class"].clone(),
                r["judge"]["current"].clone(),
            )
        })
        .collect();
    assert_eq!(
        judges,
        [
            (Value::Null, Value::Null, Value::Bool(false)),
            (current.clone().into(), "nvidia-h100-80gb-hbm3".into(), Value::Bool(true)),
            (current.clone().into(), "cpu".into(), Value::Bool(true)),
        ]
    );
    let csv = dir.path().join("all.csv");
    let mut cmd = cudal1(&db);
    cmd.args(["export", "--format", "csv", "--out"]).arg(&csv);
    assert!(run(cmd).status.success());
    let csv = std::fs::read_to_string(csv).unwrap();
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().contains(",duration_ms,judge,gpu_class,reason"));
    assert_eq!(lines.filter(|l| l.contains(&format!(",{current},cpu,"))).count(), 1, "{csv}");
}
