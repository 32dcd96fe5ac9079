//! The evaluation engine end to end on the CPU, with the real Python runner: the order of events,
//! lanes that share a device for checks and hold it alone for timing, priorities, cancelling and
//! killing, task failures, and the scratch directory left empty.

use cudal1_eval::{
    CompileCache, Device, EngineConfig, EvalSettings, Evaluator, Event, EventKind, Job, JobId,
    JobOutcome, Mode, RunnerEnv, Verdict,
};
use cudal1_task::{Candidate, Task};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod builds;
mod own;
mod profile;
mod started;
mod triton;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The interpreter the tests use (`CUDAL1_TEST_PYTHON`, `CUDAL1_PYTHON`, else the repository's
/// `.venv`) with the runner installed under `cache`.
fn runner_env(cache: &Path) -> RunnerEnv {
    let flag = ["CUDAL1_TEST_PYTHON", "CUDAL1_PYTHON"]
        .iter()
        .find_map(std::env::var_os)
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

fn task(rel: &str) -> Arc<Task> {
    Arc::new(Task::load(&repo().join("tests/suite-cpu/tasks").join(rel)).unwrap())
}

fn candidate(rel: &str) -> Candidate {
    Candidate::load(&repo().join("tests/suite-cpu/candidates").join(rel)).unwrap()
}

/// A CPU engine with short timing, `lanes` lanes, scratch under `dir/scratch`.
fn engine(
    dir: &Path,
    lanes: usize,
    call_timeout: Duration,
) -> (Evaluator, crossbeam_channel::Receiver<Event>) {
    engine_with(dir, lanes, call_timeout, false)
}

fn engine_with(
    dir: &Path,
    lanes: usize,
    call_timeout: Duration,
    pipeline: bool,
) -> (Evaluator, crossbeam_channel::Receiver<Event>) {
    let mut config = engine_config(dir, lanes, call_timeout);
    config.pipeline = pipeline;
    Evaluator::start_with_events(config).unwrap()
}

fn engine_config(dir: &Path, lanes: usize, call_timeout: Duration) -> EngineConfig {
    let settings = EvalSettings {
        timing_budget: Duration::from_millis(300),
        call_timeout,
        ..EvalSettings::default()
    };
    let mut config = EngineConfig::new(
        runner_env(&dir.join("cache")),
        vec![Device::Cpu],
        settings,
        CompileCache { root: dir.join("extensions") },
    );
    config.scratch_parent = dir.join("scratch");
    config.compile_workers = 1;
    config.lanes = lanes;
    config.seed = 7;
    config
}

/// Submits checks with the verdicts they must get, then a timed job that must be judged correct
/// with a speedup, waits for all, and ends the engine.
fn checks_then_timed(
    engine: Evaluator,
    events: &crossbeam_channel::Receiver<Event>,
    jobs: Vec<(Job, Verdict)>,
    timed: Job,
) -> cudal1_eval::EngineStats {
    let n = jobs.len() + 1;
    let handles: Vec<_> = jobs.into_iter().map(|(job, want)| (engine.submit(job), want)).collect();
    let timed = engine.submit(timed);
    let (_, by_job) = collect(events, n);
    for (h, want) in &handles {
        let JobOutcome::Evaluated(e) = outcome(&by_job[&h.id]) else {
            panic!("{:?}", outcome(&by_job[&h.id]))
        };
        assert_eq!(e.verdict, *want, "{}: {}", e.task, e.reason);
    }
    let JobOutcome::Evaluated(e) = outcome(&by_job[&timed.id]) else {
        panic!("{:?}", outcome(&by_job[&timed.id]))
    };
    assert!(e.verdict == Verdict::Correct && e.speedup.is_some(), "{}: {}", e.verdict, e.reason);
    engine.finish()
}

/// Events, in the order the stream gave them, and each job's.
#[derive(Default)]
struct Seen {
    all: Vec<Event>,
    by_job: BTreeMap<JobId, Vec<EventKind>>,
}

impl Seen {
    /// Receives events until `done` holds for what has been seen.
    fn until(&mut self, events: &crossbeam_channel::Receiver<Event>, done: impl Fn(&Seen) -> bool) {
        while !done(self) {
            let e =
                events.recv_timeout(Duration::from_secs(300)).expect("the engine keeps reporting");
            self.by_job.entry(e.job).or_default().push(e.kind.clone());
            self.all.push(e);
        }
    }

    fn finished(&self) -> usize {
        self.all.iter().filter(|e| matches!(e.kind, EventKind::Finished(_))).count()
    }
}

/// Events of each job, in the order the stream gave them, until `jobs` have finished.
fn collect(
    events: &crossbeam_channel::Receiver<Event>,
    jobs: usize,
) -> (Vec<Event>, BTreeMap<JobId, Vec<EventKind>>) {
    let mut seen = Seen::default();
    seen.until(events, |s| s.finished() >= jobs);
    (seen.all, seen.by_job)
}

fn outcome(kinds: &[EventKind]) -> &JobOutcome {
    match kinds.last() {
        Some(EventKind::Finished(o)) => o,
        other => panic!("the last event is not Finished: {other:?}"),
    }
}

fn verdict(kinds: &[EventKind]) -> Verdict {
    match outcome(kinds) {
        JobOutcome::Evaluated(e) => e.verdict,
        other => panic!("not evaluated: {other:?}"),
    }
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

#[test]
fn every_job_reports_queued_then_started_then_exactly_one_finished_and_the_scratch_is_left_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine(dir.path(), 1, Duration::from_secs(20));
    let diag = task("level1/1_Diagonal_Matmul.py");
    let fast = engine
        .submit(Job::evaluate(Arc::clone(&diag), candidate("level1/1_Diagonal_Matmul/fast.py")));
    let wrong = engine.submit(Job::evaluate(
        Arc::clone(&diag),
        candidate("level1/1_Diagonal_Matmul/wrong_axis.py"),
    ));
    let broken = engine.submit(Job::evaluate(
        diag,
        Candidate::from_source("broken.py".into(), "class ModelNew(:\n".into()),
    ));
    let (_, by_job) = collect(&events, 3);
    for (id, kinds) in &by_job {
        assert!(matches!(kinds.first(), Some(EventKind::Queued { .. })), "{id}: {kinds:?}");
        assert_eq!(
            kinds.iter().filter(|k| matches!(k, EventKind::Finished(_))).count(),
            1,
            "{id}: {kinds:?}"
        );
        // Started, then (for a job that is timed) Timing, then Finished.
        let started = kinds.iter().position(|k| matches!(k, EventKind::Started { .. })).unwrap();
        let timing = usize::from(matches!(kinds[kinds.len() - 2], EventKind::Timing));
        assert_eq!(
            started,
            kinds.len() - 2 - timing,
            "{id}: Started comes right before Finished: {kinds:?}"
        );
    }
    assert_eq!(verdict(&by_job[&fast.id]), Verdict::Correct);
    assert_eq!(verdict(&by_job[&wrong.id]), Verdict::Incorrect);
    assert_eq!(verdict(&by_job[&broken.id]), Verdict::CompileError);
    // The handle got the same outcome as the stream.
    let JobOutcome::Evaluated(e) = fast.wait() else { panic!("the handle has the evaluation") };
    assert!(e.speedup.is_some() && e.duration_ms > 0.0);
    // Between jobs nothing is left behind (expected outputs, candidate directories; a finished
    // candidate's process ends in the background within moments), and the engine removes its
    // scratch directory when it ends.
    let left = settled_files_below(engine.scratch());
    assert!(left.is_empty(), "{left:?}");
    engine.finish();
    assert_eq!(std::fs::read_dir(dir.path().join("scratch")).unwrap().count(), 0);
}

/// When each job held the device: (start, end) by the order of events.
fn held(all: &[Event]) -> BTreeMap<JobId, (usize, usize)> {
    spans_from(all, |k| matches!(k, EventKind::Started { .. }))
}

/// (the first event `starts`, `Finished`) per job, by the order of events.
fn spans_from(
    all: &[Event],
    starts: impl Fn(&EventKind) -> bool,
) -> BTreeMap<JobId, (usize, usize)> {
    let mut spans: BTreeMap<JobId, (usize, usize)> = BTreeMap::new();
    for (i, e) in all.iter().enumerate() {
        if starts(&e.kind) {
            spans.insert(e.job, (i, usize::MAX));
        } else if let (EventKind::Finished(_), Some(s)) = (&e.kind, spans.get_mut(&e.job)) {
            s.1 = i;
        }
    }
    spans
}

/// When each timed job held the device alone: (`Timing`, `Finished`) by the order of events.
fn alone(all: &[Event]) -> BTreeMap<JobId, (usize, usize)> {
    spans_from(all, |k| matches!(k, EventKind::Timing))
}

/// Issue 12: pipelined, every lane takes timed jobs: they load and check side by side, and each
/// holds the device alone only while it is timed, one at a time; a wrong one never does.
#[test]
fn pipelined_timed_jobs_are_checked_side_by_side_and_timed_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine_with(dir.path(), 3, Duration::from_secs(20), true);
    let job = |t: &str, c: &str| engine.submit(Job::evaluate(task(t), candidate(c))).id;
    let swish = job("level1/2_Swish.py", "level1/2_Swish/correct.py");
    let softmax = job("level1/3_Softmax_Rows.py", "level1/3_Softmax_Rows/correct.py");
    let wrong = job("level1/2_Swish.py", "level1/2_Swish/nan_output.py");
    let (all, by_job) = collect(&events, 3);
    for id in [swish, softmax] {
        let JobOutcome::Evaluated(e) = outcome(&by_job[&id]) else {
            panic!("{id}: {:?}", by_job[&id])
        };
        assert!(
            e.verdict == Verdict::Correct && e.speedup.is_some(),
            "{id}: {} {}",
            e.verdict,
            e.reason
        );
        assert!(
            e.measurements.phases_ms.contains_key("device_wait_timing"),
            "{:?}",
            e.measurements.phases_ms
        );
    }
    assert_eq!(verdict(&by_job[&wrong]), Verdict::Incorrect);
    assert!(
        !by_job[&wrong].iter().any(|k| matches!(k, EventKind::Timing)),
        "a wrong candidate never holds the device alone"
    );
    let overlap = |x: (usize, usize), y: (usize, usize)| x.0 < y.1 && y.0 < x.1;
    let timed = alone(&all);
    assert_eq!(timed.len(), 2);
    assert!(!overlap(timed[&swish], timed[&softmax]), "timed at once: {timed:?}");
    // Checked side by side: some two jobs were on the device at once.
    let spans = held(&all);
    let ids = [swish, softmax, wrong];
    assert!(
        ids.iter().any(|a| ids.iter().any(|b| a != b && overlap(spans[a], spans[b]))),
        "one at a time: {spans:?}"
    );
    let stats = engine.finish();
    assert!(stats.timing_busy[0].1 > Duration::ZERO);
}

/// Pipelined, running out of memory is not kept as a verdict at once (other lanes' work shares
/// the device): the candidate is evaluated again holding the device alone, and that verdict stands.
#[test]
fn pipelined_out_of_memory_is_judged_again_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine_with(dir.path(), 2, Duration::from_secs(20), true);
    let swish = task("level1/2_Swish.py");
    let source = format!("{}\n\nclass ModelNew(Model):\n    def forward(self, x):\n        raise MemoryError('out of memory')\n", swish.source);
    let id =
        engine.submit(Job::evaluate(swish, Candidate::from_source("oom.py".into(), source))).id;
    let (_, by_job) = collect(&events, 1);
    let JobOutcome::Evaluated(e) = outcome(&by_job[&id]) else { panic!("{:?}", by_job[&id]) };
    assert_eq!(
        (e.verdict, e.reason_class.as_str()),
        (Verdict::RuntimeError, "out_of_memory"),
        "{}",
        e.reason
    );
    assert!(
        by_job[&id].iter().any(|k| matches!(k, EventKind::Timing)),
        "the second try held the device alone"
    );
    engine.finish();
}

