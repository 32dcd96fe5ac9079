//! The command line over the evaluation engine: correctness mode, other systems' releases,
//! interrupts and exit statuses, a reader that goes away.

use super::{cudal1, json_lines, repo, run, FAST_TIMING};
use cudal1_llm::test_server::{Reply, TestServer};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn correctness_mode_gives_the_same_verdicts_without_timing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = cudal1(&dir.path().join("c.db"));
    cmd.args([
        "eval",
        "--suite",
        "tests/suite-cpu/tasks",
        "--candidates",
        "tests/suite-cpu/candidates",
        "--json",
        "--check-expectations",
    ])
    .args(["--mode", "correctness", "--lanes", "2"])
    // Two lanes share CI's two cores with the other tests: a generous call limit.
    .args(["--device", "cpu", "--call-timeout", "20", "--load-timeout", "120"]);
    let out = run(cmd);
    let lines = json_lines(&out);
    let (summary, rows) = lines.split_last().unwrap();
    assert!(rows.len() > 20);
    for r in rows {
        assert_eq!(r["verdict"], r["expect"]["verdict"], "{}: {}", r["candidate"], r["reason"]);
        assert_eq!(r["mode"], "correctness", "{}", r["candidate"]);
        assert_eq!(r["speedup"], Value::Null);
        assert_eq!(r["measurements"]["timing"], Value::Null);
    }
    assert_eq!(summary["summary"]["mode"], "correctness");
    assert!(out.status.success());
}

/// A CUDA-L1-shaped release built from the CPU suite: two rows with code, one without, one broken.
fn release(dir: &Path) -> std::path::PathBuf {
    let suite = repo().join("tests/suite-cpu");
    let read = |p: &str| std::fs::read_to_string(suite.join(p)).unwrap();
    let rows = [
        json!({"level_id": 1, "task_id": 1, "ref_code": read("tasks/level1/1_Diagonal_Matmul.py"), "custom_code": read("candidates/level1/1_Diagonal_Matmul/fast.py"), "score_default": 9.5, "score_cuda_graph": "3.000"}),
        json!({"level_id": 1, "task_id": 2, "ref_code": read("tasks/level1/2_Swish.py"), "custom_code": read("candidates/level1/2_Swish/nan_output.py"), "score_default": 1.2}),
        json!({"level_id": 1, "task_id": 3, "ref_code": read("tasks/level1/3_Softmax_Rows.py"), "custom_code": null, "score_default": null}),
    ];
    let mut text: Vec<String> = rows.iter().map(Value::to_string).collect();
    text.push("{\"level_id\": 1}".into());
    let file = dir.join("release.json");
    std::fs::write(&file, text.join("\n")).unwrap();
    file
}

#[test]
fn a_cuda_l1_release_is_evaluated_row_by_row_with_claims_beside_measurements() {
    let dir = tempfile::tempdir().unwrap();
    let file = release(dir.path());
    let mut cmd = cudal1(&dir.path().join("l1.db"));
    cmd.env("CUDAL1_CACHE_DIR", dir.path().join("cache"))
        .args(["eval", "--from", "cuda-l1"])
        .arg(&file)
        .args(["--suite", "tests/suite-cpu/tasks", "--json"])
        .args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let lines = json_lines(&out);
    let (summary, rows) = lines.split_last().unwrap();
    let summary = &summary["summary"];
    let fast = rows
        .iter()
        .find(|r| r["task"] == "level1/1_Diagonal_Matmul")
        .expect("named after the suite's task");
    assert_eq!(fast["verdict"], "correct", "{}", fast["reason"]);
    assert_eq!(fast["claimed"]["score_default"], 9.5);
    assert_eq!(fast["claimed"]["score_cuda_graph"], 3.0);
    let nan = rows.iter().find(|r| r["task"] == "level1/2_Swish").unwrap();
    assert_eq!(nan["verdict"], "incorrect");
    let missing = rows.iter().find(|r| r["task"] == "level1/3_Softmax_Rows").unwrap();
    assert_eq!(missing["verdict"], Value::Null);
    assert!(missing["missing"].as_str().unwrap().contains("custom_code"), "{missing}");
    assert_eq!(summary["counts"]["missing_code"], 1);
    // The task without code counts as unsolved; the broken row is an input problem.
    assert_eq!(summary["tasks"]["count"], 3);
    assert_eq!(summary["input_problems"].as_array().unwrap().len(), 1, "{summary}");
    assert_eq!(summary["claimed"]["rows"], 1);
    assert_eq!(out.status.code(), Some(1), "skipped input is not a clean exit");

    // Without a suite, tasks are named by level and id; the table shows claims.
    let mut cmd = cudal1(&dir.path().join("l1.db"));
    cmd.env("CUDAL1_CACHE_DIR", dir.path().join("cache"))
        .args(["eval", "--from", "cuda-l1"])
        .arg(&file)
        .args(FAST_TIMING);
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("level1/1_cuda_l1") && text.contains("claimed") && text.contains("no code"),
        "{text}"
    );
    assert!(text.contains("claimed geomean 9.500x"), "{text}");
}

