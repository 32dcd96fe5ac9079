//! What the previous turn of a trajectory got, from the store's rows, as the refinement prompt
//! shows it (the evidence is chosen by [`cudal1_search::Attempt::judged`]).

use cudal1_search::{extract_program, Attempt, Judged};
use cudal1_store::{NewSample, StoredProgram};

/// The attempt of `sample` (turn `sample.turn`), judged as `program` (`None`: the reply held no
/// program), with its Nsight Compute brief when there is one.
pub fn attempt(
    sample: &NewSample,
    program: Option<&StoredProgram>,
    profile: Option<&str>,
) -> Attempt {
    let Some(p) = program else {
        return Attempt::without_program(sample.turn, sample.reason.as_deref());
    };
    // The sample's own text (the stored program may be an earlier, differently laid out copy).
    let code = sample
        .reply
        .as_deref()
        .and_then(|r| extract_program(r).ok())
        .unwrap_or_else(|| p.code.clone());
    Attempt::judged(sample.turn, code, &judged(p), profile)
}

/// A stored program's verdict as [`Attempt::judged`] reads it; `cudal1-train`'s refinement turns
/// use it too.
pub fn judged(p: &StoredProgram) -> Judged<'_> {
    Judged {
        verdict: &p.verdict,
        reason: &p.reason,
        speedup_median: p.speedup_median,
        speedup_ci_low: p.speedup_ci_low,
        speedup_ci_high: p.speedup_ci_high,
        evaluation: &p.evaluation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tally::tests::{program, sample};
    use crate::tally::Outcome;

    #[test]
    fn the_samples_own_code_and_turn_with_the_stored_verdict() {
        let mut s = sample(1, 0, Outcome::Program, Some("h")).sample;
        s.turn = 2;
        s.reply = Some("Plan.\n```python\nclass ModelNew: x = 1\n```\n".to_owned());
        let p = StoredProgram {
            reason: "output 0 differs".to_owned(),
            ..program(1, "h", 1, "incorrect", None)
        };
        let a = attempt(&s, Some(&p), None);
        assert_eq!(
            (a.turn, a.code.as_deref(), a.verdict.as_str(), a.summary.as_str()),
            (2, Some("class ModelNew: x = 1\n"), "incorrect", "output 0 differs")
        );
        s.reply = None;
        assert_eq!(
            attempt(&s, Some(&p), None).code.as_deref(),
            Some(p.code.as_str()),
            "the stored code without a reply"
        );
        s.reason = Some("no code block".to_owned());
        let none = attempt(&s, None, None);
        assert_eq!((none.code, none.summary.as_str()), (None, "no code block"));
    }
}