#[test]
fn correctness_checks_share_the_device_and_a_timed_job_holds_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine(dir.path(), 3, Duration::from_secs(20));
    let swish = task("level1/2_Swish.py");
    let check = |c: &str| Job::evaluate(Arc::clone(&swish), candidate(c)).mode(Mode::Correctness);
    // The first two take a while (each call sleeps), so that they overlap wherever their lanes'
    // starts fall: a quick check could end before the second lane had its runner (seen in CI).
    let slow = |name: &str, sleep: f64, body: &str| {
        let source = format!("import time\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        time.sleep({sleep})\n        return {body}\n");
        Job::evaluate(Arc::clone(&swish), Candidate::from_source(name.into(), source))
            .mode(Mode::Correctness)
    };
    let a = engine.submit(slow("slow_correct.py", 0.3, "x * torch.sigmoid(x)"));
    let b = engine.submit(slow(
        "slow_nan_output.py",
        1.0,
        "x * torch.sigmoid(x) + torch.sqrt(x) * 0.0",
    ));
    // The timed job comes once both checks hold the device: a lane that asks for the device
    // after a timed job waits for it (seen in a loop here: the first check started last).
    let mut seen = Seen::default();
    seen.until(&events, |s| {
        [a.id, b.id].iter().all(|id| {
            s.by_job
                .get(id)
                .is_some_and(|k| k.iter().any(|k| matches!(k, EventKind::Started { .. })))
        })
    });
    let timed =
        engine.submit(Job::evaluate(Arc::clone(&swish), candidate("level1/2_Swish/correct.py")));
    let c = engine.submit(check("level1/2_Swish/correct.py"));
    seen.until(&events, |s| s.finished() >= 4);
    let Seen { all, by_job } = seen;
    let spans = held(&all);
    // The first two checks ran side by side.
    let overlap = |x: (usize, usize), y: (usize, usize)| x.0 < y.1 && y.0 < x.1;
    assert!(overlap(spans[&a.id], spans[&b.id]), "{spans:?}");
    // Nothing ran while the timed job held the device.
    for id in [a.id, b.id, c.id] {
        assert!(!overlap(spans[&timed.id], spans[&id]), "{id} ran beside the timed job: {spans:?}");
    }
    let JobOutcome::Evaluated(checked) = outcome(&by_job[&a.id]) else { panic!() };
    assert_eq!(
        (checked.verdict, checked.mode),
        (Verdict::Correct, Mode::Correctness),
        "{}",
        checked.reason
    );
    assert!(checked.speedup.is_none() && checked.measurements.timing.is_none());
    assert!(checked.reason.contains("not timed"), "{}", checked.reason);
    assert_eq!(verdict(&by_job[&b.id]), Verdict::Incorrect);
    let JobOutcome::Evaluated(full) = outcome(&by_job[&timed.id]) else { panic!() };
    assert_eq!(full.mode, Mode::Full);
    assert!(full.speedup.is_some());
    engine.finish();
}

