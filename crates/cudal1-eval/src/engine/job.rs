//! What goes into the engine (a [`Job`]) and what comes out: one [`JobOutcome`] per job, through
//! its [`JobHandle`] and as the last [`Event`] of the job in the engine's stream.

use crate::degenerate::TaskCheck;
use crate::engine::MemoryWait;
use crate::settings::{Device, Mode};
use crate::verdict::Evaluation;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use cudal1_protocol::DescribeReply;
use cudal1_task::{Candidate, Task};
use std::sync::Arc;
use std::time::Duration;

/// The engine's number for a job, unique within one [`crate::Evaluator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// One unit of work for a device.
#[derive(Debug, Clone)]
pub struct Job {
    pub task: Arc<Task>,
    pub work: Work,
    /// Higher runs first; equal priorities run in the order they were submitted.
    pub priority: i32,
}

#[derive(Debug, Clone)]
pub enum Work {
    /// Judge a candidate against the task's reference.
    Evaluate { candidate: Candidate, mode: Mode },
    /// Find out whether the task is degenerate (`tasks check`): the reference against null
    /// candidates, on these input seeds.
    CheckTask { seeds: Vec<u64> },
    /// Load the reference and say what its inputs and parameters are (`tasks list`).
    Describe,
}

impl Job {
    /// A full evaluation (correctness, then timing) at priority 0.
    pub fn evaluate(task: Arc<Task>, candidate: Candidate) -> Job {
        Job { task, work: Work::Evaluate { candidate, mode: Mode::Full }, priority: 0 }
    }

    pub fn check_task(task: Arc<Task>, seeds: Vec<u64>) -> Job {
        Job { task, work: Work::CheckTask { seeds }, priority: 0 }
    }

    pub fn describe(task: Arc<Task>) -> Job {
        Job { task, work: Work::Describe, priority: 0 }
    }

    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Job {
        if let Work::Evaluate { mode: m, .. } = &mut self.work {
            *m = mode;
        }
        self
    }

    #[must_use]
    pub fn priority(mut self, priority: i32) -> Job {
        self.priority = priority;
        self
    }

    /// Whether the job needs its device alone (it times).
    pub(crate) fn times(&self) -> bool {
        matches!(&self.work, Work::Evaluate { mode, .. } if mode.times())
    }

    /// A timed job whose program has Triton kernels: they compile (and autotune) on their first
    /// calls, in the candidate's process, so the job loads, warms them up and checks its outputs
    /// sharing the device, and takes the device alone only to time (as every timed job of a
    /// pipelined engine does). Decided from the source by cudal1 ([`cudal1_task::triton_kernels`]).
    pub(crate) fn warms_up_off_slot(&self) -> bool {
        self.times()
            && self.candidate().is_some_and(|c| !cudal1_task::triton_kernels(&c.source).is_empty())
    }

    pub(crate) fn candidate(&self) -> Option<&Candidate> {
        match &self.work {
            Work::Evaluate { candidate, .. } => Some(candidate),
            Work::CheckTask { .. } | Work::Describe => None,
        }
    }

    /// What the job is about, for people: the candidate's label, or the task for a check.
    pub fn label(&self) -> String {
        match &self.work {
            Work::Evaluate { candidate, .. } => candidate.label.clone(),
            Work::CheckTask { .. } => format!("check {}", self.task.key()),
            Work::Describe => format!("describe {}", self.task.key()),
        }
    }
}

/// How a job ended.
#[derive(Debug, Clone)]
pub enum JobOutcome {
    /// The candidate's verdict (a crashing, hanging or hostile candidate ends here too).
    Evaluated(Arc<Evaluation>),
    /// The task's check.
    Checked(Arc<TaskCheck>),
    /// What the task's reference takes and holds.
    Described(Arc<DescribeReply>),
    /// The task's reference could not be run: the task is at fault, and the job got no verdict.
    /// `at_start`: it failed to start or load, so no job of this task can be judged. `remedies`:
    /// what can be done about it, where something can (a task too large for the machine), as
    /// data for the front end to say in its own words.
    TaskFailed { error: String, at_start: bool, remedies: Vec<crate::memory::Remedy> },
    /// The machine failed, not the task or the candidate: it ran out of memory (the kernel's
    /// OOM killer ended a process that held no more than its share), or the candidate's runner
    /// failed twice before the candidate was loaded. No verdict; the same job may succeed another
    /// time, with fewer jobs at once or more memory.
    HostFailed { error: String },
    /// Not run, or stopped unfinished, because the engine was cancelled.
    Cancelled,
}

impl JobOutcome {
    pub fn evaluation(&self) -> Option<&Arc<Evaluation>> {
        match self {
            JobOutcome::Evaluated(e) => Some(e),
            _ => None,
        }
    }
}

/// A job's outcome as it arrives on a channel given to [`crate::Evaluator::submit_to`].
#[derive(Debug, Clone)]
pub struct Done {
    pub id: JobId,
    pub outcome: JobOutcome,
}

/// A submitted job: wait on it for its outcome.
#[derive(Debug)]
pub struct JobHandle {
    pub id: JobId,
    pub(crate) outcome: Receiver<JobOutcome>,
}

impl JobHandle {
    /// Blocks until the job has ended. An engine that went away without ending it counts as
    /// cancelling it.
    pub fn wait(&self) -> JobOutcome {
        self.outcome.recv().unwrap_or(JobOutcome::Cancelled)
    }

    /// As [`JobHandle::wait`], giving up after `timeout` (`None`: still running).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<JobOutcome> {
        match self.outcome.recv_timeout(timeout) {
            Ok(o) => Some(o),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(JobOutcome::Cancelled),
        }
    }

    /// The channel the outcome arrives on, for `select!` over several jobs.
    pub fn receiver(&self) -> &Receiver<JobOutcome> {
        &self.outcome
    }
}

/// One step of a job, in the engine's single ordered stream. A job's events come in this order:
/// `Queued`, then `Compiling`/`Compiled` when its program builds extensions, `WaitingForMemory`
/// when it must wait for memory or run alone for it, `Started`, and always exactly one
/// `Finished`.
#[derive(Debug, Clone)]
pub struct Event {
    pub job: JobId,
    pub kind: EventKind,
}

#[derive(Debug, Clone)]
pub enum EventKind {
    Queued {
        task: String,
        label: String,
        mode: Option<Mode>,
    },
    Compiling,
    Compiled {
        ms: f64,
        cached: bool,
        ok: bool,
    },
    /// The job's memory need does not fit beside the running jobs' ([`crate::engine::MemoryBudget`]):
    /// it waits for them before it starts. With `alone`, its need is more than the budget
    /// itself: it runs holding its device alone once nothing else holds memory (said even when
    /// nothing did).
    WaitingForMemory(MemoryWait),
    /// A device took the job: from here to `Finished` it holds the device (alone, if it times;
    /// with [`crate::EngineConfig::pipeline`], shared while it loads and checks, then, its
    /// process stopped, nothing while it waits for `Timing`).
    Started {
        device: Device,
    },
    /// The job holds the device alone from here to `Finished`: it is being timed.
    Timing,
    Finished(JobOutcome),
}
