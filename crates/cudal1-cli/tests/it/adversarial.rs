//! The adversarial corpus end to end on the CPU: every trick gets the verdict and the reason class
//! its first line promises, and every honest look-alike is `correct`.

use super::{cudal1, json_lines, repo, run};
use std::collections::BTreeSet;
use std::path::Path;

/// Every class the CPU corpus must keep covering; removing the last candidate of one fails here.
const CLASSES: [&str; 35] = [
    "audit_hook",
    "background_thread",
    "busy_while_idle",
    "clock_disagreement",
    "correct",
    "extra_threads",
    "file_access",
    "forged_origin",
    "frame_inspection",
    "gc_scan",
    "input_mutated",
    "mismatch",
    "model_patched",
    "output_aliases_input",
    "output_file_tampered",
    "output_not_tensor",
    "reference_sabotage",
    "sandbox_escape",
    "stale_result",
    "static_frame_inspection",
    "static_gc_scan",
    "static_model_patched",
    "static_monkey_patch",
    "static_tf32",
    "tampered_allclose",
    "tampered_inputs",
    "tampered_event",
    "tampered_protocol",
    "tampered_reference",
    "tampered_synchronize",
    "tampered_tf32",
    "tampered_timer",
    "tampered_torch",
    "tampered_torch_mode",
    "timed_output_mismatch",
];

/// Where the run's scratch directories go: below `/dev/shm` where there is one, as on the large
/// hosts where cudal1 picks it by itself, so that the corpus exercises the sandbox's rules there
/// (expected outputs in the same tree as the candidates' directories).
fn work_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::Builder::new().prefix("cudal1-adversarial-").tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