/// A candidate of `level1/2_Swish` that fails (`failure`: Python in its forward) on its second call
/// (the first is build time, under the load limit), the first time it is loaded, and is correct
/// from then on: the marker file that tells is outside any
/// sandbox, so the engine runs unsandboxed, and outside the shared temporary directories, where
/// the runner reports a candidate that looks for files.
fn marker_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn fails_once(swish: &Task, marker: &Path, failure: &str) -> Candidate {
    let source = format!(
        "{}\n\nimport os\nclass ModelNew(Model):\n    calls = 0\n    def forward(self, x):\n        self.calls += 1\n        if self.calls == 2 and not os.path.exists({marker:?}):\n            open({marker:?}, 'w').close()\n            {failure}\n        return super().forward(x)\n",
        swish.source,
        marker = marker.display().to_string(),
    );
    Candidate::from_source("fails_once.py".into(), source)
}

fn unsandboxed_engine(
    dir: &Path,
    lanes: usize,
    call_timeout: Duration,
) -> (Evaluator, crossbeam_channel::Receiver<Event>) {
    let mut config = engine_config(dir, lanes, call_timeout);
    config.settings.sandbox = false;
    Evaluator::start_with_events(config).unwrap()
}

/// Beside other lanes' checks, running out of memory or time is no verdict until the job ran
/// holding the device alone (issue 34: 15 of 142 rows of a release were a false out-of-memory).
#[test]
fn a_check_out_of_memory_or_time_beside_others_is_judged_again_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = unsandboxed_engine(dir.path(), 2, Duration::from_secs(4));
    let swish = task("level1/2_Swish.py");
    let markers = marker_dir();
    let oom = engine.submit(
        Job::evaluate(
            Arc::clone(&swish),
            fails_once(&swish, &markers.path().join("oom"), "raise MemoryError('out of memory')"),
        )
        .mode(Mode::Correctness),
    );
    let slow = engine.submit(
        Job::evaluate(
            Arc::clone(&swish),
            fails_once(&swish, &markers.path().join("slow"), "import time; time.sleep(60)"),
        )
        .mode(Mode::Correctness),
    );
    let (_, by_job) = collect(&events, 2);
    for id in [oom.id, slow.id] {
        let JobOutcome::Evaluated(e) = outcome(&by_job[&id]) else { panic!("{:?}", by_job[&id]) };
        assert_eq!(e.verdict, Verdict::Correct, "{}", e.reason);
        let w = e
            .warnings
            .iter()
            .find(|w| w.class == "judged_again_alone")
            .expect("the first try is told");
        assert!(
            w.message.contains(if id == oom.id {
                "out of device memory"
            } else {
                "did not finish"
            }),
            "{}",
            w.message
        );
    }
    engine.finish();
}

