//! The cudal1 store: [`Store`] keeps evaluations and batches in one SQLite file (default
//! `cudal1.db`). It is the only crate that writes SQL.
//!
//! The file runs in WAL mode with a busy timeout, so several processes can open it at once;
//! the schema is created and migrated through `PRAGMA user_version`, and a file that is not a
//! cudal1 store is refused with an error naming its path. Evaluations are keyed by
//! [`EvalKey`] (task, candidate and settings hashes, and the judge: the judging version and class
//! of GPU): recording the same key again replaces the row, so a finished evaluation doubles as a
//! cache entry, and only for the judge that made it. For `cudal1 optimize` it also keeps a
//! program database per task ([`StoredProgram`], keyed by [`ProgramKey`]) and the runs, rounds
//! and LLM samples that let an interrupted search resume, and the task checks of `tasks check`. The baselines of `cudal1 baselines` ([`StoredBaseline`],
//! keyed by [`BaselineKey`]) and the Nsight Compute profiles of `cudal1 profile` ([`StoredProfile`])
//! are kept here too; like evaluations they are SQLite-only.
//!
//! The API is split by consumer ([`api`]): [`ProgramDatabase`] (programs and the prompts made
//! from them) and [`JobQueue`] (the evaluation jobs of `serve` and `worker`) are traits that this
//! SQLite store and the PostgreSQL store (`cudal1-store-pg`) both implement.
//!
//! ```
//! use cudal1_store::{EvalKey, NewBatch, Store};
//!
//! let store = Store::open_in_memory()?;
//! store.create_batch(&NewBatch {
//!     id: "b1".into(),
//!     settings: serde_json::json!({"atol": 1e-4}),
//!     suite_path: "tasks".into(),
//!     candidates_path: "solutions".into(),
//! })?;
//! let key = EvalKey {
//!     task_hash: "t".into(),
//!     candidate_hash: "c".into(),
//!     settings_hash: "s".into(),
//!     judge: "1.0123456789ab".into(),
//!     gpu_class: "cpu".into(),
//! };
//! assert!(store.find_evaluation(&key)?.is_none());
//! # Ok::<(), cudal1_store::StoreError>(())
//! ```

pub mod api;
mod baseline;
mod batch;
mod connection;
mod error;
mod evaluation;
mod jobs;
mod json;
mod profile;
mod program;
mod retry;
mod rows;
mod schema;
mod search;
mod source;
mod task_check;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};
use rusqlite::Connection;

pub use api::{
    Acceptance, Artifact, Claim, ClaimedJob, Completion, Enqueued, JobKey, JobQueue, JobState,
    JobStatus, NewJob, ProgramDatabase, ProgramScore, PromptRecord, QueueCounts, QueueSignal,
    ServeStore, Stage,
};
pub use baseline::{BaselineFilter, BaselineKey, BaselineStatus, NewBaseline, StoredBaseline};
pub use batch::{NewBatch, StoredBatch};
pub use error::StoreError;
pub use evaluation::{EvalKey, NewEvaluation, StoredEvaluation};
pub use profile::{NewProfile, ProfileKey, StoredProfile, REFERENCE_PROGRAM};
pub use program::{NewProgram, ProgramKey, StoredProgram};
pub use search::{NewRound, NewRun, NewSample, StoredRound, StoredRun, StoredSample};
pub use source::ClaimRecord;
pub use task_check::{NewTaskCheck, StoredTaskCheck};

/// The default database file name.
pub const DEFAULT_FILE_NAME: &str = "cudal1.db";

/// A handle on one store file. Cheap to share between threads (`Send + Sync`); each process
/// opens its own handle.
#[derive(Debug)]
pub struct Store {
    // A mutex rather than a pool: statements are short and SQLite has one writer anyway.
    conn: Mutex<Connection>,
    path: PathBuf,
    /// Subscribers to the job queue's signals in this process.
    subscribers: Mutex<Vec<Sender<QueueSignal>>>,
}

