//! The store's API, split by consumer so that each backend implements what it serves without SQL
//! leaking out: [`ProgramDatabase`] (the measured programs contrastive prompts are drawn from, and
//! the prompts shown) and [`JobQueue`] (evaluation jobs shared by `serve` and `worker` processes).
//! The SQLite [`crate::Store`] implements both (one machine); `cudal1-store-pg` implements both
//! on PostgreSQL (many machines). `eval`'s evaluations and `optimize`'s runs stay SQLite-only.

use std::time::Duration;

use crossbeam_channel::Receiver;
use serde::{Deserialize, Serialize};

use crate::{NewProgram, ProgramKey, StoreError, StoredProgram};

/// A correct program with a measured speedup, as prompts rank them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramScore {
    pub id: i64,
    pub speedup: f64,
}

/// A contrastive prompt as it was shown: reproducible from its inputs, and the lineage of the
/// programs written in answer to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptRecord {
    /// A content hash of the inputs below (task, key, database watermark, sampler settings).
    pub id: String,
    pub task_hash: String,
    pub settings_hash: String,
    /// Program ids shown, in the prompt's order (empty for a first-round prompt).
    pub exemplar_ids: Vec<i64>,
    /// Only programs with an id up to this were considered.
    pub as_of: i64,
}

/// The measured programs of each task, and the prompts made from them.
pub trait ProgramDatabase: Send + Sync {
    /// Records `p` unless its key is already recorded; returns the id stored under the key (the
    /// first program recorded under a key is kept, so a program is evaluated once).
    fn insert_program(&self, p: &NewProgram) -> Result<i64, StoreError>;
    /// The program recorded under `key`, if any.
    fn find_program(&self, key: &ProgramKey) -> Result<Option<StoredProgram>, StoreError>;
    /// The program with this row id, if any.
    fn program(&self, id: i64) -> Result<Option<StoredProgram>, StoreError>;
    /// Every program of a task evaluated under one settings hash, oldest first.
    fn programs_for_task(
        &self,
        task_hash: &str,
        settings_hash: &str,
    ) -> Result<Vec<StoredProgram>, StoreError>;
    /// Correct programs of a task with a finite speedup and an id up to `as_of` (all when
    /// `None`), oldest first: what contrastive prompts sample from, without their code.
    fn ranked_programs(
        &self,
        task_hash: &str,
        settings_hash: &str,
        as_of: Option<i64>,
    ) -> Result<Vec<ProgramScore>, StoreError>;
    /// Records the own-kernel share (0 to 1) of the program `id`, measured after it was judged
    /// (`cudal1_eval::own`); `false` when there is no such program.
    fn set_program_own_share(&self, id: i64, share: f64) -> Result<bool, StoreError>;
    /// The highest program id recorded (0 when there is none): a watermark that pins the
    /// database's state for reproducible prompts.
    fn last_program_id(&self) -> Result<i64, StoreError>;
    /// Records a prompt unless its id is recorded already.
    fn record_prompt(&self, p: &PromptRecord) -> Result<(), StoreError>;
    fn find_prompt(&self, id: &str) -> Result<Option<PromptRecord>, StoreError>;
}

/// What makes two evaluation jobs the same: the task, the exact code, the settings (the
/// evaluation mode included), the class of GPU it must be measured on (`cpu` for the CPU) and
/// the judging version that must judge it: a job done by an older build is not this build's
/// result, so asking again queues a new job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobKey {
    pub task_hash: String,
    pub candidate_hash: String,
    pub settings_hash: String,
    pub gpu_class: String,
    /// The judging version (`cudal1_eval::judge_version`); empty in jobs queued before judges
    /// were recorded.
    pub judge: String,
}

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for a worker (also after a lease expired).
    Queued,
    /// Held by a worker under a lease.
    Running,
    /// Evaluated: the result is final (the first result written wins).
    Done,
    /// Given up: the task's reference failed, or too many workers took it and went away.
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<JobState> {
        [JobState::Queued, JobState::Running, JobState::Done, JobState::Failed]
            .into_iter()
            .find(|s| s.as_str() == text)
    }

    /// Done or failed: nothing will change any more.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed)
    }
}