/// A reference that fails beside other lanes' work is started again, holding the device alone,
/// before its task is blamed.
#[test]
fn a_reference_that_fails_beside_others_is_tried_again_alone_before_its_task_is_blamed() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = unsandboxed_engine(dir.path(), 2, Duration::from_secs(20));
    let swish = task("level1/2_Swish.py");
    let markers = marker_dir();
    let marker = markers.path().join("reference-failed");
    let source = format!(
        "{}\n\nimport os\n_forward = Model.forward\ndef _once(self, x):\n    if x.device.type != 'meta' and not os.path.exists({m:?}):\n        open({m:?}, 'w').close()\n        raise RuntimeError('an illegal memory access was encountered')\n    return _forward(self, x)\nModel.forward = _once\n",
        swish.source,
        m = marker.display().to_string(),
    );
    let path = dir.path().join("2_Swish.py");
    std::fs::write(&path, &source).unwrap();
    let flaky = Arc::new(Task::from_source(&path, source).unwrap());
    let id = engine
        .submit(
            Job::evaluate(flaky, candidate("level1/2_Swish/correct.py")).mode(Mode::Correctness),
        )
        .id;
    let (_, by_job) = collect(&events, 1);
    let JobOutcome::Evaluated(e) = outcome(&by_job[&id]) else { panic!("{:?}", by_job[&id]) };
    assert_eq!(e.verdict, Verdict::Correct, "{}", e.reason);
    assert!(
        e.warnings
            .iter()
            .any(|w| w.class == "judged_again_alone" && w.message.contains("reference failed")),
        "{:?}",
        e.warnings
    );
    engine.finish();
}

