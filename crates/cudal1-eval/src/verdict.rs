//! The result of evaluating one candidate: one verdict, always with a readable reason.

use cudal1_protocol::Finding;
use cudal1_stats::Interval;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Correct,
    Incorrect,
    CompileError,
    RuntimeError,
    Timeout,
    Exploit,
}

impl Verdict {
    pub const ALL: [Verdict; 6] = [
        Verdict::Correct,
        Verdict::Incorrect,
        Verdict::CompileError,
        Verdict::RuntimeError,
        Verdict::Timeout,
        Verdict::Exploit,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Correct => "correct",
            Verdict::Incorrect => "incorrect",
            Verdict::CompileError => "compile_error",
            Verdict::RuntimeError => "runtime_error",
            Verdict::Timeout => "timeout",
            Verdict::Exploit => "exploit",
        }
    }

    pub fn parse(text: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A verdict with its reason and a short machine-readable class of the reason
/// (e.g. `output_aliases_input`, `timed_output_mismatch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    pub verdict: Verdict,
    pub reason: String,
    pub class: String,
    /// What the program printed that explains the verdict in full: the traceback of an
    /// exception, the compiler's whole output (the reason keeps only its error lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

impl Judgement {
    pub fn new(verdict: Verdict, class: &str, reason: impl Into<String>) -> Judgement {
        Judgement { verdict, reason: reason.into(), class: class.to_owned(), log: None }
    }

    /// The same judgement with `log` kept beside it (nothing when it is empty).
    #[must_use]
    pub fn with_log(mut self, log: Option<String>) -> Judgement {
        self.log = log.filter(|l| !l.trim().is_empty());
        self
    }
}

/// Something worth a reader's attention that did not decide the verdict: a static-screening
/// warning (a thread, a side stream, code that hides from the screen), or a time close to what
/// the device's memory bandwidth allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    pub class: String,
    pub message: String,
}

/// The facts of the runtime, for the store and the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub python: String,
    pub torch: String,
    pub cuda: Option<String>,
    pub gpu: Option<String>,
    pub driver: Option<String>,
}

/// Correctness of one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedCheck {
    pub seed: u64,
    /// During timing (a checked timed call) or before it.
    pub timed: bool,
    pub passed: bool,
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    pub mismatches: u64,
    /// The call's own time; timed calls report theirs in the timing data instead.
    pub candidate_ms: Option<f64>,
}

/// Raw timing data and its statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimingReport {
    pub reference_ms: Vec<f64>,
    pub candidate_ms: Vec<f64>,
    /// The median per-call time of each block as seen by cudal1's own clock (block wall / calls).
    pub reference_outer_ms: Vec<f64>,
    pub candidate_outer_ms: Vec<f64>,
    pub blocks: usize,
    pub calls_per_block: u32,
    /// Speedup by the outer clock, which includes the same per-call overhead on both sides.
    pub outer_speedup: Option<f64>,
    pub reference: Option<Interval>,
    pub candidate: Option<Interval>,
    /// Why the timing was repeated (a suspicious clock, a large speedup), and the first result.
    #[serde(default)]
    pub remeasured: Option<Remeasure>,
    /// What the times cover (crate::window); absent in evaluations stored before it existed.
    #[serde(default)]
    pub window: Option<crate::window::WindowUsed>,
    /// The GPU spin queued before each call, in microseconds.
    #[serde(default)]
    pub spin_us: Option<f64>,
    /// Medians per call: the host's time to issue a call, and on a GPU how long the device stayed
    /// busy or synchronising after the call returned.
    #[serde(default)]
    pub reference_issue_ms: Option<f64>,
    #[serde(default)]
    pub candidate_issue_ms: Option<f64>,
    #[serde(default)]
    pub reference_tail_ms: Option<f64>,
    #[serde(default)]
    pub candidate_tail_ms: Option<f64>,
    /// cudal1's own counts: the candidate's processes' CPU time while the reference's blocks ran
    /// (and those blocks' wall time), and the extra CPU cores it kept busy during its blocks.
    #[serde(default)]
    pub candidate_cpu_while_reference_ms: Option<f64>,
    #[serde(default)]
    pub reference_blocks_wall_ms: Option<f64>,
    #[serde(default)]
    pub extra_cores: Option<f64>,
    /// What cudal1's clock supports (see `timing::OuterBound`): the least time per call it allows
    /// the candidate, and the speedup of block means.
    #[serde(default)]
    pub outer_floor_ms: Option<f64>,
    #[serde(default)]
    pub supported_speedup: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remeasure {
    pub why: String,
    pub first_speedup: Option<f64>,
}

