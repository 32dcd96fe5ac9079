//! `cudal1 report`: one self-contained HTML file from the store. [`gather`] reads the batches,
//! optimize runs and training runs asked for into a typed [`Report`]; [`render`] writes it
//! through a template embedded in the binary, with charts as inline SVG ([`charts`]) and a few
//! lines of inline script (sorting tables, opening linked details). The page loads nothing from
//! the network: no fonts, scripts or images from outside.
//!
//! ```no_run
//! use cudal1_report::{gather, render, Request};
//! use cudal1_store::Store;
//!
//! let store = Store::open(std::path::Path::new("cudal1.db"))?;
//! let report = gather(&store, &Request::default())?;
//! std::fs::write("report.html", render(&report)?)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod charts;
mod gather;
pub mod model;
mod render;
mod train;

use std::path::PathBuf;

pub use gather::{
    baselines_for, gather, unified_diff, BaselineMeasure, BaselineSet, Request, SUMMARY_P,
};
pub use model::Report;
pub use render::render;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] cudal1_store::StoreError),
    #[error("`{}` holds no batch `{batch}`", store.display())]
    UnknownBatch { store: PathBuf, batch: String },
    #[error("`{}` holds no optimize run `{run}`", store.display())]
    UnknownRun { store: PathBuf, run: String },
    #[error("cannot read the training metrics `{}`", path.display())]
    Training {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` line {line} is not a JSON object: {reason}", path.display())]
    TrainingData { path: PathBuf, line: usize, reason: String },
    #[error("rendering the report failed")]
    Render(#[source] minijinja::Error),
}
