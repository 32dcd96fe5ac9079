//! A batch of candidates through the engine, as nextest runs tests: results already in the store
//! are reused, the rest are submitted at once, and every event of the engine's one stream goes to
//! each reporter in turn (progress on stderr, JSON lines on stdout, the store recorder). No
//! reporter knows of another.

use crate::interrupt::Interrupt;
use crate::out;
use crate::record;

use crate::reporters;

use crate::workspace::Workspace;
use anyhow::{Context, Result};
use cudal1_eval::{
    EngineStats, EvalSettings, Evaluation, Event, EventKind, Job, JobId, JobOutcome, Mode,
};
use cudal1_store::Store;
use cudal1_task::{Candidate, Expectation, Task};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One candidate to judge.
pub struct Item {
    pub task: Arc<Task>,
    pub candidate: Candidate,
    pub expect: Option<Expectation>,
    /// What another system claimed for it (`eval --from`), shown beside the measurement.
    pub claimed: Option<serde_json::Value>,
}

pub struct Options<'a> {
    pub mode: Mode,
    /// JSON lines on stdout as each candidate finishes.
    pub json_lines: bool,
    /// A line per finished candidate on stderr (a batch in a terminal).
    pub progress_lines: bool,
    pub force: bool,
    /// The store's batch record the evaluations belong to.
    pub batch_id: Option<&'a str>,
    /// `eval --baseline`: JSON rows also state the speedup against it.
    pub against: Option<&'a crate::against::Against>,
}

/// A finished candidate.
pub struct Row {
    pub item: usize,
    pub evaluation: Arc<Evaluation>,
    pub reused: bool,
    /// Its row in the store (`cudal1 show ID`); `None` when it could not be saved.
    pub id: Option<i64>,
}

pub struct Finished {
    /// In the items' order.
    pub rows: Vec<Row>,
    /// Candidates whose task's reference failed (no verdict), with the error and what can be
    /// done about it ([`crate::hint::for_memory`] says it).
    pub task_failures: Vec<(usize, String, Vec<cudal1_eval::Remedy>)>,
    /// Candidates that got no verdict because the machine failed (it ran out of memory, or a runner
    /// died before the candidate was loaded).
    pub host_failures: Vec<(usize, String)>,
    /// Candidates left undone by an interrupt.
    pub cancelled: usize,
    pub stats: Option<EngineStats>,
    /// Candidates that waited for memory before they started, and of those, how many needed
    /// more than the budget and ran holding their device alone.
    pub memory_waits: usize,
    pub ran_alone_for_memory: usize,
}

/// The settings an evaluation in `mode` is stored under.
pub fn settings_for(ws: &Workspace, mode: Mode) -> EvalSettings {
    EvalSettings { mode, ..ws.settings.clone() }
}

