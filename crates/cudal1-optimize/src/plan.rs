//! The prompts of a round: round 1 shows the reference alone; later rounds show it with up to N
//! earlier correct variants of the task, drawn by CUDA-L1's bucketed softmax. A later turn of a
//! trajectory (`--turns`) shows what its first turn showed and the previous turn's program with
//! its verdict.

use std::collections::HashMap;

use cudal1_search::{
    draw_prompt, Exemplar, ExemplarSampler, PromptError, Prompts, Reference, Variant,
};
use cudal1_store::StoredProgram;
use rand::Rng;
use serde::Serialize;

use crate::feedback;
use crate::tally::correct_speedup;
use crate::turns::NextTurn;

/// Which template a prompt came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptKind {
    First,
    Contrastive,
    /// A later turn of a trajectory: the previous turn's program and its verdict.
    Refine,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::First => "first",
            PromptKind::Contrastive => "contrastive",
            PromptKind::Refine => "refine",
        }
    }
}

/// One request to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub round: u32,
    pub index: u32,
    /// 1-based turn of the slot's trajectory.
    pub turn: u32,
    pub kind: PromptKind,
    /// Program ids shown, in the prompt's order (a later turn: its first turn's exemplars, then
    /// the previous turn's program).
    pub exemplar_ids: Vec<i64>,
    pub prompt: String,
    /// The request's sampling seed, distinct per sample so that repeated prompts differ.
    pub seed: u64,
}

