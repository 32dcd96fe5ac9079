//! Integration tests of `Store` on real SQLite files in temporary directories.

use std::path::Path;
use std::sync::{Arc, Barrier};

use cudal1_store::{EvalKey, NewBatch, NewEvaluation, Store, StoreError};
use serde_json::json;
use tempfile::TempDir;

mod programs;

fn key(task: &str, candidate: &str) -> EvalKey {
    EvalKey {
        task_hash: format!("task-{task}"),
        candidate_hash: format!("cand-{candidate}"),
        settings_hash: "settings-1".into(),
        judge: "1.0123456789ab".into(),
        gpu_class: "nvidia-h100-80gb-hbm3".into(),
    }
}

/// An evaluation in which every field holds a distinct, non-default value.
fn evaluation(task: &str, candidate: &str) -> NewEvaluation {
    NewEvaluation {
        key: key(task, candidate),
        batch_id: Some("batch-a".into()),
        task_name: format!("{task}_conv2d ünïcode"),
        task_path: format!("/suite/level1/{task}.py"),
        candidate_label: format!("{candidate}.py"),
        verdict: "correct".into(),
        reason: "max abs error 3e-6 within atol 1e-4; line 'two'\nnext line".into(),
        speedup_median: Some(1.234_567_890_123_4),
        speedup_ci_low: Some(1.1),
        speedup_ci_high: Some(1.300_000_000_000_000_3),
        ref_ms: Some(0.812_345),
        candidate_ms: Some(0.657_999_999_999_999_9),
        device: "cuda:0".into(),
        environment: json!({"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "torch": "2.11.0", "cuda": "13.0", "python": "3.11.7"}),
        settings: json!({"atol": 1e-4, "rtol": 1e-4, "seeds": [11, 12, 13], "budget_s": 30, "allow_tf32": false}),
        measurements: json!({"ref": [0.81, 0.82, 0.8123], "cand": [0.65, 0.66], "findings": [], "max_abs": 3.0e-6, "big": u64::MAX}),
        duration_ms: 4_512.25,
    }
}

fn temp() -> TempDir {
    tempfile::tempdir().expect("temporary directory")
}

#[test]
fn every_field_round_trips() {
    let dir = temp();
    let store = Store::open(&dir.path().join("cudal1.db")).unwrap();
    let e = evaluation("t1", "c1");
    let id = store.insert_evaluation(&e).unwrap();
    let got = store.find_evaluation(&e.key).unwrap().expect("the evaluation just recorded");
    assert_eq!(got.id, id);
    assert_eq!(got.to_new(), e);
    assert!(got.created_at.ends_with('Z') && got.created_at.contains('T'), "{}", got.created_at);

    // The other shape of every optional field.
    let mut sparse = evaluation("t2", "c1");
    sparse.batch_id = None;
    sparse.speedup_median = None;
    sparse.speedup_ci_low = None;
    sparse.speedup_ci_high = None;
    sparse.ref_ms = None;
    sparse.candidate_ms = None;
    sparse.reason = String::new();
    sparse.environment = json!(null);
    sparse.measurements = json!("just a string");
    store.insert_evaluation(&sparse).unwrap();
    assert_eq!(store.find_evaluation(&sparse.key).unwrap().unwrap().to_new(), sparse);
}

#[test]
fn inserting_the_same_key_replaces_the_row_and_keeps_its_id() {
    let dir = temp();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    let first = evaluation("t", "c");
    let id = store.insert_evaluation(&first).unwrap();

    let mut second = first.clone();
    second.verdict = "incorrect".into();
    second.reason = "output 0 differs".into();
    second.speedup_median = None;
    second.batch_id = Some("batch-b".into());
    second.measurements = json!({"rerun": true});
    assert_eq!(store.insert_evaluation(&second).unwrap(), id);

    let got = store.find_evaluation(&first.key).unwrap().unwrap();
    assert_eq!(got.to_new(), second);
    assert_eq!(store.recent_evaluations(10).unwrap().len(), 1);
    assert!(store.evaluations_for_batch("batch-a").unwrap().is_empty());
    assert_eq!(store.evaluations_for_batch("batch-b").unwrap().len(), 1);

    // A key differing in any one part is a different evaluation.
    let mut other = first.clone();
    other.key.settings_hash = "settings-2".into();
    assert_ne!(store.insert_evaluation(&other).unwrap(), id);
    assert_eq!(store.recent_evaluations(10).unwrap().len(), 2);
}

#[test]
fn finding_a_missing_key_gives_none() {
    let store = Store::open_in_memory().unwrap();
    assert!(store.find_evaluation(&key("t", "c")).unwrap().is_none());
    store.insert_evaluation(&evaluation("t", "c")).unwrap();
    for missing in [
        key("t", "other"),
        key("other", "c"),
        EvalKey { settings_hash: "x".into(), ..key("t", "c") },
    ] {
        assert!(store.find_evaluation(&missing).unwrap().is_none(), "{missing:?}");
    }
}

#[test]
fn a_verdict_of_another_judge_or_gpu_class_is_kept_but_never_found() {
    let store = Store::open_in_memory().unwrap();
    // `correct 14x` recorded by an older judging version, and by this one on another GPU.
    let mut older = evaluation("t", "c");
    older.key.judge = "0.fedcba987654".into();
    older.speedup_median = Some(14.0);
    let older_id = store.insert_evaluation(&older).unwrap();
    let mut elsewhere = evaluation("t", "c");
    elsewhere.key.gpu_class = "nvidia-a100-sxm4-40gb".into();
    let elsewhere_id = store.insert_evaluation(&elsewhere).unwrap();
    let here = key("t", "c");
    assert!(
        store.find_evaluation(&here).unwrap().is_none(),
        "another judge's verdict was found as this one's"
    );
    // Judged again here: a row of its own; the others stay, listed with their judges.
    let mut again = evaluation("t", "c");
    again.verdict = "exploit".into();
    let id = store.insert_evaluation(&again).unwrap();
    assert!(id != older_id && id != elsewhere_id);
    assert_eq!(store.find_evaluation(&here).unwrap().unwrap().verdict, "exploit");
    let listed: Vec<(String, String)> = store
        .all_evaluations()
        .unwrap()
        .iter()
        .map(|e| (e.key.judge.clone(), e.key.gpu_class.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            ("0.fedcba987654".to_owned(), "nvidia-h100-80gb-hbm3".to_owned()),
            ("1.0123456789ab".to_owned(), "nvidia-a100-sxm4-40gb".to_owned()),
            ("1.0123456789ab".to_owned(), "nvidia-h100-80gb-hbm3".to_owned()),
        ]
    );
    for missing in [
        EvalKey { judge: "0.fedcba987654".into(), ..key("t", "other") },
        EvalKey { gpu_class: "cpu".into(), ..key("t", "c") },
    ] {
        assert!(store.find_evaluation(&missing).unwrap().is_none(), "{missing:?}");
    }
}

#[test]
fn reopening_a_file_keeps_its_data() {
    let dir = temp();
    let path = dir.path().join("cudal1.db");
    let e = evaluation("t", "c");
    {
        let store = Store::open(&path).unwrap();
        store.insert_evaluation(&e).unwrap();
        store.create_batch(&batch("batch-a")).unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.find_evaluation(&e.key).unwrap().unwrap().to_new(), e);
    assert!(store.find_batch("batch-a").unwrap().is_some());
    assert_eq!(store.path(), path);
}

#[test]
fn two_handles_on_one_file_can_both_write_at_once() {
    let dir = temp();
    let path = dir.path().join("shared.db");
    let writers = 2;
    let per_writer = 150;
    let barrier = Arc::new(Barrier::new(writers));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (path, barrier) = (path.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                // Each thread opens its own handle, as a separate process would.
                let store = Store::open(&path).unwrap();
                barrier.wait();
                for i in 0..per_writer {
                    let mut e = evaluation(&format!("w{w}-{i}"), "c");
                    e.batch_id = Some(format!("writer-{w}"));
                    store.insert_evaluation(&e).unwrap();
                    // Read between writes, so readers and writers interleave.
                    assert!(store.find_evaluation(&e.key).unwrap().is_some());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let store = Store::open(&path).unwrap();
    for w in 0..writers {
        let rows = store.evaluations_for_batch(&format!("writer-{w}")).unwrap();
        assert_eq!(rows.len(), per_writer);
        // Oldest first: the writer's own insertion order.
        let names: Vec<_> = rows.iter().map(|r| r.key.task_hash.clone()).collect();
        let expected: Vec<_> = (0..per_writer).map(|i| format!("task-w{w}-{i}")).collect();
        assert_eq!(names, expected);
    }
}

/// Set in a child copy of this test binary: the store file it writes to, and its writer name.
const CHILD_DB: &str = "CUDAL1_STORE_TEST_CHILD_DB";
const CHILD_NAME: &str = "CUDAL1_STORE_TEST_CHILD_NAME";
const PER_PROCESS: usize = 200;

/// Not a test on its own: the body of a child process started by
/// `separate_processes_can_write_one_file_at_once`.
#[test]
#[ignore = "run as a child process by separate_processes_can_write_one_file_at_once"]
fn child_process_writer() {
    let path = std::env::var_os(CHILD_DB).expect("started by the parent test");
    let name = std::env::var(CHILD_NAME).expect("started by the parent test");
    write_as(Path::new(&path), &name);
}

fn write_as(path: &Path, name: &str) {
    let store = Store::open(path).unwrap();
    for i in 0..PER_PROCESS {
        let mut e = evaluation(&format!("{name}-{i}"), "c");
        e.batch_id = Some(name.to_owned());
        store.insert_evaluation(&e).unwrap();
    }
}

#[test]
fn separate_processes_can_write_one_file_at_once() {
    let dir = temp();
    let path = dir.path().join("processes.db");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["proc-a", "proc-b"]
        .into_iter()
        .map(|name| {
            let child = std::process::Command::new(&exe)
                .args(["--ignored", "--exact", "child_process_writer", "--test-threads=1"])
                .env(CHILD_DB, &path)
                .env(CHILD_NAME, name)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (name, child)
        })
        .collect();
    // This process writes too, while the children run.
    write_as(&path, "proc-parent");
    for (name, child) in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("1 passed"), "{name} did not run the writer: {stdout}");
    }
    let store = Store::open(&path).unwrap();
    for name in ["proc-a", "proc-b", "proc-parent"] {
        assert_eq!(store.evaluations_for_batch(name).unwrap().len(), PER_PROCESS, "{name}");
    }
}

#[test]
fn many_handles_opening_a_fresh_file_at_once_migrate_it_once() {
    let dir = temp();
    let path = dir.path().join("fresh.db");
    let n = 6;
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (path, barrier) = (path.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let store = Store::open(&path).unwrap();
                store.insert_evaluation(&evaluation(&format!("t{i}"), "c")).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(Store::open(&path).unwrap().recent_evaluations(100).unwrap().len(), n);
}

#[test]
fn a_missing_directory_gives_an_error_naming_the_path() {
    let dir = temp();
    let path = dir.path().join("no-such-dir").join("cudal1.db");
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(&err, StoreError::MissingDirectory { path: p, .. } if *p == path), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("does not exist"), "{message}");
    assert!(!path.parent().unwrap().exists(), "opening must not create the directory");
}

#[test]
fn a_file_that_is_not_sqlite_gives_an_error_naming_the_path() {
    let dir = temp();
    let path = dir.path().join("notes.db");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()) && message.contains("not an SQLite database"),
        "{message}"
    );
    assert!(std::error::Error::source(&err).is_some());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "the file must be left untouched");
}

