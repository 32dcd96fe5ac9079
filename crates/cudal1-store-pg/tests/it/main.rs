//! The job queue and program database against a real PostgreSQL server (initdb + pg_ctl in a
//! temporary directory) and, for the behaviour both backends share, against a real SQLite file.
//! Without PostgreSQL's binaries the PostgreSQL halves are skipped with a message, unless
//! `CUDAL1_REQUIRE_PG` is set (CI sets it).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use cudal1_store::{
    Artifact, Claim, Completion, JobKey, JobQueue, JobState, NewJob, NewProgram, ProgramKey,
    PromptRecord, QueueSignal, ServeStore, Stage, Store,
};
use cudal1_store_pg::test_server::TestPostgres;
use cudal1_store_pg::PgStore;
use serde_json::json;

mod restart;

/// One server for the whole binary; each test gets its own database.
fn server() -> Option<&'static TestPostgres> {
    static SERVER: OnceLock<Option<TestPostgres>> = OnceLock::new();
    SERVER
        .get_or_init(|| match TestPostgres::start() {
            Ok(s) => Some(s),
            Err(why) => {
                assert!(
                    std::env::var_os("CUDAL1_REQUIRE_PG").is_none(),
                    "CUDAL1_REQUIRE_PG is set, but: {why}"
                );
                eprintln!("skipping the PostgreSQL tests: {why}");
                None
            }
        })
        .as_ref()
}

/// A fresh database on the shared server.
fn fresh_database(server: &TestPostgres) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!("t{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
    let mut admin =
        postgres::Client::connect(&server.url(), postgres::NoTls).expect("connect as admin");
    admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create a database");
    server.url().replace("/postgres", &format!("/{name}"))
}

fn pg() -> Option<PgStore> {
    let server = server()?;
    Some(PgStore::connect(&fresh_database(server)).expect("connect"))
}

fn sqlite() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("q.db")).unwrap();
    (dir, store)
}

/// Runs a test body on both backends.
fn both(test: impl Fn(&dyn ServeStore)) {
    let (_dir, store) = sqlite();
    test(&store);
    if let Some(store) = pg() {
        test(&store);
    }
}

fn job(task: &str, code: &str) -> NewJob {
    NewJob {
        key: JobKey {
            task_hash: format!("t-{task}"),
            candidate_hash: format!("c-{code}"),
            settings_hash: "s".into(),
            gpu_class: "cpu".into(),
            judge: "1.now".into(),
        },
        settings_family: "fam".into(),
        task_name: format!("level1/{task}"),
        task_source: "class Model: pass\n".into(),
        candidate_source: format!("class ModelNew: pass  # {code}\n"),
        program_key: ProgramKey {
            task_hash: format!("t-{task}"),
            code_hash: format!("n-{code}"),
            settings_hash: "ps".into(),
        },
        parent_ids: vec![],
        mode: "correctness".into(),
        settings: json!({"device": "cpu", "seeds": 5, "pi": std::f64::consts::PI}),
        priority: 0,
        stage: Stage::Run,
        max_attempts: 3,
    }
}

fn claim(worker: &str, limit: usize, lease: Duration) -> Claim {
    Claim {
        worker: worker.into(),
        gpu_class: "cpu".into(),
        judge: "1.now".into(),
        stages: vec![Stage::Run],
        family: None,
        limit,
        lease,
    }
}

fn evaluated(verdict: &str, program: Option<NewProgram>) -> Completion {
    Completion::Evaluated {
        evaluation: json!({"verdict": verdict, "speedup": {"median": 1.25}}),
        verdict: verdict.into(),
        program,
    }
}

fn new_program(task: &str, code: &str, speedup: Option<f64>) -> NewProgram {
    NewProgram {
        key: ProgramKey {
            task_hash: format!("t-{task}"),
            code_hash: format!("n-{code}"),
            settings_hash: "ps".into(),
        },
        code: format!("class ModelNew: pass  # {code}\n"),
        run_id: "serve".into(),
        round: 0,
        trajectory: None,
        turn: 1,
        parent_ids: vec![],
        verdict: if speedup.is_some() { "correct" } else { "incorrect" }.into(),
        reason: "r".into(),
        reason_class: "ok".into(),
        speedup_median: speedup,
        speedup_ci_low: speedup,
        speedup_ci_high: speedup,
        evaluation: json!({}),
    }
}