impl Store {
    /// Opens the store at `path`, creating the file and schema if needed and migrating an older
    /// schema. Fails with an error naming `path` when its directory is missing, the file is not
    /// an SQLite database or belongs to another application, or its schema is newer than this
    /// build.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = retry::on_busy(Duration::from_millis(error::BUSY_TIMEOUT_MS), || {
            let mut conn = connection::open_file(path)?;
            schema::migrate(&mut conn, path)?;
            Ok(conn)
        })?;
        Ok(Store {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
            subscribers: Mutex::default(),
        })
    }

    /// A private store in memory, gone when dropped.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let mut conn = connection::open_memory(&path)?;
        schema::migrate(&mut conn, &path)?;
        Ok(Store { conn: Mutex::new(conn), path, subscribers: Mutex::default() })
    }

    /// The file this store was opened from (`:memory:` for an in-memory store).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The evaluation recorded under `key`, if any.
    pub fn find_evaluation(&self, key: &EvalKey) -> Result<Option<StoredEvaluation>, StoreError> {
        evaluation::find(&self.conn(), &self.path, key)
    }

    /// Records `e`, replacing every field of an earlier evaluation with the same key; returns
    /// the row id, which stays the same on replacement. NaN in a number field is refused.
    pub fn insert_evaluation(&self, e: &NewEvaluation) -> Result<i64, StoreError> {
        evaluation::upsert(&self.conn(), &self.path, e)
    }

    /// The evaluation with this row id (`cudal1 show ID`), if any.
    pub fn evaluation(&self, id: i64) -> Result<Option<StoredEvaluation>, StoreError> {
        evaluation::by_id(&self.conn(), &self.path, id)
    }

    /// Records the own-kernel share of the evaluation `id` (0 to 1) and its split per kernel;
    /// `false` when no evaluation has that id. Re-evaluating the same key clears it.
    pub fn set_own_share(
        &self,
        id: i64,
        share: f64,
        kernels: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        evaluation::set_own_share(&self.conn(), &self.path, id, share, kernels)
    }

    /// Every evaluation of the store, oldest row first (`cudal1 export`).
    pub fn all_evaluations(&self) -> Result<Vec<StoredEvaluation>, StoreError> {
        evaluation::all(&self.conn(), &self.path)
    }

    /// Evaluations last recorded with this `batch_id`, oldest row first.
    pub fn evaluations_for_batch(
        &self,
        batch_id: &str,
    ) -> Result<Vec<StoredEvaluation>, StoreError> {
        evaluation::for_batch(&self.conn(), &self.path, batch_id)
    }

    /// Every evaluation a batch showed: those recorded under its id and those it reused from
    /// the store ([`Store::add_batch_evaluations`]), oldest row first.
    pub fn batch_evaluations(&self, batch_id: &str) -> Result<Vec<StoredEvaluation>, StoreError> {
        evaluation::members(&self.conn(), &self.path, batch_id)
    }

    /// Records that a batch showed these evaluations, whether new or reused: `(row id, task
    /// name, candidate label)` as the batch named them ([`Store::batch_evaluations`] gives them
    /// under these names).
    pub fn add_batch_evaluations(
        &self,
        batch_id: &str,
        members: &[(i64, &str, &str)],
    ) -> Result<(), StoreError> {
        evaluation::add_members(&mut self.conn(), &self.path, batch_id, members)
    }

    /// The `limit` most recently recorded evaluations, newest first.
    pub fn recent_evaluations(&self, limit: usize) -> Result<Vec<StoredEvaluation>, StoreError> {
        evaluation::recent(&self.conn(), &self.path, limit)
    }

    /// Records a new batch; an existing id is an error ([`StoreError::BatchExists`]).
    pub fn create_batch(&self, b: &NewBatch) -> Result<(), StoreError> {
        batch::create(&self.conn(), &self.path, b)
    }

    /// Stores the batch's summary and finish time ([`StoreError::UnknownBatch`] if absent).
    pub fn finish_batch(
        &self,
        batch_id: &str,
        summary_json: &serde_json::Value,
    ) -> Result<(), StoreError> {
        batch::finish(&self.conn(), &self.path, batch_id, summary_json)
    }

    /// The batch with this id, if any.
    pub fn find_batch(&self, batch_id: &str) -> Result<Option<StoredBatch>, StoreError> {
        batch::find(&self.conn(), &self.path, batch_id)
    }

    /// Keeps programs' text by content hash (`(hash, text)`; a hash recorded already is kept), so
    /// that reports can show code after its files are gone.
    pub fn record_sources(&self, sources: &[(&str, &str)]) -> Result<(), StoreError> {
        source::record_sources(&mut self.conn(), &self.path, sources)
    }

    /// The program text recorded under this content hash, if any.
    pub fn source(&self, hash: &str) -> Result<Option<String>, StoreError> {
        source::source(&self.conn(), &self.path, hash)
    }

    /// Records another system's claims for candidates of a batch (replacing earlier ones).
    pub fn record_claims(&self, claims: &[ClaimRecord]) -> Result<(), StoreError> {
        source::record_claims(&mut self.conn(), &self.path, claims)
    }

    /// The claims recorded for a batch, in the order recorded.
    pub fn claims(&self, batch_id: &str) -> Result<Vec<ClaimRecord>, StoreError> {
        source::claims(&self.conn(), &self.path, batch_id)
    }

    /// Every batch's id, the most recently created first (`cudal1 report` shows the first).
    pub fn batch_ids(&self) -> Result<Vec<String>, StoreError> {
        batch::ids(&self.conn(), &self.path)
    }

    /// Every optimize run's id, the most recently created first.
    pub fn run_ids(&self) -> Result<Vec<String>, StoreError> {
        search::run_ids(&self.conn(), &self.path)
    }

    /// Records an optimize run unless its id exists; returns the run as stored.
    pub fn begin_run(&self, r: &NewRun) -> Result<StoredRun, StoreError> {
        search::begin_run(&self.conn(), &self.path, r)
    }

    /// The optimize run with this id, if any.
    pub fn find_run(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        search::find_run(&self.conn(), &self.path, run_id)
    }

    /// Stores why the run stopped and when ([`StoreError::UnknownRun`] if absent).
    pub fn finish_run(&self, run_id: &str, stop_reason: &str) -> Result<(), StoreError> {
        search::finish_run(&self.conn(), &self.path, run_id, stop_reason)
    }

    /// Records a finished round (replacing the same round's earlier totals).
    pub fn finish_round(&self, r: &NewRound) -> Result<(), StoreError> {
        search::finish_round(&self.conn(), &self.path, r)
    }

    /// The finished rounds of a run, first round first.
    pub fn rounds_for_run(&self, run_id: &str) -> Result<Vec<StoredRound>, StoreError> {
        search::rounds(&self.conn(), &self.path, run_id)
    }

    /// Records one LLM sample ([`StoreError::SampleExists`] if its slot is taken).
    pub fn insert_sample(&self, s: &NewSample) -> Result<i64, StoreError> {
        search::insert_sample(&self.conn(), &self.path, s)
    }

    /// Every sample of a run, by round and index.
    pub fn samples_for_run(&self, run_id: &str) -> Result<Vec<StoredSample>, StoreError> {
        search::samples(&self.conn(), &self.path, run_id)
    }

    /// The check of a task under these check settings, if one was recorded.
    pub fn find_task_check(
        &self,
        task_hash: &str,
        settings_hash: &str,
    ) -> Result<Option<StoredTaskCheck>, StoreError> {
        task_check::find(&self.conn(), &self.path, task_hash, settings_hash)
    }

    /// Records a finished task check, replacing one of the same task and settings.
    pub fn insert_task_check(&self, c: &NewTaskCheck) -> Result<(), StoreError> {
        task_check::upsert(&self.conn(), &self.path, c)
    }

    /// Records a baseline, replacing one with the same key (task, settings, class of device,
    /// name). NaN in a number field is refused.
    pub fn record_baseline(&self, b: &NewBaseline) -> Result<(), StoreError> {
        baseline::upsert(&self.conn(), &self.path, b)
    }

    /// The baseline recorded under `key`, if any.
    pub fn find_baseline(&self, key: &BaselineKey) -> Result<Option<StoredBaseline>, StoreError> {
        baseline::find(&self.conn(), &self.path, key)
    }

    /// The baselines that match `filter` (all with [`BaselineFilter::default`]), by task name,
    /// then baseline name.
    pub fn baselines(&self, filter: &BaselineFilter) -> Result<Vec<StoredBaseline>, StoreError> {
        baseline::matching(&self.conn(), &self.path, filter)
    }

    /// Records an Nsight Compute profile, replacing one with the same key (task, program, class
    /// of device).
    pub fn record_profile(&self, p: &NewProfile) -> Result<(), StoreError> {
        profile::upsert(&self.conn(), &self.path, p)
    }

    /// The profile recorded under `key`, if any.
    pub fn find_profile(&self, key: &ProfileKey) -> Result<Option<StoredProfile>, StoreError> {
        profile::find(&self.conn(), &self.path, key)
    }

    /// Every profile, or those of one task, by task name, then label.
    pub fn profiles(&self, task_hash: Option<&str>) -> Result<Vec<StoredProfile>, StoreError> {
        profile::matching(&self.conn(), &self.path, task_hash)
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (an open transaction
        // rolls back), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn signal(&self, signal: &QueueSignal) {
        let mut subs = self.subscribers.lock().unwrap_or_else(PoisonError::into_inner);
        subs.retain(|s| s.send(signal.clone()).is_ok());
    }
}

