//! What people read: errors, verdict lines, tables and summaries. Data goes to stdout through
//! [`crate::out`]; tables fit the terminal, wrapping long reasons instead of cutting them.

use crate::out;
use cudal1_eval::window::WindowUsed;
use cudal1_eval::Evaluation;
use cudal1_stats::SuiteSummary;
use cudal1_task::Expectation;
use std::io;

/// `error:` / `Caused by:` / `hint:`, as the user should see them.
pub fn print_error(err: &anyhow::Error) {
    let mut chain = err.chain();
    let top = chain.next().map(|e| e.to_string()).unwrap_or_default();
    let (top, hint) = split_hint(&top);
    eprintln!("error: {top}");
    let mut hints: Vec<String> = hint.into_iter().collect();
    let mut last = top;
    for cause in chain {
        let (text, h) = split_hint(&cause.to_string());
        // A cause that only repeats its parent's words adds nothing.
        if !last.contains(&text) {
            eprintln!("  Caused by: {text}");
        }
        last = text;
        hints.extend(h);
    }
    for h in hints {
        eprintln!("hint: {h}");
    }
}

fn split_hint(text: &str) -> (String, Option<String>) {
    match text.split_once("\nhint: ") {
        Some((a, b)) => (a.to_owned(), Some(b.trim_end().to_owned())),
        None => (text.to_owned(), None),
    }
}

pub fn speedup_text(e: &Evaluation) -> String {
    match e.speedup {
        Some(s) => format!("{:.2}x [{:.2}, {:.2}]", s.median, s.ci_low, s.ci_high),
        None => "-".into(),
    }
}

/// A candidate's label for people: a path relative to the working directory when it is below it.
pub fn short_label(label: &str) -> String {
    let cwd = std::env::current_dir().ok();
    let path = std::path::Path::new(label);
    cwd.and_then(|c| path.strip_prefix(&c).ok().map(|p| p.display().to_string())).unwrap_or_else(|| label.to_owned())
}

fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.4}"))
}

pub fn print_single(e: &Evaluation) -> io::Result<()> {
    out::line(format!("task:       {}", e.task))?;
    out::line(format!("candidate:  {}", short_label(&e.candidate)))?;
    out::line(format!("verdict:    {}", e.verdict))?;
    out::line(format!("reason:     {}", e.reason.replace('\n', "\n            ")))?;
    if e.speedup.is_some() {
        out::line(format!("speedup:    {} (median, 95% CI)", speedup_text(e)))?;
        out::line(format!("time:       reference {} ms, candidate {} ms (median per call{})", ms(e.ref_ms), ms(e.candidate_ms), window_text(e)))?;
    }
    let env = &e.environment;
    out::line(format!(
        "device:     {}{} (torch {}, CUDA {}, driver {})",
        e.device,
        env.gpu.as_ref().map(|g| format!(" = {g}")).unwrap_or_default(),
        env.torch,
        env.cuda.as_deref().unwrap_or("-"),
        env.driver.as_deref().unwrap_or("-")
    ))?;
    for w in &e.warnings {
        out::line(format!("warning:    [{}] {}", w.class, w.message))?;
    }
    Ok(())
}

/// What the times cover, where it is not the plain host clock.
fn window_text(e: &Evaluation) -> String {
    let Some(t) = &e.measurements.timing else { return String::new() };
    match t.window {
        Some(WindowUsed::Gpu) => ", GPU work: the launch is hidden behind a queued spin".into(),
        Some(WindowUsed::UntilIdle { excess_ms }) => format!(", until the device was idle: work outlived a call by {:.3} ms", excess_ms),
        Some(WindowUsed::Wall) => ", from an idle GPU to the end of the synchronisation".into(),
        Some(WindowUsed::Host) | None => String::new(),
    }
}

/// One line of the batch table.
pub struct Row<'a> {
    pub evaluation: &'a Evaluation,
    pub expect: Option<&'a Expectation>,
    pub reused: bool,
    /// Another system's claimed speedups (`eval --from`).
    pub claimed: Option<&'a serde_json::Value>,
}

pub fn expectation_met(e: &Evaluation, expect: Option<&Expectation>) -> Option<bool> {
    expect.map(|x| x.verdict == e.verdict.as_str())
}

/// The table of a batch; `missing` rows (task, label, why) had nothing to evaluate.
pub fn print_table(rows: &[Row<'_>], missing: &[(&str, &str, &str)]) -> io::Result<()> {
    let claims = rows.iter().any(|r| r.claimed.is_some());
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    let mut header = vec!["task", "candidate", "verdict", "speedup [95% CI]"];
    if claims {
        header.push("claimed");
    }
    header.extend(["ref ms", "cand ms", "reason"]);
    t.set_header(header);
    for r in rows {
        let e = r.evaluation;
        let mut verdict = e.verdict.to_string();
        if let Some(false) = expectation_met(e, r.expect) {
            verdict.push_str(&format!(" (expected {})", r.expect.map(|x| x.verdict.as_str()).unwrap_or("")));
        }
        if r.reused {
            verdict.push_str(" *");
        }
        let reason = e.reason.lines().next().unwrap_or("").to_owned();
        let label = std::path::Path::new(&e.candidate).file_name().map_or(e.candidate.clone(), |f| f.to_string_lossy().into_owned());
        let mut cells = vec![e.task.clone(), label, verdict, speedup_text(e)];
        if claims {
            let claimed = r.claimed.and_then(|c| c.get("score_default")).and_then(serde_json::Value::as_f64);
            cells.push(claimed.map_or("-".into(), |c| format!("{c:.2}x")));
        }
        cells.extend([ms(e.ref_ms), ms(e.candidate_ms), reason]);
        t.add_row(cells);
    }
    for (task, label, why) in missing {
        let mut cells = vec![(*task).to_owned(), (*label).to_owned(), "no code".into(), "-".into()];
        if claims {
            cells.push("-".into());
        }
        cells.extend(["-".into(), "-".into(), (*why).to_owned()]);
        t.add_row(cells);
    }
    out::line(t)
}

pub fn print_summary(title: &str, s: &SuiteSummary) -> io::Result<()> {
    let fast: Vec<String> = s.fast_p.iter().map(|(p, f)| format!("fast_{p} = {:.1}%", f * 100.0)).collect();
    let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3}x"));
    out::line(format!(
        "{title}: {} of {} correct ({:.1}%), {}; speedup mean {}, median {}, geomean {}{}",
        s.correct,
        s.tasks,
        s.correct_rate * 100.0,
        fast.join(", "),
        opt(s.mean_speedup),
        opt(s.median_speedup),
        opt(s.geomean_speedup),
        if s.excluded > 0 { format!(" ({} excluded)", s.excluded) } else { String::new() }
    ))
}
