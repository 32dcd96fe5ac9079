//! `eval --own-share` needs a GPU and says so; a share stored with an evaluation is shown by
//! `show` (in words) and `show --json` (as documented).

use super::{assert_documented, cudal1, run, FAST_TIMING};
use serde_json::Value;

#[test]
fn the_own_share_is_refused_on_the_cpu_and_a_stored_one_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("own.db");
    let (task, cand) = (
        "tests/suite-cpu/tasks/level1/2_Swish.py",
        "tests/suite-cpu/candidates/level1/2_Swish/correct.py",
    );
    let mut cmd = cudal1(&db);
    cmd.args(["eval", "--task", task, "--candidate", cand, "--own-share"]).args(FAST_TIMING);
    let out = run(cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("`--own-share` needs a CUDA device"), "{err}");

    let mut cmd = cudal1(&db);
    cmd.args(["eval", "--task", task, "--candidate", cand, "--json"]).args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(e.get("own_share").is_none(), "none measured: {e}");
    let id = e["id"].as_i64().unwrap();

    // What `eval --own-share` stores on a GPU, recorded here by hand.
    let share = serde_json::json!({
        "share": 0.6, "own_ns": 600.0, "total_ns": 1000.0, "calls": 1, "profiled_ms_per_call": 0.001,
        "extension_symbols": 40, "triton_kernels": [], "profiled": true,
        "kernels": [
            {"name": "_Z5swishPKfPfi", "launches": 1, "time_ns": 600.0, "origin": "own"},
            {"name": "ampere_sgemm_128x64_nn", "launches": 1, "time_ns": 400.0, "origin": "library_name"}
        ]
    });
    let store = cudal1_store::Store::open(&db).unwrap();
    assert!(store.set_own_share(id, 0.6, &share).unwrap());
    drop(store);

    let mut cmd = cudal1(&db);
    cmd.args(["show", &id.to_string(), "--json"]);
    let stored: Value = serde_json::from_slice(&run(cmd).stdout).unwrap();
    assert_eq!(stored["own_share"], 0.6);
    assert_documented(&stored, "", &["evaluation", "stored"], "");
    assert_documented(&stored, "own_kernels", &["own-kernels"], "");
    let mut cmd = cudal1(&db);
    cmd.args(["show", &id.to_string()]);
    let shown = String::from_utf8_lossy(&run(cmd).stdout).into_owned();
    assert!(shown.contains("own kernels: 60% own (1 of 2 kernels; 1 of its own named like a library's, counted as library)"), "{shown}");

    // Judged again: the share of the old verdict is gone.
    let mut cmd = cudal1(&db);
    cmd.args(["eval", "--task", task, "--candidate", cand, "--json", "--force"]).args(FAST_TIMING);
    assert!(run(cmd).status.success());
    let mut cmd = cudal1(&db);
    cmd.args(["show", &id.to_string(), "--json"]);
    let stored: Value = serde_json::from_slice(&run(cmd).stdout).unwrap();
    assert!(stored.get("own_share").is_none(), "{stored}");
}
