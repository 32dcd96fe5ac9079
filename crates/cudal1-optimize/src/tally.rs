//! Counting what a run has: what became of each sample, round totals, the best program. Pure
//! functions over store rows, so the report, the progress lines and the stop rules agree.

use std::collections::HashMap;

use cudal1_eval::Verdict;
use cudal1_search::{Language, Written};
use cudal1_store::{NewRound, StoredProgram, StoredSample};
use serde::Serialize;

/// What became of one LLM request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The reply held a program (evaluated, or found in the program database).
    Program,
    /// The reply held no usable program; the reason says why.
    NoCode,
    /// No reply: the request failed (timeout, connection, server error).
    LlmError,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Program => "program",
            Outcome::NoCode => "no_code",
            Outcome::LlmError => "llm_error",
        }
    }
}

/// Programs of the task, by normalised-source hash.
pub type ProgramIndex = HashMap<String, StoredProgram>;

pub fn index_programs(programs: Vec<StoredProgram>) -> ProgramIndex {
    programs.into_iter().map(|p| (p.key.code_hash.clone(), p)).collect()
}

/// A correct program's speedup, when it has a finite one.
pub fn correct_speedup(p: &StoredProgram) -> Option<f64> {
    (p.verdict == Verdict::Correct.as_str()).then_some(p.speedup_median?).filter(|s| s.is_finite())
}

/// The sample's program, if it has one that was evaluated.
pub fn program_of<'a>(s: &StoredSample, programs: &'a ProgramIndex) -> Option<&'a StoredProgram> {
    programs.get(s.sample.code_hash.as_deref()?)
}

/// The fastest correct program among the samples (the earliest recorded on a tie) that a run
/// asking for `language` counts as its own: one a prompt in that language may show (its
/// language's or plain PyTorch, [`Language::may_show`]). A Triton run whose LLM wrote a CUDA
/// program anyway does not report it as its best, nor a CUDA run a Triton one.
pub fn best_program<'a, 'b>(
    samples: impl IntoIterator<Item = &'b StoredSample>,
    programs: &'a ProgramIndex,
    language: Language,
) -> Option<&'a StoredProgram> {
    let mut best: Option<(&StoredProgram, f64)> = None;
    for p in samples.into_iter().filter_map(|s| program_of(s, programs)) {
        let Some(speedup) = correct_speedup(p) else { continue };
        let better = match best {
            None => true,
            Some((b, s)) => speedup > s || (speedup == s && p.id < b.id),
        };
        // Read what it is written in only when it would be the best (a parse).
        if better && language.may_show(Written::of(&p.code)) {
            best = Some((p, speedup));
        }
    }
    best.map(|(p, _)| p)
}

