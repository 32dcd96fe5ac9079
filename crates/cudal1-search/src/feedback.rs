//! What the previous turn of a trajectory got, as the refinement prompt shows it: the program,
//! its verdict, and the evidence that helps fix or speed it (the compiler's error lines, the
//! mismatch, the speedup with its interval, the findings). `optimize --turns` and
//! `train rl --turns` build their [`Attempt`]s here.

use serde_json::Value;

use crate::Attempt;

/// Evidence lines a prompt shows at most; the rest is counted.
const MAX_LINES: usize = 12;
/// Characters of one evidence line at most.
const MAX_LINE: usize = 300;

/// What the evaluator said about a program, as the store keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Judged<'a> {
    /// `correct`, `incorrect`, `compile_error`, `runtime_error`, `timeout` or `exploit`.
    pub verdict: &'a str,
    pub reason: &'a str,
    pub speedup_median: Option<f64>,
    pub speedup_ci_low: Option<f64>,
    pub speedup_ci_high: Option<f64>,
    /// The evaluator's whole record (`ref_ms`, `candidate_ms`, `measurements.checks`,
    /// `measurements.findings` are read; anything else is ignored).
    pub evaluation: &'a Value,
}

impl Attempt {
    /// Turn `turn`'s program `code`, judged `j`, with its Nsight Compute brief when there is one.
    pub fn judged(turn: u32, code: String, j: &Judged<'_>, profile: Option<&str>) -> Attempt {
        let mut reason = j.reason.lines().filter(|l| !l.trim().is_empty());
        let first = reason.next().unwrap_or("").trim().to_owned();
        let rest: Vec<&str> = reason.collect();
        let (summary, details) = match j.verdict {
            "correct" => (speed_sentence(j), Vec::new()),
            "compile_error" => (first, error_lines(&rest)),
            "incorrect" => {
                let mut d = capped(&rest);
                d.extend(checks_line(j.evaluation));
                (first, d)
            }
            "exploit" => {
                let mut d = findings(j.evaluation);
                d.extend(capped(&rest));
                d.truncate(MAX_LINES);
                (first, d)
            }
            _ => (first, capped(&rest)),
        };
        Attempt {
            turn,
            code: Some(code),
            verdict: j.verdict.to_owned(),
            correct: j.verdict == "correct",
            summary,
            details,
            profile: profile.map(str::to_owned),
        }
    }

    /// Turn `turn`'s reply, which held no program, and why.
    pub fn without_program(turn: u32, why: Option<&str>) -> Attempt {
        Attempt {
            turn,
            code: None,
            verdict: "no program".to_owned(),
            correct: false,
            summary: why
                .map_or_else(|| "the reply held no ```python block".to_owned(), str::to_owned),
            details: Vec::new(),
            profile: None,
        }
    }
}

/// "speedup 1.23x (95% CI 1.10x to 1.35x): the reference takes 2.000 ms per call, this program
/// 1.626 ms."
fn speed_sentence(j: &Judged<'_>) -> String {
    let Some(median) = j.speedup_median else { return "correct, not timed".to_owned() };
    let mut s = format!("speedup {median:.2}x");
    if let (Some(lo), Some(hi)) = (j.speedup_ci_low, j.speedup_ci_high) {
        s.push_str(&format!(" (95% CI {lo:.2}x to {hi:.2}x)"));
    }
    if median < 1.0 {
        s.push_str(", slower than the reference");
    }
    let ms = |k: &str| j.evaluation.get(k).and_then(Value::as_f64);
    if let (Some(r), Some(c)) = (ms("ref_ms"), ms("candidate_ms")) {
        s.push_str(&format!(": the reference takes {r:.3} ms per call, this program {c:.3} ms"));
    }
    s.push('.');
    s
}

/// The compiler's error lines, each once; the last lines when none says `error`.
fn error_lines(lines: &[&str]) -> Vec<String> {
    let mut errors: Vec<&str> = Vec::new();
    for l in lines.iter().copied().filter(|l| l.to_ascii_lowercase().contains("error")) {
        if !errors.contains(&l) {
            errors.push(l);
        }
    }
    if errors.is_empty() {
        return capped(&lines[lines.len().saturating_sub(MAX_LINES)..]);
    }
    capped(&errors)
}

/// At most [`MAX_LINES`] lines of at most [`MAX_LINE`] characters, and a count of the rest.
fn capped(lines: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = lines
        .iter()
        .take(MAX_LINES)
        .map(|l| {
            let l = l.trim_end();
            if l.chars().count() > MAX_LINE {
                format!("{}...", l.chars().take(MAX_LINE).collect::<String>())
            } else {
                l.to_owned()
            }
        })
        .collect();
    if lines.len() > MAX_LINES {
        out.push(format!("... ({} more lines)", lines.len() - MAX_LINES));
    }
    out
}

/// "2 of 5 checked calls differed from the reference's outputs."
fn checks_line(evaluation: &Value) -> Option<String> {
    let checks = evaluation.pointer("/measurements/checks")?.as_array()?;
    let failed =
        checks.iter().filter(|c| c.get("passed").and_then(Value::as_bool) == Some(false)).count();
    (failed > 0).then(|| {
        format!("{failed} of {} checked calls differed from the reference's outputs.", checks.len())
    })
}

