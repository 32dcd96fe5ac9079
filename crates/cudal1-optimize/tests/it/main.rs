//! The optimize loop with real parts: a chat-completions server on 127.0.0.1, a SQLite file,
//! and (where a program is evaluated) the real Python runner on the CPU. Stop rules, resuming an
//! interrupted round, and resuming a crash that left a program unevaluated.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudal1_eval::{CompileCache, Device, EngineConfig, EvalSettings, Evaluator, Judge, RunnerEnv};
use cudal1_llm::test_server::{Reply, TestServer};
use cudal1_llm::{OpenAiClient, OpenAiConfig, RetryPolicy};
use cudal1_optimize::{run_id, Event, OptimizeConfig, Optimizer, Profiles, RunSummary, StopReason};
use cudal1_search::{normalized_hash, Language, Prompts};
use cudal1_store::{NewSample, Store, StoredProgram};
use cudal1_task::Task;
use serde_json::json;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn task() -> Task {
    Task::load(&repo().join("tests/suite-cpu/tasks/level1/1_Diagonal_Matmul.py")).unwrap()
}

/// A server that answers every request with `status` and `text`, counts requests, and sets
/// `close` (the loop's Ctrl-C flag) when it sees request number `close_at`, before answering it.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    _server: TestServer,
}

impl Server {
    fn start(status: u16, text: &'static str, close: Option<(usize, Arc<AtomicBool>)>) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let server = TestServer::start(move |req| {
            let n = {
                let mut log = log.lock().unwrap();
                log.push(req.body);
                log.len()
            };
            if let Some((at, flag)) = &close {
                if n >= *at {
                    flag.store(true, Ordering::SeqCst);
                }
            }
            let reply = json!({
                "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 50}
            });
            Reply::json(status, reply.to_string())
        })
        .unwrap();
        Self { url: format!("{}/v1", server.url()), seen, _server: server }
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

fn client(url: &str) -> OpenAiClient {
    let mut c = OpenAiConfig::new(url, "m");
    c.max_concurrent = 1;
    c.retry = RetryPolicy { max_retries: 0, ..RetryPolicy::default() };
    OpenAiClient::new(c).unwrap()
}

fn settings() -> EvalSettings {
    EvalSettings {
        timing_budget: Duration::from_millis(300),
        call_timeout: Duration::from_secs(5),
        ..EvalSettings::default()
    }
}

/// The interpreter the tests use (`CUDAL1_TEST_PYTHON`, else the repository's `.venv`) with the
/// runner package installed under `cache`.
fn runner_env(cache: &Path) -> RunnerEnv {
    let flag = std::env::var_os("CUDAL1_TEST_PYTHON")
        .map(PathBuf::from)
        .or_else(|| Some(repo().join(".venv/bin/python")).filter(|p| p.exists()));
    let interp = cudal1_python::find_interpreter(&cudal1_python::PythonRequest {
        flag,
        start_dir: Some(repo()),
        ..Default::default()
    })
    .unwrap();
    let package_root = cudal1_python::RUNNER.install(cache).unwrap();
    RunnerEnv {
        python: interp.path.clone(),
        python_dirs: vec![interp.probe.prefix.clone(), interp.probe.base_prefix.clone()],
        package_root,
        cuda_arch: None,
        gpu_names: vec![],
        bytecode: None,
        forks: true,
        gpu_ids: vec![],
    }
}

/// An engine on the CPU whose scratch directory is made under `dir/scratch`.
fn engine(env: &RunnerEnv, dir: &Path) -> Evaluator {
    let mut config = EngineConfig::new(
        env.clone(),
        vec![Device::Cpu],
        settings(),
        CompileCache { root: dir.join("extensions") },
    );
    config.scratch_parent = dir.join("scratch");
    config.compile_workers = 1;
    config.lanes = 1;
    Evaluator::start(config).unwrap()
}

/// Files below `dir` once finished candidates' processes, which end in the background, are gone
/// (waits up to 20 s for the directory to settle).
fn settled_files_below(dir: &Path) -> Vec<PathBuf> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = files_below(dir);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Files (not directories) below `dir`, but the engine's mark of its scratch.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_below(&path));
        } else if entry.file_name() != cudal1_eval::scratch::OWNER_FILE {
            // (The engine's own mark that its scratch is in use stays while the engine lives.)
            found.push(path);
        }
    }
    found
}

