//! What a run leaves in its output directory: `best.py` (the best correct program),
//! `best.json` (its evaluation and lineage, or, with no correct program yet, what each program
//! got), `report.md` (rounds, the lineage, every sample) and `replies/` (every LLM reply, one
//! file each, linked from the report).
//!
//! A CUDA run writes them into the directory it is given (`--out`), as before languages existed;
//! a run in another language into a folder of that language's name inside it
//! ([`language_dir`]: `--out/triton/`), so that a Triton run given a CUDA run's `--out` keeps
//! both runs' `best.py` and reports side by side instead of overwriting the CUDA run's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::summary::RunSummary;
use crate::OptimizeError;
use cudal1_search::Language;

/// Where a run asking for `language` writes its outputs when given `out`: `out` itself for CUDA
/// (unchanged from before languages existed), `out/<language>` (`out/triton`) otherwise.
#[must_use]
pub fn language_dir(out: &Path, language: Language) -> PathBuf {
    match language {
        Language::Cuda => out.to_owned(),
        other => out.join(other.as_str()),
    }
}

/// The files written; `best` (`best.py`) is `None` when the run has no correct program.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputFiles {
    /// The directory they are in ([`language_dir`]).
    pub dir: PathBuf,
    pub best: Option<PathBuf>,
    pub record: PathBuf,
    pub report: PathBuf,
    pub replies: PathBuf,
}

/// Writes the outputs into the run's [`language_dir`] of `out` (created if needed). Without a
/// correct program, a `best.py` left there by an earlier invocation is removed, so the directory
/// never shows a best program the report does not; `best.json` then says what each program got.
pub fn write_outputs(out: &Path, s: &RunSummary) -> Result<OutputFiles, OptimizeError> {
    let dir = &language_dir(out, s.language);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| OptimizeError::Output { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let (py, js, md, replies) =
        (dir.join("best.py"), dir.join("best.json"), dir.join("report.md"), dir.join("replies"));
    let record = match &s.best {
        Some(b) => {
            std::fs::write(&py, &b.code).map_err(io(&py))?;
            json!({
                "run_id": s.run_id,
                "task": s.task,
                "task_path": s.task_path,
                "program_id": b.program_id,
                "round": b.round,
                "speedup": {"median": b.speedup, "ci_low": b.speedup_ci_low, "ci_high": b.speedup_ci_high},
                "evaluation": b.evaluation,
                "lineage": b.lineage,
            })
        }
        None => {
            match std::fs::remove_file(&py) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&py)(e)),
                _ => {}
            }
            let mut seen = Vec::new();
            let programs: Vec<serde_json::Value> = s
                .samples
                .iter()
                .filter(|l| l.program_id.is_some_and(|id| !seen.contains(&id) && { seen.push(id); true }))
                .map(|l| json!({"program_id": l.program_id, "round": l.round, "turn": l.turn, "verdict": l.verdict, "reason": l.reason, "reply": l.reply_file()}))
                .collect();
            json!({
                "run_id": s.run_id,
                "task": s.task,
                "task_path": s.task_path,
                "program_id": null,
                "round": null,
                "speedup": null,
                "evaluation": null,
                "lineage": [],
                "note": format!("no correct program yet ({}): `programs` says what each got, `replies/` holds what the LLM wrote", s.stop_text),
                "programs": programs,
            })
        }
    };
    let text = serde_json::to_string_pretty(&record).expect("JSON values serialise");
    std::fs::write(&js, text + "\n").map_err(io(&js))?;
    std::fs::create_dir_all(&replies).map_err(io(&replies))?;
    for l in &s.samples {
        let path = dir.join(l.reply_file());
        let body = match &l.reply {
            Some(reply) => reply.clone(),
            None => {
                format!("(no reply: {})\n", l.reason.as_deref().unwrap_or("the request failed"))
            }
        };
        std::fs::write(&path, body).map_err(io(&path))?;
    }
    std::fs::write(&md, render_report(s)).map_err(io(&md))?;
    Ok(OutputFiles {
        dir: dir.clone(),
        best: s.best.as_ref().map(|_| py),
        record: js,
        report: md,
        replies,
    })
}

fn speedup(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}x"))
}