/// Polls `f` until it returns `Some`, failing after `within`.
fn eventually<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn enqueueing_is_idempotent_on_the_key() {
    both(|q| {
        let a = q.enqueue(&[job("a", "1"), job("a", "2")]).unwrap();
        assert!(a.iter().all(|e| e.created && e.state == JobState::Queued));
        assert_ne!(a[0].id, a[1].id);
        let mut other_class = job("a", "1");
        other_class.key.gpu_class = "h100".into();
        let again = q.enqueue(&[job("a", "1"), other_class]).unwrap();
        assert_eq!((again[0].id, again[0].created), (a[0].id, false), "{}", q.describe());
        assert!(again[1].created, "another GPU class is another job");
        assert_eq!(q.counts().unwrap().queued, 3);
    });
}

#[test]
fn a_job_done_by_another_judging_version_is_judged_again_by_this_one() {
    both(|q| {
        let mut older = job("v", "1");
        older.key.judge = "0.old".into();
        let old = q.enqueue(&[older]).unwrap();
        let old_worker =
            Claim { judge: "0.old".into(), ..claim("old", 1, Duration::from_secs(60)) };
        let taken = q.claim(&old_worker).unwrap();
        assert_eq!(taken.len(), 1);
        assert!(q.complete(taken[0].id, "old", &evaluated("correct", None)).unwrap());
        // The same task, code, settings and GPU class asked for by this version: a new job, not
        // the old result.
        let now = q.enqueue(&[job("v", "1")]).unwrap();
        assert!(
            now[0].created && now[0].id != old[0].id && now[0].state == JobState::Queued,
            "{}: {now:?}",
            q.describe()
        );
        // Only a worker of this version takes it.
        assert!(q.claim(&old_worker).unwrap().is_empty(), "{}", q.describe());
        let got = q.claim(&claim("new", 5, Duration::from_secs(60))).unwrap();
        assert_eq!(
            got.iter().map(|j| (j.id, j.key.judge.as_str())).collect::<Vec<_>>(),
            [(now[0].id, "1.now")]
        );
        let old_status = q.status(&[old[0].id]).unwrap();
        assert_eq!(
            (old_status[0].state, old_status[0].key.judge.as_str()),
            (JobState::Done, "0.old")
        );
    });
}

