//! Stage 1's fine-tuning (and stage 2's inner loop): supervised steps on examples, through the
//! chat template, in a data order fixed by the seed so that a resumed run takes the same steps.

use crate::data::SftExample;
use crate::policy::Policy;
use crate::run::RunDir;
use crate::{TrainError, TrainEvent};
use cudal1_model::messages::Sequence;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftConfig {
    pub epochs: u32,
    /// Examples per step.
    pub batch_size: usize,
    pub micro_batch: u32,
    /// Commit every this many steps, and after the last.
    pub save_every: u64,
    pub seed: u64,
}

impl SftConfig {
    pub fn steps(&self, examples: usize) -> u64 {
        u64::from(self.epochs) * examples.div_ceil(self.batch_size.max(1)) as u64
    }
}

/// The examples of step `step` (1-based): epoch by epoch, each epoch in its own seeded order.
pub fn batch_of(config: &SftConfig, examples: usize, step: u64) -> Vec<usize> {
    let per_epoch = examples.div_ceil(config.batch_size.max(1)) as u64;
    let epoch = (step - 1) / per_epoch;
    let within = ((step - 1) % per_epoch) as usize;
    let mut order: Vec<usize> = (0..examples).collect();
    order.shuffle(&mut StdRng::seed_from_u64(crate::grpo::step_seed(config.seed, epoch, 7)));
    order.into_iter().skip(within * config.batch_size).take(config.batch_size).collect()
}

/// Token ids of every example (the chat template applied once).
pub fn encode(policy: &mut Policy, examples: &[SftExample]) -> Result<Vec<Sequence>, TrainError> {
    examples.iter().map(|e| policy.sft_sequence(&e.messages, &e.reply)).collect()
}

/// Runs (or resumes) supervised steps over `examples` as `config` says; `step_offset` numbers
/// the steps in a longer run (a self-supervised round), and `commit` says whether this loop
/// commits (a round commits once, at its end).
pub fn run(
    policy: &mut Policy,
    sequences: &[Sequence],
    config: &SftConfig,
    run: &RunDir,
    resume_from: u64,
    commit: bool,
    stop: &dyn Fn() -> bool,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<Vec<Value>, TrainError> {
    if sequences.is_empty() {
        return Err(TrainError::Config("no examples to train on".into()));
    }
    let total = config.steps(sequences.len());
    let mut lines = Vec::new();
    let mut last = resume_from;
    for step in resume_from + 1..=total {
        if stop() {
            break;
        }
        on_event(TrainEvent::StepStarted { step, of: total });
        let started = Instant::now();
        let batch: Vec<Sequence> = batch_of(config, sequences.len(), step)
            .into_iter()
            .map(|i| sequences[i].clone())
            .collect();
        let reply = policy.sft_step(batch, config.micro_batch)?;
        let line = json!({
            "step": step,
            "epoch": (step - 1) / sequences.len().div_ceil(config.batch_size.max(1)) as u64 + 1,
            "loss": reply.loss,
            "grad_norm": reply.grad_norm,
            "entropy": reply.entropy,
            "tokens": reply.tokens,
            "seconds": {"train": started.elapsed().as_secs_f64()},
        });
        run.record_metrics(&line)?;
        if commit && (step % config.save_every == 0 || step == total) {
            run.commit(policy, step, Value::Null)?;
            on_event(TrainEvent::Committed { step });
        }
        on_event(TrainEvent::StepFinished { step, metrics: line.clone() });
        lines.push(line);
        last = step;
    }
    if commit && last > resume_from && last % config.save_every != 0 && last != total {
        run.commit(policy, last, Value::Null)?;
        on_event(TrainEvent::Committed { step: last });
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_is_seen_once_an_epoch_in_a_seeded_order() {
        let c = SftConfig { epochs: 2, batch_size: 3, micro_batch: 8, save_every: 1, seed: 9 };
        assert_eq!(c.steps(7), 6);
        let epoch = |e: u64| -> Vec<usize> {
            let mut all: Vec<usize> = (1..=3).flat_map(|s| batch_of(&c, 7, e * 3 + s)).collect();
            all.sort_unstable();
            all
        };
        assert_eq!(epoch(0), (0..7).collect::<Vec<_>>());
        assert_eq!(epoch(1), (0..7).collect::<Vec<_>>());
        assert_eq!(
            batch_of(&c, 7, 4),
            batch_of(&c, 7, 4),
            "the same step, the same batch (resume)"
        );
        assert_ne!(batch_of(&c, 7, 1), batch_of(&c, 7, 4), "epochs are shuffled differently");
    }
}