#[test]
fn a_kernelbench_generation_directory_is_matched_by_level_and_problem() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("runs/my_run");
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::copy(
        repo().join("tests/suite-cpu/candidates/level1/2_Swish/correct.py"),
        run_dir.join("level_1_problem_2_sample_0_kernel.py"),
    )
    .unwrap();
    std::fs::copy(
        repo().join("tests/suite-cpu/candidates/level1/2_Swish/raises_in_forward.py"),
        run_dir.join("level_1_problem_2_sample_1_kernel.py"),
    )
    .unwrap();
    let mut cmd = cudal1(&dir.path().join("kb.db"));
    cmd.args(["eval", "--from", "kernelbench"])
        .arg(dir.path().join("runs"))
        .args(["--suite", "tests/suite-cpu/tasks", "--json"])
        .args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let lines = json_lines(&out);
    let verdicts: Vec<&str> =
        lines[..lines.len() - 1].iter().map(|r| r["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts.len(), 2);
    assert!(verdicts.contains(&"correct") && verdicts.contains(&"runtime_error"), "{verdicts:?}");

    let mut cmd = cudal1(&dir.path().join("kb.db"));
    cmd.args(["eval", "--from", "kernelbench"]).arg(dir.path().join("runs"));
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hint: add `--suite"));
}

#[test]
fn a_reader_that_goes_away_ends_the_run_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (child, reader, first) = suite_batch(&dir.path().join("p.db"), dir.path());
    assert!(serde_json::from_str::<Value>(&first).is_ok(), "{first}");
    drop(reader); // `| head -1`
    let out = child.wait_with_output().unwrap();
    // Progress lines name candidates (`cpp_compile_error.py`); what the command said must not
    // be an error.
    let err = super::said(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
    assert_eq!(scratch_dirs(dir.path()), Vec::<String>::new(), "the engine's scratch is removed");
}

/// `cudal1 eval --json` of the CPU suite's whole batch, scratch under `work`, started and read up
/// to its first JSON line (a finished candidate): the child (stderr piped), the rest of its output
/// and that line.
fn suite_batch(
    db: &Path,
    work: &Path,
) -> (std::process::Child, BufReader<std::process::ChildStdout>, String) {
    let mut cmd = cudal1(db);
    cmd.env("CUDAL1_WORK_DIR", work)
        .args([
            "eval",
            "--suite",
            "tests/suite-cpu/tasks",
            "--candidates",
            "tests/suite-cpu/candidates",
            "--json",
        ])
        .args(FAST_TIMING)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    (child, reader, first)
}

/// The engine scratch directories (`cudal1-*`) under `dir`.
fn scratch_dirs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("cudal1-"))
        .collect()
}

fn interrupt(pid: u32) {
    // SAFETY: signalling a child we started.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
}

#[test]
fn ctrl_c_once_drains_and_twice_stops_now_and_both_exit_130_with_scratch_removed() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Once the candidate runs, press twice.
    let mut child = hanging_eval(&dir.path().join("i.db"), &work);
    std::thread::sleep(Duration::from_secs(2));
    interrupt(child.id());
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().unwrap().is_none(), "one press lets the evaluation under way finish");
    let pressed = Instant::now();
    interrupt(child.id());
    let out = child.wait_with_output().unwrap();
    assert!(pressed.elapsed() < Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("press Ctrl-C again") && err.contains("stopping now"), "{err}");
    assert_eq!(scratch_dirs(&work), Vec::<String>::new(), "scratch removed after stopping now");

    // A batch interrupted once finishes what runs, skips the rest, and does not exit 0.
    let (mut child, reader, _) = suite_batch(&dir.path().join("i.db"), &work);
    interrupt(child.id());
    let rest: Vec<String> = reader.lines().map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let summary: Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert!(summary["summary"]["counts"]["skipped"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(scratch_dirs(&work), Vec::<String>::new());
}

/// One press ends a run within 10 s whatever runs (issue 34: 45 s and more on a two-GPU host):
/// work that cannot finish in a few seconds is abandoned, nothing of it stored, and the same
/// command does it again.
#[test]
fn ctrl_c_once_abandons_what_cannot_finish_within_seconds_and_exits_130_within_10_s() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let db = dir.path().join("a.db");
    let child = hanging_eval(&db, &work);
    let pressed = Instant::now();
    interrupt(child.id());
    let out = child.wait_with_output().unwrap();
    let took = pressed.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(took < Duration::from_secs(10), "one press took {took:?} to end the run: {err}");
    assert!(err.contains("abandoned"), "{err}");
    assert_eq!(scratch_dirs(&work), Vec::<String>::new(), "scratch removed");
    // Nothing of the abandoned evaluation was stored: the same command judges it again.
    let store = cudal1_store::Store::open(&db).unwrap();
    for batch in store.batch_ids().unwrap() {
        assert!(
            store.batch_evaluations(&batch).unwrap().is_empty(),
            "an abandoned evaluation was stored"
        );
    }

    // An extension build under way in the compile pool (tens of seconds of C++ on two cores) is
    // killed too: the run ends within 10 s, and the same command then builds it and finishes.
    let candidate = dir.path().join("cpp_correct.py");
    let source = std::fs::read_to_string(
        super::repo().join("tests/suite-cpu/candidates/level1/4_Row_Sum/cpp_correct.py"),
    )
    .unwrap();
    // A program of its own: never built before, so the pool builds it now.
    let fresh = format!("{source}\n# {:?}\n", std::time::SystemTime::now());
    std::fs::write(&candidate, fresh).unwrap();
    let build = |db: &Path| {
        let mut cmd = cudal1(db);
        // A drain far longer than the bound below: a run that ends within it did not wait for
        // the build to be killed at the end of the drain, it was killed at the press (0.3 s on
        // an idle machine; a timed bound alone could not tell the two apart on a loaded one).
        cmd.env("CUDAL1_WORK_DIR", &work)
            .env("CUDAL1_INTERRUPT_GRACE_MS", "30000")
            .args(["eval", "--task", "tests/suite-cpu/tasks/level1/4_Row_Sum.py", "--candidate"])
            .arg(&candidate)
            .args(["--device", "cpu", "--mode", "correctness", "--json", "--load-timeout", "300"]);
        cmd
    };
    let mut cmd = build(&db);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !has_scratch_entry(&work, "compile-") {
        assert!(Instant::now() < deadline, "the build never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pressed = Instant::now();
    interrupt(child.id());
    let out = child.wait_with_output().unwrap();
    let took = pressed.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        took < Duration::from_secs(10),
        "one press took {took:?} to end a run with a build under way: {err}"
    );
    assert_eq!(scratch_dirs(&work), Vec::<String>::new(), "scratch removed");
    let out = run(build(&db));
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "correct", "{}", v["reason"]);
}

/// Whether an engine's scratch directory below `work` holds an entry named `prefix...`.
fn has_scratch_entry(work: &Path, prefix: &str) -> bool {
    scratch_dirs(work).iter().any(|s| {
        std::fs::read_dir(work.join(s))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
    })
}

#[test]
fn the_scratch_of_a_run_killed_outright_is_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Not an engine's: the next run leaves it alone.
    std::fs::create_dir_all(work.join("cudal1-someone-elses")).unwrap();
    let mut child = hanging_eval(&dir.path().join("k.db"), &work);
    // SIGKILL, as the OOM killer or `timeout -k` would: nothing of cudal1 runs to clean up.
    child.kill().unwrap();
    child.wait().unwrap();
    let mut left = scratch_dirs(&work);
    left.sort();
    assert_eq!(left.len(), 2, "the killed run's scratch stays behind: {left:?}");

    let mut cmd = cudal1(&dir.path().join("k.db"));
    cmd.env("CUDAL1_WORK_DIR", &work)
        .args([
            "eval",
            "--task",
            "tests/suite-cpu/tasks/level1/2_Swish.py",
            "--candidate",
            "tests/suite-cpu/candidates/level1/2_Swish/missing_modelnew.py",
        ])
        .args(["--device", "cpu"]);
    let out = run(cmd);
    assert!(out.status.code().is_some(), "{out:?}");
    assert_eq!(
        scratch_dirs(&work),
        vec!["cudal1-someone-elses".to_owned()],
        "the killed run's scratch is gone, the other kept"
    );
}

#[test]
fn a_batch_killed_outright_keeps_the_members_it_finished() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let (mut child, _, first) = suite_batch(&db, dir.path());
    let row: Value = serde_json::from_str(&first).unwrap();
    child.kill().unwrap(); // SIGKILL: no summary, no end of the batch
    child.wait().unwrap();
    let store = cudal1_store::Store::open(&db).unwrap();
    let batches = store.batch_ids().unwrap();
    assert_eq!(batches.len(), 1, "{batches:?}");
    let members = store.batch_evaluations(&batches[0]).unwrap();
    assert!(
        members.iter().any(|m| m.candidate_label == row["candidate"].as_str().unwrap()),
        "{row} not among {} member(s)",
        members.len()
    );
}

/// `cudal1 eval` of a candidate that never returns, with a call limit far away (only a signal ends
/// it), scratch under `work`; returned once the candidate's process runs (its directory exists).
fn hanging_eval(db: &Path, work: &Path) -> std::process::Child {
    let mut cmd = cudal1(db);
    cmd.env("CUDAL1_WORK_DIR", work)
        .args([
            "eval",
            "--task",
            "tests/suite-cpu/tasks/level1/2_Swish.py",
            "--candidate",
            "tests/suite-cpu/candidates/level1/2_Swish/infinite_loop.py",
        ])
        .args(["--device", "cpu", "--call-timeout", "600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !has_candidate_dir(work) {
        assert!(Instant::now() < deadline, "the candidate never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

fn has_candidate_dir(work: &Path) -> bool {
    scratch_dirs(work).iter().any(|s| {
        std::fs::read_dir(work.join(s))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("candidate-"))
    })
}

fn terminate(pid: u32) {
    // SAFETY: signalling a child we started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
}

#[test]
fn tasks_check_in_a_terminal_shows_progress_and_ctrl_c_exits_130_leaves_no_scratch_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let db = dir.path().join("t.db");
    let check = || {
        let mut cmd = cudal1(&db);
        cmd.env("CUDAL1_WORK_DIR", &work)
            .env_remove("NO_COLOR")
            .args([
                "tasks",
                "check",
                "tests/adversarial/degenerate",
                "--device",
                "cpu",
                "--lanes",
                "1",
            ])
            .args([
                "--only",
                "level1/3_Bias_Only",
                "--only",
                "level1/6_Healthy_Linear",
                "--only",
                "level1/5_Wide_Clamp",
            ]);
        cmd
    };
    let mut terminal = super::pty::Terminal::spawn(check(), 100);
    // A line per finished task above the progress bar, then Ctrl-C typed at the keyboard.
    terminal.wait_for("level1/3_Bias_Only: ", Duration::from_secs(180));
    assert!(terminal.screen().contains("/3 "), "a progress bar: {}", terminal.screen());
    terminal.ctrl_c();
    let status = terminal.child.wait().unwrap();
    let screen = terminal.screen();
    assert_eq!(status.code(), Some(130), "{screen}");
    assert!(screen.contains("interrupted: finishing the task checks under way"), "{screen}");
    assert_eq!(scratch_dirs(&work), Vec::<String>::new(), "the engine's scratch is removed");
    let done = ["level1/3_Bias_Only: ", "level1/6_Healthy_Linear: ", "level1/5_Wide_Clamp: "]
        .iter()
        .filter(|t| screen.contains(*t))
        .count();
    assert!(done < 3, "Ctrl-C after the first check stops before the last: {screen}");

    // The same command resumes: the finished checks come from the store, the rest are made.
    let mut cmd = check();
    cmd.arg("--json");
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(1), "two of the three are degenerate");
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows.iter().filter(|r| r["reused"] == true).count(), done);
    assert!(rows.iter().any(|r| r["task"] == "level1/3_Bias_Only" && r["reused"] == true));
    assert_eq!(scratch_dirs(&work), Vec::<String>::new());
}

/// A program that never returns from its first call.
const ENDLESS: &str = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, a, B):\n        while True:\n            pass\n";

#[test]
fn optimize_stopped_by_sigterm_twice_exits_130_and_leaves_no_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    // An OpenAI-compatible server whose reply is the endless program.
    let server = TestServer::start(|_| {
        let reply = json!({"choices": [{"message": {"content": format!("```python\n{ENDLESS}```\n")}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}});
        Reply::json(200, reply.to_string())
    })
    .unwrap();
    let url = format!("{}/v1", server.url());
    let mut cmd = cudal1(&dir.path().join("o.db"));
    cmd.env("CUDAL1_WORK_DIR", &work)
        .args([
            "optimize",
            "tests/suite-cpu/tasks/level1/1_Diagonal_Matmul.py",
            "--llm-url",
            &url,
            "--model",
            "m",
            "--rounds",
            "1",
            "--samples",
            "1",
        ])
        .args(["--device", "cpu", "--call-timeout", "600", "--out"])
        .arg(dir.path().join("out"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !has_candidate_dir(&work) {
        assert!(Instant::now() < deadline, "the program was never evaluated");
        std::thread::sleep(Duration::from_millis(100));
    }
    terminate(child.id());
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        child.try_wait().unwrap().is_none(),
        "one SIGTERM lets the evaluation under way finish"
    );
    let pressed = Instant::now();
    terminate(child.id());
    let out = child.wait_with_output().unwrap();
    assert!(pressed.elapsed() < Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("stopping now"), "{err}");
    assert_eq!(scratch_dirs(&work), Vec::<String>::new(), "scratch removed after stopping now");
}

/// `--load-timeout` bounds how long a program that never finishes importing holds its lane (the
/// default is 300 s), and the reason names the load.
#[test]
fn a_candidate_that_loops_at_import_is_a_timeout_within_the_load_limit() {
    let dir = tempfile::tempdir().unwrap();
    let candidate = dir.path().join("loops_at_import.py");
    std::fs::write(&candidate, "import torch.nn as nn\n\nwhile True:\n    pass\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n").unwrap();
    let mut cmd = cudal1(&dir.path().join("l.db"));
    cmd.args(["eval", "--task", "tests/suite-cpu/tasks/level1/2_Swish.py", "--candidate"])
        .arg(&candidate)
        .args(["--device", "cpu", "--load-timeout", "3", "--json"]);
    let started = Instant::now();
    let out = run(cmd);
    let r: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(r["verdict"], "timeout", "{r}");
    assert!(r["reason"].as_str().unwrap().contains("did not finish loading within 3.0 s"), "{r}");
    let load = r["measurements"]["phases_ms"]["load"].as_f64().unwrap();
    assert!((3000.0..15_000.0).contains(&load), "{r}");
    assert!(started.elapsed() < Duration::from_secs(120), "{:?}", started.elapsed());
}

/// A first call longer than the call limit (as `torch.compile`'s, which compiles there) is build
/// time: it has the load limit and a phase of its own, and later calls keep the call limit.
#[test]
fn a_slow_first_call_has_the_load_limit_and_later_calls_the_call_limit() {
    let dir = tempfile::tempdir().unwrap();
    let slow_first = dir.path().join("slow_first.py");
    let body = |extra: &str| {
        format!(
            "import time\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.calls = 0\n\n    def forward(self, x):\n        self.calls += 1\n{extra}        return x * torch.sigmoid(x)\n"
        )
    };
    std::fs::write(&slow_first, body("        if self.calls == 1:\n            time.sleep(4)\n"))
        .unwrap();
    let slow_second = dir.path().join("slow_second.py");
    std::fs::write(&slow_second, body("        if self.calls == 2:\n            time.sleep(4)\n"))
        .unwrap();
    let eval = |candidate: &Path| {
        let mut cmd = cudal1(&dir.path().join("f.db"));
        cmd.args(["eval", "--task", "tests/suite-cpu/tasks/level1/2_Swish.py", "--candidate"])
            .arg(candidate)
            .args([
                "--device",
                "cpu",
                "--budget",
                "0.3",
                "--call-timeout",
                "2",
                "--load-timeout",
                "30",
                "--json",
            ]);
        let r: Value = serde_json::from_slice(&run(cmd).stdout).expect("one JSON object");
        r
    };
    let first = eval(&slow_first);
    assert_eq!(first["verdict"], "correct", "{first}");
    assert!(
        first["measurements"]["phases_ms"]["first_call"].as_f64().unwrap() >= 4000.0,
        "{first}"
    );
    let second = eval(&slow_second);
    assert_eq!(second["verdict"], "timeout", "{second}");
    assert!(
        second["reason"]
            .as_str()
            .unwrap()
            .contains("did not finish running the correctness checks within 2.0 s"),
        "{second}"
    );
}

/// Runs `cudal1 ARGS` under a parent that adopts orphans (a child subreaper), and returns the
/// command lines of the processes it adopted, reaped or not, once cudal1 has exited.
const ADOPTER: &str = r#"
import ctypes, json, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
adopted = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            line = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if ppid == os.getpid():
        adopted.append(line or f"pid {pid} (a zombie)")
print(json.dumps({"code": code, "adopted": adopted}))
"#;

#[test]
fn after_a_run_nothing_cudal1_started_is_left_for_init_to_adopt() {
    let dir = tempfile::tempdir().unwrap();
    let python = std::env::var("CUDAL1_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = std::process::Command::new(python);
    cmd.current_dir(super::repo())
        .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
        .env("CUDAL1_DB", dir.path().join("z.db"))
        .args(["-c", ADOPTER, env!("CARGO_BIN_EXE_cudal1")])
        // References and candidates are forked from fork servers: those end with the run.
        .args([
            "eval",
            "--task",
            "tests/suite-cpu/tasks/level1/2_Swish.py",
            "--candidate",
            "tests/suite-cpu/candidates/level1/2_Swish/correct.py",
        ])
        .args(["--device", "cpu", "--mode", "correctness", "--load-timeout", "120"]);
    let out = run(cmd);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["code"], 0, "{v}");
    assert_eq!(v["adopted"], json!([]), "left behind by cudal1: {v}");
}

/// Runs `cudal1 ARGS` (with the work directory `WORK`) under a parent that adopts orphans and never
/// waits for them, presses Ctrl-C once the candidate runs, and once cudal1 has exited lists the
/// processes it left to that parent (a zombie, or one still ending). Then it reaps them itself.
/// With `MODE` `keeper`, it first kills the candidate's keeper (the process outside its runner's
/// PID namespace) and says whether the keeper's init and runner were reaped while cudal1 ran.
const INTERRUPTED_ADOPTER: &str = r#"
import ctypes, json, os, signal, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
mode, work, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def running():
    for d in os.listdir(work):
        if d.startswith("cudal1-") and any(e.startswith("candidate-") for e in os.listdir(os.path.join(work, d))):
            return True
    return False
def stats():
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
            with open(f"/proc/{pid}/status") as f:
                depth = next((len(l.split()) - 1 for l in f if l.startswith("NSpid:")), 0)
        except OSError:
            continue
        rest = text.rsplit(")", 1)[1].split()
        found[int(pid)] = (int(rest[1]), rest[0], text[text.index("(") + 1:text.rindex(")")], depth)
    return found
def ours():
    return [(pid, s, c) for pid, (ppid, s, c, _) in stats().items() if ppid == os.getpid()]
deadline = time.monotonic() + 120
while not running():
    assert time.monotonic() < deadline and proc.poll() is None, "the candidate never started"
    time.sleep(0.1)
time.sleep(1)
result = {}
if mode == "keeper":
    # cudal1's descendants only: other programs on this machine have keepers too.
    now = stats()
    tree, grew = {proc.pid}, True
    while grew:
        grew = False
        for pid, (ppid, *_) in now.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    inside = {pid: v for pid, v in now.items() if pid in tree}
    keepers = {v[0] for pid, v in inside.items() if v[0] in inside and v[3] > inside[v[0]][3]}
    if keepers:
        keeper = keepers.pop()
        kids = [pid for pid, v in inside.items() if v[0] == keeper]
        os.kill(keeper, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{k}") for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        result["adopted_and_reaped"] = not any(os.path.exists(f"/proc/{k}") for k in kids)
        result["keeper_children"] = len(kids)
    else:
        result["no_keeper"] = True
proc.send_signal(signal.SIGINT)
code = proc.wait()
left = ours()
for pid, _, _ in left:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
deadline = time.monotonic() + 10
while ours() and time.monotonic() < deadline:
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            time.sleep(0.05)
    except ChildProcessError:
        break
result.update({"code": code, "left": [f"pid {p} ({c}), state {s}" for p, s, c in left]})
print(json.dumps(result))
"#;

#[test]
fn an_interrupted_run_leaves_nothing_to_a_parent_that_adopts_orphans() {
    let v = interrupted_under_an_adopter("press");
    assert_eq!(v["code"], 130, "{v}");
    // Before: the runner, a zombie, and its namespace's init, ending until someone reaps it.
    assert_eq!(v["left"], json!([]), "left behind by cudal1: {v}");
}

#[test]
fn cudal1_reaps_what_a_killed_keeper_leaves_while_it_runs() {
    let v = interrupted_under_an_adopter("keeper");
    if v["no_keeper"] == true {
        eprintln!("skipped: the candidate's runner has no PID namespace of its own here");
        return;
    }
    // The candidate's evaluation ends with its keeper (cudal1 may be done before the press).
    assert!([0, 1, 130].iter().any(|c| v["code"] == *c), "{v}");
    // The keeper's init and runner came to cudal1, not to the parent above it, and cudal1 reaped
    // them within seconds, while it ran.
    assert_eq!(v["keeper_children"], 2, "{v}");
    assert_eq!(v["adopted_and_reaped"], true, "{v}");
    assert_eq!(v["left"], json!([]), "left behind by cudal1: {v}");
}

/// [`INTERRUPTED_ADOPTER`] over a candidate that never returns from its second call, in `mode`.
fn interrupted_under_an_adopter(mode: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let python = std::env::var("CUDAL1_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = std::process::Command::new(python);
    cmd.current_dir(super::repo())
        .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
        .env("CUDAL1_DB", dir.path().join("z.db"))
        .env("CUDAL1_WORK_DIR", &work)
        .args(["-c", INTERRUPTED_ADOPTER, mode])
        .arg(&work)
        .arg(env!("CARGO_BIN_EXE_cudal1"))
        // The candidate never returns from its second call: the press's grace ends with its
        // runner killed, sandboxed in a PID namespace of its own (a keeper, its init, the runner).
        .args(["eval", "--task", "tests/suite-cpu/tasks/level1/2_Swish.py", "--candidate"])
        .arg("tests/suite-cpu/candidates/level1/2_Swish/infinite_loop.py")
        .args(["--device", "cpu", "--mode", "correctness", "--lanes", "1"])
        .args(["--call-timeout", "600", "--load-timeout", "120"]);
    let out = run(cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}