/// Everything measured while evaluating a candidate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    pub compile_ms: Option<f64>,
    pub load_ms: Option<f64>,
    /// Time the candidate's process spent inside extension builds while it held its device
    /// (building what the compile pool missed, or finding its build done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_ms: Option<f64>,
    /// Build calls the compile pool could not make happen ahead of device time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed_builds: Vec<String>,
    pub checks: Vec<SeedCheck>,
    pub findings: Vec<Finding>,
    pub timing: Option<TimingReport>,
    /// When it failed: the traceback of its exception or its compiler's output, then the tail of
    /// its process's stderr.
    pub log_tail: Option<String>,
    /// Wall time of each step of the evaluation (start, load, triton_warmup, first_call,
    /// correctness, device_wait_timing, timing, verdict), in ms.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases_ms: BTreeMap<String, f64>,
    /// A timed program with `@triton.jit` kernels: its warm-up (Triton's JIT compiles and
    /// autotuning), made before its outputs were checked and apart from every timed window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton: Option<TritonWarmup>,
}

/// The warm-up of a program's Triton kernels ([`Measurements::triton`]). Triton compiles (and
/// autotunes) a kernel on its first calls, inside the candidate's process: a warm-up call on
/// fresh inputs, untimed and unchecked, makes those happen before the correctness checks, while
/// the job shares its device with other checks and before it takes the device alone to time
/// (docs/design.md). The counts are of kernel binaries in the process's own Triton cache, read by
/// cudal1 after each phase; the process can write there, so they are its claims and only ever
/// held against itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TritonWarmup {
    /// Its `@triton.jit` (or `@triton.autotune`) functions, from its source.
    pub kernels: Vec<String>,
    /// The warm-up call's wall time by cudal1's clock (also `phases_ms.triton_warmup`).
    pub warmup_ms: f64,
    /// Whether the warm-up ran off the device's timing slot: the job did not yet hold the device
    /// alone (it held it beside other checks, never beside a timed job). `false` where it ran
    /// holding the device alone (evaluated again alone, or outside an engine).
    pub off_slot: bool,
    /// Kernel binaries compiled by the warm-up call.
    pub compiled_in_warmup: usize,
    /// Compiled later, during the correctness checks (still before the device is held alone).
    pub compiled_in_checks: usize,
    /// Compiled during timing: then a timed window held a compile (the candidate's own loss;
    /// the `triton_compiled_while_timed` warning says so).
    pub compiled_while_timed: usize,
}

impl Measurements {
    /// Adds `took` to the phase `name` (a phase may be entered more than once).
    pub fn phase(&mut self, name: &str, took: std::time::Duration) {
        *self.phases_ms.entry(name.to_owned()).or_insert(0.0) += took.as_secs_f64() * 1e3;
    }
}

/// One evaluated candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub task: String,
    pub task_hash: String,
    pub candidate: String,
    pub candidate_hash: String,
    pub verdict: Verdict,
    pub reason: String,
    pub reason_class: String,
    pub speedup: Option<Interval>,
    pub ref_ms: Option<f64>,
    pub candidate_ms: Option<f64>,
    pub device: String,
    /// `correctness`: not timed, so no speedup. Absent (full) in evaluations stored before modes.
    #[serde(default, skip_serializing_if = "crate::settings::Mode::is_full")]
    pub mode: crate::settings::Mode,
    /// A trial on smaller inputs (`--scale`): the speedup is not the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    pub environment: Environment,
    pub measurements: Measurements,
    pub duration_ms: f64,
    /// Not part of the verdict; absent in evaluations stored before warnings existed.
    #[serde(default)]
    pub warnings: Vec<Warning>,
    /// Who judged it (the judging version and the class of GPU), set by the engine; absent in
    /// evaluations stored before judges were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<crate::judge::Judge>,
}
