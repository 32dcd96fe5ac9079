//! Workers on real queues (an SQLite file; a PostgreSQL server started by the test) judging
//! real candidates of the CPU suite with the real Python runner.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use cudal1_eval::{CompileCache, Device, EngineConfig, EvalSettings, Judge, Mode, RunnerEnv};
use cudal1_queue::{JobSpec, WorkerConfig, WorkerEvent, WorkerSummary};
use cudal1_store::{JobQueue, JobState, NewJob, ProgramDatabase, Stage, Store};
use cudal1_store_pg::test_server::TestPostgres;
use cudal1_store_pg::PgStore;
use cudal1_task::Task;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

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
    RunnerEnv::prepare(&interp, cache).unwrap()
}

fn settings() -> EvalSettings {
    EvalSettings {
        mode: Mode::Correctness,
        timing_budget: Duration::from_millis(300),
        call_timeout: Duration::from_secs(10),
        ..EvalSettings::for_device(Device::Cpu)
    }
}

fn worker(name: &str, dir: &Path, env: &RunnerEnv) -> WorkerConfig {
    let mut engine = EngineConfig::new(
        env.clone(),
        vec![Device::Cpu],
        settings(),
        CompileCache { root: dir.join("extensions") },
    );
    engine.scratch_parent = dir.join("scratch");
    engine.compile_workers = 1;
    engine.lanes = 1;
    WorkerConfig {
        engine,
        name: name.into(),
        gpu_class: "cpu".into(),
        stages: vec![Stage::Run, Stage::Compile],
        lease: Duration::from_secs(5),
        ahead: 2,
        task_root: dir.join("tasks"),
        allow_unsandboxed: false,
        build_environment: "test".into(),
        exit_when_idle: Some(Duration::from_millis(1500)),
    }
}

fn suite_task(name: &str) -> Task {
    Task::load(&repo().join(format!("tests/suite-cpu/tasks/{name}.py"))).unwrap()
}

fn candidate(task: &str, file: &str) -> String {
    std::fs::read_to_string(repo().join(format!("tests/suite-cpu/candidates/{task}/{file}.py")))
        .unwrap()
}

fn job(task: &Task, code: &str) -> NewJob {
    JobSpec {
        task,
        code,
        settings: &settings(),
        judge: &Judge::new("cpu"),
        parent_ids: vec![],
        priority: 0,
        max_attempts: 3,
        compile_stage: false,
    }
    .to_job()
}

fn run_worker(queue: &dyn JobQueue, config: &WorkerConfig) -> WorkerSummary {
    let stop = AtomicBool::new(false);
    cudal1_queue::run(queue, config, &stop, &mut |e| {
        if let WorkerEvent::StoreProblem { error } = e {
            panic!("{error}");
        }
    })
    .unwrap()
}

#[test]
fn a_worker_judges_queued_jobs_and_files_their_programs() {
    let dir = tempfile::tempdir().unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let store = Store::open(&dir.path().join("q.db")).unwrap();
    let matmul = suite_task("level1/1_Diagonal_Matmul");
    let swish = suite_task("level1/2_Swish");
    let jobs = [
        job(&matmul, &candidate("level1/1_Diagonal_Matmul", "fast")),
        job(&matmul, &candidate("level1/1_Diagonal_Matmul", "wrong_axis")),
        job(&swish, &candidate("level1/2_Swish", "missing_modelnew")),
    ];
    let ids: Vec<i64> = store.enqueue(&jobs).unwrap().into_iter().map(|e| e.id).collect();
    let summary = run_worker(&store, &worker("w1", dir.path(), &env));
    assert_eq!(
        (summary.claimed, summary.evaluated, summary.failed, summary.discarded),
        (3, 3, 0, 0)
    );
    let mut statuses = store.status(&ids).unwrap();
    statuses.sort_by_key(|s| s.id);
    let verdicts: Vec<&str> = statuses.iter().map(|s| s.verdict.as_deref().unwrap()).collect();
    assert_eq!(
        verdicts,
        ["correct", "incorrect", "runtime_error"],
        "results: {:#?}",
        statuses.iter().map(|s| &s.result).collect::<Vec<_>>()
    );
    for s in &statuses {
        assert_eq!((s.state, s.attempts, s.worker.as_deref()), (JobState::Done, 1, Some("w1")));
        let program = store.program(s.program_id.unwrap()).unwrap().unwrap();
        assert_eq!(Some(program.verdict.as_str()), s.verdict.as_deref());
        assert_eq!(
            s.result.as_ref().unwrap()["task"],
            s.task_name.as_str(),
            "the task keeps its name on the worker"
        );
    }
}

#[test]
fn two_workers_share_a_postgres_queue_without_duplicates() {
    let server = match TestPostgres::start() {
        Ok(s) => s,
        Err(why) => {
            assert!(std::env::var_os("CUDAL1_REQUIRE_PG").is_none(), "{why}");
            eprintln!("skipping: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let env = runner_env(&dir.path().join("cache"));
    let queue = PgStore::connect(&server.url()).unwrap();
    let tasks =
        ["level1/1_Diagonal_Matmul", "level1/2_Swish", "level1/3_Softmax_Rows"].map(suite_task);
    let mut jobs = Vec::new();
    for (task, files) in tasks.iter().zip([
        ["fast", "wrong_axis"],
        ["correct", "nan_output"],
        ["correct", "wrong_shape"],
    ]) {
        for f in files {
            jobs.push(job(task, &candidate(&task.key(), f)));
        }
    }
    let ids: Vec<i64> = queue.enqueue(&jobs).unwrap().into_iter().map(|e| e.id).collect();
    let summaries: Vec<WorkerSummary> = std::thread::scope(|s| {
        let url = server.url();
        let handles: Vec<_> = ["a", "b"]
            .iter()
            .map(|name| {
                let (url, env, dir) = (url.clone(), &env, dir.path().join(name));
                // Each worker has its own connection, as separate processes would.
                s.spawn(move || {
                    run_worker(&PgStore::connect(&url).unwrap(), &worker(name, &dir, env))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let evaluated: u64 = summaries.iter().map(|s| s.evaluated).sum();
    assert_eq!(evaluated, 6, "{summaries:?}");
    assert!(
        summaries.iter().all(|s| s.discarded == 0 && s.claimed > 0),
        "both workers took jobs, none twice: {summaries:?}"
    );
    for s in queue.status(&ids).unwrap() {
        assert_eq!((s.state, s.attempts, s.discarded), (JobState::Done, 1, 0), "job {}", s.id);
    }
}