/// With one lane nothing runs beside a job: its out-of-memory is its own.
#[test]
fn with_one_lane_out_of_memory_is_the_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = unsandboxed_engine(dir.path(), 1, Duration::from_secs(20));
    let swish = task("level1/2_Swish.py");
    let markers = marker_dir();
    let id = engine
        .submit(
            Job::evaluate(
                Arc::clone(&swish),
                fails_once(
                    &swish,
                    &markers.path().join("oom"),
                    "raise MemoryError('out of memory')",
                ),
            )
            .mode(Mode::Correctness),
        )
        .id;
    let (_, by_job) = collect(&events, 1);
    let JobOutcome::Evaluated(e) = outcome(&by_job[&id]) else { panic!("{:?}", by_job[&id]) };
    assert_eq!(
        (e.verdict, e.reason_class.as_str()),
        (Verdict::RuntimeError, "out_of_memory"),
        "{}",
        e.reason
    );
    assert!(e.warnings.is_empty(), "{:?}", e.warnings);
    engine.finish();
}

/// A correctness check of a correct candidate of a task.
fn check(t: &str, c: &str) -> Job {
    Job::evaluate(task(t), candidate(c)).mode(Mode::Correctness)
}

/// Checks of tasks 1, 2, 3 and 5 of the CPU suite, one correct candidate each.
fn correct_checks_of_four_tasks() -> Vec<(Job, Verdict)> {
    [
        ("level1/1_Diagonal_Matmul.py", "level1/1_Diagonal_Matmul/fast.py"),
        ("level1/2_Swish.py", "level1/2_Swish/correct.py"),
        ("level1/3_Softmax_Rows.py", "level1/3_Softmax_Rows/correct.py"),
        ("level1/5_Small_Matmul.py", "level1/5_Small_Matmul/correct.py"),
    ]
    .into_iter()
    .map(|(t, c)| (check(t, c), Verdict::Correct))
    .collect()
}

