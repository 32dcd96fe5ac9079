//! Stage 2: self-supervised rounds. Each round the policy samples `samples_per_task` replies for
//! every training task; the evaluator (correctness mode) keeps the correct programs not seen
//! before (in stage 1's data or an earlier round); the policy is fine-tuned on them, with a replay
//! of stage 1's examples so that it does not forget them. Speed is not a criterion here.

use crate::data::{answers_in, keep_correct, task_messages, Candidate, Collected, SftExample};
use crate::policy::{Policy, Sampling};
use crate::run::RunDir;
use crate::{TrainError, TrainEvent};
use cudal1_eval::Evaluator;
use cudal1_model::messages::{Message, Sample, Sequence};
use cudal1_search::{extract_program, normalized_hash, Language, Prompts};
use cudal1_task::Task;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelfSupConfig {
    pub rounds: u64,
    pub samples_per_task: u32,
    pub sampling: Sampling,
    /// Stage-1 examples mixed into each round's fine-tuning, as a fraction of their number.
    pub replay: f64,
    /// Passes over each round's examples.
    pub epochs: u32,
    pub batch_size: usize,
    pub micro_batch: u32,
    pub seed: u64,
}

/// Runs (or resumes) the rounds; `round` is the run's step.
#[expect(clippy::too_many_arguments)]
pub fn run(
    policy: &mut Policy,
    engine: &Evaluator,
    prompts: &Prompts,
    tasks: &[Arc<Task>],
    stage1: &[SftExample],
    config: &SelfSupConfig,
    run: &RunDir,
    resume_from: u64,
    stop: &dyn Fn() -> bool,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<Vec<Value>, TrainError> {
    // What is already known: stage 1's programs, and those kept by committed rounds.
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for e in stage1 {
        if let Ok(code) = extract_program(&e.reply) {
            seen.insert((
                e.provenance["task_hash"].as_str().map(str::to_owned).unwrap_or_default(),
                normalized_hash(&code),
            ));
        }
    }
    for line in run.lines("samples.jsonl") {
        if let Some(p) = line.get("example").and_then(|e| e.get("provenance")) {
            if let (Some(t), Some(c)) = (p["task_hash"].as_str(), p["code_hash"].as_str()) {
                seen.insert((t.to_owned(), c.to_owned()));
            }
        }
    }
    let mut lines = Vec::new();
    for round in resume_from + 1..=config.rounds {
        if stop() {
            break;
        }
        on_event(TrainEvent::StepStarted { step: round, of: config.rounds });
        let started = Instant::now();
        on_event(TrainEvent::Phase { step: round, phase: "generate" });
        let mut prompt_ids = Vec::with_capacity(tasks.len());
        let mut conversations = Vec::with_capacity(tasks.len());
        for task in tasks {
            let messages = task_messages(prompts, task)?;
            prompt_ids.push(policy.prompt_ids(&messages[0].content)?);
            conversations.push(messages);
        }
        let samples = policy.generate(
            prompt_ids,
            config.samples_per_task,
            config.sampling,
            crate::grpo::step_seed(config.seed, round, 1),
        )?;
        let t_generate = started.elapsed().as_secs_f64();

        let started = Instant::now();
        on_event(TrainEvent::Phase { step: round, phase: "evaluate" });
        let truncated = samples.iter().filter(|s| s.finish_reason == "length").count();
        let mut stats = Collected { replies: samples.len(), ..Collected::default() };
        let candidates = round_candidates(
            prompts.asks_for(),
            tasks,
            &conversations,
            &samples,
            round,
            &mut stats,
        );
        let kept = keep_correct(engine, candidates, &mut seen, &mut stats, on_event);
        let t_evaluate = started.elapsed().as_secs_f64();
        run.record_samples(
            &kept.iter().map(|e| json!({"step": round, "example": e})).collect::<Vec<_>>(),
        )?;

        let started = Instant::now();
        on_event(TrainEvent::Phase { step: round, phase: "train" });
        let mut rng = StdRng::seed_from_u64(crate::grpo::step_seed(config.seed, round, 2));
        let mut replay: Vec<&SftExample> = stage1.iter().collect();
        replay.shuffle(&mut rng);
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        replay.truncate((stage1.len() as f64 * config.replay).round() as usize);
        let mut sequences: Vec<Sequence> = Vec::new();
        for e in kept.iter().chain(replay.iter().copied()) {
            sequences.push(policy.sft_sequence(&e.messages, &e.reply)?);
        }
        let mut losses = Vec::new();
        if !kept.is_empty() {
            for _ in 0..config.epochs {
                sequences.shuffle(&mut rng);
                for batch in sequences.chunks(config.batch_size.max(1)) {
                    losses.push(policy.sft_step(batch.to_vec(), config.micro_batch)?.loss);
                }
            }
        }
        let t_train = started.elapsed().as_secs_f64();
        let correct = stats.verdicts.get("correct").copied().unwrap_or(0);
        #[expect(clippy::cast_precision_loss)]
        let line = json!({
            "step": round,
            "samples": samples.len(),
            "truncated": truncated,
            "with_program": samples.len() - stats.without_program,
            "duplicates": stats.duplicates,
            "judged": stats.judged,
            "correct": correct,
            "judged_correct_rate": if stats.judged > 0 { correct as f64 / stats.judged as f64 } else { 0.0 },
            "new_kept": kept.len(),
            "replayed": replay.len(),
            "sft_steps": losses.len(),
            "loss": if losses.is_empty() { None } else { Some(losses.iter().sum::<f64>() / losses.len() as f64) },
            "verdicts": stats.verdicts,
            "other_language": stats.other_language,
            "seconds": {"generate": t_generate, "evaluate": t_evaluate, "train": t_train},
        });
        run.record_metrics(&line)?;
        run.commit(policy, round, Value::Null)?;
        on_event(TrainEvent::Committed { step: round });
        on_event(TrainEvent::StepFinished { step: round, metrics: line.clone() });
        lines.push(line);
    }
    Ok(lines)
}

/// The round's `samples` (each answering `conversations[prompt_index]` for
/// `tasks[prompt_index]`) as candidates to judge and keep: only those answering in the `language`
/// the prompts ask for, by the rule `sft-data` keeps its answers by ([`answers_in`]; for Triton
/// prompts, programs with Triton kernels and no CUDA extension), so that a Triton run never
/// fine-tunes the policy on a CUDA program it wrote anyway. What is left out is counted in
/// `stats.other_language`.
fn round_candidates(
    language: Language,
    tasks: &[Arc<Task>],
    conversations: &[Vec<Message>],
    samples: &[Sample],
    round: u64,
    stats: &mut Collected,
) -> Vec<Candidate> {
    let candidates = samples
        .iter()
        .map(|s| Candidate {
            task: Arc::clone(&tasks[s.prompt_index]),
            messages: conversations[s.prompt_index].clone(),
            reply: s.text.clone(),
            provenance: json!({"source": "policy", "round": round}),
        })
        .collect();
    answers_in(language, candidates, stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::corpus_reply;
    use std::path::Path;

    fn sample(prompt_index: usize, code: &str) -> Sample {
        Sample {
            prompt_index,
            ids: vec![],
            logprobs: vec![],
            text: corpus_reply(code),
            finish_reason: "stop".into(),
        }
    }

    #[test]
    fn a_round_keeps_only_the_samples_written_in_the_prompts_language() {
        let task = Arc::new(
            Task::from_source(
                Path::new("level1/1_X.py"),
                "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\ndef get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n".into(),
            )
            .unwrap(),
        );
        let cuda = "from torch.utils.cpp_extension import load_inline\next = load_inline(name='e', cpp_sources='')\nclass ModelNew: pass\n";
        let triton = "import triton\n@triton.jit\ndef k(x):\n    pass\nclass ModelNew: pass\n";
        let plain = "import torch\nclass ModelNew: pass\n";
        let samples = [sample(0, cuda), sample(0, triton), sample(0, plain)];
        let tasks = [task];
        let conversations = [vec![Message::user("write it in Triton".to_owned())]];
        let replies = |language| {
            let mut stats = Collected::default();
            let kept = round_candidates(language, &tasks, &conversations, &samples, 3, &mut stats);
            for c in &kept {
                assert_eq!(
                    (c.task.key(), c.provenance["round"].as_u64()),
                    (tasks[0].key(), Some(3))
                );
                assert_eq!(c.messages, conversations[0]);
            }
            (kept.into_iter().map(|c| c.reply).collect::<Vec<_>>(), stats.other_language)
        };
        let (kept, left_out) = replies(Language::Triton);
        assert_eq!(kept, [corpus_reply(triton)]);
        let left_out: Vec<(&str, usize)> = left_out.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(left_out, [("cuda", 1), ("pytorch", 1)]);
        // A CUDA run keeps every sample, as it did before languages existed.
        let (kept, left_out) = replies(Language::Cuda);
        assert_eq!(kept.len(), 3);
        assert!(left_out.is_empty());
    }
}
