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
    cmd.args(["eval", "--task", SWISH, "--candidate"]).arg(&hog).args(["--memory", "1G", "--json"]).args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["verdict"].as_str(), v["reason_class"].as_str()), (Some("runtime_error"), Some("out_of_memory")), "{}", v["reason"]);
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("ran out of memory while running the correctness checks (the first call, build time: under the load limit): it went over its memory limit of 1.0 GiB (it reached "), "{reason}");
    assert!(reason.contains("`--memory` sets the limit"), "{reason}");
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
    cmd.env("CUDAL1_WORK_DIR", &work).args(["eval", "--task"]).arg(&task).arg("--candidate").arg(&cand).args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error: the reference `level1/1_Huge_ReLU` failed while checking that it fits in memory: it needs about 1.5 TiB of memory, the host has "), "{err}");
    assert!(err.contains("inputs 256 GiB, outputs 256 GiB (kept twice)") && err.contains("\nhint: `--scale 0.25`"), "{err}");
    // Refused before anything of that size was made.
    assert!(std::fs::read_dir(&work).unwrap().next().is_none(), "scratch removed");

    let mut cmd = cudal1(&dir.path().join("h.db"));
    cmd.args(["eval", "--task"]).arg(&task).arg("--candidate").arg(&cand).args(["--scale", "0.0000152587890625", "--json"]).args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "correct", "{}", v["reason"]);
    assert_eq!(v["scale"], 0.0000152587890625);
    let scaled = v["warnings"].as_array().unwrap().iter().find(|w| w["class"] == "scaled").expect("marked as scaled");
    assert!(scaled["message"].as_str().unwrap().contains("batch_size 1048576 -> 16"), "{scaled}");

    // A scale that finds nothing to shrink says so.
    let fixed = dir.path().join("level1/2_Fixed.py");
    std::fs::write(&fixed, HUGE.replace("torch.randn(batch_size, dim)", "torch.randn(16, 8)")).unwrap();
    let mut cmd = cudal1(&dir.path().join("h.db"));
    cmd.args(["eval", "--task"]).arg(&fixed).arg("--candidate").arg(&cand).args(["--scale", "0.5"]).args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no module-level integer gives an input's leading dimension"), "{err}");
}