/// Runs the loop once and returns its summary and events. Between evaluations the engine's
/// scratch holds nothing (expected outputs and candidate directories are removed as each program
/// is judged), and once the engine ends its scratch directory is gone.
fn run(
    llm: &OpenAiClient,
    store: &Store,
    config: &OptimizeConfig,
    cancel: &AtomicBool,
    env: &RunnerEnv,
    dir: &Path,
) -> (RunSummary, Vec<Event>) {
    let prompts = Prompts::builtin();
    let engine = engine(env, dir);
    let optimizer = Optimizer {
        llm,
        prompts: &prompts,
        store,
        engine: &engine,
        config,
        cancel,
        profiles: None,
    };
    let mut events = Vec::new();
    let summary = optimizer.run(&task(), "it", &mut |e| events.push(e)).unwrap();
    let left = settled_files_below(engine.scratch());
    assert!(left.is_empty(), "left in the scratch directory while the engine runs: {left:?}");
    engine.finish();
    assert_eq!(
        std::fs::read_dir(dir.join("scratch")).unwrap().count(),
        0,
        "the engine removes its scratch directory"
    );
    (summary, events)
}

/// An environment that is never used: these loops evaluate nothing.
fn unused_env() -> RunnerEnv {
    RunnerEnv {
        python: "/nonexistent/python".into(),
        python_dirs: vec![],
        package_root: "/nonexistent".into(),
        cuda_arch: None,
        gpu_names: vec![],
        bytecode: None,
        forks: false,
        gpu_ids: vec![],
    }
}

const NO_CODE: &str = "Use a broadcast instead of a diagonal matrix.";

#[test]
fn an_interrupted_round_resumes_with_only_the_missing_samples() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let config = OptimizeConfig { concurrency: 1, ..OptimizeConfig::new(1, 4) };
    let cancel = Arc::new(AtomicBool::new(false));
    let server = Server::start(200, NO_CODE, Some((2, Arc::clone(&cancel))));
    let (first, _) = run(&client(&server.url), &store, &config, &cancel, &unused_env(), dir.path());
    assert_eq!(first.stop, StopReason::Interrupted);
    assert!(first.rounds.is_empty(), "an interrupted round is not finished");
    assert_eq!(first.samples.len(), 2);
    assert_eq!(server.requests(), 2);

    let server = Server::start(200, NO_CODE, None);
    let (second, events) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::RoundStarted { round: 1, requests: 2, already_recorded: 2, .. }
        )),
        "{events:?}"
    );
    assert_eq!(server.requests(), 2);
    assert_eq!(second.stop, StopReason::Rounds { rounds: 1 });
    assert_eq!(second.rounds.len(), 1);
    assert_eq!(second.rounds[0].samples, 4);
    assert_eq!(second.samples.iter().map(|s| s.index).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert!(second.samples.iter().all(|s| s.outcome == "no_code"
        && s.reason.as_deref().is_some_and(|r| r.starts_with("no code block"))));
}