/// SplitMix64 of the three numbers: stable across runs and platforms, unlike `DefaultHasher`.
pub fn sample_seed(seed: u64, round: u32, index: u32) -> u64 {
    let mut z =
        seed ^ (u64::from(round) << 32 | u64::from(index)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
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
pub fn plan_round(
    input: &PlanInput<'_>,
    indices: &[u32],
    rng: &mut impl Rng,
) -> Result<Vec<Planned>, PromptError> {
    let variants: Vec<Variant> = input
        .programs
        .iter()
        .map(|p| Variant {
            id: p.id,
            code: p.code.clone(),
            speedup: correct_speedup(p),
            profile: input.profiles.get(&p.id).cloned(),
        })
        .collect();
    let reference = Reference { code: input.reference, profile: input.reference_profile };
    indices
        .iter()
        .map(|&index| {
            let drawn = draw_prompt(
                input.prompts,
                reference,
                &variants,
                input.round > 1,
                input.sampler,
                input.exemplars,
                rng,
            )?;
            Ok(Planned {
                round: input.round,
                index,
                turn: 1,
                kind: if drawn.contrastive { PromptKind::Contrastive } else { PromptKind::First },
                exemplar_ids: drawn.shown,
                prompt: drawn.prompt,
                seed: sample_seed(input.seed, input.round, index),
            })
        })
        .collect()
}

/// The prompts of the trajectories' next turns: each shows the exemplars its first turn showed
/// (those still in the database), then the previous turn's program with its verdict and reason.
pub fn plan_turns(input: &PlanInput<'_>, next: &[NextTurn]) -> Result<Vec<Planned>, PromptError> {
    let reference = Reference { code: input.reference, profile: input.reference_profile };
    next.iter()
        .map(|n| {
            let shown: Vec<(i64, Exemplar)> = n
                .exemplar_ids
                .iter()
                .filter_map(|id| {
                    let p = input.programs.iter().find(|p| p.id == *id)?;
                    let exemplar = Exemplar {
                        profile: input.profiles.get(id).cloned(),
                        ..Exemplar::measured(p.code.clone(), correct_speedup(p)?)
                    };
                    Some((*id, exemplar))
                })
                .collect();
            let previous = n.previous_program.as_ref();
            let profile = previous
                .filter(|p| correct_speedup(p).is_some())
                .and_then(|p| input.profiles.get(&p.id))
                .map(String::as_str);
            let attempt = feedback::attempt(&n.previous.sample, previous, profile);
            let exemplars: Vec<Exemplar> = shown.iter().map(|(_, e)| e.clone()).collect();
            let mut ids: Vec<i64> = shown.iter().map(|(id, _)| *id).collect();
            ids.extend(previous.map(|p| p.id));
            Ok(Planned {
                round: input.round,
                index: n.index,
                turn: n.turn,
                kind: PromptKind::Refine,
                exemplar_ids: ids,
                prompt: input.prompts.refine(reference, &exemplars, &attempt)?,
                seed: turn_seed(input.seed, input.round, n.index, n.turn),
            })
        })
        .collect()
}

/// The sampling seed of turn `turn` of a slot; turn 1's is [`sample_seed`]'s.
pub fn turn_seed(seed: u64, round: u32, index: u32, turn: u32) -> u64 {
    sample_seed(seed ^ u64::from(turn - 1).wrapping_mul(0xd6e8_feb8_6659_fd93), round, index)
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
        let input = PlanInput {
            round,
            reference: REFERENCE,
            prompts: &prompts,
            programs: &refs,
            sampler: &sampler,
            exemplars: 2,
            seed: 7,
            reference_profile: None,
            profiles: &profiles,
        };
        plan_round(&input, indices, &mut StdRng::seed_from_u64(1)).unwrap()
    }

    #[test]
    fn round_one_and_rounds_without_correct_variants_use_the_first_prompt() {
        let wrong = [program(1, "w", 1, "incorrect", None)];
        for p in plan(1, &[program(2, "f", 1, "correct", Some(2.0))], &[0, 1])
            .into_iter()
            .chain(plan(2, &wrong, &[0]))
        {
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
        assert_eq!(turn_seed(7, 1, 0, 1), a, "turn 1 keeps the seed it had before turns");
        assert_ne!(turn_seed(7, 1, 0, 2), a);
        assert_ne!(turn_seed(7, 1, 0, 2), turn_seed(7, 1, 0, 3));
    }

    #[test]
    fn a_later_turn_shows_the_first_turns_exemplars_and_the_previous_program_with_its_verdict() {
        let mut wrong = program(5, "wrong", 2, "incorrect", None);
        wrong.reason = "output 0 differs at 3 of 8 elements".into();
        let programs = [
            program(1, "fast", 1, "correct", Some(2.5)),
            program(2, "gone", 1, "exploit", Some(9.0)),
            wrong.clone(),
        ];
        let refs: Vec<&StoredProgram> = programs.iter().collect();
        let prompts = Prompts::builtin();
        let sampler = ExemplarSampler::new(0.25, 1.0).unwrap();
        let profiles = HashMap::new();
        let input = PlanInput {
            round: 2,
            reference: REFERENCE,
            prompts: &prompts,
            programs: &refs,
            sampler: &sampler,
            exemplars: 2,
            seed: 7,
            reference_profile: None,
            profiles: &profiles,
        };
        let mut previous =
            crate::tally::tests::sample(2, 3, crate::Outcome::Program, Some("wrong"));
        previous.sample.reply = Some("```python\nclass ModelNew: wrong = 1\n```".into());
        let next = NextTurn {
            index: 3,
            turn: 2,
            exemplar_ids: vec![1, 2],
            previous,
            previous_program: Some(wrong),
        };
        let planned = plan_turns(&input, &[next]).unwrap();
        let p = &planned[0];
        assert_eq!((p.round, p.index, p.turn, p.kind), (2, 3, 2, PromptKind::Refine));
        assert_eq!(p.exemplar_ids, vec![1, 5], "the exploit is not shown; the previous program is");
        assert_eq!(p.seed, turn_seed(7, 2, 3, 2));
        assert!(
            p.prompt.contains("speedup 2.50x (correct)") && p.prompt.contains("# fast"),
            "{}",
            p.prompt
        );
        assert!(
            p.prompt.contains(
                "## Your previous attempt (turn 1)\n\n```python\nclass ModelNew: wrong = 1\n```"
            ),
            "{}",
            p.prompt
        );
        assert!(
            p.prompt.contains(
                "verdict on your previous attempt: incorrect. output 0 differs at 3 of 8 elements"
            ),
            "{}",
            p.prompt
        );
    }
}
