//! [`Policy`]: the model being trained, in its worker, with typed helpers and time limits.

use crate::TrainError;
use cudal1_model::messages::{
    self, Aggregation, Encode, Generate, Load, LoadReply, Logprobs, Memory, Message, ModelSource,
    Optimizer, Policy as Which, Sample, Sequence, StepKind, TrainStep, TrainStepReply,
};
use cudal1_model::{ModelConfig, ModelWorker};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The model to train and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicySpec {
    pub source: ModelSource,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// `float32`, `bfloat16` or `float16`.
    pub dtype: String,
    /// `None`: full fine-tuning.
    pub lora: Option<messages::Lora>,
    pub optimizer: Optimizer,
}

/// Time limits of the worker's operations; generous, since a GPU step of a large model is slow.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub load: Duration,
    pub generate: Duration,
    pub step: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            load: Duration::from_secs(1800),
            generate: Duration::from_secs(3600),
            step: Duration::from_secs(3600),
        }
    }
}

/// Sampling settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: u32,
}

pub struct Policy {
    worker: ModelWorker,
    pub loaded: LoadReply,
    limits: Limits,
    peaks: Peaks,
    decoder: Option<String>,
    /// How the worker last decoded the LoRA adapter (`merged`, `separate`).
    adapter: Option<String>,
    /// Told what the worker holds of its GPU after each op ([`Policy::report_held`]).
    held: Option<Box<dyn FnMut(u64) + Send>>,
    /// What it held after its last op that said.
    last_held: Option<u64>,
}

/// The worker's peak memory while sampling and while scoring or training, since the last
/// [`Policy::take_peaks`]; `None` where nothing ran (or the worker reported nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peaks {
    pub generate: Option<Memory>,
    pub train: Option<Memory>,
}

fn keep_max(slot: &mut Option<Memory>, seen: Option<Memory>) {
    if let Some(m) = seen {
        *slot = Some(match slot.take() {
            Some(before) => before.max(m),
            None => m,
        });
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("model", &self.loaded.model)
            .field("step", &self.loaded.step)
            .finish()
    }
}

fn failed(doing: &'static str) -> impl FnOnce(cudal1_model::ModelError) -> TrainError {
    move |source| TrainError::Policy { doing, source }
}

impl Policy {
    /// Starts the worker and loads the model for training (with a reference policy when
    /// `reference` is set).
    pub fn start(
        config: &ModelConfig,
        spec: &PolicySpec,
        reference: bool,
        seed: u64,
        limits: Limits,
    ) -> Result<Policy, TrainError> {
        let mut worker = ModelWorker::spawn(config).map_err(failed("starting"))?;
        let load = Load {
            model: spec.source.clone(),
            device: spec.device.clone(),
            dtype: spec.dtype.clone(),
            lora: spec.lora.clone(),
            optimizer: Some(spec.optimizer.clone()),
            reference: reference && spec.lora.is_none(),
            seed: Some(seed),
        };
        let loaded = match worker.call(&load, limits.load) {
            Ok(l) => l,
            Err(e) => {
                let tail = worker.stderr_tail();
                worker.shutdown();
                tracing::debug!(stderr = %tail, "the model worker failed to load");
                return Err(TrainError::Policy { doing: "loading the model", source: e });
            }
        };
        tracing::info!(model = %loaded.model, parameters = loaded.parameters, trainable = loaded.trainable, "policy loaded");
        Ok(Policy {
            worker,
            loaded,
            limits,
            peaks: Peaks::default(),
            decoder: None,
            adapter: None,
            held: None,
            last_held: None,
        })
    }

    /// Token ids of a one-turn conversation (the user's prompt), through the chat template.
    pub fn prompt_ids(&mut self, prompt: &str) -> Result<Vec<u32>, TrainError> {
        Ok(self
            .worker
            .call(&Encode::prompt(vec![Message::user(prompt)]), self.limits.generate)
            .map_err(failed("encoding a prompt"))?
            .prompt_ids)
    }

    /// A supervised example as token ids: the conversation, and the reply ending with the
    /// end-of-sequence token.
    pub fn sft_sequence(
        &mut self,
        messages: &[Message],
        reply: &str,
    ) -> Result<Sequence, TrainError> {
        let enc = Encode {
            messages: messages.to_vec(),
            add_generation_prompt: true,
            completion: Some(reply.to_owned()),
        };
        let r =
            self.worker.call(&enc, self.limits.generate).map_err(failed("encoding an example"))?;
        Ok(Sequence::new(r.prompt_ids, r.completion_ids.unwrap_or_default()))
    }

