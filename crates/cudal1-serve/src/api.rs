//! The wire format: what clients send and what they get back. Unknown fields are refused, so a
//! misspelt option is an error rather than silently ignored.

use cudal1_search::Language;
use serde::{Deserialize, Serialize};

/// `POST /v1/reward` and `POST /v1/reward/submit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardRequest {
    pub items: Vec<RewardItem>,
    /// `full` (the default: verdict and speedup) or `correctness` (no timing; reward 1 or 0).
    #[serde(default)]
    pub mode: Option<String>,
    /// Seconds to wait for results (long poll); the server caps it. `/v1/reward/submit` does
    /// not wait.
    #[serde(default)]
    pub wait_s: Option<f64>,
    #[serde(default)]
    pub priority: Option<i32>,
    /// Clip of group-normalised rewards (CUDA-L1: 1.5).
    #[serde(default)]
    pub clip: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardItem {
    /// A task of the suite, as `eval` names it (`level1/12_Name`).
    pub task: String,
    /// The model's reply; its last python block defining `ModelNew` is the program.
    pub completion: String,
    /// The prompt it answered (from `/v1/prompt`), for the program's lineage.
    #[serde(default)]
    pub prompt_id: Option<String>,
    /// Rewards normalised within a group of this size, once every member is scored.
    #[serde(default)]
    pub group: Option<GroupRef>,
    /// Anything; echoed back.
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupRef {
    pub id: String,
    pub size: u32,
    /// The member's place in its group; by default its place among this request's items of
    /// the group (give it when a group's members come in separate requests).
    #[serde(default)]
    pub index: Option<u32>,
}

/// Where an item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    /// Evaluated: `verdict` and `reward` hold.
    Done,
    /// Not evaluated yet; ask again (the same request, or `/v1/reward/get` with the job).
    Pending,
    /// No verdict can be given (the reference failed, every worker that took it went away):
    /// `reward` is null and `reason` says why.
    Failed,
    /// The completion holds no program: reward 0, and `reason` says what is missing.
    NoCode,
}

#[derive(Debug, Clone, Serialize)]
pub struct Speedup {
    pub median: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RewardResult {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<serde_json::Value>,
    pub task: String,
    /// The evaluation job (the same for the same task, code and settings).
    pub job: Option<i64>,
    pub state: ItemState,
    /// The speedup for a correct program (1 in correctness mode), 0 for any other verdict or a
    /// reply without a program, null when it could not be scored.
    pub reward: Option<f64>,
    pub verdict: Option<String>,
    pub reason: String,
    pub reason_class: Option<String>,
    pub speedup: Option<Speedup>,
    pub program_id: Option<i64>,
    /// The result existed before this request (nothing was evaluated for it).
    pub cached: bool,
    /// The reward normalised within its group and clipped, once the whole group is scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_reward: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct RewardResponse {
    pub results: Vec<RewardResult>,
    /// Items still pending when the wait ended.
    pub pending: usize,
}

/// `POST /v1/reward/get`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetRequest {
    pub jobs: Vec<i64>,
    #[serde(default)]
    pub wait_s: Option<f64>,
}

/// `POST /v1/prompt`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptRequest {
    pub task: String,
    /// The same key (with the same `as_of` and sampler settings) gives the same prompt; a random
    /// one is drawn when absent and returned.
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub exemplars: Option<usize>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub bucket_width: Option<f64>,
    /// Only programs with ids up to this; by default the database as it is now (returned).
    #[serde(default)]
    pub as_of: Option<i64>,
    /// What the prompt asks programs to be written in: `cuda` or `triton` (default: the
    /// server's `--language`).
    #[serde(default)]
    pub language: Option<Language>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShownExemplar {
    pub program_id: i64,
    pub speedup: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptResponse {
    pub task: String,
    pub prompt_id: String,
    /// `first` (the reference alone: no correct variant is known yet) or `contrastive`.
    pub kind: &'static str,
    pub prompt: String,
    pub messages: Vec<Message>,
    pub exemplars: Vec<ShownExemplar>,
    pub key: String,
    pub as_of: i64,
    /// What the prompt asks programs to be written in (`cuda` or `triton`).
    pub language: Language,
}

/// `GET /v1/prompts/export`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// Tasks, comma-separated (default: every task of the suite).
    #[serde(default)]
    pub tasks: Option<String>,
    #[serde(default)]
    pub per_task: Option<usize>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub exemplars: Option<usize>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub bucket_width: Option<f64>,
    #[serde(default)]
    pub as_of: Option<i64>,
    /// `cuda` or `triton` (default: the server's `--language`).
    #[serde(default)]
    pub language: Option<Language>,
}

/// `POST /openrlhf/get_reward`: OpenRLHF's remote reward shape.
#[derive(Debug, Deserialize)]
pub struct OpenRlhfRequest {
    /// Prompt and response, decoded together.
    pub query: Vec<String>,
    #[serde(default)]
    pub prompts: Vec<String>,
    /// The task of each query (`--data.label_key task` on an exported prompt set).
    #[serde(default)]
    pub labels: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct OpenRlhfResponse {
    /// 0 for a query that could not be scored (`extra_logs.cudal1_scored` is 0 for it): OpenRLHF
    /// turns each value into a tensor, which a null would break.
    pub rewards: Vec<f64>,
    pub scores: Vec<f64>,
    pub extra_logs: serde_json::Map<String, serde_json::Value>,
}