impl ProgramDatabase for Store {
    fn insert_program(&self, p: &NewProgram) -> Result<i64, StoreError> {
        program::insert(&self.conn(), &self.path, p)
    }

    fn find_program(&self, key: &ProgramKey) -> Result<Option<StoredProgram>, StoreError> {
        program::find(&self.conn(), &self.path, key)
    }

    fn program(&self, id: i64) -> Result<Option<StoredProgram>, StoreError> {
        program::by_id(&self.conn(), &self.path, id)
    }

    fn programs_for_task(
        &self,
        task_hash: &str,
        settings_hash: &str,
    ) -> Result<Vec<StoredProgram>, StoreError> {
        program::for_task(&self.conn(), &self.path, task_hash, settings_hash)
    }

    fn ranked_programs(
        &self,
        task_hash: &str,
        settings_hash: &str,
        as_of: Option<i64>,
    ) -> Result<Vec<ProgramScore>, StoreError> {
        program::ranked(&self.conn(), &self.path, task_hash, settings_hash, as_of)
    }

    fn last_program_id(&self) -> Result<i64, StoreError> {
        program::last_id(&self.conn(), &self.path)
    }

    fn set_program_own_share(&self, id: i64, share: f64) -> Result<bool, StoreError> {
        program::set_own_share(&self.conn(), &self.path, id, share)
    }