/// The totals of round `round` of a run asking for `language`, as recorded when the round
/// finishes; its best is [`best_program`]'s.
pub fn round_totals(
    run_id: &str,
    round: u32,
    samples: &[StoredSample],
    programs: &ProgramIndex,
    wall_ms: f64,
    language: Language,
) -> NewRound {
    let this: Vec<&StoredSample> = samples.iter().filter(|s| s.sample.round == round).collect();
    let count = |pred: &dyn Fn(&StoredSample) -> bool| {
        u32::try_from(this.iter().filter(|s| pred(s)).count()).unwrap_or(u32::MAX)
    };
    let valid = count(&|s| s.sample.outcome == Outcome::Program.as_str());
    let correct = count(&|s| program_of(s, programs).and_then(correct_speedup).is_some());
    let new_programs = programs.values().filter(|p| p.run_id == run_id && p.round == round).count();
    let best = best_program(samples.iter().filter(|s| s.sample.round <= round), programs, language);
    NewRound {
        run_id: run_id.to_owned(),
        round,
        samples: u32::try_from(this.len()).unwrap_or(u32::MAX),
        valid,
        correct,
        new_programs: u32::try_from(new_programs).unwrap_or(u32::MAX),
        best_program_id: best.map(|p| p.id),
        best_speedup: best.and_then(correct_speedup),
        prompt_tokens: this.iter().map(|s| s.sample.prompt_tokens).sum(),
        completion_tokens: this.iter().map(|s| s.sample.completion_tokens).sum(),
        cost_usd: this.iter().map(|s| s.sample.cost_usd).sum(),
        wall_ms,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cudal1_store::{NewSample, ProgramKey};

    pub(crate) fn program(
        id: i64,
        hash: &str,
        round: u32,
        verdict: &str,
        speedup: Option<f64>,
    ) -> StoredProgram {
        StoredProgram {
            id,
            created_at: String::new(),
            key: ProgramKey {
                task_hash: "t".into(),
                code_hash: hash.into(),
                settings_hash: "s".into(),
            },
            code: format!("class ModelNew: pass  # {hash}\n"),
            run_id: "run".into(),
            round,
            trajectory: None,
            turn: 1,
            parent_ids: vec![],
            verdict: verdict.into(),
            reason: String::new(),
            reason_class: String::new(),
            speedup_median: speedup,
            speedup_ci_low: speedup,
            speedup_ci_high: speedup,
            evaluation: serde_json::Value::Null,
            own_share: None,
        }
    }

    pub(crate) fn sample(
        round: u32,
        index: u32,
        outcome: Outcome,
        hash: Option<&str>,
    ) -> StoredSample {
        StoredSample {
            id: i64::from(round * 100 + index),
            created_at: String::new(),
            sample: NewSample {
                run_id: "run".into(),
                round,
                index,
                turn: 1,
                prompt_kind: "first".into(),
                exemplar_ids: vec![],
                model: None,
                reply: None,
                finish_reason: None,
                prompt_tokens: 10,
                completion_tokens: 5,
                cost_usd: 0.01,
                latency_ms: None,
                outcome: outcome.as_str().into(),
                reason: None,
                code_hash: hash.map(str::to_owned),
            },
        }
    }

    #[test]
    fn totals_count_valid_correct_new_and_the_best_so_far() {
        let programs = index_programs(vec![
            program(1, "fast", 1, "correct", Some(3.0)),
            program(2, "wrong", 1, "incorrect", None),
            program(3, "slow", 2, "correct", Some(0.5)),
            program(4, "old", 1, "correct", Some(9.0)),
        ]);
        let mut old = programs["old"].clone();
        old.run_id = "another run".into();
        let programs: ProgramIndex = programs
            .into_iter()
            .map(|(h, p)| if h == "old" { (h, old.clone()) } else { (h, p) })
            .collect();
        let samples = vec![
            sample(1, 0, Outcome::Program, Some("fast")),
            sample(1, 1, Outcome::NoCode, None),
            sample(1, 2, Outcome::Program, Some("wrong")),
            sample(2, 0, Outcome::Program, Some("slow")),
            sample(2, 1, Outcome::Program, Some("fast")),
            sample(2, 2, Outcome::LlmError, None),
            // Evaluation still pending: valid, not correct.
            sample(2, 3, Outcome::Program, Some("pending")),
        ];
        let r1 = round_totals("run", 1, &samples, &programs, 5.0, Language::Cuda);
        assert_eq!((r1.samples, r1.valid, r1.correct, r1.new_programs), (3, 2, 1, 2));
        assert_eq!((r1.best_program_id, r1.best_speedup), (Some(1), Some(3.0)));
        assert_eq!((r1.prompt_tokens, r1.completion_tokens), (30, 15));
        let r2 = round_totals("run", 2, &samples, &programs, 5.0, Language::Cuda);
        assert_eq!((r2.samples, r2.valid, r2.correct, r2.new_programs), (4, 3, 2, 1));
        // Program 4 is faster but this run never sampled it.
        assert_eq!((r2.best_program_id, r2.best_speedup), (Some(1), Some(3.0)));
    }

    #[test]
    fn the_best_is_written_in_the_runs_language_or_plain_pytorch() {
        let mut cuda = program(1, "cuda", 1, "correct", Some(5.0));
        cuda.code = "from torch.utils.cpp_extension import load_inline\next = load_inline(name='e', cpp_sources='')\nclass ModelNew: pass\n".into();
        let mut triton = program(2, "triton", 1, "correct", Some(3.0));
        triton.code =
            "import triton\n@triton.jit\ndef k(x):\n    pass\nclass ModelNew: pass\n".into();
        let plain = program(3, "plain", 1, "correct", Some(1.5));
        let programs = index_programs(vec![cuda, triton, plain]);
        let all = vec![
            sample(1, 0, Outcome::Program, Some("cuda")),
            sample(1, 1, Outcome::Program, Some("triton")),
            sample(1, 2, Outcome::Program, Some("plain")),
        ];
        let best = |samples: &[StoredSample], language| {
            best_program(samples, &programs, language).map(|p| p.id)
        };
        assert_eq!(best(&all, Language::Cuda), Some(1));
        assert_eq!(best(&all, Language::Triton), Some(2));
        // Without a program of its own language, plain PyTorch; never the other language.
        assert_eq!(best(&[all[0].clone(), all[2].clone()], Language::Triton), Some(3));
        assert_eq!(best(&all[..1], Language::Triton), None);
        let r = round_totals("run", 1, &all[..2], &programs, 5.0, Language::Triton);
        assert_eq!((r.correct, r.best_program_id, r.best_speedup), (2, Some(2), Some(3.0)));
    }

    #[test]
    fn no_correct_program_means_no_best() {
        let programs = index_programs(vec![
            program(1, "inf", 1, "correct", Some(f64::INFINITY)),
            program(2, "x", 1, "exploit", Some(50.0)),
        ]);
        let samples = vec![
            sample(1, 0, Outcome::Program, Some("inf")),
            sample(1, 1, Outcome::Program, Some("x")),
        ];
        assert!(best_program(&samples, &programs, Language::Cuda).is_none());
    }
}
