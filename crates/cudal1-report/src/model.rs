//! The report's data: everything the page shows, gathered from the store into typed values
//! ([`crate::gather`]) before any HTML is written ([`crate::render`]). Numbers are kept raw (for
//! `data-value` attributes and tests) and as the text a person reads.

use serde::Serialize;

/// The whole report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub title: String,
    /// The store it was made from, for people.
    pub store: String,
    pub batches: Vec<BatchView>,
    /// What speedups are measured against: `reference` (the task's own program, timed beside
    /// each candidate), then each named baseline.
    pub baselines: Vec<String>,
    /// Inline SVG: fast_p for p from 0 to 5, a line per batch and baseline.
    pub fast_p_chart: String,
    /// fast_p at a few p, per batch and baseline.
    pub fast_p_rows: Vec<FastPRow>,
    pub fast_p_columns: Vec<String>,
    /// Inline SVG per level: how the best speedups of tasks are distributed.
    pub distributions: Vec<LevelChart>,
    /// One row per task, a cell per batch.
    pub tasks: Vec<TaskRow>,
    /// Every evaluation shown, with code and diff.
    pub details: Vec<EvalDetail>,
    /// Exploit findings and warnings of every evaluation shown.
    pub findings: Vec<Notice>,
    pub warnings: Vec<Notice>,
    /// Another system's claimed speedups beside the measured ones, per batch that has them.
    pub claims: Vec<ClaimsView>,
    /// Whether any evaluation shown has an own-kernel share (the table gets its column).
    pub own_shares: bool,
    pub runs: Vec<RunView>,
    /// Inline SVG: every run's best speedup per round (empty for fewer than two runs).
    pub runs_compared: String,
    pub training: Vec<TrainingView>,
    /// Inline SVG per metric that several training runs share, a line per run.
    pub training_compared: Vec<String>,
    /// Nsight Compute profiles of the tasks shown (`cudal1 profile`, `optimize --profile`).
    pub profiles: Vec<ProfileView>,
}

/// One program's Nsight Compute profile.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileView {
    pub task: String,
    /// `reference`, a candidate's file, or `program #ID` of an optimize run.
    pub label: String,
    pub gpu_class: String,
    pub created_at: String,
    /// Its first line: launches, distinct kernels and GPU time.
    pub summary: String,
    /// Longest first; empty when the stored profile could not be read (then `brief` is shown).
    pub kernels: Vec<KernelRow>,
    pub brief: String,
}

/// One kernel of a profile, its numbers as text (`–` where ncu gave none).
#[derive(Clone, Debug, Serialize)]
pub struct KernelRow {
    pub name: String,
    pub full_name: String,
    pub share: f64,
    pub time: String,
    pub launches: u32,
    pub compute: String,
    pub memory: String,
    pub dram: String,
    pub occupancy: String,
    pub registers: String,
    pub grid: String,
    pub block: String,
}

/// One batch's summary.
#[derive(Clone, Debug, Serialize)]
pub struct BatchView {
    pub id: String,
    /// Short name for column headers (`#1 solutions`).
    pub label: String,
    pub created_at: String,
    pub suite_path: String,
    pub candidates_path: String,
    pub device: String,
    pub gpu: Option<String>,
    pub candidates: usize,
    /// Verdict and count, every verdict listed.
    pub verdicts: Vec<(String, usize)>,
    /// Over the best candidate of each task (KernelBench's way).
    pub by_task: Summary,
    /// Over every candidate.
    pub by_candidate: Summary,
    pub findings: usize,
    pub warnings: usize,
    /// Tasks and candidates (rows of a release) that had no code to evaluate: counted as not
    /// solved in the summaries and fast_p, as eval counts them.
    pub missing_tasks: usize,
    pub missing_candidates: usize,
}

