//! [`RunSummary`]: what a run has found, read back from the store, for the report, `best.json`
//! and `--json`.

use std::collections::HashMap;

use cudal1_search::{Language, Written};
use cudal1_store::{NewRound, StoredProgram, StoredSample};
use serde::Serialize;

use crate::lineage::{lineage, LineageNode};
use crate::stop::StopReason;
use crate::tally::{best_program, program_of, ProgramIndex};

/// The best correct program of a run, with how it was measured and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct BestProgram {
    pub program_id: i64,
    pub round: u32,
    pub speedup: f64,
    pub speedup_ci_low: Option<f64>,
    pub speedup_ci_high: Option<f64>,
    /// What its kernels are written in: the run's language, or `pytorch` (no custom kernel).
    pub written: Written,
    pub code: String,
    /// The evaluator's full record (verdict, reason, timings, environment).
    pub evaluation: serde_json::Value,
    pub lineage: Vec<LineageNode>,
}

/// One LLM sample and what became of it.
#[derive(Debug, Clone, Serialize)]
pub struct SampleLine {
    pub round: u32,
    pub index: u32,
    /// 1-based turn of the slot's trajectory (`--turns`).
    pub turn: u32,
    pub prompt_kind: String,
    pub exemplar_ids: Vec<i64>,
    pub outcome: String,
    /// Why there is no program, or the evaluator's reason for its verdict.
    pub reason: Option<String>,
    pub program_id: Option<i64>,
    pub verdict: Option<String>,
    pub speedup: Option<f64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The LLM's whole reply, for the `replies/` files (not in `--json`: it can be long).
    #[serde(skip)]
    pub reply: Option<String>,
}

impl SampleLine {
    /// Where its reply is kept in the output directory.
    pub fn reply_file(&self) -> String {
        if self.turn > 1 {
            format!("replies/round-{}-sample-{}-turn-{}.md", self.round, self.index, self.turn)
        } else {
            format!("replies/round-{}-sample-{}.md", self.round, self.index)
        }
    }
}

/// Totals over every sample of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub samples: usize,
    pub valid: usize,
    pub correct: usize,
    /// Correct samples whose program is written in the other language than the run asked for
    /// (or in both): never the run's best ([`crate::tally::best_program`]).
    pub other_language: usize,
    /// Distinct programs the run's samples hold.
    pub programs: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
}

/// Work done by this invocation (a resumed run that had nothing left to do shows zeros).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Invocation {
    pub requests: u32,
    pub evaluations: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub task: String,
    pub task_path: String,
    pub llm: String,
    /// The language the run's prompts asked for; its best is in it or plain PyTorch.
    pub language: Language,
    pub stop: StopReason,
    pub stop_text: String,
    pub rounds: Vec<NewRound>,
    pub best: Option<BestProgram>,
    pub totals: Totals,
    pub invocation: Invocation,
    pub samples: Vec<SampleLine>,
}

/// Everything but the identifying fields, computed from the run's rows.
pub struct Parts {
    pub rounds: Vec<NewRound>,
    pub best: Option<BestProgram>,
    pub totals: Totals,
    pub samples: Vec<SampleLine>,
}

pub fn parts(
    rounds: Vec<NewRound>,
    samples: &[StoredSample],
    programs: &ProgramIndex,
    language: Language,
) -> Parts {
    let by_id: HashMap<i64, &StoredProgram> = programs.values().map(|p| (p.id, p)).collect();
    let best = best_program(samples, programs, language).and_then(|p| {
        Some(BestProgram {
            program_id: p.id,
            round: p.round,
            speedup: p.speedup_median?,
            speedup_ci_low: p.speedup_ci_low,
            speedup_ci_high: p.speedup_ci_high,
            written: Written::of(&p.code),
            code: p.code.clone(),
            evaluation: p.evaluation.clone(),
            lineage: lineage(p.id, &by_id),
        })
    });
    let mut lines: Vec<SampleLine> = samples
        .iter()
        .map(|s| {
            let program = program_of(s, programs);
            SampleLine {
                round: s.sample.round,
                index: s.sample.index,
                turn: s.sample.turn,
                prompt_kind: s.sample.prompt_kind.clone(),
                exemplar_ids: s.sample.exemplar_ids.clone(),
                outcome: s.sample.outcome.clone(),
                reason: s.sample.reason.clone().or_else(|| program.map(|p| p.reason.clone())),
                program_id: program.map(|p| p.id),
                verdict: program.map(|p| p.verdict.clone()),
                speedup: program.and_then(|p| p.speedup_median),
                prompt_tokens: s.sample.prompt_tokens,
                completion_tokens: s.sample.completion_tokens,
                reply: s.sample.reply.clone(),
            }
        })
        .collect();
    // In the order of the run's slots, not of the replies' arrival (several requests are in
    // flight at once).
    lines.sort_by_key(|l| (l.round, l.index, l.turn));
    let mut distinct: Vec<i64> = lines.iter().filter_map(|l| l.program_id).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let totals = Totals {
        samples: lines.len(),
        valid: lines.iter().filter(|l| l.outcome == crate::Outcome::Program.as_str()).count(),
        correct: lines.iter().filter(|l| l.verdict.as_deref() == Some("correct")).count(),
        other_language: samples
            .iter()
            .filter_map(|s| program_of(s, programs))
            .filter(|p| p.verdict == "correct" && !language.may_show(Written::of(&p.code)))
            .count(),
        programs: distinct.len(),
        prompt_tokens: samples.iter().map(|s| s.sample.prompt_tokens).sum(),
        completion_tokens: samples.iter().map(|s| s.sample.completion_tokens).sum(),
        cost_usd: samples.iter().map(|s| s.sample.cost_usd).sum(),
    };
    Parts { rounds, best, totals, samples: lines }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::tests::{program, sample};
    use crate::tally::{index_programs, Outcome};

    #[test]
    fn best_lineage_and_sample_lines() {
        let mut fast = program(2, "fast", 2, "correct", Some(2.0));
        fast.parent_ids = vec![1];
        let programs = index_programs(vec![
            program(1, "ok", 1, "correct", Some(1.2)),
            fast,
            program(3, "bad", 2, "exploit", Some(9.0)),
        ]);
        let mut no_code = sample(1, 1, Outcome::NoCode, None);
        no_code.sample.reason = Some("no code block".into());
        let samples = vec![
            sample(1, 0, Outcome::Program, Some("ok")),
            no_code,
            sample(2, 0, Outcome::Program, Some("fast")),
            sample(2, 1, Outcome::Program, Some("bad")),
            sample(2, 2, Outcome::Program, Some("fast")),
        ];
        let p = parts(vec![], &samples, &programs, Language::Cuda);
        let best = p.best.unwrap();
        assert_eq!((best.program_id, best.speedup, best.written), (2, 2.0, Written::PyTorch));
        assert_eq!(p.totals.other_language, 0);
        assert_eq!(best.lineage.iter().map(|n| n.id).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(p.samples[1].reason.as_deref(), Some("no code block"));
        assert_eq!(p.samples[3].verdict.as_deref(), Some("exploit"));
        assert_eq!(
            (p.totals.samples, p.totals.valid, p.totals.correct, p.totals.programs),
            (5, 4, 3, 3)
        );
    }
}
