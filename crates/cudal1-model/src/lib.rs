//! The model worker: cudal1's one Python process for tensor work on language models
//! (`python -m cudal1_model`, python/cudal1_model). The main type is [`ModelWorker`]: it starts the
//! worker under [`cudal1_supervisor::Worker`], the supervisor of every Python child (own process
//! group, timeouts, kill, leak checks), and sends the typed requests of [`messages`] over the
//! runner's JSON-lines envelope. Two users drive it: `optimize`'s embedded model ([`messages::Chat`])
//! and `cudal1 train` ([`messages::Generate`], [`messages::Logprobs`], [`messages::TrainStep`],
//! [`messages::Save`], [`messages::Restore`]). The worker does tensor work only; every decision
//! (rewards, advantages, which samples count, when to step or save) is the caller's.
//!
//! ```no_run
//! use cudal1_model::{messages, ModelConfig, ModelWorker};
//! use std::time::Duration;
//! # fn demo(config: ModelConfig) -> Result<(), cudal1_model::ModelError> {
//! let mut worker = ModelWorker::spawn(&config)?;
//! worker.call(&messages::Load::hf("runs/tiny"), Duration::from_secs(600))?;
//! let prompt = worker.call(&messages::Encode::prompt(vec![messages::Message::user("Write ModelNew.")]), Duration::from_secs(60))?;
//! let samples = worker.call(&messages::Generate { prompts: vec![prompt.prompt_ids], n: 4, ..messages::Generate::default() }, Duration::from_secs(600))?;
//! println!("{} samples", samples.samples.len());
//! worker.shutdown();
//! # Ok(()) }
//! ```

pub mod messages;
mod worker;

pub use worker::{ModelConfig, ModelError, ModelWorker};
