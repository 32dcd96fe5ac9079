//! The optimize tables on real files: two handles recording the same program, and a run's
//! records surviving a reopen.

use std::sync::{Arc, Barrier};

use cudal1_store::{NewProgram, NewRound, NewRun, NewSample, ProgramDatabase, ProgramKey, Store};
use serde_json::json;

fn program(code: &str) -> NewProgram {
    NewProgram {
        key: ProgramKey {
            task_hash: "task".into(),
            code_hash: format!("hash-{code}"),
            settings_hash: "cpu".into(),
        },
        code: code.into(),
        run_id: "run".into(),
        round: 1,
        trajectory: None,
        turn: 1,
        parent_ids: vec![],
        verdict: "correct".into(),
        reason: "matches on every seed".into(),
        reason_class: "ok".into(),
        speedup_median: Some(1.5),
        speedup_ci_low: Some(1.4),
        speedup_ci_high: Some(1.6),
        evaluation: json!({"verdict": "correct", "timing": {"blocks": 5}}),
    }
}

#[test]
fn two_handles_recording_one_program_at_once_get_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    drop(Store::open(&path).unwrap());
    let barrier = Arc::new(Barrier::new(4));
    let ids: Vec<i64> = (0..4)
        .map(|_| {
            let (path, barrier) = (path.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let store = Store::open(&path).unwrap();
                barrier.wait();
                store.insert_program(&program("class ModelNew: pass")).unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.programs_for_task("task", "cpu").unwrap().len(), 1);
}

#[test]
fn a_run_with_its_rounds_samples_and_programs_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let store = Store::open(&path).unwrap();
    store
        .begin_run(&NewRun {
            id: "run".into(),
            task_hash: "task".into(),
            task_name: "level1/1_X".into(),
            task_path: "/t.py".into(),
            settings_hash: "cpu".into(),
            settings: json!({"device": "Cpu"}),
            config: json!({"rounds": 3}),
        })
        .unwrap();
    let parent = store.insert_program(&program("a")).unwrap();
    let mut child = program("b");
    child.parent_ids = vec![parent];
    child.round = 2;
    let child = store.insert_program(&child).unwrap();
    let sample = NewSample {
        run_id: "run".into(),
        round: 2,
        index: 0,
        turn: 1,
        prompt_kind: "contrastive".into(),
        exemplar_ids: vec![parent],
        model: Some("m".into()),
        reply: Some("```python\nb\n```".into()),
        finish_reason: Some("stop".into()),
        prompt_tokens: 1200,
        completion_tokens: 300,
        cost_usd: 0.002,
        latency_ms: Some(2500.0),
        outcome: "program".into(),
        reason: None,
        code_hash: Some("hash-b".into()),
    };
    store.insert_sample(&sample).unwrap();
    let round = NewRound {
        run_id: "run".into(),
        round: 2,
        samples: 1,
        valid: 1,
        correct: 1,
        new_programs: 1,
        best_program_id: Some(child),
        best_speedup: Some(1.5),
        prompt_tokens: 1200,
        completion_tokens: 300,
        cost_usd: 0.002,
        wall_ms: 9000.0,
    };
    store.finish_round(&round).unwrap();
    store.finish_run("run", "finished all 3 round(s)").unwrap();
    drop(store);

    let store = Store::open(&path).unwrap();
    let run = store.find_run("run").unwrap().unwrap();
    assert_eq!(run.stop_reason.as_deref(), Some("finished all 3 round(s)"));
    assert_eq!(run.config["rounds"], 3);
    assert_eq!(store.rounds_for_run("run").unwrap()[0].round, round);
    assert_eq!(store.samples_for_run("run").unwrap()[0].sample, sample);
    let got = store.program(child).unwrap().unwrap();
    assert_eq!((got.parent_ids, got.round), (vec![parent], 2));
    assert_eq!(got.evaluation["timing"]["blocks"], 5);
    assert_eq!(store.find_program(&program("a").key).unwrap().unwrap().id, parent);
}
