//! [`draw_prompt`]: the prompt for one sample (or one group of samples) of a task: the reference
//! alone while the task has no correct variant, else the contrastive prompt with N earlier correct
//! variants drawn by the [`ExemplarSampler`] from those the prompt's language may show
//! ([`crate::exemplar_pool`]). `optimize` and training build their prompts here.

use rand::Rng;

use crate::{
    exemplar_pool, Exemplar, ExemplarSampler, PromptError, Prompts, Reference, ScoredVariant,
    Written,
};

/// An earlier program of the task as a prompt may show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// The caller's id for it (the store's program id).
    pub id: i64,
    pub code: String,
    /// The measured speedup, when it is a correct program; others are never shown.
    pub speedup: Option<f64>,
    /// Its Nsight Compute brief, shown with it when set.
    pub profile: Option<String>,
}

/// A rendered prompt and what it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    pub prompt: String,
    pub contrastive: bool,
    /// Ids of the variants shown, in the prompt's order.
    pub shown: Vec<i64>,
}

/// The prompt for `reference` given its earlier `variants`: the first-round prompt when
/// `contrastive` is false or no variant is correct, else up to `n` correct variants drawn by
/// `sampler` from those a prompt in `prompts`' language may show ([`exemplar_pool`]): a Triton
/// prompt never shows a CUDA variant, nor a CUDA prompt a Triton one. When no correct variant
/// of the language remains, the first-round prompt.
pub fn draw_prompt<'r>(
    prompts: &Prompts,
    reference: impl Into<Reference<'r>>,
    variants: &[Variant],
    contrastive: bool,
    sampler: &ExemplarSampler,
    n: usize,
    rng: &mut impl Rng,
) -> Result<Drawn, PromptError> {
    let reference = reference.into();
    let correct: Vec<(&Variant, f64)> = variants
        .iter()
        .filter_map(|v| v.speedup.filter(|s| s.is_finite()).map(|s| (v, s)))
        .collect();
    let correct = exemplar_pool(prompts.asks_for(), correct, |(v, _)| Written::of(&v.code));
    if !contrastive || correct.is_empty() || n == 0 {
        return Ok(Drawn { prompt: prompts.first(reference)?, contrastive: false, shown: vec![] });
    }
    let scored: Vec<ScoredVariant> =
        correct.iter().map(|(_, s)| ScoredVariant { speedup: *s, correct: true }).collect();
    let picked = sampler.sample(&scored, n, rng);
    let shown: Vec<Exemplar> = picked
        .iter()
        .map(|&i| Exemplar {
            profile: correct[i].0.profile.clone(),
            ..Exemplar::measured(correct[i].0.code.clone(), correct[i].1)
        })
        .collect();
    Ok(Drawn {
        prompt: prompts.contrastive(reference, &shown)?,
        contrastive: true,
        shown: picked.iter().map(|&i| correct[i].0.id).collect(),
    })
}