#[test]
fn a_directory_or_another_applications_database_is_refused() {
    let dir = temp();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains(&dir.path().display().to_string()), "{err}");

    let path = dir.path().join("other.db");
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE customers (name TEXT); INSERT INTO customers VALUES ('ada');")
        .unwrap();
    drop(other);
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    let other = rusqlite::Connection::open(&path).unwrap();
    let tables: i64 =
        other.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0)).unwrap();
    assert_eq!(tables, 1, "nothing may be added to another application's database");
}

#[test]
fn an_empty_file_is_migrated_to_the_current_schema_in_wal_mode() {
    let dir = temp();
    let path = dir.path().join("empty.db");
    std::fs::File::create(&path).unwrap();
    let store = Store::open(&path).unwrap();
    store.insert_evaluation(&evaluation("t", "c")).unwrap();

    let raw = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = raw.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    let mode: String = raw.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    let unique: i64 = raw
        .query_row("SELECT \"unique\" FROM pragma_index_list('evaluations') WHERE name = 'evaluations_key'", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 1, "user_version {version}");
    assert_eq!(mode, "wal");
    assert_eq!(unique, 1);
}

#[test]
fn a_store_from_a_newer_build_is_refused() {
    let dir = temp();
    let path = dir.path().join("new.db");
    drop(Store::open(&path).unwrap());
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("PRAGMA user_version = 999").unwrap();
    drop(raw);
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::SchemaTooNew { found: 999, .. }), "{err:?}");
    assert!(err.to_string().contains("upgrade cudal1"), "{err}");
}