/// Which part of the work a job waits for. Programs that build extensions may be built by a
/// CPU-only machine first (`Compile`), then measured by a GPU machine (`Run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Compile,
    Run,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Compile => "compile",
            Stage::Run => "run",
        }
    }

    pub fn parse(text: &str) -> Option<Stage> {
        match text {
            "compile" => Some(Stage::Compile),
            "run" => Some(Stage::Run),
            _ => None,
        }
    }
}

/// An evaluation job to queue. Everything a worker on another machine needs travels with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    pub key: JobKey,
    /// The settings' hash without the mode: a worker's engine runs every mode of one family.
    pub settings_family: String,
    /// `level1/12_Name`.
    pub task_name: String,
    pub task_source: String,
    pub candidate_source: String,
    /// The program database's key for the code (its normalised-source hash) and the settings
    /// hash programs are filed under.
    pub program_key: ProgramKey,
    /// Program ids shown in the prompt this code answered, if known.
    pub parent_ids: Vec<i64>,
    /// `full` or `correctness`.
    pub mode: String,
    /// The evaluation settings, as the evaluator serialises them.
    pub settings: serde_json::Value,
    /// Higher runs first.
    pub priority: i32,
    pub stage: Stage,
    /// Workers that may take the job before it is given up.
    pub max_attempts: u32,
}

/// What enqueueing a job found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    pub id: i64,
    pub state: JobState,
    /// New work: a new job, or one given up for want of workers queued again (that is no
    /// result); `false`: one with the same key is queued, running, done or failed by a worker.
    pub created: bool,
}

/// A worker's request for jobs.
#[derive(Clone, Debug)]
pub struct Claim {
    /// Names the worker in the queue (host, pid and a random part).
    pub worker: String,
    pub gpu_class: String,
    /// The worker's judging version: it takes only jobs queued for it.
    pub judge: String,
    /// The stages it takes.
    pub stages: Vec<Stage>,
    /// Only jobs of this settings family (the worker's engine is busy with it).
    pub family: Option<String>,
    pub limit: usize,
    pub lease: Duration,
}

/// A built extension directory, made by a compile-stage worker for the run stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// What it was built with (Python, torch and CUDA versions); used only where they match.
    pub environment: String,
    /// A tar archive of the build directory.
    pub archive: Vec<u8>,
}

/// A job a worker holds.
#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub id: i64,
    pub key: JobKey,
    pub settings_family: String,
    pub task_name: String,
    pub task_source: String,
    pub candidate_source: String,
    pub mode: String,
    pub settings: serde_json::Value,
    /// Where the program is filed in the program database, and the prompt's exemplars.
    pub program_key: ProgramKey,
    pub parent_ids: Vec<i64>,
    pub stage: Stage,
    pub priority: i32,
    /// 1 for the first worker to take it.
    pub attempt: u32,
    pub artifact: Option<Artifact>,
}

/// How a worker ends a job.
#[derive(Clone, Debug)]
pub enum Completion {
    /// The evaluation (verdict, reason, measurements), and the program to file under the task.
    Evaluated { evaluation: serde_json::Value, verdict: String, program: Option<NewProgram> },
    /// No verdict can be given (the reference failed); recorded, and final.
    Failed { error: String },
    /// This worker cannot run the job (no sandbox, another device, its engine would not start):
    /// recorded as failed like a job given up for want of workers, so that asking for it again
    /// queues it again.
    Unrunnable { error: String },
}

/// What a worker's completion does to a job, in every backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acceptance {
    /// It is the job's result: written, and waiters are told.
    Write,
    /// The same worker sending its own result again (its reply was lost): taken, nothing written.
    Again,
    /// Dropped and counted (`discarded`): the job is final already, or a failure comes from a
    /// worker that does not hold the job now.
    Discard,
}