/// A suite summary's numbers, raw and as text.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub count: usize,
    pub correct: usize,
    pub correct_rate: f64,
    pub mean_speedup: Option<f64>,
    pub median_speedup: Option<f64>,
    pub geomean_speedup: Option<f64>,
    /// `(p, fraction by the median, fraction by the interval's lower bound)` at 1, 1.5 and 2.
    pub fast_p: Vec<(f64, f64, f64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FastPRow {
    pub batch: String,
    pub baseline: String,
    /// Fractions at each of `fast_p_columns`' p.
    pub values: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LevelChart {
    pub level: String,
    pub svg: String,
}

/// A task across batches.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRow {
    pub task: String,
    pub level: String,
    /// The reference's time, from the first batch that measured it.
    pub ref_ms: Option<f64>,
    /// Each baseline's time in the order of [`Report::baselines`] after `reference`.
    pub baseline_ms: Vec<Option<f64>>,
    /// The best candidate of the task in each batch (`None`: the batch has no candidate for it).
    pub cells: Vec<Option<TaskCell>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskCell {
    /// The anchor of the best candidate's details.
    pub anchor: String,
    pub verdict: String,
    pub reason: String,
    pub speedup: Option<Speedup>,
    pub candidates: usize,
    /// Another system's claim for the best candidate, when recorded.
    pub claimed: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Speedup {
    pub median: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// The interval is too wide to rank by.
    pub wide: bool,
}

/// One evaluation in full.
#[derive(Clone, Debug, Serialize)]
pub struct EvalDetail {
    pub anchor: String,
    pub id: i64,
    pub batch: String,
    pub task: String,
    pub candidate: String,
    pub verdict: String,
    pub reason: String,
    pub reason_class: String,
    pub speedup: Option<Speedup>,
    pub ref_ms: Option<f64>,
    pub candidate_ms: Option<f64>,
    /// Each named baseline's time for the task and the candidate's speedup over it, in the
    /// order of [`Report::baselines`] after `reference` (`None`: not measured for this task).
    pub baselines: Vec<Option<BaselineTime>>,
    pub claimed: Option<f64>,
    /// The share of its GPU time in kernels it built itself (`eval --own-share`), and in words.
    pub own_share: Option<f64>,
    pub own_text: Option<String>,
    pub warnings: Vec<String>,
    pub findings: Vec<String>,
    pub log_tail: Option<String>,
    /// `None` when the store and the disk no longer hold the code.
    pub code: Option<String>,
    pub diff: Vec<DiffLine>,
    pub diff_note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BaselineTime {
    pub name: String,
    pub ms: Option<f64>,
    /// The baseline's own speedup over the reference.
    pub baseline_speedup: f64,
    /// The candidate's speedup over the baseline.
    pub speedup: Option<f64>,
}

/// A line of a unified diff: `kind` is `hunk`, `add`, `del` or `ctx`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffLine {
    pub kind: &'static str,
    pub text: String,
}

/// A finding or warning with where it was seen.
#[derive(Clone, Debug, Serialize)]
pub struct Notice {
    pub anchor: String,
    pub batch: String,
    pub task: String,
    pub candidate: String,
    pub verdict: String,
    pub kind: String,
    pub detail: String,
}

/// Claimed against measured, over the candidates measured correct.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimsView {
    pub batch: String,
    pub pairs: usize,
    pub claimed_rows: usize,
    pub claimed_geomean: Option<f64>,
    pub measured_geomean: Option<f64>,
    /// Rows claimed faster than measured by more than their interval allows.
    pub overstated: usize,
    pub svg: String,
}

/// An `optimize` run's history.
#[derive(Clone, Debug, Serialize)]
pub struct RunView {
    pub id: String,
    pub task: String,
    pub created_at: String,
    pub stop_reason: Option<String>,
    pub rounds: Vec<RoundRow>,
    pub chart: String,
    /// The best program and its ancestors (the exemplars shown when each was written), newest first.
    pub lineage: Vec<LineageRow>,
    pub best_code: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RoundRow {
    pub round: u32,
    pub samples: u32,
    pub valid: u32,
    pub correct: u32,
    pub new_programs: u32,
    pub best_speedup: Option<f64>,
    pub best_program_id: Option<i64>,
    pub cost_usd: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LineageRow {
    pub id: i64,
    /// 0 for the best program, 1 for its exemplars, and so on.
    pub depth: usize,
    pub round: u32,
    pub verdict: String,
    pub speedup: Option<f64>,
    pub parents: Vec<i64>,
}

/// A training run's curves.
#[derive(Clone, Debug, Serialize)]
pub struct TrainingView {
    pub dir: String,
    pub stage: String,
    pub steps: usize,
    /// One inline SVG per metric, rewards and losses first.
    pub charts: Vec<String>,
    /// Each plotted metric's last value.
    pub last: Vec<(String, f64)>,
}