#[test]
fn a_token_budget_ends_the_round_early_and_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let config =
        OptimizeConfig { concurrency: 1, max_total_tokens: Some(300), ..OptimizeConfig::new(3, 5) };
    let server = Server::start(200, NO_CODE, None);
    let (s, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    // 150 tokens a reply: the budget is spent after two, and with one request at a time the
    // third is never sent.
    assert_eq!(s.stop, StopReason::TokenBudget { spent: 300, limit: 300 });
    assert_eq!(s.rounds.len(), 1, "the round ended early and counts as finished");
    assert_eq!(s.rounds[0].samples, 2, "{:?}", s.rounds);
    assert_eq!(server.requests(), s.samples.len());

    // Rerunning spends nothing: the budget covers the whole run.
    let (again, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    assert!(matches!(again.stop, StopReason::TokenBudget { .. }));
    assert_eq!(again.invocation.requests, 0);
}

#[test]
fn patience_stops_a_run_that_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let config = OptimizeConfig { patience: Some(2), ..OptimizeConfig::new(5, 1) };
    let server = Server::start(200, NO_CODE, None);
    let (s, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    assert_eq!(s.stop, StopReason::NoImprovement { rounds: 2 });
    assert_eq!(s.rounds.len(), 2);
    assert_eq!(server.requests(), 2);
}

#[test]
fn a_round_of_failed_requests_stops_the_run_with_the_error_and_the_next_run_sends_them_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let config = OptimizeConfig::new(1, 2);
    let server = Server::start(503, "overloaded", None);
    let (s, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    let StopReason::LlmUnavailable { round: 1, error } = &s.stop else { panic!("{:?}", s.stop) };
    assert!(error.contains("HTTP 503"), "{error}");
    assert!(s.rounds.is_empty(), "a round nobody answered is not finished");
    assert!(s.samples.iter().all(|x| x.outcome == "llm_error"));

    // The server is back: the same run sends the two requests again and finishes the round.
    let server = Server::start(200, NO_CODE, None);
    let (s, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    assert_eq!(s.stop, StopReason::Rounds { rounds: 1 });
    assert_eq!(server.requests(), 2);
    assert_eq!(s.rounds.len(), 1);
    let answered: Vec<u32> =
        s.samples.iter().filter(|x| x.outcome == "no_code").map(|x| x.index).collect();
    assert_eq!(answered, [2, 3], "new samples beside the failed ones, which stay on record");
    // A third run has nothing left to send.
    let (s, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    assert_eq!((s.stop, server.requests()), (StopReason::Rounds { rounds: 1 }, 2));
}

#[test]
fn a_program_a_crash_left_unevaluated_is_evaluated_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let fast = std::fs::read_to_string(
        repo().join("tests/suite-cpu/candidates/level1/1_Diagonal_Matmul/fast.py"),
    )
    .unwrap();
    // What an invocation killed after recording a reply, before its evaluation, leaves behind.
    let task = task();
    store
        .insert_sample(&NewSample {
            run_id: run_id(
                &task.hash,
                &Judge::new("cpu").settings_hash(&settings()),
                "it",
                Language::Cuda,
            ),
            round: 1,
            index: 0,
            turn: 1,
            prompt_kind: "first".into(),
            exemplar_ids: vec![],
            model: Some("m".into()),
            reply: Some(format!("```python\n{fast}```\n")),
            finish_reason: Some("stop".into()),
            prompt_tokens: 100,
            completion_tokens: 50,
            cost_usd: 0.0,
            latency_ms: Some(1.0),
            outcome: "program".into(),
            reason: None,
            code_hash: Some(normalized_hash(&fast)),
        })
        .unwrap();
    let server = Server::start(200, NO_CODE, None);
    let (s, events) = run(
        &client(&server.url),
        &store,
        &OptimizeConfig::new(1, 1),
        &AtomicBool::new(false),
        &env,
        dir.path(),
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::RunStarted { pending_evaluations: 1, recorded_samples: 1, .. }
        )),
        "{events:?}"
    );
    assert_eq!(server.requests(), 0, "the round already had its sample");
    assert_eq!((s.invocation.requests, s.invocation.evaluations), (0, 1));
    let best = s.best.expect("the fast program is correct");
    assert!(best.speedup > 1.0, "{}", best.speedup);
    assert_eq!(best.code, fast);
    assert_eq!(s.rounds[0].correct, 1);
}

#[test]
fn a_rejected_key_stops_the_run_with_an_error_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let server = Server::start(401, "bad key", None);
    let llm = client(&server.url);
    let (settings, prompts) = (settings(), Prompts::builtin());
    let engine = engine(&unused_env(), dir.path());
    let config = OptimizeConfig::new(2, 3);
    let cancel = AtomicBool::new(false);
    let optimizer = Optimizer {
        llm: &llm,
        prompts: &prompts,
        store: &store,
        engine: &engine,
        config: &config,
        cancel: &cancel,
        profiles: None,
    };
    let err = optimizer.run(&task(), "it", &mut |_| {}).unwrap_err();
    assert!(matches!(err, cudal1_optimize::OptimizeError::Llm { .. }), "{err:?}");
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("HTTP 401"), "{cause}");
    let run =
        run_id(&task().hash, &Judge::new("cpu").settings_hash(&settings), "it", Language::Cuda);
    assert!(store.samples_for_run(&run).unwrap().is_empty());
    assert!(store.rounds_for_run(&run).unwrap().is_empty());
}