    fn record_prompt(&self, p: &PromptRecord) -> Result<(), StoreError> {
        program::record_prompt(&self.conn(), &self.path, p)
    }

    fn find_prompt(&self, id: &str) -> Result<Option<PromptRecord>, StoreError> {
        program::find_prompt(&self.conn(), &self.path, id)
    }
}

impl JobQueue for Store {
    fn enqueue(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>, StoreError> {
        let out = jobs::enqueue(&mut self.conn(), &self.path, jobs)?;
        if out.iter().any(|e| e.created) {
            self.signal(&QueueSignal::Queued);
        }
        Ok(out)
    }

    fn claim(&self, claim: &Claim) -> Result<Vec<ClaimedJob>, StoreError> {
        let (jobs, failed) = jobs::claim(&mut self.conn(), &self.path, claim)?;
        for id in failed {
            self.signal(&QueueSignal::Finished(id));
        }
        Ok(jobs)
    }

    fn heartbeat(
        &self,
        worker: &str,
        ids: &[i64],
        lease: Duration,
    ) -> Result<Vec<i64>, StoreError> {
        jobs::heartbeat(&self.conn(), &self.path, worker, ids, lease)
    }

    fn complete(&self, id: i64, worker: &str, completion: &Completion) -> Result<bool, StoreError> {
        let first = jobs::complete(&mut self.conn(), &self.path, id, worker, completion)?;
        if first {
            self.signal(&QueueSignal::Finished(id));
        }
        Ok(first)
    }

    fn release(&self, id: i64, worker: &str) -> Result<(), StoreError> {
        jobs::release(&self.conn(), &self.path, id, worker)?;
        self.signal(&QueueSignal::Queued);
        Ok(())
    }

    fn advance(
        &self,
        id: i64,
        worker: &str,
        artifact: Option<&Artifact>,
    ) -> Result<(), StoreError> {
        jobs::advance(&self.conn(), &self.path, id, worker, artifact)?;
        self.signal(&QueueSignal::Queued);
        Ok(())
    }

    fn status(&self, ids: &[i64]) -> Result<Vec<JobStatus>, StoreError> {
        jobs::status(&self.conn(), &self.path, ids)
    }

    fn counts(&self) -> Result<QueueCounts, StoreError> {
        jobs::counts(&self.conn(), &self.path)
    }

    fn subscribe(&self) -> Receiver<QueueSignal> {
        let (tx, rx) = unbounded();
        self.subscribers.lock().unwrap_or_else(PoisonError::into_inner).push(tx);
        rx
    }

    fn describe(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Store>();
    }

    #[test]
    fn in_memory_stores_are_private() {
        let a = Store::open_in_memory().unwrap();
        let b = Store::open_in_memory().unwrap();
        a.create_batch(&NewBatch {
            id: "x".into(),
            settings: serde_json::json!(null),
            suite_path: String::new(),
            candidates_path: String::new(),
        })
        .unwrap();
        assert!(a.find_batch("x").unwrap().is_some());
        assert!(b.find_batch("x").unwrap().is_none());
        assert_eq!(a.path(), Path::new(":memory:"));
    }
}
