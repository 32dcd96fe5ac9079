//! The prompts of a round: round 1 shows the reference alone; later rounds show it with up to N
//! earlier correct variants of the task, drawn by CUDA-L1's bucketed softmax.

use std::collections::HashMap;

use cudal1_search::{draw_prompt, ExemplarSampler, PromptError, Prompts, Reference, Variant};
use cudal1_store::StoredProgram;
use rand::Rng;
use serde::Serialize;

use crate::tally::correct_speedup;

/// Which template a prompt came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptKind {
    First,
    Contrastive,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::First => "first",
            PromptKind::Contrastive => "contrastive",
        }
    }
}

/// One request to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub round: u32,
    pub index: u32,
    pub kind: PromptKind,
    /// Program ids shown, in the prompt's order.
    pub exemplar_ids: Vec<i64>,
    pub prompt: String,
    /// The request's sampling seed, distinct per sample so that repeated prompts differ.
    pub seed: u64,
}

/// SplitMix64 of the three numbers: stable across runs and platforms, unlike `DefaultHasher`.
pub fn sample_seed(seed: u64, round: u32, index: u32) -> u64 {
    let mut z = seed ^ (u64::from(round) << 32 | u64::from(index)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    // JSON numbers above 2^53 lose precision in some servers; keep seeds within it.
    (z ^ (z >> 31)) >> 11
}

/// What a round's prompts are built from.
pub struct PlanInput<'a> {
    pub round: u32,
    pub reference: &'a str,
    pub prompts: &'a Prompts,
    /// The task's programs (any verdict): only correct ones with a finite speedup are shown.
    pub programs: &'a [&'a StoredProgram],
    pub sampler: &'a ExemplarSampler,
    pub exemplars: usize,
    pub seed: u64,
    /// Nsight Compute briefs to show (`optimize --profile`): the reference's, and programs' by id.
    pub reference_profile: Option<&'a str>,
    pub profiles: &'a HashMap<i64, String>,
}

/// The prompts for the sample slots `indices` of round `input.round`; each slot draws its own
/// exemplars.
pub fn plan_round(input: &PlanInput<'_>, indices: &[u32], rng: &mut impl Rng) -> Result<Vec<Planned>, PromptError> {
    let variants: Vec<Variant> =
        input.programs.iter().map(|p| Variant { id: p.id, code: p.code.clone(), speedup: correct_speedup(p), profile: input.profiles.get(&p.id).cloned() }).collect();
    let reference = Reference { code: input.reference, profile: input.reference_profile };
    indices
        .iter()
        .map(|&index| {
            let drawn = draw_prompt(input.prompts, reference, &variants, input.round > 1, input.sampler, input.exemplars, rng)?;
            Ok(Planned {
                round: input.round,
                index,
                kind: if drawn.contrastive { PromptKind::Contrastive } else { PromptKind::First },
                exemplar_ids: drawn.shown,
                prompt: drawn.prompt,
                seed: sample_seed(input.seed, input.round, index),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::tests::program;
    use rand::{rngs::StdRng, SeedableRng};

    const REFERENCE: &str = "class Model:\n    pass\n";

    fn plan(round: u32, programs: &[StoredProgram], indices: &[u32]) -> Vec<Planned> {
        let prompts = Prompts::builtin();
        let sampler = ExemplarSampler::new(0.25, 1.0).unwrap();
        let refs: Vec<&StoredProgram> = programs.iter().collect();
        let profiles = HashMap::new();
        let input = PlanInput { round, reference: REFERENCE, prompts: &prompts, programs: &refs, sampler: &sampler, exemplars: 2, seed: 7, reference_profile: None, profiles: &profiles };
        plan_round(&input, indices, &mut StdRng::seed_from_u64(1)).unwrap()
    }

    #[test]
    fn round_one_and_rounds_without_correct_variants_use_the_first_prompt() {
        let wrong = [program(1, "w", 1, "incorrect", None)];
        for p in plan(1, &[program(2, "f", 1, "correct", Some(2.0))], &[0, 1]).into_iter().chain(plan(2, &wrong, &[0])) {
            assert_eq!(p.kind, PromptKind::First);
            assert!(p.exemplar_ids.is_empty());
            assert!(p.prompt.contains(REFERENCE.trim_end()));
        }
    }

    #[test]
    fn later_rounds_show_correct_variants_with_their_speedups() {
        let programs = [
            program(1, "fast", 1, "correct", Some(2.5)),
            program(2, "slow", 1, "correct", Some(0.5)),
            program(3, "hack", 1, "exploit", Some(40.0)),
        ];
        let planned = plan(2, &programs, &[3, 4, 5]);
        assert_eq!(planned.iter().map(|p| p.index).collect::<Vec<_>>(), vec![3, 4, 5]);
        for p in &planned {
            assert_eq!(p.kind, PromptKind::Contrastive);
            let mut ids = p.exemplar_ids.clone();
            ids.sort_unstable();
            assert_eq!(ids, vec![1, 2], "two buckets, both shown; never the exploit");
            assert!(p.prompt.contains("speedup 2.50x (correct)"), "{}", p.prompt);
            assert!(p.prompt.contains("speedup 0.50x (correct, slower than the reference)"));
            assert!(p.prompt.contains("# fast") && !p.prompt.contains("# hack"));
        }
        let one = plan(3, &programs[..1], &[0]);
        assert_eq!(one[0].exemplar_ids, vec![1], "fewer correct variants than N: what there is");
    }

    #[test]
    fn seeds_differ_per_slot_and_repeat_per_input() {
        let a = sample_seed(7, 1, 0);
        assert_eq!(a, sample_seed(7, 1, 0));
        let all = [a, sample_seed(7, 1, 1), sample_seed(7, 2, 0), sample_seed(8, 1, 0)];
        for (i, x) in all.iter().enumerate() {
            assert!(*x < 1 << 53);
            assert!(all[i + 1..].iter().all(|y| y != x), "{all:?}");
        }
    }
}