fn batch(id: &str) -> NewBatch {
    NewBatch {
        id: id.into(),
        settings: json!({"atol": 1e-4, "budget_s": 20, "devices": ["cuda:0"]}),
        suite_path: "/suites/level1".into(),
        candidates_path: "/runs/candidates".into(),
    }
}

#[test]
fn batches_round_trip_and_collect_their_evaluations() {
    let dir = temp();
    let store = Store::open(&dir.path().join("b.db")).unwrap();
    assert!(store.find_batch("b1").unwrap().is_none());
    store.create_batch(&batch("b1")).unwrap();
    let started = store.find_batch("b1").unwrap().unwrap();
    assert_eq!(
        (
            started.id.as_str(),
            &started.settings,
            started.suite_path.as_str(),
            started.candidates_path.as_str()
        ),
        ("b1", &batch("b1").settings, "/suites/level1", "/runs/candidates")
    );
    assert_eq!((started.finished_at.as_deref(), started.summary.as_ref()), (None, None));

    for (i, batch_id) in [Some("b1"), None, Some("b1"), Some("b2")].into_iter().enumerate() {
        let mut e = evaluation(&format!("t{i}"), "c");
        e.batch_id = batch_id.map(String::from);
        store.insert_evaluation(&e).unwrap();
    }
    let in_b1: Vec<_> =
        store.evaluations_for_batch("b1").unwrap().into_iter().map(|e| e.key.task_hash).collect();
    assert_eq!(in_b1, ["task-t0", "task-t2"]);

    let summary = json!({"tasks": 2, "fast_p": [[1.0, 0.5]], "geomean_speedup": 1.25});
    store.finish_batch("b1", &summary).unwrap();
    let finished = store.find_batch("b1").unwrap().unwrap();
    assert_eq!(finished.summary, Some(summary));
    assert_eq!(finished.created_at, started.created_at);
    assert!(finished.finished_at.as_deref().is_some_and(|f| f >= started.created_at.as_str()));

    let err = store.create_batch(&batch("b1")).unwrap_err();
    assert!(matches!(err, StoreError::BatchExists { .. }), "{err:?}");
    let err = store.finish_batch("missing", &json!({})).unwrap_err();
    assert!(matches!(err, StoreError::UnknownBatch { .. }), "{err:?}");
}

