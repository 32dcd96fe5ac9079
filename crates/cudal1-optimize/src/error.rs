//! The one error type of this crate. Everything a candidate or a reply can do wrong is recorded
//! as data (a verdict, a sample's reason); only what stops the whole run is an error.

use std::path::PathBuf;

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum OptimizeError {
    #[error("invalid optimize options: {reason}")]
    Config { reason: String },

    #[error("the store failed while optimizing `{task}`")]
    Store {
        task: String,
        #[source]
        source: Box<cudal1_store::StoreError>,
    },

    #[error("cannot render the prompt for `{task}`")]
    Prompt {
        task: String,
        #[source]
        source: Box<cudal1_search::PromptError>,
    },

    /// The LLM failed in a way more requests cannot fix (authentication, a wrong URL or model).
    #[error("the LLM {llm} failed for good while optimizing `{task}`")]
    Llm {
        task: String,
        llm: String,
        #[source]
        source: Box<cudal1_llm::LlmError>,
    },

    /// The task's reference program could not be run, so no candidate can be judged;
    /// `remedies`: what can be done about it, where something can.
    #[error("the reference of `{task}` failed, so no program can be evaluated: {message}")]
    Reference { task: String, message: String, remedies: Vec<cudal1_eval::Remedy> },

    #[error(
        "the evaluator of `{task}` stopped unexpectedly with {outstanding} evaluation(s) under way"
    )]
    EvaluatorStopped { task: String, outstanding: usize },

    #[error("cannot write `{}`", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