    /// `n` samples of each prompt.
    pub fn generate(
        &mut self,
        prompts: Vec<Vec<u32>>,
        n: u32,
        sampling: Sampling,
        seed: u64,
    ) -> Result<Vec<Sample>, TrainError> {
        let req = Generate {
            prompts,
            n,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            max_tokens: sampling.max_tokens,
            seed: Some(seed),
        };
        let reply = self.worker.call(&req, self.limits.generate).map_err(failed("sampling"))?;
        self.seen(reply.memory, false);
        if reply.decoder.is_some() {
            self.decoder = reply.decoder;
        }
        if reply.adapter.is_some() {
            self.adapter = reply.adapter;
        }
        Ok(reply.samples)
    }

    /// Has `sink` told, after each op that reports it, what the worker's allocator still
    /// reserves of its GPU (bytes): what it keeps there while candidates are judged on it
    /// ([`cudal1_eval::OutsideMemory::hold`]). It replaces the sink before, and is told at once
    /// what the last op left held, if one said.
    pub fn report_held(&mut self, mut sink: Box<dyn FnMut(u64) + Send>) {
        if let Some(held) = self.last_held {
            sink(held);
        }
        self.held = Some(sink);
    }

    /// An op's memory: its peaks kept (`train`: scoring or training, else sampling), and what is
    /// held after it told.
    fn seen(&mut self, memory: Option<Memory>, train: bool) {
        if let Some(held) = memory.as_ref().and_then(|m| m.held_bytes) {
            self.last_held = Some(held);
            if let Some(sink) = self.held.as_mut() {
                sink(held);
            }
        }
        keep_max(if train { &mut self.peaks.train } else { &mut self.peaks.generate }, memory);
    }

    /// The peaks of memory since the last call (or the start), which then start again.
    pub fn take_peaks(&mut self) -> Peaks {
        std::mem::take(&mut self.peaks)
    }

    /// The decoder the worker last sampled with (`dynamic`, `static` or `graphs`).
    pub fn decoder(&self) -> Option<&str> {
        self.decoder.as_deref()
    }

    /// How the worker last decoded the LoRA adapter (`merged`, `separate`; none without one).
    pub fn adapter(&self) -> Option<&str> {
        self.adapter.as_deref()
    }

    /// Per-token log-probabilities of `sequences` under the policy or the reference policy.
    pub fn logprobs(
        &mut self,
        sequences: Vec<Sequence>,
        which: Which,
        temperature: f64,
    ) -> Result<Vec<Vec<f64>>, TrainError> {
        let req = Logprobs { sequences, temperature, policy: which, micro_batch: 8 };
        let reply =
            self.worker.call(&req, self.limits.step).map_err(failed("scoring sequences"))?;
        self.seen(reply.memory, true);
        Ok(reply.logprobs)
    }

    pub fn step(&mut self, req: &TrainStep) -> Result<TrainStepReply, TrainError> {
        let reply =
            self.worker.call(req, self.limits.step).map_err(failed("taking a training step"))?;
        self.loaded.step = reply.step;
        self.seen(reply.memory.clone(), true);
        Ok(reply)
    }

    /// One supervised step over `sequences`.
    pub fn sft_step(
        &mut self,
        sequences: Vec<Sequence>,
        micro_batch: u32,
    ) -> Result<TrainStepReply, TrainError> {
        let mut req = TrainStep::sft(sequences);
        req.kind = StepKind::Sft;
        req.aggregation = Aggregation::TokenMean;
        req.micro_batch = micro_batch;
        self.step(&req)
    }

    pub fn save(&mut self, dir: &Path) -> Result<PathBuf, TrainError> {
        Ok(self
            .worker
            .call(&messages::Save { dir: dir.to_owned() }, self.limits.step)
            .map_err(failed("saving a checkpoint"))?
            .dir)
    }

    pub fn restore(&mut self, dir: &Path) -> Result<u64, TrainError> {
        let step = self
            .worker
            .call(&messages::Restore { dir: dir.to_owned(), weights_only: false }, self.limits.load)
            .map_err(failed("restoring a checkpoint"))?
            .step;
        self.loaded.step = step;
        Ok(step)
    }

    /// Starts from another run's result: its trained weights only.
    pub fn init_from(&mut self, dir: &Path) -> Result<(), TrainError> {
        self.worker
            .call(&messages::Restore { dir: dir.to_owned(), weights_only: true }, self.limits.load)
            .map_err(failed("loading the starting checkpoint"))?;
        Ok(())
    }

    pub fn shutdown(self) {
        self.worker.shutdown();
    }
}