#[test]
fn recent_evaluations_are_newest_first_and_limited() {
    let store = Store::open_in_memory().unwrap();
    for i in 0..5 {
        store.insert_evaluation(&evaluation(&format!("t{i}"), "c")).unwrap();
    }
    // Replacing t1 makes it the most recent.
    store.insert_evaluation(&evaluation("t1", "c")).unwrap();
    let recent: Vec<_> =
        store.recent_evaluations(3).unwrap().into_iter().map(|e| e.key.task_hash).collect();
    assert_eq!(recent, ["task-t1", "task-t4", "task-t3"]);
    assert!(store.recent_evaluations(0).unwrap().is_empty());
    assert_eq!(store.recent_evaluations(usize::MAX).unwrap().len(), 5);
}

#[test]
fn large_measurements_round_trip() {
    let dir = temp();
    let path = dir.path().join("large.db");
    let store = Store::open(&path).unwrap();
    let mut e = evaluation("t", "c");
    // About 200k timings with full-precision floats: several megabytes of JSON.
    let timings: Vec<f64> = (0..200_000).map(|i| 0.1 + f64::from(i).sqrt() / 7.0).collect();
    e.measurements = json!({"ref": timings, "cand": timings.iter().rev().collect::<Vec<_>>()});
    assert!(e.measurements.to_string().len() > 4_000_000);
    store.insert_evaluation(&e).unwrap();
    drop(store);
    let got = Store::open(&path).unwrap().find_evaluation(&e.key).unwrap().unwrap();
    assert_eq!(got.measurements, e.measurements);
}