/// Runs the batch to the end (or to an interrupt).
pub fn run(
    ws: &Workspace,
    items: &[Item],
    opts: &Options<'_>,
    interrupt: &Interrupt,
) -> Result<Finished> {
    let settings = settings_for(ws, opts.mode);
    let mut done: BTreeMap<usize, Row> = BTreeMap::new();
    let mut pending = Vec::new();
    for (i, item) in items.iter().enumerate() {
        // Only this judge's verdicts (this build, this class of GPU) are reused; another's is
        // judged again, and stays in the store beside the new one.
        let key = record::key(&item.task.hash, &item.candidate.hash, &settings, &ws.machine.judge);
        let stored = if opts.force {
            None
        } else {
            ws.store.find_evaluation(&key)?.and_then(|s| {
                Some((s.id, record::from_store(&s, &item.task.key(), &item.candidate.label)?))
            })
        };
        match stored {
            Some((id, e)) => {
                done.insert(
                    i,
                    Row { item: i, evaluation: Arc::new(e), reused: true, id: Some(id) },
                );
            }
            None => pending.push(i),
        }
    }
    let mut reporters = Reporters {
        progress: reporters::BatchProgress::new(items.len(), done.len(), opts.progress_lines),
        json: opts.json_lines,
        against: opts.against,
        recorder: Recorder {
            store: &ws.store,
            settings: &settings,
            judge: &ws.machine.judge,
            batch_id: opts.batch_id,
            error: None,
        },
    };
    for row in done.values() {
        reporters.json_row(&items[row.item], row)?;
    }
    let mut finished = Finished {
        rows: Vec::new(),
        task_failures: Vec::new(),
        host_failures: Vec::new(),
        cancelled: 0,
        stats: None,
        memory_waits: 0,
        ran_alone_for_memory: 0,
    };
    if !pending.is_empty() && !interrupt.interrupted() {
        let (engine, events) = ws.engine_with_events()?;
        interrupt.watch(engine.canceller());
        let mut ids: HashMap<JobId, usize> = HashMap::new();
        for &i in &pending {
            let item = &items[i];
            let handle = engine.submit(
                Job::evaluate(Arc::clone(&item.task), item.candidate.clone()).mode(opts.mode),
            );
            ids.insert(handle.id, i);
        }
        let mut left = pending.len();
        for event in &events {
            let Some(&i) = ids.get(&event.job) else { continue };
            let ended = matches!(event.kind, EventKind::Finished(_));
            if let Some(row) = reporters.event(&items[i], i, &event, &mut finished)? {
                done.insert(i, row);
            }
            if ended {
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
        finished.stats = Some(engine.finish());
    } else {
        finished.cancelled = pending.len();
    }
    reporters.progress.progress.finish();
    if let Some(e) = reporters.recorder.error {
        return Err(e)
            .context("saving results (the batch finished, but some results were not saved)");
    }
    finished.rows = done.into_values().collect();
    Ok(finished)
}

struct Reporters<'a> {
    progress: reporters::BatchProgress,
    json: bool,
    against: Option<&'a crate::against::Against>,
    recorder: Recorder<'a>,
}

impl Reporters<'_> {
    /// Hands one event to every reporter; a finished evaluation comes back as a row.
    fn event(
        &mut self,
        item: &Item,
        index: usize,
        event: &Event,
        finished: &mut Finished,
    ) -> Result<Option<Row>> {
        self.progress.event(item, event);
        if let EventKind::WaitingForMemory(wait) = &event.kind {
            finished.memory_waits += 1;
            finished.ran_alone_for_memory += usize::from(wait.alone);
        }
        let EventKind::Finished(outcome) = &event.kind else { return Ok(None) };
        match outcome {
            JobOutcome::Evaluated(e) => {
                let id = self.recorder.record(item, e);
                let row = Row { item: index, evaluation: Arc::clone(e), reused: false, id };
                self.progress.finished(item, &row);
                self.json_row(item, &row)?;
                Ok(Some(row))
            }
            JobOutcome::TaskFailed { error, remedies, .. } => {
                finished.task_failures.push((index, error.clone(), remedies.clone()));
                Ok(None)
            }
            JobOutcome::HostFailed { error } => {
                finished.host_failures.push((index, error.clone()));
                Ok(None)
            }
            JobOutcome::Cancelled => {
                finished.cancelled += 1;
                Ok(None)
            }
            JobOutcome::Checked(_) | JobOutcome::Described(_) => Ok(None),
        }
    }

    fn json_row(&self, item: &Item, row: &Row) -> Result<()> {
        if !self.json {
            return Ok(());
        }
        let mut v = serde_json::to_value(&*row.evaluation)?;
        v["id"] = row.id.into();
        v["expect"] = serde_json::to_value(&item.expect)?;
        v["reused"] = row.reused.into();
        if let Some(c) = &item.claimed {
            v["claimed"] = c.clone();
        }
        if let Some(against) = self.against {
            v["baseline"] = against.json(&row.evaluation);
        }
        self.progress.progress.suspend(|| out::line(v))?;
        Ok(())
    }
}

/// The store reporter: every new evaluation is saved as soon as it arrives, so a crash loses only
/// what ran.
struct Recorder<'a> {
    store: &'a Store,
    settings: &'a EvalSettings,
    judge: &'a cudal1_eval::Judge,
    batch_id: Option<&'a str>,
    error: Option<cudal1_store::StoreError>,
}

impl Recorder<'_> {
    /// Saves `e`; its row id.
    fn record(&mut self, item: &Item, e: &Evaluation) -> Option<i64> {
        let row = record::to_store(
            e,
            &item.task.path.display().to_string(),
            self.settings,
            self.judge,
            self.batch_id,
        );
        match self.store.insert_evaluation(&row) {
            Ok(id) => Some(id),
            Err(err) => {
                self.error.get_or_insert(err);
                None
            }
        }
    }
}