/// The runner's findings, "kind: detail" each.
fn findings(evaluation: &Value) -> Vec<String> {
    let Some(list) = evaluation.pointer("/measurements/findings").and_then(Value::as_array) else {
        return Vec::new();
    };
    let lines: Vec<String> = list
        .iter()
        .filter_map(|f| {
            let kind = f.get("kind")?.as_str()?;
            let detail = f.get("detail").and_then(Value::as_str).unwrap_or("");
            Some(if detail.is_empty() {
                format!("finding: {kind}")
            } else {
                format!("finding: {kind}: {detail}")
            })
        })
        .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    capped(&refs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn judged(
        verdict: &'static str,
        reason: &'static str,
        speedup: Option<f64>,
        evaluation: &'static Value,
    ) -> Judged<'static> {
        Judged {
            verdict,
            reason,
            speedup_median: speedup,
            speedup_ci_low: speedup,
            speedup_ci_high: speedup,
            evaluation,
        }
    }

    fn leak(v: Value) -> &'static Value {
        Box::leak(Box::new(v))
    }

    const CODE: &str = "class ModelNew: x = 1\n";

    #[test]
    fn a_compile_error_shows_its_error_lines_once() {
        let reason = "the extension does not build:\nk.cu(3): error: identifier \"y\" is undefined\nninja: build stopped\nk.cu(3): error: identifier \"y\" is undefined\n1 error detected";
        let a = Attempt::judged(
            1,
            CODE.into(),
            &judged("compile_error", reason, None, &Value::Null),
            None,
        );
        assert_eq!((a.turn, a.verdict.as_str(), a.correct), (1, "compile_error", false));
        assert_eq!(a.code.as_deref(), Some(CODE));
        assert_eq!(a.summary, "the extension does not build:");
        assert_eq!(
            a.details,
            ["k.cu(3): error: identifier \"y\" is undefined", "1 error detected"]
        );
        // Without an error line, the last lines.
        let a = Attempt::judged(
            1,
            CODE.into(),
            &judged("compile_error", "does not parse\nline a\nline b", None, &Value::Null),
            None,
        );
        assert_eq!(a.details, ["line a", "line b"]);
    }

    #[test]
    fn a_wrong_output_shows_the_mismatch_and_the_failed_checks() {
        let evaluation = leak(
            json!({"measurements": {"checks": [{"passed": true}, {"passed": false}, {"passed": false}]}}),
        );
        let reason = "output 0 differs at 12 of 64 elements (max abs error 3.0e0)";
        let a =
            Attempt::judged(2, CODE.into(), &judged("incorrect", reason, None, evaluation), None);
        assert_eq!((a.turn, a.summary.as_str()), (2, reason));
        assert_eq!(a.details, ["2 of 3 checked calls differed from the reference's outputs."]);
    }

    #[test]
    fn a_correct_program_shows_its_speedup_with_the_interval_and_its_profile() {
        let evaluation = leak(json!({"ref_ms": 2.0, "candidate_ms": 1.62}));
        let j = Judged {
            speedup_ci_low: Some(1.1),
            speedup_ci_high: Some(1.35),
            ..judged("correct", "ok", Some(1.234), evaluation)
        };
        let a = Attempt::judged(1, CODE.into(), &j, Some("2 kernel launches"));
        assert!(a.correct);
        assert_eq!(a.summary, "speedup 1.23x (95% CI 1.10x to 1.35x): the reference takes 2.000 ms per call, this program 1.620 ms.");
        assert_eq!(a.profile.as_deref(), Some("2 kernel launches"));
        let slow = Attempt::judged(
            1,
            CODE.into(),
            &judged("correct", "ok", Some(0.5), &Value::Null),
            None,
        );
        assert_eq!(
            slow.summary,
            "speedup 0.50x (95% CI 0.50x to 0.50x), slower than the reference."
        );
    }

    #[test]
    fn an_exploit_shows_its_findings_and_long_reasons_are_capped() {
        let evaluation = leak(
            json!({"measurements": {"findings": [{"kind": "side_stream", "detail": "work after return"}, {"kind": "thread"}]}}),
        );
        let a = Attempt::judged(
            1,
            CODE.into(),
            &judged("exploit", "left work on a side stream", Some(9.0), evaluation),
            None,
        );
        assert_eq!(a.summary, "left work on a side stream");
        assert_eq!(a.details, ["finding: side_stream: work after return", "finding: thread"]);

        let long: String = std::iter::once("raised an exception".to_owned())
            .chain((0..20).map(|i| format!("frame {i} {}", "x".repeat(400))))
            .collect::<Vec<_>>()
            .join("\n");
        let long: &'static str = Box::leak(long.into_boxed_str());
        let a = Attempt::judged(
            1,
            CODE.into(),
            &judged("runtime_error", long, None, &Value::Null),
            None,
        );
        assert_eq!(a.details.len(), MAX_LINES + 1);
        assert!(a.details[0].ends_with("...") && a.details[0].chars().count() == MAX_LINE + 3);
        assert_eq!(a.details[MAX_LINES], "... (8 more lines)");
    }

    #[test]
    fn a_reply_without_a_program_says_why() {
        let a =
            Attempt::without_program(1, Some("no code block: the reply has no ```python fence"));
        assert_eq!((a.code, a.verdict.as_str(), a.correct), (None, "no program", false));
        assert_eq!(a.summary, "no code block: the reply has no ```python fence");
        assert_eq!(Attempt::without_program(2, None).summary, "the reply held no ```python block");
    }
}