#[test]
fn a_nan_is_refused_without_writing() {
    let store = Store::open_in_memory().unwrap();
    let mut e = evaluation("t", "c");
    e.speedup_ci_low = Some(f64::NAN);
    let err = store.insert_evaluation(&e).unwrap_err();
    assert!(err.to_string().contains("speedup_ci_low"), "{err}");
    assert!(store.find_evaluation(&e.key).unwrap().is_none());
}

#[test]
fn default_file_name_is_cudal1_db() {
    assert_eq!(Path::new(cudal1_store::DEFAULT_FILE_NAME), Path::new("cudal1.db"));
}

#[test]
fn baselines_survive_reopening_the_file_and_are_filtered_by_task() {
    use cudal1_store::{BaselineFilter, BaselineKey, BaselineStatus, NewBaseline};
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("cudal1.db");
    let measured = NewBaseline {
        key: BaselineKey {
            task_hash: "t1".into(),
            settings_hash: "s".into(),
            gpu_class: "cpu".into(),
            judge: "1.0123456789ab".into(),
            name: "compile-default".into(),
        },
        task_name: "level1/19_ReLU".into(),
        status: BaselineStatus::Measured,
        reason: "correct on 3 seeds".into(),
        speedup_median: Some(1.25),
        speedup_ci_low: Some(1.2),
        speedup_ci_high: Some(1.3),
        baseline_ms: Some(0.8),
        reference_ms: Some(1.0),
        evaluation: json!({"verdict": "correct"}),
    };
    let failed = NewBaseline {
        key: BaselineKey {
            task_hash: "t2".into(),
            name: "cuda-graphs".into(),
            ..measured.key.clone()
        },
        task_name: "level1/23_Softmax".into(),
        status: BaselineStatus::Failed,
        reason: "CUDA graphs need a CUDA device".into(),
        speedup_median: None,
        speedup_ci_low: None,
        speedup_ci_high: None,
        baseline_ms: None,
        reference_ms: None,
        evaluation: json!(null),
    };
    {
        let store = Store::open(&path).unwrap();
        store.record_baseline(&measured).unwrap();
        store.record_baseline(&failed).unwrap();
    }
    let store = Store::open(&path).unwrap();
    let all = store.baselines(&BaselineFilter::default()).unwrap();
    assert_eq!(
        all.iter().map(|b| b.baseline.clone()).collect::<Vec<_>>(),
        [measured.clone(), failed.clone()]
    );
    let t2 = store.baselines(&BaselineFilter::task("t2")).unwrap();
    assert_eq!(t2.len(), 1);
    assert_eq!(t2[0].baseline.status, BaselineStatus::Failed);
    assert!(t2[0].created_at.ends_with('Z'));
    assert_eq!(store.find_baseline(&measured.key).unwrap().unwrap().baseline, measured);
}