#[test]
fn checks_of_new_tasks_reuse_the_oldest_references_process_and_judge_as_fresh_ones() {
    // One lane keeps three references. A fourth task's check loads into the oldest's process
    // instead of starting an interpreter; timed jobs never do.
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine(dir.path(), 1, Duration::from_secs(20));
    let mut jobs = correct_checks_of_four_tasks();
    // The oldest (task 1) was reused for task 5; task 3 is still kept for its wrong candidate.
    jobs.extend([
        (
            check("level1/3_Softmax_Rows.py", "level1/3_Softmax_Rows/wrong_shape.py"),
            Verdict::Incorrect,
        ),
        // Task 1 again, in task 2's process.
        (
            check("level1/1_Diagonal_Matmul.py", "level1/1_Diagonal_Matmul/wrong_axis.py"),
            Verdict::Incorrect,
        ),
        (
            check("level1/1_Diagonal_Matmul.py", "level1/1_Diagonal_Matmul/fast.py"),
            Verdict::Correct,
        ),
    ]);
    // Task 5's kept reference is a reused process: a timed job of task 5 gets a fresh one.
    let timed = Job::evaluate(
        task("level1/5_Small_Matmul.py"),
        candidate("level1/5_Small_Matmul/correct.py"),
    );
    let stats = checks_then_timed(engine, &events, jobs, timed);
    assert_eq!((stats.references_started, stats.references_reused), (4, 2), "{stats:?}");
}

#[test]
fn a_reference_started_for_checks_is_never_timed() {
    // Its process runs as checks' processes do (on a GPU, with one hardware queue): a timed job
    // of the same task, right after, gets a fresh one.
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine(dir.path(), 1, Duration::from_secs(20));
    let jobs = vec![(check("level1/2_Swish.py", "level1/2_Swish/correct.py"), Verdict::Correct)];
    let timed = Job::evaluate(task("level1/2_Swish.py"), candidate("level1/2_Swish/correct.py"));
    let stats = checks_then_timed(engine, &events, jobs, timed);
    assert_eq!((stats.references_started, stats.references_reused), (2, 0), "{stats:?}");
}

