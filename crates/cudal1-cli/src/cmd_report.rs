//! `cudal1 report`: the store as one self-contained HTML file (the `cudal1-report` crate gathers
//! and renders; this resolves flags and writes the file).

use crate::args::ReportArgs;
use crate::exit::Status;
use crate::out;
use crate::workspace::open_existing;
use anyhow::{bail, Context, Result};
use cudal1_report::{gather, render, ReportError, Request};

pub fn run(a: &ReportArgs) -> Result<Status> {
    let store = open_existing(&a.db.db)?;
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