#[test]
fn concurrent_workers_never_take_the_same_job() {
    both(|q| {
        let jobs: Vec<NewJob> = (0..40).map(|i| job("c", &i.to_string())).collect();
        q.enqueue(&jobs).unwrap();
        let barrier = Barrier::new(4);
        let taken: Vec<Vec<i64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|w| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        let mut mine = Vec::new();
                        loop {
                            let got = q
                                .claim(&claim(&format!("w{w}"), 3, Duration::from_secs(60)))
                                .unwrap();
                            if got.is_empty() {
                                return mine;
                            }
                            mine.extend(got.iter().map(|j| j.id));
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<i64> = taken.concat();
        all.sort_unstable();
        let n = all.len();
        all.dedup();
        assert_eq!((n, all.len()), (40, 40), "{}: every job taken exactly once", q.describe());
        assert_eq!(q.counts().unwrap().running, 40);
    });
}

#[test]
fn a_claimed_job_carries_everything_a_worker_needs() {
    both(|q| {
        let mut high = job("p", "high");
        high.priority = 5;
        high.parent_ids = vec![3, 1];
        q.enqueue(&[job("p", "low"), high.clone()]).unwrap();
        let got = q.claim(&claim("w", 10, Duration::from_secs(60))).unwrap();
        assert_eq!(got.len(), 2);
        let first = &got[0];
        assert_eq!(first.key, high.key, "higher priority first");
        assert_eq!(
            (first.task_source.as_str(), first.candidate_source.as_str()),
            (high.task_source.as_str(), high.candidate_source.as_str())
        );
        assert_eq!(first.settings, high.settings, "settings round-trip bit for bit");
        assert_eq!(
            (first.attempt, first.stage, first.mode.as_str()),
            (1, Stage::Run, "correctness")
        );
        assert!(first.artifact.is_none());
        assert_eq!((&first.program_key, &first.parent_ids), (&high.program_key, &high.parent_ids));
    });
}

#[test]
fn claims_filter_by_gpu_class_stage_and_settings_family() {
    both(|q| {
        let mut gpu = job("f", "gpu");
        gpu.key.gpu_class = "h100".into();
        let mut compile = job("f", "compile");
        compile.stage = Stage::Compile;
        let mut other = job("f", "other-family");
        other.settings_family = "other".into();
        q.enqueue(&[gpu, compile, other, job("f", "plain")]).unwrap();
        let mut c = claim("w", 10, Duration::from_secs(60));
        c.family = Some("fam".into());
        let got: Vec<String> =
            q.claim(&c).unwrap().into_iter().map(|j| j.key.candidate_hash).collect();
        assert_eq!(got, ["c-plain"]);
        c.stages = vec![Stage::Compile];
        let got: Vec<String> =
            q.claim(&c).unwrap().into_iter().map(|j| j.key.candidate_hash).collect();
        assert_eq!(got, ["c-compile"]);
        c.family = None;
        c.stages = vec![Stage::Run, Stage::Compile];
        c.gpu_class = "h100".into();
        let got: Vec<String> =
            q.claim(&c).unwrap().into_iter().map(|j| j.key.candidate_hash).collect();
        assert_eq!(got, ["c-gpu"]);
    });
}

#[test]
fn an_expired_lease_requeues_the_job_and_too_many_attempts_fail_it() {
    both(|q| {
        let signals = q.subscribe();
        let mut j = job("l", "1");
        j.max_attempts = 2;
        let id = q.enqueue(&[j]).unwrap()[0].id;
        let lease = Duration::from_millis(300);
        let first = q.claim(&claim("dies", 1, lease)).unwrap();
        assert_eq!((first[0].id, first[0].attempt), (id, 1));
        assert!(q.claim(&claim("other", 1, lease)).unwrap().is_empty(), "held under a lease");
        // The first worker never renews: the second takes it once the lease has run out.
        let second = eventually(Duration::from_secs(10), "the lease to expire", || {
            q.claim(&claim("other", 1, lease)).unwrap().pop()
        });
        assert_eq!((second.id, second.attempt), (id, 2));
        // The second worker goes away too: the job is failed with a reason, and waiters hear it.
        eventually(Duration::from_secs(10), "the job to be given up", || {
            q.claim(&claim("third", 1, lease)).unwrap();
            let s = q.status(&[id]).unwrap().pop().unwrap();
            (s.state == JobState::Failed).then_some(s)
        });
        let s = q.status(&[id]).unwrap().pop().unwrap();
        assert!(
            s.error.as_deref().unwrap().contains("2 workers took this job and went away"),
            "{:?}",
            s.error
        );
        eventually(Duration::from_secs(10), "the failure signal", || {
            signals.try_iter().any(|sig| sig == QueueSignal::Finished(id)).then_some(())
        });
        assert!(
            !q.complete(id, "other", &evaluated("correct", None)).unwrap(),
            "a failed job stays failed"
        );

        // A failure is no result to cache: the same job asked for again is queued again, afresh.
        let again = q.enqueue(&[job("l", "1")]).unwrap().pop().unwrap();
        assert_eq!((again.id, again.state, again.created), (id, JobState::Queued, true));
        let s = q.status(&[id]).unwrap().pop().unwrap();
        assert_eq!((s.state, s.attempts, s.error.as_deref()), (JobState::Queued, 0, None));
        // A failure from a worker of the given-up attempt does not end the new one.
        assert!(!q.complete(id, "dies", &Completion::Failed { error: "late".into() }).unwrap());
        assert_eq!(q.status(&[id]).unwrap()[0].state, JobState::Queued);
        let taken = q.claim(&claim("fourth", 1, Duration::from_secs(60))).unwrap();
        assert_eq!((taken[0].id, taken[0].attempt), (id, 1));
        assert!(q.complete(id, "fourth", &evaluated("correct", None)).unwrap());
        // Done is a result: asking again hands it out.
        let cached = q.enqueue(&[job("l", "1")]).unwrap().pop().unwrap();
        assert_eq!((cached.state, cached.created), (JobState::Done, false));
    });
}

#[test]
fn heartbeats_keep_the_lease_and_a_release_does_not_count_as_an_attempt() {
    both(|q| {
        let id = q.enqueue(&[job("h", "1")]).unwrap()[0].id;
        let lease = Duration::from_millis(400);
        q.claim(&claim("w", 1, lease)).unwrap();
        let until = Instant::now() + Duration::from_millis(1200);
        while Instant::now() < until {
            assert_eq!(q.heartbeat("w", &[id], lease).unwrap(), vec![id]);
            assert!(q.claim(&claim("thief", 1, lease)).unwrap().is_empty());
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(q.heartbeat("not-me", &[id], lease).unwrap().is_empty());
        q.release(id, "w").unwrap();
        let again = q.claim(&claim("next", 1, lease)).unwrap();
        assert_eq!((again[0].id, again[0].attempt), (id, 1));
    });
}

#[test]
fn the_first_result_wins_and_later_ones_are_counted_and_dropped() {
    both(|q| {
        let signals = q.subscribe();
        let id = q.enqueue(&[job("r", "1")]).unwrap()[0].id;
        q.claim(&claim("slow", 1, Duration::from_millis(100))).unwrap();
        let taken = eventually(Duration::from_secs(10), "the lease to expire", || {
            q.claim(&claim("fast", 1, Duration::from_secs(60))).unwrap().pop()
        });
        assert_eq!(taken.id, id);
        assert!(q
            .complete(id, "fast", &evaluated("correct", Some(new_program("r", "1", Some(1.25)))))
            .unwrap());
        // The winner sending its result again (its reply was lost) is told it was taken, and
        // nothing is counted; the loser's result is dropped and counted.
        assert!(q
            .complete(id, "fast", &evaluated("correct", Some(new_program("r", "1", Some(1.25)))))
            .unwrap());
        assert!(!q.complete(id, "slow", &evaluated("incorrect", None)).unwrap());
        let s = q.status(&[id]).unwrap().pop().unwrap();
        assert_eq!(
            (s.state, s.verdict.as_deref(), s.worker.as_deref(), s.discarded),
            (JobState::Done, Some("correct"), Some("fast"), 1)
        );
        assert_eq!(s.result.unwrap()["speedup"]["median"], 1.25);
        let program = q.program(s.program_id.unwrap()).unwrap().unwrap();
        assert_eq!(program.speedup_median, Some(1.25));
        assert!(
            signals.try_iter().any(|sig| sig == QueueSignal::Finished(id)) || {
                // PostgreSQL delivers through the listener thread.
                eventually(Duration::from_secs(10), "the finished signal", || {
                    signals
                        .recv_timeout(Duration::from_millis(100))
                        .ok()
                        .filter(|s| *s == QueueSignal::Finished(id))
                });
                true
            }
        );
        // A job that failed for a reason is final too.
        let id2 = q.enqueue(&[job("r", "2")]).unwrap()[0].id;
        q.claim(&claim("w", 1, Duration::from_secs(60))).unwrap();
        assert!(q
            .complete(id2, "w", &Completion::Failed { error: "the reference failed".into() })
            .unwrap());
        let s = q.status(&[id2]).unwrap().pop().unwrap();
        assert_eq!((s.state, s.error.as_deref()), (JobState::Failed, Some("the reference failed")));
        // A failure a worker reported (the task's fault) is kept: asking again is answered with it.
        let again = q.enqueue(&[job("r", "2")]).unwrap().pop().unwrap();
        assert_eq!((again.id, again.state, again.created), (id2, JobState::Failed, false));
        // One a worker could not run (no sandbox, another device) is failed, but asked for again
        // it is queued again, for another worker.
        let id3 = q.enqueue(&[job("r", "3")]).unwrap()[0].id;
        q.claim(&claim("w", 1, Duration::from_secs(60))).unwrap();
        assert!(q
            .complete(id3, "w", &Completion::Unrunnable { error: "no sandbox here".into() })
            .unwrap());
        let s = q.status(&[id3]).unwrap().pop().unwrap();
        assert_eq!((s.state, s.worker.as_deref()), (JobState::Failed, None));
        let again = q.enqueue(&[job("r", "3")]).unwrap().pop().unwrap();
        assert_eq!((again.id, again.state, again.created), (id3, JobState::Queued, true));
        q.claim(&claim("w", 1, Duration::from_secs(60))).unwrap();
        assert!(q
            .complete(id3, "w", &Completion::Failed { error: "the reference failed".into() })
            .unwrap());
        let counts = q.counts().unwrap();
        assert_eq!((counts.done, counts.failed, counts.queued, counts.running), (1, 2, 0, 0));
    });
}

#[test]
fn a_compiled_job_moves_to_the_run_stage_with_its_build() {
    both(|q| {
        let mut j = job("b", "1");
        j.stage = Stage::Compile;
        let id = q.enqueue(&[j]).unwrap()[0].id;
        let mut c = claim("cpu-box", 1, Duration::from_secs(60));
        c.stages = vec![Stage::Compile];
        assert_eq!(q.claim(&c).unwrap()[0].stage, Stage::Compile);
        let artifact =
            Artifact { environment: "py3.11 torch2.9".into(), archive: vec![0, 1, 2, 255, 0] };
        q.advance(id, "cpu-box", Some(&artifact)).unwrap();
        assert!(q.claim(&c).unwrap().is_empty());
        let got = q.claim(&claim("gpu-box", 1, Duration::from_secs(60))).unwrap().pop().unwrap();
        assert_eq!((got.id, got.stage, got.attempt), (id, Stage::Run, 1));
        assert_eq!(got.artifact, Some(artifact));
        // A build that could not be made leaves the job for the run stage to build.
        let mut j = job("b", "2");
        j.stage = Stage::Compile;
        let id = q.enqueue(&[j]).unwrap()[0].id;
        q.claim(&c).unwrap();
        q.advance(id, "cpu-box", None).unwrap();
        let got = q.claim(&claim("gpu-box", 1, Duration::from_secs(60))).unwrap().pop().unwrap();
        assert_eq!((got.id, got.stage, got.artifact), (id, Stage::Run, None));
    });
}

#[test]
fn ranked_programs_and_prompts_pin_the_database() {
    both(|q| {
        let slow = q.insert_program(&new_program("x", "slow", Some(0.5))).unwrap();
        q.insert_program(&new_program("x", "wrong", None)).unwrap();
        let fast = q.insert_program(&new_program("x", "fast", Some(2.0))).unwrap();
        let mut infinite = new_program("x", "inf", Some(f64::INFINITY));
        infinite.verdict = "correct".into();
        q.insert_program(&infinite).unwrap();
        let ranked = q.ranked_programs("t-x", "ps", None).unwrap();
        assert_eq!(
            ranked.iter().map(|p| (p.id, p.speedup)).collect::<Vec<_>>(),
            [(slow, 0.5), (fast, 2.0)]
        );
        let pinned = q.ranked_programs("t-x", "ps", Some(slow)).unwrap();
        assert_eq!(pinned.len(), 1);
        assert!(q.last_program_id().unwrap() > fast);
        let record = PromptRecord {
            id: "p1".into(),
            task_hash: "t-x".into(),
            settings_hash: "ps".into(),
            exemplar_ids: vec![fast, slow],
            as_of: fast,
        };
        q.record_prompt(&record).unwrap();
        q.record_prompt(&PromptRecord { exemplar_ids: vec![], ..record.clone() }).unwrap();
        assert_eq!(q.find_prompt("p1").unwrap(), Some(record), "the first record stays");
        assert_eq!(q.find_prompt("nope").unwrap(), None);
        // The same program under its key is one row.
        assert_eq!(q.insert_program(&new_program("x", "fast", Some(9.0))).unwrap(), fast);
        assert_eq!(q.programs_for_task("t-x", "ps").unwrap().len(), 4);
        assert_eq!(
            q.find_program(&new_program("x", "fast", None).key).unwrap().unwrap().speedup_median,
            Some(2.0)
        );
        // A refinement turn's program keeps its trajectory and turn; others are turn 1 of none.
        let turn = NewProgram {
            trajectory: Some("run/1/0".into()),
            turn: 3,
            ..new_program("x", "turn3", Some(1.5))
        };
        q.insert_program(&turn).unwrap();
        let back = q.find_program(&turn.key).unwrap().unwrap();
        assert_eq!((back.trajectory.as_deref(), back.turn), (Some("run/1/0"), 3));
        let plain = q.find_program(&new_program("x", "slow", None).key).unwrap().unwrap();
        assert_eq!((plain.trajectory, plain.turn), (None, 1));
    });
}

#[test]
fn notifications_reach_another_processs_handle() {
    let Some(server) = server() else { return };
    let url = fresh_database(server);
    let (a, b) = (PgStore::connect(&url).unwrap(), PgStore::connect(&url).unwrap());
    let heard = b.subscribe();
    // The listener needs a moment to connect: keep announcing until it hears.
    let id = a.enqueue(&[job("n", "1")]).unwrap()[0].id;
    eventually(Duration::from_secs(10), "the queued signal", || {
        a.enqueue(&[job("n", &format!("{:?}", Instant::now()))]).unwrap();
        heard.recv_timeout(Duration::from_millis(100)).ok().filter(|s| *s == QueueSignal::Queued)
    });
    a.claim(&claim("w", 1, Duration::from_secs(60))).unwrap();
    a.complete(id, "w", &evaluated("correct", None)).unwrap();
    eventually(Duration::from_secs(10), "the finished signal", || {
        heard
            .recv_timeout(Duration::from_millis(100))
            .ok()
            .filter(|s| *s == QueueSignal::Finished(id))
    });
    let statuses: BTreeMap<i64, JobState> =
        b.status(&[id, 999_999]).unwrap().into_iter().map(|s| (s.id, s.state)).collect();
    assert_eq!(statuses, BTreeMap::from([(id, JobState::Done)]));
}

/// Jobs queued before jobs were keyed by their judge (schema 8 gave them `judge = ''`) were never
/// taken: a worker takes only its own judge's. Nothing judged them yet, so a worker takes them
/// under its judge (same id, for whoever waits on them); one queued again since under that judge
/// is failed, naming the job that does it.
#[test]
fn jobs_queued_before_jobs_carried_a_judge_are_taken_or_failed_for_their_twin() {
    both(|store| {
        let unjudged = |code: &str, gpu: &str| {
            let mut j = job("old", code);
            j.key.judge = String::new();
            j.key.gpu_class = gpu.into();
            j
        };
        let old = store
            .enqueue(&[unjudged("a", "cpu"), unjudged("b", "cpu"), unjudged("c", "h100")])
            .unwrap();
        // The work of `b`, asked for again by a build that records judges.
        let twin = store.enqueue(&[job("old", "b")]).unwrap()[0].id;
        let taken = store.claim(&claim("w", 10, Duration::from_secs(60))).unwrap();
        let mut ids: Vec<i64> = taken.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [old[0].id, twin], "{taken:?}");
        let adopted = taken.iter().find(|j| j.id == old[0].id).unwrap();
        assert_eq!(adopted.key.judge, "1.now", "taken under the worker's judge");
        let statuses = store.status(&[old[1].id, old[2].id]).unwrap();
        let b = statuses.iter().find(|s| s.id == old[1].id).unwrap();
        assert_eq!(b.state, JobState::Failed);
        assert!(
            b.error.as_deref().unwrap().contains(&format!("queued again since as job {twin}")),
            "{:?}",
            b.error
        );
        // Another class of GPU's old job waits for a worker of that class.
        let c = statuses.iter().find(|s| s.id == old[2].id).unwrap();
        assert_eq!((c.state, c.key.judge.as_str()), (JobState::Queued, ""));
        // The adopted job ends as any other.
        assert!(store.complete(old[0].id, "w", &evaluated("correct", None)).unwrap());
        assert_eq!(store.status(&[old[0].id]).unwrap()[0].state, JobState::Done);
    });
}
