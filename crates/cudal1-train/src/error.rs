//! Why a training stage stopped.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("the policy (model worker) failed while {doing}")]
    Policy {
        doing: &'static str,
        #[source]
        source: cudal1_model::ModelError,
    },
    #[error("cannot {doing} `{}`", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` line {line}: {reason}", path.display())]
    Data { path: PathBuf, line: usize, reason: String },
    #[error("the run in `{}` was started with other settings ({what}); resume it with the same settings, or start the new run in another directory", dir.display())]
    Mismatch { dir: PathBuf, what: String },
    #[error("invalid setting: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] cudal1_store::StoreError),
    #[error(transparent)]
    Prompt(#[from] cudal1_search::PromptError),
    #[error("every sample of {groups} group(s) in a row carried no signal (equal or unscored rewards); stopped after {refills} refills")]
    NoSignal { groups: usize, refills: usize },
}

impl TrainError {
    pub fn io<'a>(
        doing: &'static str,
        path: &'a std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> TrainError + 'a {
        move |source| TrainError::Io { doing, path: path.to_owned(), source }
    }
}
