//! `cudal1 profile` and `optimize --profile` on a machine without a GPU: `--dry-run` runs each
//! program under the profiling driver and says which fail and why; asking for a real profile, or
//! for profiles in prompts, without a GPU is a clear error. Profiles themselves are read from
//! Nsight Compute on the GPU (`bench/gpu_profile.sh`); their parsing, storing and reporting are
//! tested in their crates.

use super::{cudal1, json_lines, repo, run, FAST_TIMING};

const TASK: &str = "tests/suite-cpu/tasks/level1/2_Swish.py";

#[test]
fn a_dry_run_checks_each_program_and_a_profile_without_a_gpu_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let cands = repo().join("tests/suite-cpu/candidates/level1/2_Swish");
    let out = cudal1(&db)
        .args(["profile", TASK, "--dry-run", "--device", "cpu", "--json"])
        .arg(cands.join("correct.py"))
        .arg(cands.join("raises_in_forward.py"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a program that fails is a problem to look at");
    let rows = json_lines(&out);
    let ok: Vec<(String, bool)> = rows
        .iter()
        .map(|r| {
            (
                r["program"].as_str().unwrap().rsplit('/').next().unwrap().to_owned(),
                r["ok"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ok,
        [
            ("reference".to_owned(), true),
            ("correct.py".to_owned(), true),
            ("raises_in_forward.py".to_owned(), false)
        ]
    );
    let error = rows[2]["error"].as_str().unwrap();
    assert!(error.contains("runtime_error") && error.contains("warm-up"), "{error}");

    let out = cudal1(&db).args(["profile", TASK, "--device", "cpu"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("profiling needs a CUDA device"), "{err}");

    let out = cudal1(&db).args(["profile", TASK, "--no-reference"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to profile"));

    let out = cudal1(&db)
        .args([
            "optimize",
            TASK,
            "--device",
            "cpu",
            "--profile",
            "--llm-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--out",
        ])
        .arg(dir.path().join("o"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`--profile` needs a CUDA device") && err.contains("hint:"), "{err}");
}

/// A profiled program confines itself before it runs: one that writes beside the store fails
/// (and writes nothing); `--no-sandbox` lets the same program write, which shows what stopped it.
#[test]
fn a_profiled_program_cannot_write_outside_its_own_directories() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let planted = dir.path().join("planted.txt");
    let candidate = dir.path().join("writes_beside_the_store.py");
    std::fs::write(
        &candidate,
        format!(
            "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        open({:?}, 'w').write('planted')\n\n    def forward(self, x):\n        return x * torch.sigmoid(x)\n",
            planted.display().to_string()
        ),
    )
    .unwrap();
    let profile = |extra: &[&str]| {
        let out = cudal1(&db)
            .args(["profile", TASK, "--no-reference", "--dry-run", "--device", "cpu", "--json"])
            .arg(&candidate)
            .args(extra)
            .output()
            .unwrap();
        let rows = json_lines(&out);
        assert_eq!(rows.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
        rows[0].clone()
    };
    let confined = profile(&[]);
    assert_eq!(confined["ok"], false, "{confined}");
    assert!(confined["error"].as_str().unwrap().contains("PermissionError"), "{confined}");
    assert!(!planted.exists());
    let free = profile(&["--no-sandbox"]);
    assert_eq!(free["ok"], true, "{free}");
    assert_eq!(std::fs::read_to_string(&planted).unwrap(), "planted");
}

/// A profile loads the build an evaluation published, whatever the process ids: the compile pool
/// runs as pid 2 of a PID namespace (where there is one), the profiling driver outside any. The
/// extension's name holds both kinds of number that once made them ask for different builds: a
/// `2` that is not a process id (the pool renamed it as if it were its own pid) and the process's
/// own id (published kernels do this). A program no evaluation built yet is built by the pool
/// first, off the device, as an evaluation would. With the entry's record of builds emptied, the
/// driver finds nothing to load, builds it itself and says so: the report can fail.
#[test]
fn a_profile_loads_the_build_its_evaluation_published() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let task = "tests/suite-cpu/tasks/level1/4_Row_Sum.py";
    let source = std::fs::read_to_string(
        repo().join("tests/suite-cpu/candidates/level1/4_Row_Sum/cpp_correct.py"),
    )
    .unwrap()
    .replace("name=\"cudal1_cpu_row_sum_cpp\"", "name=f\"cudal1_l2_row_sum_{os.getpid()}\"");
    assert!(source.contains("os.getpid()"));
    let candidate = dir.path().join("pid_named_cpp.py");
    std::fs::write(&candidate, format!("# {}\n{source}", dir.path().display())).unwrap();
    let cache = dir.path().join("cache");
    let dry_run = || {
        let out = cudal1(&db)
            .env("CUDAL1_CACHE_DIR", &cache)
            .args(["profile", task, "--no-reference", "--dry-run", "--device", "cpu", "--json"])
            .arg(&candidate)
            .output()
            .unwrap();
        let rows = json_lines(&out);
        assert_eq!(rows.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(rows[0]["ok"], true, "{}", rows[0]);
        rows[0]["built_here"].as_array().unwrap().len()
    };
    assert_eq!(dry_run(), 0, "the pool builds it first; the driver loads that build");
    let published: Vec<std::path::PathBuf> = std::fs::read_dir(cache.join("extensions"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(".cudal1-built").exists())
        .collect();
    assert_eq!(published.len(), 1, "{published:?}");
    let record = published[0].join(".cudal1-builds.json");
    assert!(std::fs::read_to_string(&record).unwrap().contains("cudal1_l"), "a build is recorded");

    let out = run({
        let mut c = cudal1(&db);
        c.env("CUDAL1_CACHE_DIR", &cache)
            .args(["eval", "--task", task, "--candidate"])
            .arg(&candidate)
            .args(["--mode", "correctness", "--json"])
            .args(FAST_TIMING);
        c
    });
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(row["verdict"], "correct", "{row}");
    assert_eq!(dry_run(), 0, "the evaluation and the profile load the same build");

    std::fs::write(&record, "{}").unwrap();
    assert_eq!(dry_run(), 1, "nothing recorded to load: the driver builds it itself");
}
