//! `cudal1 serve` and `cudal1 worker` as processes, under load and faults: N clients at once,
//! a worker killed mid-job, the server killed and started again, PostgreSQL restarted under a
//! running worker. Every check reads the queue itself (one job per program, how many attempts,
//! no second result).

use cudal1_store::{JobQueue, JobState};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::repo;

/// A child process killed (SIGKILL) when dropped; its output goes to a log file.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn start(args: &[&str], dir: &Path, name: &str, env: &[(&str, &str)]) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cudal1"));
        cmd.current_dir(repo())
            .args(args)
            .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
            .env_remove("CUDAL1_QUEUE")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc { child: cmd.spawn().expect("cudal1 starts"), log }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits until the log holds `text`.
    fn wait_for(&mut self, text: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.output().contains(text) {
            assert!(self.alive(), "the process ended before printing `{text}`:\n{}", self.output());
            assert!(Instant::now() < deadline, "`{text}` not printed in time:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One HTTP/1.1 exchange over a fresh connection: (status, JSON body).
fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> std::io::Result<(u16, Value)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(timeout))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {raw:?}")))?;
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Ok((status, serde_json::from_str(&body).unwrap_or(Value::Null)))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

fn serve(dir: &Path, port: u16, extra: &[&str], name: &str) -> Proc {
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        "serve",
        "--suite",
        "tests/suite-cpu/tasks",
        "--listen",
        &listen,
        "--mode",
        "correctness",
        "--call-timeout",
        "10",
    ];
    args.extend_from_slice(extra);
    let mut p = Proc::start(&args, dir, name, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while http(port, "GET", "/health", None, Duration::from_secs(2)).is_err() {
        assert!(p.alive() && Instant::now() < deadline, "serve did not start:\n{}", p.output());
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

fn worker(dir: &Path, name: &str, queue: &[&str], lease: &str) -> Proc {
    let mut args = vec![
        "worker",
        "--device",
        "cpu",
        "--progress",
        "--name",
        name,
        "--lease",
        lease,
        "--lanes",
        "1",
        "--compile-workers",
        "1",
    ];
    args.extend_from_slice(queue);
    Proc::start(&args, dir, name, &[])
}

/// A correct program of the CPU suite that sleeps while it loads, so that it is under way long
/// enough to be interrupted; `tag` makes it a program of its own.
fn slow_program(tag: &str, seconds: f64) -> String {
    let code = std::fs::read_to_string(
        repo().join("tests/suite-cpu/candidates/level1/2_Swish/correct.py"),
    )
    .unwrap();
    format!("```python\n# {tag}\nimport time\ntime.sleep({seconds})\n{code}\n```\n")
}

fn candidate(task: &str, file: &str, tag: &str) -> String {
    let code = std::fs::read_to_string(
        repo().join(format!("tests/suite-cpu/candidates/{task}/{file}.py")),
    )
    .unwrap();
    format!("```python\n# {tag}\n{code}\n```\n")
}

/// Sends the same reward request until every item is done, across refused connections and
/// server restarts, as a client of a restarting server does. (answer, connection failures)
fn reward_until_done(port: u16, body: &Value, within: Duration) -> (Value, usize) {
    let deadline = Instant::now() + within;
    let mut failures = 0;
    loop {
        assert!(Instant::now() < deadline, "no answer in time ({failures} failed connections)");
        match http(port, "POST", "/v1/reward", Some(body), Duration::from_secs(120)) {
            Ok((200, v)) if v["pending"] == 0 => return (v, failures),
            Ok((200 | 503, _)) => {}
            Ok((status, v)) => panic!("{status}: {v}"),
            Err(_) => failures += 1,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn submit(port: u16, items: &[Value]) -> Vec<i64> {
    let (status, v) = http(
        port,
        "POST",
        "/v1/reward/submit",
        Some(&json!({"items": items})),
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(status, 202, "{v}");
    v["results"].as_array().unwrap().iter().map(|r| r["job"].as_i64().unwrap()).collect()
}

#[test]
fn serve_under_load_answers_every_request_and_judges_each_program_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("serve.db");
    let port = free_port();
    let mut server = serve(
        dir.path(),
        port,
        &[
            "--device",
            "cpu",
            "--db",
            db.to_str().unwrap(),
            "--lanes",
            "2",
            "--compile-workers",
            "1",
        ],
        "serve",
    );
    let out = Command::new(std::env::var("CUDAL1_PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(repo().join("bench/serve_load.py"))
        .args([
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--clients",
            "8",
            "--duration",
            "12",
            "--programs",
            "10",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("serve load: {report}");
    println!(
        "serve load (8 clients, 12 s, CPU): p50 {} ms, p99 {} ms, {} requests answered",
        report["p50_ms"], report["p99_ms"], report["answered"]
    );
    assert!(server.alive(), "{}", server.output());
    assert_eq!(report["errors"], 0, "{report}");
    assert!(report["requests"].as_u64().unwrap() >= 8, "{report}");
    assert_eq!(report["answered"], report["requests"], "every request answered: {report}");
    assert_eq!(report["programs_with_several_jobs"], 0, "{report}");
    // One job per program that has code (a reply without a program makes no job), each judged once.
    let jobs: Vec<i64> =
        report["jobs"].as_array().unwrap().iter().map(|j| j.as_i64().unwrap()).collect();
    let store = cudal1_store::Store::open(&db).unwrap();
    let counts = store.counts().unwrap();
    assert_eq!(
        counts.queued + counts.running + counts.done + counts.failed,
        jobs.len() as u64,
        "no job beyond the programs sent"
    );
    for s in store.status(&jobs).unwrap() {
        assert!(s.state == JobState::Done && s.attempts == 1 && s.discarded == 0, "{s:?}");
    }
}

#[test]
fn a_killed_worker_s_job_is_taken_again_after_its_lease_and_done_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let db_arg = db.to_str().unwrap();
    let port = free_port();
    let _server = serve(
        dir.path(),
        port,
        &["--db", db_arg, "--local-worker", "false", "--gpu-class", "cpu"],
        "serve",
    );
    let job = submit(
        port,
        &[json!({"task": "level1/2_Swish", "completion": slow_program("killed", 3.0)})],
    )[0];
    let mut first = worker(dir.path(), "first", &["--db", db_arg], "2");
    first.wait_for(&format!("job {job} (level1/2_Swish): claimed"), Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    first.kill();
    // A client waiting on the job meanwhile, and a second worker.
    let waiting = std::thread::spawn(move || {
        http(
            port,
            "POST",
            "/v1/reward/get",
            Some(&json!({"jobs": [job], "wait_s": 120})),
            Duration::from_secs(150),
        )
        .unwrap()
    });
    let mut second = worker(dir.path(), "second", &["--db", db_arg], "2");
    let (status, v) = waiting.join().unwrap();
    assert_eq!(
        (status, v["results"][0]["verdict"].as_str()),
        (200, Some("correct")),
        "{v}\n{}",
        second.output()
    );
    let s = &cudal1_store::Store::open(&db).unwrap().status(&[job]).unwrap()[0];
    assert_eq!(
        (s.state, s.attempts, s.worker.as_deref(), s.discarded),
        (JobState::Done, 2, Some("second"), 0),
        "{s:?}"
    );
    assert!(second.alive());
}

#[test]
fn a_restarted_server_keeps_its_queue_and_a_waiting_client_gets_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let db_arg = db.to_str().unwrap();
    let port = free_port();
    let args = ["--db", db_arg, "--local-worker", "false", "--gpu-class", "cpu"];
    let mut server = serve(dir.path(), port, &args, "serve-1");
    let mut w = worker(dir.path(), "w", &["--db", db_arg], "10");
    let body = json!({"items": [{"task": "level1/2_Swish", "completion": slow_program("restart", 3.0)}, {"task": "level1/3_Softmax_Rows", "completion": candidate("level1/3_Softmax_Rows", "correct", "restart")}], "wait_s": 60});
    let client =
        std::thread::spawn(move || reward_until_done(port, &body, Duration::from_secs(180)));
    w.wait_for("claimed", Duration::from_secs(60));
    server.kill();
    std::thread::sleep(Duration::from_millis(500));
    let _again = serve(dir.path(), port, &args, "serve-2");
    let (v, failures) = client.join().unwrap();
    let results = v["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["verdict"] == "correct"), "{v}");
    assert!(
        failures > 0 || results.iter().any(|r| r["cached"] == true),
        "the client's wait was cut by the restart"
    );
    let jobs: Vec<i64> = results.iter().map(|r| r["job"].as_i64().unwrap()).collect();
    let store = cudal1_store::Store::open(&db).unwrap();
    assert_eq!(store.counts().unwrap().done, 2, "the same two jobs, not new ones");
    for s in store.status(&jobs).unwrap() {
        assert!(s.attempts == 1 && s.discarded == 0, "{s:?}");
    }
    assert!(w.alive());
}

#[test]
fn postgres_restarted_under_a_running_worker_and_server_loses_nothing() {
    let pg = match cudal1_store_pg::test_server::TestPostgres::start() {
        Ok(pg) => pg,
        Err(why) => panic!("{why}"),
    };
    let url = pg.url();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = serve(dir.path(), port, &["--queue", &url, "--gpu-class", "cpu"], "serve");
    let mut w = worker(dir.path(), "w", &["--queue", &url], "15");
    let items: Vec<Value> = (0..3)
        .map(|i| json!({"task": "level1/2_Swish", "completion": slow_program(&format!("pg {i}"), 1.5)}))
        .chain([json!({"task": "level1/2_Swish", "completion": candidate("level1/2_Swish", "nan_output", "pg")})])
        .collect();
    let jobs = submit(port, &items);
    w.wait_for("claimed", Duration::from_secs(60));
    pg.restart();
    let (status, v) = http(
        port,
        "POST",
        "/v1/reward/get",
        Some(&json!({"jobs": jobs, "wait_s": 150})),
        Duration::from_secs(200),
    )
    .unwrap();
    assert_eq!(status, 200, "{v}");
    let verdicts: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["verdict"].as_str().unwrap_or("none"))
        .collect();
    assert_eq!(
        verdicts,
        ["correct", "correct", "correct", "incorrect"],
        "{v}\nworker:\n{}\nserve:\n{}",
        w.output(),
        server.output()
    );
    assert!(w.alive() && server.alive(), "both survive the restart");
    let store = cudal1_store_pg::PgStore::connect(&url).unwrap();
    for s in store.status(&jobs).unwrap() {
        assert!(s.state == JobState::Done && s.attempts == 1 && s.discarded == 0, "{s:?}");
    }
    assert_eq!(store.counts().unwrap().done, 4);
}

/// The startup line names the language prompts ask for when a request names none (issue 31).
#[test]
fn the_startup_line_names_the_default_language() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let db_arg = db.to_str().unwrap();
    for language in ["cuda", "triton"] {
        let port = free_port();
        let mut extra = vec!["--db", db_arg, "--local-worker", "false", "--gpu-class", "cpu"];
        if language == "triton" {
            extra.extend(["--language", "triton"]);
        }
        let mut server = serve(dir.path(), port, &extra, language);
        server.wait_for(
            &format!("prompts ask for {language} unless a request names its `language`"),
            Duration::from_secs(10),
        );
        let (status, prompt) = http(
            port,
            "POST",
            "/v1/prompt",
            Some(&json!({"task": "level1/2_Swish", "key": "k"})),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(status, 200, "{prompt}");
        assert_eq!(prompt["language"], language, "{prompt}");
    }
}