#[test]
fn staged_checks_of_new_tasks_load_into_a_kept_reference_while_the_job_before_runs() {
    // With candidates started ahead, a lane starts two references (its first job's, and one
    // ahead for the next); every later task of a check loads into the reference the running job
    // does not use. A timed job still gets a fresh process. Processes of checks started ahead
    // run niced until their turn.
    let dir = tempfile::tempdir().unwrap();
    let mut config = engine_config(dir.path(), 1, Duration::from_secs(20));
    config.prefetch = Some(true);
    let (engine, events) = Evaluator::start_with_events(config).unwrap();
    let mut jobs = correct_checks_of_four_tasks();
    jobs.extend([
        (
            check("level1/1_Diagonal_Matmul.py", "level1/1_Diagonal_Matmul/wrong_axis.py"),
            Verdict::Incorrect,
        ),
        (check("level1/2_Swish.py", "level1/2_Swish/nan_output.py"), Verdict::Incorrect),
        (
            check("level1/3_Softmax_Rows.py", "level1/3_Softmax_Rows/wrong_shape.py"),
            Verdict::Incorrect,
        ),
        // Started ahead niced, and given its priority back at its turn where that is allowed.
        (
            Job::evaluate(task("level1/2_Swish.py"), started::nice_sensitive())
                .mode(Mode::Correctness),
            if nix::unistd::geteuid().is_root() { Verdict::Correct } else { Verdict::Incorrect },
        ),
    ]);
    let timed = Job::evaluate(
        task("level1/5_Small_Matmul.py"),
        candidate("level1/5_Small_Matmul/correct.py"),
    );
    let stats = checks_then_timed(engine, &events, jobs, timed);
    assert_eq!((stats.references_started, stats.references_reused), (3, 5), "{stats:?}");
}

#[test]
fn a_higher_priority_job_overtakes_earlier_ones_still_queued() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine(dir.path(), 1, Duration::from_secs(20));
    let swish = task("level1/2_Swish.py");
    let job = |p: i32| {
        Job::evaluate(Arc::clone(&swish), candidate("level1/2_Swish/raises_in_forward.py"))
            .mode(Mode::Correctness)
            .priority(p)
    };
    let first = engine.submit(job(0));
    let low = engine.submit(job(0));
    let high = engine.submit(job(5));
    let (all, _) = collect(&events, 3);
    let started = |id: JobId| {
        all.iter().position(|e| e.job == id && matches!(e.kind, EventKind::Started { .. })).unwrap()
    };
    assert!(started(high.id) < started(low.id), "{all:?}");
    assert!(started(first.id) < started(low.id));
    engine.finish();
}