fn candidate_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(candidate_files(&path));
        } else if path.extension().is_some_and(|e| e == "py") {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn every_adversarial_candidate_gets_its_verdict_and_reason_class() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_dir();
    let mut cmd = cudal1(&dir.path().join("adv.db"));
    cmd.env("CUDAL1_WORK_DIR", work.path());
    cmd.args([
        "eval",
        "--suite",
        "tests/adversarial/tasks",
        "--candidates",
        "tests/adversarial/candidates",
        "--json",
    ])
    .args(["--device", "cpu", "--budget", "0.5", "--call-timeout", "10"]);
    let out = run(cmd);
    let lines = json_lines(&out);
    let (summary, rows) = lines.split_last().unwrap();
    // Every file of the corpus was evaluated (none skipped for a missing task).
    assert_eq!(
        rows.len(),
        candidate_files(&repo().join("tests/adversarial/candidates")).len(),
        "{summary}"
    );

    let mut wrong = Vec::new();
    let mut classes = BTreeSet::new();
    for r in rows {
        let expect = &r["expect"];
        let (verdict, class) = (expect["verdict"].as_str(), expect["class"].as_str());
        assert!(
            verdict.is_some() && class.is_some(),
            "{} has no `# cudal1: expect=... class=...` line",
            r["candidate"]
        );
        if r["verdict"].as_str() != verdict || r["reason_class"].as_str() != class {
            wrong.push(format!(
                "{}: got {} / {}, expected {} / {}: {}",
                r["candidate"],
                r["verdict"],
                r["reason_class"],
                verdict.unwrap(),
                class.unwrap(),
                r["reason"]
            ));
        }
        assert!(!r["reason"].as_str().unwrap().is_empty());
        classes.insert(r["reason_class"].as_str().unwrap().to_owned());
    }
    assert!(
        wrong.is_empty(),
        "{} candidate(s) got another verdict:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let missing: Vec<&str> = CLASSES.iter().copied().filter(|c| !classes.contains(*c)).collect();
    assert!(missing.is_empty(), "no candidate covers {missing:?}");

    // The static screen's warnings reach the evaluation without deciding it.
    let joined = rows
        .iter()
        .find(|r| r["candidate"].as_str().unwrap().ends_with("honest_joined_threads.py"))
        .unwrap();
    assert_eq!(joined["verdict"], "correct");
    assert!(
        joined["warnings"].as_array().unwrap().iter().any(|w| w["class"] == "threads"),
        "{}",
        joined["warnings"]
    );
}

#[test]
fn every_corpus_file_states_its_trick() {
    for root in ["tests/adversarial/candidates", "tests/adversarial/cuda/candidates"] {
        for file in candidate_files(&repo().join(root)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let mut lines = text.lines();
            let first = lines.next().unwrap_or("");
            let expect = cudal1_task::expectation(&text)
                .unwrap_or_else(|| panic!("{file}: no expectation line"));
            assert!(first.starts_with("# cudal1: expect="), "{file}");
            assert!(expect.class.is_some(), "{file}: the expectation names no class");
            // The next line says what the trick is (or why the look-alike is honest). A trick that
            // works only on the CPU says first what it is expected to get on a GPU, and why.
            let mut second = lines.next().unwrap_or("");
            if second.starts_with("# cudal1[gpu]: expect=") {
                assert!(
                    lines.next().is_some_and(|l| l.starts_with("# On a GPU")),
                    "{file}: the GPU line says why"
                );
                second = lines.take(3).find(|l| l.starts_with("# Trick")).unwrap_or("");
            }
            assert!(
                second.starts_with("# Trick") || second.starts_with("# Look-alike"),
                "{file}: {second}"
            );
        }
    }
}

/// `# cudal1: degenerate=a,b` (or `none`) from a task's first line.
fn expected_flags(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let list = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# cudal1: degenerate="))
        .unwrap_or_else(|| panic!("{}: no degenerate= line", path.display()));
    list.split(',').map(str::trim).filter(|f| *f != "none").map(str::to_owned).collect()
}

#[test]
fn tasks_check_flags_each_degenerate_task_with_its_reasons_and_passes_healthy_ones() {
    let store = tempfile::tempdir().unwrap();
    let db = store.path().join("checks.db");
    let mut cmd = cudal1(&db);
    cmd.args(["tasks", "check", "tests/adversarial/degenerate", "--device", "cpu", "--json"]);
    let out = cmd.output().unwrap();
    let rows = json_lines(&out);
    let dir = repo().join("tests/adversarial/degenerate/level1");
    assert_eq!(
        rows.len(),
        std::fs::read_dir(&dir).unwrap().count(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in &rows {
        super::assert_documented(r, "", &["check"], "");
        let key = r["task"].as_str().unwrap();
        assert!(r.get("error").is_none_or(|e| e.is_null()), "{key}: {}", r["error"]);
        let file = dir.join(format!("{}.py", key.trim_start_matches("level1/")));
        let got: BTreeSet<String> = r["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(got, expected_flags(&file), "{key}: {}", r["flags"]);
        assert!(r["flags"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| !f["reason"].as_str().unwrap().is_empty()));
        assert_eq!(r["unjudged"].as_array().unwrap().len(), 0, "{key}: {}", r["unjudged"]);
    }
    // A flagged task is remembered for the exit status.
    assert_eq!(out.status.code(), Some(1));
    assert!(rows.iter().all(|r| r["reused"] == false));

    // The same check again comes from the store, with the same flags, and still exits 1.
    let mut cmd = cudal1(&db);
    cmd.args(["tasks", "check", "tests/adversarial/degenerate", "--device", "cpu", "--json"]);
    let again = cmd.output().unwrap();
    assert_eq!(again.status.code(), Some(1));
    let again = json_lines(&again);
    assert_eq!(again.len(), rows.len());
    for r in &again {
        assert_eq!(r["reused"], true, "{r}");
        let first = rows.iter().find(|x| x["task"] == r["task"]).unwrap();
        assert_eq!(r["flags"], first["flags"]);
    }

    // The adversarial corpus's own tasks are healthy.
    let mut cmd = cudal1(&db);
    cmd.args(["tasks", "check", "tests/adversarial/tasks", "--device", "cpu", "--json"]);
    let out = run(cmd);
    assert!(out.status.success());
    for r in json_lines(&out) {
        assert_eq!(r["flags"].as_array().unwrap().len(), 0, "{r}");
    }
}

/// A candidate may write below a fixed `/tmp` path, and what it writes there reaches no other
/// evaluation and stays off the host's `/tmp`, on both ways of starting a runner: forked from the
/// fork server (the default) and started as an interpreter of its own (`CUDAL1_FORK_SERVER=0`).
/// The twins write the same path and turn wrong if they see a mark that is not their own.
#[test]
fn each_candidate_has_a_tmp_of_its_own_on_both_spawn_paths() {
    if !cudal1_supervisor::private_tmp_available() {
        eprintln!(
            "SKIP each_candidate_has_a_tmp_of_its_own_on_both_spawn_paths: no private /tmp here"
        );
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let copy = |from: &str, to: &str| {
        let to = root.path().join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo().join(from), to).unwrap();
    };
    let gelu = "level1/2_Linear_GELU";
    copy(&format!("tests/adversarial/tasks/{gelu}.py"), &format!("tasks/{gelu}.py"));
    for twin in ["a", "b"] {
        let name = format!("{gelu}/honest_private_tmp_{twin}.py");
        copy(&format!("tests/adversarial/candidates/{name}"), &format!("cands/{name}"));
    }
    copy("tests/suite-cpu/tasks/level1/2_Swish.py", "tasks/level1/2_Swish.py");
    let fixed = "level1/2_Swish/writes_fixed_tmp.py";
    copy(&format!("tests/suite-cpu/candidates/{fixed}"), &format!("cands/{fixed}"));
    // The paths the candidates write, as the host would have them.
    let written =
        [Path::new("/tmp/cudal1-probe-5e1d0c7a"), Path::new("/tmp/cudal1-suite-fixed-tmp")];
    for fork_server in ["1", "0"] {
        for path in written {
            let _ = std::fs::remove_dir_all(path);
        }
        let mut cmd = cudal1(&root.path().join(format!("tmp{fork_server}.db")));
        cmd.env("CUDAL1_FORK_SERVER", fork_server);
        cmd.arg("eval")
            .arg("--suite")
            .arg(root.path().join("tasks"))
            .arg("--candidates")
            .arg(root.path().join("cands"))
            .arg("--json")
            .args(super::FAST_TIMING);
        let out = run(cmd);
        let lines = json_lines(&out);
        let (_, rows) = lines.split_last().unwrap();
        assert_eq!(rows.len(), 3, "CUDAL1_FORK_SERVER={fork_server}");
        for r in rows {
            assert_eq!(
                r["verdict"], "correct",
                "CUDAL1_FORK_SERVER={fork_server}: {}: {}",
                r["candidate"], r["reason"]
            );
        }
        for path in written {
            assert!(
                !path.exists(),
                "CUDAL1_FORK_SERVER={fork_server}: {} is on the host",
                path.display()
            );
        }
    }
}
