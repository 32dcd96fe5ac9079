//! The LLM-facing half of cudal1's contrastive search. The main type is
//! [`Prompts`], which renders the first-round prompt (the reference alone),
//! the contrastive prompt (the reference plus earlier variants with their
//! measured speedups) and the refinement prompt of a later turn (the previous
//! attempt with its verdict and reason) from minijinja templates that ship in the crate and can
//! be overridden from a directory, asking for CUDA or for Triton kernels ([`Language`]). Around
//! it: [`extract_program`] finds the candidate in a reply, [`normalized_hash`] de-duplicates
//! candidates, [`ExemplarSampler`] picks which earlier variants a prompt shows (CUDA-L1's
//! bucketed softmax), [`exemplar_pool`] keeps the earlier variants a prompt in one language may
//! show (its own language's and plain PyTorch), [`draw_prompt`] renders the prompt for a task from
//! its earlier variants, and [`group_normalized_rewards`] turns a group's
//! speedups into GRPO rewards.
//!
//! ```
//! use cudal1_search::{extract_program, Exemplar, Prompts};
//! let prompts = Prompts::builtin();
//! let reference = "class Model(nn.Module):\n    def forward(self, x):\n        return x + 1\n";
//! let shown = [Exemplar { code: "class ModelNew(nn.Module): ...".into(), speedup: 1.3, verdict: "correct".into(), profile: None }];
//! let prompt = prompts.contrastive(reference, &shown)?;
//! assert!(prompt.contains("speedup 1.30x"));
//! let reply = "Analysis ...\n```python\nclass ModelNew(nn.Module):\n    pass\n```\n";
//! assert_eq!(extract_program(reply)?, "class ModelNew(nn.Module):\n    pass\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod contrastive;
mod extract;
mod feedback;
mod normalize;
mod pool;
mod prompts;
mod reward;
mod sampler;

pub use contrastive::{draw_prompt, Drawn, Variant};
pub use extract::{extract_program, ExtractError};
pub use feedback::Judged;
pub use normalize::{normalize, normalized_hash};
pub use pool::{exemplar_pool, Written};
pub use prompts::{Attempt, Exemplar, Language, PromptError, Prompts, Reference, TEMPLATE_NAMES};
pub use reward::{group_advantages, group_normalized_rewards};
pub use sampler::{Bucket, ExemplarSampler, SamplerError, ScoredVariant};