impl Completion {
    /// How a job in `state`, held by `holder`, takes this completion from `worker`. A verdict is
    /// a verdict whoever brings it (the first one wins); a failure counts only from the worker
    /// that holds the job now, so that a worker whose lease ran out (the job was given up and
    /// queued again since) cannot end the new attempt.
    #[must_use]
    pub fn acceptance(&self, state: &str, holder: Option<&str>, worker: &str) -> Acceptance {
        let own = holder == Some(worker);
        if state == JobState::Done.as_str() || state == JobState::Failed.as_str() {
            return if own { Acceptance::Again } else { Acceptance::Discard };
        }
        match self {
            Completion::Evaluated { .. } => Acceptance::Write,
            Completion::Failed { .. } | Completion::Unrunnable { .. }
                if state == JobState::Running.as_str() && own =>
            {
                Acceptance::Write
            }
            Completion::Failed { .. } | Completion::Unrunnable { .. } => Acceptance::Discard,
        }
    }

    /// The worker a job ended by this completion keeps: an unrunnable job keeps none, so that it
    /// counts as given up (asking for it again queues it again), not as the task's failure.
    #[must_use]
    pub fn kept_worker<'a>(&self, worker: &'a str) -> Option<&'a str> {
        (!matches!(self, Completion::Unrunnable { .. })).then_some(worker)
    }
}

/// A job as the queue holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    pub id: i64,
    pub key: JobKey,
    pub task_name: String,
    pub mode: String,
    pub state: JobState,
    pub stage: Stage,
    pub attempts: u32,
    /// The worker holding it, or the one that finished it.
    pub worker: Option<String>,
    pub verdict: Option<String>,
    /// The evaluation, once done.
    pub result: Option<serde_json::Value>,
    /// Why it failed.
    pub error: Option<String>,
    pub program_id: Option<i64>,
    /// Results that arrived after the first one and were dropped (a slow worker whose lease had
    /// expired): the evaluations that ran more than once.
    pub discarded: u32,
}

/// Jobs per state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounts {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
}

/// What a subscriber hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueSignal {
    /// The job reached a final state.
    Finished(i64),
    /// New jobs may be waiting.
    Queued,
    /// Signals may have been missed (a lost connection): check everything again.
    Resync,
}

/// The evaluation job queue. Enqueueing is idempotent on [`JobKey`]; workers claim jobs under a
/// lease they renew with heartbeats; a job whose lease expires goes back to the queue, and one
/// taken by `max_attempts` workers that all went away is failed; the first result written wins.
pub trait JobQueue: Send + Sync {
    /// Queues each job unless one with its key exists; in the jobs' order.
    fn enqueue(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>, StoreError>;
    /// Takes up to `claim.limit` jobs (highest priority, then oldest first) under a lease.
    fn claim(&self, claim: &Claim) -> Result<Vec<ClaimedJob>, StoreError>;
    /// Extends the lease of the jobs the worker still holds; returns their ids.
    fn heartbeat(&self, worker: &str, ids: &[i64], lease: Duration)
        -> Result<Vec<i64>, StoreError>;
    /// Ends a job; `true` when this was its first result (later ones are counted and dropped).
    fn complete(&self, id: i64, worker: &str, completion: &Completion) -> Result<bool, StoreError>;
    /// Gives a job back unfinished (the worker is stopping); the attempt does not count.
    fn release(&self, id: i64, worker: &str) -> Result<(), StoreError>;
    /// Moves a job of the compile stage to the run stage, with its build when it was made.
    fn advance(&self, id: i64, worker: &str, artifact: Option<&Artifact>)
        -> Result<(), StoreError>;
    /// The jobs with these ids that exist, in no particular order.
    fn status(&self, ids: &[i64]) -> Result<Vec<JobStatus>, StoreError>;
    fn counts(&self) -> Result<QueueCounts, StoreError>;
    /// Signals of finished and new jobs, from this process and (where the backend can) others.
    fn subscribe(&self) -> Receiver<QueueSignal>;
    /// Which backend this is, for people (`sqlite:PATH`, `postgres://host/db`).
    fn describe(&self) -> String;
}

/// A store that holds both, as `serve` and `worker` need.
pub trait ServeStore: JobQueue + ProgramDatabase {}

impl<T: JobQueue + ProgramDatabase> ServeStore for T {}