#[test]
fn kill_stops_a_hanging_evaluation_at_once_and_cancels_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine(dir.path(), 1, Duration::from_secs(600));
    let swish = task("level1/2_Swish.py");
    let hang = engine
        .submit(Job::evaluate(Arc::clone(&swish), candidate("level1/2_Swish/infinite_loop.py")));
    let queued =
        engine.submit(Job::evaluate(Arc::clone(&swish), candidate("level1/2_Swish/correct.py")));
    // Wait until the hanging candidate holds the device, then give it time to be inside its call.
    loop {
        let e = events.recv_timeout(Duration::from_secs(120)).unwrap();
        if e.job == hang.id && matches!(e.kind, EventKind::Started { .. }) {
            break;
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let killed_at = Instant::now();
    engine.kill();
    assert!(
        matches!(hang.wait_timeout(Duration::from_secs(30)), Some(JobOutcome::Cancelled)),
        "killed, not judged"
    );
    assert!(matches!(queued.wait(), JobOutcome::Cancelled));
    assert!(killed_at.elapsed() < Duration::from_secs(30));
    // Later submissions end at once.
    let late = engine.submit(Job::evaluate(swish, candidate("level1/2_Swish/correct.py")));
    assert!(matches!(late.wait_timeout(Duration::from_secs(5)), Some(JobOutcome::Cancelled)));
    engine.finish();
    assert_eq!(
        std::fs::read_dir(dir.path().join("scratch")).unwrap().count(),
        0,
        "scratch removed after a kill too"
    );
}

#[test]
fn a_reference_that_cannot_load_fails_its_task_and_tasks_can_be_described_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _events) = engine(dir.path(), 2, Duration::from_secs(20));
    let broken_path = dir.path().join("level1/9_Broken.py");
    std::fs::create_dir_all(broken_path.parent().unwrap()).unwrap();
    let source = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\ndef get_inputs():\n    return [torch.randn(3)]\ndef get_init_inputs():\n    raise RuntimeError('no init inputs today')\n";
    std::fs::write(&broken_path, source).unwrap();
    let broken = Arc::new(Task::load(&broken_path).unwrap());
    let failed =
        engine.submit(Job::evaluate(Arc::clone(&broken), candidate("level1/2_Swish/correct.py")));
    match failed.wait() {
        JobOutcome::TaskFailed { error, at_start, remedies } => {
            assert!(remedies.is_empty(), "{remedies:?}");
            assert!(at_start, "{error}");
            assert!(error.contains("no init inputs today"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    let described = engine.submit(Job::describe(task("level2/1_Linear_ReLU.py")));
    let JobOutcome::Described(d) = described.wait() else { panic!("described") };
    assert_eq!(d.method, "meta", "{:?}", d.note);
    assert!(d.parameters > 0 && !d.inputs.is_empty());
    let checked = engine.submit(Job::check_task(task("level1/2_Swish.py"), vec![1, 2, 3]));
    let JobOutcome::Checked(c) = checked.wait() else { panic!("checked") };
    assert!(!c.is_degenerate(), "{c:?}");
    engine.finish();
}

/// Issue 17 on the CPU: a device list of two (the CPU twice, standing in for two GPUs) gives two
/// timing slots that time at once, fed from one queue; every job runs once and both devices'
/// slots do timed work.
#[test]
fn two_devices_time_at_once_from_one_queue() {
    let dir = tempfile::tempdir().unwrap();
    let settings = EvalSettings {
        timing_budget: Duration::from_millis(600),
        call_timeout: Duration::from_secs(20),
        ..EvalSettings::default()
    };
    let mut config = EngineConfig::new(
        runner_env(&dir.path().join("cache")),
        vec![Device::Cpu, Device::Cpu],
        settings,
        CompileCache { root: dir.path().join("extensions") },
    );
    config.scratch_parent = dir.path().join("scratch");
    config.compile_workers = 1;
    config.lanes = 1;
    config.seed = 7;
    let (engine, events) = Evaluator::start_with_events(config).unwrap();
    let swish = task("level1/2_Swish.py");
    let ids: Vec<JobId> = (0..4)
        .map(|_| {
            engine
                .submit(Job::evaluate(Arc::clone(&swish), candidate("level1/2_Swish/correct.py")))
                .id
        })
        .collect();
    let (all, by_job) = collect(&events, ids.len());
    for id in &ids {
        let JobOutcome::Evaluated(e) = outcome(&by_job[id]) else {
            panic!("{id}: {:?}", by_job[id])
        };
        assert!(
            e.verdict == Verdict::Correct && e.speedup.is_some(),
            "{id}: {} {}",
            e.verdict,
            e.reason
        );
        let started = by_job[id].iter().filter(|k| matches!(k, EventKind::Started { .. })).count();
        assert_eq!(started, 1, "{id} started once");
    }
    // Two timed jobs held their devices at the same time: one slot per device, not one in all.
    let spans = held(&all);
    let overlap = |x: (usize, usize), y: (usize, usize)| x.0 < y.1 && y.0 < x.1;
    assert!(
        ids.iter().any(|a| ids.iter().any(|b| a != b && overlap(spans[a], spans[b]))),
        "no two timed jobs overlapped: {spans:?}"
    );
    let stats = engine.finish();
    assert_eq!(stats.timing_busy.len(), 2);
    for (device, busy) in &stats.timing_busy {
        assert!(*busy > Duration::ZERO, "{device}'s slot never timed: {stats:?}");
    }
}
