//! `cudal1 report`: the store as one self-contained HTML file (the `cudal1-report` crate gathers
//! and renders; this resolves flags and writes the file).

use crate::exit::Status;
use crate::out;
use crate::workspace::open_existing;
use anyhow::{bail, Context, Result};
use clap::Args;
use cudal1_report::{gather, render, ReportError, Request};
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
    /// The SQLite store.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
}

pub fn run(a: &ReportArgs) -> Result<Status> {
    let store = open_existing(&a.db)?;
    let request = Request {
        title: a.title.clone(),
        batches: a.batches.clone(),
        runs: a.runs.clone(),
        training: a.training.clone(),
        baselines: a.baselines.clone(),
    };
    let report =
        match gather(&store, &request) {
            Ok(r) => r,
            Err(ReportError::UnknownBatch { store, batch }) => {
                let known = open_existing(&store)?.batch_ids()?;
                bail!(
                    "`{}` holds no batch `{batch}`\nhint: {}",
                    store.display(),
                    if known.is_empty() {
                        "run `cudal1 eval --suite ... --candidates ...` first".to_owned()
                    } else {
                        format!(
                            "batches there, newest first: {}",
                            known
                                .iter()
                                .take(5)
                                .map(|b| format!("`{b}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                );
            }
            Err(e @ ReportError::UnknownRun { .. }) => return Err(anyhow::Error::new(e).context(
                "hint: `cudal1 optimize` prints its run id; leave out `--run` to show every run",
            )),
            Err(e) => return Err(e.into()),
        };
    let html = render(&report)?;
    std::fs::write(&a.out, html).with_context(|| format!("writing `{}`", a.out.display()))?;
    out::line(format!(
        "wrote {} ({} batch(es), {} task(s), {} candidate(s), {} optimize run(s), {} training run(s))",
        a.out.display(),
        report.batches.len(),
        report.tasks.len(),
        report.details.len(),
        report.runs.len(),
        report.training.len()
    ))?;
    Ok(Status::Done)
}
