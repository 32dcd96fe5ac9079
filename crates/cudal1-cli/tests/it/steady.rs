//! A long `cudal1 optimize` run holds steady memory: evaluations accumulate in the store, not in
//! the process. A real HTTP server on 127.0.0.1 answers every chat request with a new program
//! (each one distinct, so each is evaluated; each fails its first call at the end of a chain of
//! 300 calls, so each is quick and its evaluation carries a 20 KB traceback), and the process's
//! resident memory is read from /proc while the run goes on. Before the measured run, the store
//! gets a hundred more such rows, so that the run starts on a store of some size. SQLite's page
//! cache (2000 KiB by default) fills with what the run writes over its first forty programs or
//! so; what grows after that is the process's own.

use super::cudal1;
use cudal1_llm::test_server::{Reply, TestServer};
use cudal1_store::{NewProgram, ProgramDatabase, ProgramKey, Store};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TASK: &str = "tests/suite-cpu/tasks/level1/1_Diagonal_Matmul.py";

/// The `n`-th program: `n` makes its source (and so its evaluation) new. Its first call goes
/// down a chain of 300 functions (made at load time, so the source stays short) and fails at the
/// end with a message of 300 lines: the verdict's log holds the whole traceback and the message
/// (about 40 KB together), the reason its first lines.
fn failing_program(n: usize) -> String {
    let step = "step_{}_of_a_long_chain_of_calls_made_to_fill_the_traceback";
    format!(
        "import torch\nimport torch.nn as nn\n\nSTEP = '{step}'\nMESSAGE = 'attempt {n} failed\\n' + ''.join(f'line {{i}}: the log of the evaluation keeps the message whole\\n' for i in range(300))\nSOURCE = ''.join(f'def {{STEP.format(i)}}(x):\\n    return {{STEP.format(i + 1)}}(x)\\n' for i in range(300))\nSOURCE += f'def {{STEP.format(300)}}(x):\\n    raise RuntimeError(MESSAGE)\\n'\nSTEPS = {{'MESSAGE': MESSAGE}}\nexec(SOURCE, STEPS)\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, a, B):\n        return STEPS[STEP.format(0)](a)\n"
    )
}

/// Answers every chat request with the next program.
fn serve_programs(answered: Arc<AtomicUsize>) -> TestServer {
    TestServer::start(move |_| {
        let n = answered.fetch_add(1, Ordering::SeqCst);
        let text = format!("A new attempt.\n\n```python\n{}```\n", failing_program(n));
        Reply::completion(&text, 100, 50)
    })
    .expect("a test server on 127.0.0.1")
}

/// Resident memory of process `pid` in KiB, while it runs.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The least-squares slope of `y` over `x`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let cov: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    cov / var
}

/// What one `cudal1 optimize` invocation did, and its memory as it went.
struct Invocation {
    stdout: String,
    log: String,
    judged: usize,
    /// (programs judged, resident KiB), read every 50 ms.
    memory: Vec<(usize, u64)>,
}