/// The report as Markdown.
pub fn render_report(s: &RunSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# cudal1 optimize: {}\n", s.task);
    let _ = writeln!(out, "- task: `{}`", s.task_path);
    let _ = writeln!(out, "- run: `{}`, LLM: {}", s.run_id, s.llm);
    let asked = match s.language {
        cudal1_search::Language::Cuda => "CUDA",
        cudal1_search::Language::Triton => "Triton",
    };
    let _ = writeln!(
        out,
        "- language: the prompts asked for {asked} kernels (`--language {}`)",
        s.language
    );
    let _ = writeln!(out, "- stopped: {}", s.stop_text);
    let t = &s.totals;
    let _ = writeln!(
        out,
        "- samples: {} ({} with a program, {} correct; {} distinct programs), tokens: {} prompt + {} completion, cost ${:.4}",
        t.samples, t.valid, t.correct, t.programs, t.prompt_tokens, t.completion_tokens, t.cost_usd
    );
    match &s.best {
        Some(b) => {
            let ci = match (b.speedup_ci_low, b.speedup_ci_high) {
                (Some(lo), Some(hi)) => format!(" (95% CI {lo:.2}x to {hi:.2}x)"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "- best: program #{} from round {}, speedup {:.2}x{ci}, {}, in `best.py`",
                b.program_id,
                b.round,
                b.speedup,
                b.written.describe()
            );
        }
        None => {
            let _ = writeln!(out, "- best: no correct program yet, so there is no `best.py` (`best.json` says what each program got)");
        }
    }
    if t.other_language > 0 {
        let _ = writeln!(
            out,
            "- {} correct sample(s) hold programs with kernels of another language than {asked}: listed below, never the best",
            t.other_language
        );
    }

    let _ = writeln!(out, "\n## Rounds\n");
    let _ = writeln!(out, "| round | samples | valid | correct | new programs | best speedup so far | tokens | cost |");
    let _ = writeln!(out, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &s.rounds {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | ${:.4} |",
            r.round,
            r.samples,
            r.valid,
            r.correct,
            r.new_programs,
            speedup(r.best_speedup),
            r.prompt_tokens + r.completion_tokens,
            r.cost_usd
        );
    }
    if s.rounds.is_empty() {
        let _ = writeln!(out, "\nNo round has finished yet.");
    }

    if let Some(b) = &s.best {
        let _ = writeln!(out, "\n## Lineage of the best\n");
        let _ = writeln!(
            out,
            "Each program lists the exemplars its prompt showed, indented below it.\n"
        );
        for n in &b.lineage {
            let origin = if n.parents.is_empty() {
                "written from the reference alone".to_owned()
            } else {
                let ids: Vec<String> = n.parents.iter().map(|p| format!("#{p}")).collect();
                format!("shown {}", ids.join(", "))
            };
            let _ = writeln!(
                out,
                "{}- #{}: round {} of run `{}`, {} {}, {origin}",
                "  ".repeat(n.depth as usize),
                n.id,
                n.round,
                n.run_id,
                n.verdict,
                speedup(n.speedup)
            );
        }
    }

    if !s.samples.is_empty() {
        let _ = writeln!(out, "\n## Samples\n");
        let _ = writeln!(out, "Every LLM reply is in `replies/`, linked here.\n");
        let _ = writeln!(out, "| round | sample | outcome | verdict | speedup | reason | reply |");
        let _ = writeln!(out, "| ---: | ---: | --- | --- | ---: | --- | --- |");
        for l in &s.samples {
            let pending = if l.outcome == crate::Outcome::Program.as_str() {
                "evaluation pending"
            } else {
                ""
            };
            let reason = l
                .reason
                .as_deref()
                .unwrap_or(pending)
                .lines()
                .next()
                .unwrap_or("")
                .replace('|', "\\|");
            let verdict = match l.program_id {
                Some(id) => format!("#{id} {}", l.verdict.as_deref().unwrap_or("")),
                None => "-".to_owned(),
            };
            let file = l.reply_file();
            let slot = if l.turn > 1 {
                format!("{} (turn {})", l.index, l.turn)
            } else {
                l.index.to_string()
            };
            let _ = writeln!(
                out,
                "| {} | {slot} | {} | {verdict} | {} | {reason} | [{}]({file}) |",
                l.round,
                l.outcome,
                speedup(l.speedup),
                file.trim_start_matches("replies/")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lineage::LineageNode;
    use crate::stop::StopReason;
    use crate::summary::{BestProgram, Invocation, SampleLine, Totals};
    use cudal1_store::NewRound;

    fn summary(best: bool) -> RunSummary {
        let round = |n: u32, best: Option<f64>| NewRound {
            run_id: "r1".into(),
            round: n,
            samples: 3,
            valid: 2,
            correct: 1,
            new_programs: 2,
            best_program_id: best.map(|_| 5),
            best_speedup: best,
            prompt_tokens: 100,
            completion_tokens: 50,
            cost_usd: 0.0,
            wall_ms: 10.0,
        };
        let node = |id, depth, parents: Vec<i64>| LineageNode {
            id,
            depth,
            round: 2 - depth,
            run_id: "r1".into(),
            verdict: "correct".into(),
            speedup: Some(3.0 - f64::from(depth)),
            parents,
        };
        RunSummary {
            run_id: "r1".into(),
            task: "level1/1_X".into(),
            task_path: "/t/level1/1_X.py".into(),
            llm: "test llm".into(),
            language: cudal1_search::Language::Cuda,
            stop: StopReason::Rounds { rounds: 2 },
            stop_text: "finished all 2 round(s)".into(),
            rounds: vec![round(1, None), round(2, best.then_some(3.0))],
            best: best.then(|| BestProgram {
                program_id: 5,
                round: 2,
                speedup: 3.0,
                speedup_ci_low: Some(2.8),
                speedup_ci_high: Some(3.3),
                written: cudal1_search::Written::Cuda,
                code: "class ModelNew: pass\n".into(),
                evaluation: json!({"verdict": "correct"}),
                lineage: vec![node(5, 0, vec![2]), node(2, 1, vec![])],
            }),
            totals: Totals {
                samples: 6,
                valid: 4,
                correct: 1,
                other_language: 0,
                programs: 4,
                prompt_tokens: 200,
                completion_tokens: 100,
                cost_usd: 0.0,
            },
            invocation: Invocation::default(),
            samples: vec![SampleLine {
                round: 1,
                index: 2,
                turn: 1,
                prompt_kind: "first".into(),
                exemplar_ids: vec![],
                outcome: "no_code".into(),
                reason: Some("no code block: the reply has | no block".into()),
                program_id: None,
                verdict: None,
                speedup: None,
                prompt_tokens: 1,
                completion_tokens: 1,
                reply: Some("I would rather not.".into()),
            }],
        }
    }

    #[test]
    fn the_report_has_the_rounds_the_lineage_and_the_failures() {
        let md = render_report(&summary(true));
        assert!(md.contains("| 1 | 3 | 2 | 1 | 2 | - | 150 | $0.0000 |"), "{md}");
        assert!(md.contains("| 2 | 3 | 2 | 1 | 2 | 3.00x | 150 | $0.0000 |"), "{md}");
        assert!(
            md.contains("- best: program #5 from round 2, speedup 3.00x (95% CI 2.80x to 3.30x), CUDA, in `best.py`"),
            "{md}"
        );
        assert!(md.contains("- #5: round 2 of run `r1`, correct 3.00x, shown #2\n  - #2: round 1 of run `r1`, correct 2.00x, written from the reference alone"), "{md}");
        assert!(md.contains("| 1 | 2 | no_code | - | - | no code block: the reply has \\| no block | [round-1-sample-2.md](replies/round-1-sample-2.md) |"), "{md}");
    }

    #[test]
    fn a_triton_run_writes_beside_a_cuda_run_in_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        let cuda = write_outputs(dir.path(), &summary(true)).unwrap();
        assert_eq!(cuda.dir, dir.path());
        assert_eq!(cuda.best.as_deref(), Some(dir.path().join("best.py").as_path()));
        let mut triton = summary(true);
        triton.language = Language::Triton;
        triton.run_id = "r2".into();
        triton.best.as_mut().unwrap().code = "import triton\nclass ModelNew: pass\n".into();
        let files = write_outputs(dir.path(), &triton).unwrap();
        let sub = dir.path().join("triton");
        assert_eq!(files.dir, sub);
        assert_eq!(files.best.as_deref(), Some(sub.join("best.py").as_path()));
        assert_eq!((files.record.parent(), files.report.parent()), (Some(&*sub), Some(&*sub)));
        assert_eq!(files.replies, sub.join("replies"));
        assert!(sub.join("replies/round-1-sample-2.md").is_file());
        assert!(std::fs::read_to_string(sub.join("best.py")).unwrap().starts_with("import triton"));
        assert!(std::fs::read_to_string(sub.join("best.json")).unwrap().contains("\"r2\""));
        // The CUDA run's outputs are untouched.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("best.py")).unwrap(),
            "class ModelNew: pass\n"
        );
        assert!(std::fs::read_to_string(dir.path().join("best.json")).unwrap().contains("\"r1\""));
    }

    #[test]
    fn outputs_are_written_and_stale_ones_removed_without_a_best() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_outputs(dir.path(), &summary(true)).unwrap();
        assert_eq!(std::fs::read_to_string(files.best.unwrap()).unwrap(), "class ModelNew: pass\n");
        assert_eq!(
            std::fs::read_to_string(files.replies.join("round-1-sample-2.md")).unwrap(),
            "I would rather not."
        );
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&files.record).unwrap()).unwrap();
        assert_eq!(record["speedup"]["median"], 3.0);
        assert_eq!(record["lineage"][1]["id"], 2);
        assert_eq!(record["evaluation"]["verdict"], "correct");

        let files = write_outputs(dir.path(), &summary(false)).unwrap();
        assert!(files.best.is_none());
        assert!(!dir.path().join("best.py").exists());
        // best.json is still there, saying there is no best yet.
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&files.record).unwrap()).unwrap();
        assert_eq!(record["program_id"], serde_json::Value::Null);
        assert!(record["note"].as_str().unwrap().starts_with("no correct program yet"), "{record}");
        assert!(std::fs::read_to_string(files.report).unwrap().contains("no correct program yet"));
    }
}