/// Profiles from a source that fails for the reference and names each program; it counts what
/// it was asked.
#[derive(Default)]
struct NamedProfiles {
    asked: Mutex<Vec<Option<i64>>>,
}

impl Profiles for NamedProfiles {
    fn reference(&self, _task: &Task) -> Result<String, String> {
        self.asked.lock().unwrap().push(None);
        Err("ncu could not read the counters".into())
    }

    fn program(&self, _task: &Task, program: &StoredProgram) -> Result<String, String> {
        self.asked.lock().unwrap().push(Some(program.id));
        Ok(format!("1 kernel launch of program {}", program.id))
    }
}

#[test]
fn with_profiles_prompts_show_each_correct_programs_profile_taken_once_between_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let fast = std::fs::read_to_string(
        repo().join("tests/suite-cpu/candidates/level1/1_Diagonal_Matmul/fast.py"),
    )
    .unwrap();
    let reply: &'static str =
        Box::leak(format!("Broadcast instead.\n```python\n{fast}```\n").into_boxed_str());
    let server = Server::start(200, reply, None);
    let (llm, prompts, config, cancel) = (
        client(&server.url),
        Prompts::builtin(),
        OptimizeConfig::new(3, 1),
        AtomicBool::new(false),
    );
    let engine = engine(&env, dir.path());
    let profiles = NamedProfiles::default();
    let optimizer = Optimizer {
        llm: &llm,
        prompts: &prompts,
        store: &store,
        engine: &engine,
        config: &config,
        cancel: &cancel,
        profiles: Some(&profiles),
    };
    let mut events = Vec::new();
    let s = optimizer.run(&task(), "it", &mut |e| events.push(e)).unwrap();
    engine.finish();
    let id = s.best.as_ref().expect("the fast program is correct").program_id;

    // The reference is tried once (its failure is an event, not an error); the program once.
    assert_eq!(*profiles.asked.lock().unwrap(), vec![None, Some(id)]);
    let profiling: Vec<(u32, usize)> = events
        .iter()
        .filter_map(|e| {
            if let Event::Profiling { round, programs } = e {
                Some((*round, *programs))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(profiling, vec![(1, 1), (2, 1)]);
    assert!(events.iter().any(|e| matches!(e, Event::ProfileFailed { program_id: None, error } if error.contains("counters"))), "{events:?}");

    let prompts: Vec<String> = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|b| {
            serde_json::from_str::<serde_json::Value>(b).unwrap()["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(prompts.len(), 3);
    assert!(!prompts[0].contains("Nsight Compute"), "no profile of the reference to show");
    for later in &prompts[1..] {
        assert!(
            later.contains(&format!(
                "Nsight Compute profile of variant 1:\n\n1 kernel launch of program {id}"
            )),
            "{later}"
        );
    }
}

#[test]
fn a_later_turn_shows_the_previous_programs_speedup_and_profile_and_a_known_program_is_not_judged_again(
) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let fast = std::fs::read_to_string(
        repo().join("tests/suite-cpu/candidates/level1/1_Diagonal_Matmul/fast.py"),
    )
    .unwrap();
    let reply: &'static str =
        Box::leak(format!("Broadcast instead.\n```python\n{fast}```\n").into_boxed_str());
    let server = Server::start(200, reply, None);
    // No speedup is good enough: the trajectory takes both turns.
    let config = OptimizeConfig { turns: 2, turn_target: 1e9, ..OptimizeConfig::new(1, 1) };
    let (llm, prompts, cancel) = (client(&server.url), Prompts::builtin(), AtomicBool::new(false));
    let engine = engine(&env, dir.path());
    let profiles = NamedProfiles::default();
    let optimizer = Optimizer {
        llm: &llm,
        prompts: &prompts,
        store: &store,
        engine: &engine,
        config: &config,
        cancel: &cancel,
        profiles: Some(&profiles),
    };
    let mut events = Vec::new();
    let s = optimizer.run(&task(), "it", &mut |e| events.push(e)).unwrap();
    engine.finish();
    let best = s.best.as_ref().expect("the fast program is correct");
    let id = best.program_id;

    assert_eq!(s.invocation.requests, 2);
    assert_eq!(s.invocation.evaluations, 1, "turn 2 wrote the same program: judged once");
    assert_eq!(
        s.samples.iter().map(|l| (l.index, l.turn, l.program_id)).collect::<Vec<_>>(),
        [(0, 1, Some(id)), (0, 2, Some(id))]
    );
    assert!(
        events.iter().any(|e| matches!(e, Event::TurnsStarted { round: 1, requests: 1 })),
        "{events:?}"
    );
    assert_eq!(
        *profiles.asked.lock().unwrap(),
        vec![None, Some(id)],
        "the previous program is profiled for turn 2"
    );
    let prompts: Vec<String> = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|b| {
            serde_json::from_str::<serde_json::Value>(b).unwrap()["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let turn2 = &prompts[1];
    let speedup = format!(
        "verdict on your previous attempt: correct. speedup {:.2}x (95% CI {:.2}x to {:.2}x)",
        best.speedup,
        best.speedup_ci_low.unwrap(),
        best.speedup_ci_high.unwrap()
    );
    assert!(turn2.contains(&speedup), "{turn2}");
    assert!(
        turn2.contains(&format!(
            "Nsight Compute profile of your previous attempt:\n\n1 kernel launch of program {id}"
        )),
        "{turn2}"
    );
    assert!(turn2.contains("is correct. Write a program that is faster still"), "{turn2}");
    let stored = store.samples_for_run(&s.run_id).unwrap();
    assert_eq!(
        stored.iter().map(|x| (x.sample.turn, x.sample.prompt_kind.as_str())).collect::<Vec<_>>(),
        [(1, "first"), (2, "refine")]
    );
}

#[test]
fn a_later_turns_failed_request_is_sent_again_by_the_next_run_in_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let config = OptimizeConfig { turns: 2, ..OptimizeConfig::new(1, 1) };
    // Turn 1 answers without code, and Ctrl-C comes with it.
    let cancel = Arc::new(AtomicBool::new(false));
    let server = Server::start(200, NO_CODE, Some((1, Arc::clone(&cancel))));
    let (s, _) = run(&client(&server.url), &store, &config, &cancel, &unused_env(), dir.path());
    assert_eq!((s.stop, server.requests()), (StopReason::Interrupted, 1));
    // Turn 2's request fails: the round stays open.
    let server = Server::start(503, "overloaded", None);
    let (s, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    assert!(matches!(s.stop, StopReason::LlmUnavailable { round: 1, .. }), "{:?}", s.stop);
    assert_eq!(
        s.samples.iter().map(|l| (l.turn, l.outcome.as_str())).collect::<Vec<_>>(),
        [(1, "no_code"), (2, "llm_error")]
    );
    // The server is back: turn 2 is sent again, shows why turn 1 had no program, and takes the
    // failed request's place.
    let server = Server::start(200, NO_CODE, None);
    let (s, _) = run(
        &client(&server.url),
        &store,
        &config,
        &AtomicBool::new(false),
        &unused_env(),
        dir.path(),
    );
    assert_eq!((s.stop, server.requests()), (StopReason::Rounds { rounds: 1 }, 1));
    assert_eq!(
        s.samples.iter().map(|l| (l.turn, l.outcome.as_str())).collect::<Vec<_>>(),
        [(1, "no_code"), (2, "no_code")]
    );
    let body: serde_json::Value = serde_json::from_str(&server.seen.lock().unwrap()[0]).unwrap();
    let prompt = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        prompt
            .contains("## Your previous attempt (turn 1)\n\nYour previous reply held no program."),
        "{prompt}"
    );
    assert!(
        prompt.contains("verdict on your previous attempt: no program. no code block"),
        "{prompt}"
    );
}
