//! `cudal1 report`'s arguments.

use super::DbFlag;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A batch to show (repeatable: several side by side); default: the most recent batch.
    /// `cudal1 eval` prints its batch id last.
    #[arg(long = "batch", value_name = "ID")]
    pub batches: Vec<String>,
    /// An optimize run to show (repeatable); default: every run in the store.
    #[arg(long = "run", value_name = "OPTIMIZE_RUN")]
    pub runs: Vec<String>,
    /// A training run directory (with `metrics.jsonl`) whose curves to show (repeatable).
    #[arg(long = "train", value_name = "RUN_DIR")]
    pub training: Vec<PathBuf>,
    /// A baseline to measure candidates against besides the reference (repeatable:
    /// `compile-default`, `cuda-graphs`, ...); default: every one the store has for the tasks.
    #[arg(long = "baseline", value_name = "NAME")]
    pub baselines: Vec<String>,
    /// The page's title.
    #[arg(long)]
    pub title: Option<String>,
    /// The HTML file to write.
    #[arg(long, short, default_value = "report.html")]
    pub out: PathBuf,
    #[command(flatten)]
    pub db: DbFlag,
}