fn optimize(db: &std::path::Path, out: &std::path::Path, url: &str, rounds: usize) -> Invocation {
    let mut cmd = cudal1(db);
    // One malloc arena: otherwise glibc gives threads arenas of their own, up to eight per core,
    // and the process's memory steps up as new threads first allocate, whatever it keeps.
    cmd.env("MALLOC_ARENA_MAX", "1");
    // Blocks of 16 KiB and more (an evaluation's log, its JSON) mapped on their own and returned
    // when freed, instead of glibc's threshold rising as they are freed and later ones filling
    // the heap in steps: resident memory then follows what is kept.
    cmd.env("MALLOC_MMAP_THRESHOLD_", "16384");
    cmd.args(["optimize", TASK, "--llm-url", url, "--model", "scripted", "--json"])
        .args(["--rounds", &rounds.to_string(), "--samples", &SAMPLES.to_string()])
        .args(["--device", "cpu", "--budget", "0.3", "--call-timeout", "5", "--seed", "1"])
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().expect("cudal1 starts");
    let pid = child.id();
    // Programs judged so far, from the progress lines on stderr (a line per program).
    let judged = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (stderr, judged, log) = (child.stderr.take().unwrap(), judged.clone(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(" program #") {
                    judged.fetch_add(1, Ordering::SeqCst);
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        })
    };
    // Standard output is read as it comes too: a run's JSON lines outgrow a pipe's buffer, and
    // cudal1 would wait on a full pipe.
    let out_reader = {
        let mut stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).map(|_| text)
        })
    };
    let mut memory = Vec::new();
    while child.try_wait().unwrap().is_none() {
        if let Some(kib) = rss_kib(pid) {
            memory.push((judged.load(Ordering::SeqCst), kib));
        }
        if started.elapsed() > Duration::from_secs(400) {
            let _ = child.kill();
            panic!("the run takes too long: {}", log.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let stdout = out_reader.join().unwrap().expect("cudal1's standard output is text");
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let log = log.lock().unwrap().clone();
    assert!(status.success(), "{log}");
    Invocation { stdout, log, judged: judged.load(Ordering::SeqCst), memory }
}

const SAMPLES: usize = 8;

#[test]
fn a_long_optimize_run_holds_steady_memory_as_evaluations_accumulate() {
    let dir = tempfile::tempdir().unwrap();
    let answered = Arc::new(AtomicUsize::new(0));
    let server = serve_programs(Arc::clone(&answered));
    let url = format!("{}/v1", server.url());
    let (db, out) = (dir.path().join("steady.db"), dir.path().join("out"));

    // One round, then a hundred more rows like its programs (other code, the same evaluation).
    let first = optimize(&db, &out, &url, 1);
    assert_eq!(first.judged, SAMPLES, "{}", first.log);
    let (task_hash, settings_hash): (String, String) = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT task_hash, settings_hash FROM programs LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let store = Store::open(&db).unwrap();
    let model = store.programs_for_task(&task_hash, &settings_hash).unwrap().remove(0);
    for i in 0..100 {
        store
            .insert_program(&NewProgram {
                key: ProgramKey { code_hash: format!("filler-{i}"), ..model.key.clone() },
                code: format!("{}# filler {i}\n", model.code),
                run_id: "filler".into(),
                round: 1,
                trajectory: None,
                turn: 1,
                parent_ids: vec![],
                verdict: model.verdict.clone(),
                reason: model.reason.clone(),
                reason_class: model.reason_class.clone(),
                speedup_median: None,
                speedup_ci_low: None,
                speedup_ci_high: None,
                evaluation: model.evaluation.clone(),
            })
            .unwrap();
    }
    drop(store);

    // The same command with more rounds continues the run: twelve more rounds, measured. SQLite's
    // page cache fills with the pages the run writes over its first forty programs or so (each
    // ~40 KiB of log), in steps of a few hundred KiB as the heap grows: the late half of 96
    // programs lies past that.
    let rounds = 13;
    let started = Instant::now();
    let run = optimize(&db, &out, &url, rounds);
    let measured = SAMPLES * (rounds - 1);
    server.stop();

    // Every round ran and every program was judged, once, each a failure with a long log.
    let summary: Value = serde_json::from_str(run.stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.log));
    assert_eq!(summary["rounds"].as_array().map(Vec::len), Some(rounds), "{}", run.log);
    assert_eq!(summary["invocation"]["evaluations"], measured, "{summary}");
    assert_eq!((run.judged, answered.load(Ordering::SeqCst)), (measured, SAMPLES * rounds));
    let (failed, logged): (i64, i64) = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT sum(verdict = 'runtime_error'), sum(length(evaluation) > 16384) FROM programs \
             WHERE run_id != 'filler'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let all = (SAMPLES * rounds) as i64;
    assert_eq!((failed, logged), (all, all), "each a failure with a long log");

    // After the first round of this invocation (the engine, the interpreter's pools and the
    // HTTP client warmed up; the summary written after the last program left out), memory stays
    // where it was: each evaluation (about 40 KB of log) goes to the store and none stays.
    // The second half of the measured programs: the allocator's arenas may still step up over
    // the first rounds, while an unbounded store of evaluations keeps growing to the end.
    let from = SAMPLES + (measured - SAMPLES) / 2;
    let late: Vec<(f64, f64)> = run
        .memory
        .iter()
        .filter(|(n, _)| *n >= from && *n < measured)
        .map(|(n, kib)| (*n as f64, *kib as f64))
        .collect();
    assert!(late.len() >= 20, "too few readings: {:?}", run.memory);
    let per_program_kib = slope(&late);
    let low = late.iter().map(|(_, k)| *k).fold(f64::INFINITY, f64::min);
    let high = late.iter().map(|(_, k)| *k).fold(0.0, f64::max);
    eprintln!(
        "{measured} programs in {:.0} s: {per_program_kib:.1} KiB per program, {low} to {high} KiB",
        started.elapsed().as_secs_f64()
    );
    // Measured on a 2-core machine: 2.2 KiB a program over programs 56-103, 136 KiB from low to
    // high (with six rounds, CI once saw 21.3 KiB a program over programs 28-47, the page cache
    // still filling); 33.6 and 37.6 KiB a program with the engine's event stream left unread
    // (each event keeps its evaluation), the leak this test is for.
    assert!(
        per_program_kib < 18.0 && high - low < 1536.0,
        "resident memory grew with the programs judged: {per_program_kib:.1} KiB per program, \
         {low} to {high} KiB; readings (programs, KiB): {:?}",
        run.memory
    );
}
