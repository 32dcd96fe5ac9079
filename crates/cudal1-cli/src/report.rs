//! What people read: errors, verdict lines, tables and summaries. Data goes to stdout through
//! [`crate::out`]; tables fit the terminal, wrapping long reasons instead of cutting them.

use crate::out;
use crate::style::{self, Paint};
use cudal1_eval::window::WindowUsed;
use cudal1_eval::{Evaluation, Verdict};
use cudal1_stats::SuiteSummary;
use cudal1_task::Expectation;
use std::io;

/// `error:` / `Caused by:` / `hint:`, as the user should see them.
/// The CLI's own errors carry their hint after `\nhint: `; a library's error carries what can be
/// done as data, which [`crate::hint::for_error`] says.
pub fn print_error(err: &anyhow::Error) {
    let mut chain = err.chain();
    let Some(first) = chain.next() else { return };
    let (top, hint) = split_hint(&first.to_string());
    eprintln!("{} {top}", style::err("error:", Paint::Error));
    let mut hints: Vec<String> = hint.into_iter().chain(crate::hint::for_error(first)).collect();
    let mut last = top;
    for cause in chain {
        let (text, h) = split_hint(&cause.to_string());
        // A cause that only repeats its parent's words adds nothing.
        if !last.contains(&text) {
            eprintln!("  Caused by: {text}");
        }
        last = text;
        hints.extend(h);
        hints.extend(crate::hint::for_error(cause));
    }
    hints.dedup();
    for h in hints {
        eprintln!("{} {h}", style::err("hint:", Paint::Hint));
    }
}

fn split_hint(text: &str) -> (String, Option<String>) {
    match text.split_once("\nhint: ") {
        Some((a, b)) => (a.to_owned(), Some(b.trim_end().to_owned())),
        None => (text.to_owned(), None),
    }
}

/// `1.23x [1.10, 1.31]`; a wide interval says so (`wide`), and a trial on smaller inputs too.
pub fn speedup_text(e: &Evaluation) -> String {
    let mut text = match e.speedup {
        Some(s) if s.is_wide() => {
            format!("{:.2}x [{:.2}, {:.2}] wide", s.median, s.ci_low, s.ci_high)
        }
        Some(s) => format!("{:.2}x [{:.2}, {:.2}]", s.median, s.ci_low, s.ci_high),
        None => "-".into(),
    };
    if e.scale.is_some() {
        text.push_str(" scaled");
    }
    text
}

/// A verdict for people, in its colour on stdout.
pub fn verdict_text(v: Verdict) -> String {
    style::out(v.as_str(), Paint::Verdict(v))
}

/// The reason as a table shows it: its first line (and the line after a first line that ends
/// in `:`, where the compiler's first error is), at most [`REASON_CHARS`] characters; the whole
/// reason with `-v` and in `cudal1 show`.
pub fn reason_summary(reason: &str) -> String {
    if style::verbose() {
        return reason.trim_end().to_owned();
    }
    let mut lines =
        reason.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("---"));
    let first = lines.next().unwrap_or("");
    let mut text = first.to_owned();
    if first.ends_with(':') {
        if let Some(next) = lines.next() {
            text.push(' ');
            text.push_str(next);
        }
    }
    if text.chars().count() > REASON_CHARS {
        text = text.chars().take(REASON_CHARS - 1).collect::<String>() + "…";
    }
    text
}

/// Longest reason a table shows without `-v`.
pub const REASON_CHARS: usize = 200;

/// A candidate's label for people: a path relative to the working directory when it is below it.
pub fn short_label(label: &str) -> String {
    let cwd = std::env::current_dir().ok();
    let path = std::path::Path::new(label);
    cwd.and_then(|c| path.strip_prefix(&c).ok().map(|p| p.display().to_string()))
        .unwrap_or_else(|| label.to_owned())
}

fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.4}"))
}

/// One evaluation: what `eval --task` prints, and the head of `cudal1 show`.
pub fn print_single(e: &Evaluation, id: Option<i64>) -> io::Result<()> {
    if let Some(id) = id {
        out::line(format!("id:         {id}"))?;
    }
    out::line(format!("task:       {}", e.task))?;
    out::line(format!("candidate:  {}", short_label(&e.candidate)))?;
    out::line(format!("verdict:    {} ({})", verdict_text(e.verdict), e.reason_class))?;
    out::line(format!("reason:     {}", e.reason.replace('\n', "\n            ")))?;
    if e.speedup.is_some() {
        out::line(format!("speedup:    {} (median, 95% CI)", speedup_text(e)))?;
        out::line(format!(
            "time:       reference {} ms, candidate {} ms (median per call{})",
            ms(e.ref_ms),
            ms(e.candidate_ms),
            window_text(e)
        ))?;
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
        out::line(format!(
            "{}    [{}] {}",
            style::out("warning:", Paint::Warning),
            w.class,
            w.message
        ))?;
    }
    Ok(())
}

/// The rest of an evaluation, after [`print_single`]: where the time went, every check, the
/// timing, findings and the program's own output (`cudal1 show`).
pub fn print_details(e: &Evaluation) -> io::Result<()> {
    let m = &e.measurements;
    out::line(format!(
        "mode:       {}{}",
        e.mode,
        e.scale.map(|s| format!(", scaled by {s}")).unwrap_or_default()
    ))?;
    let phases: Vec<String> = m.phases_ms.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
    out::line(format!(
        "duration:   {:.1} ms{}",
        e.duration_ms,
        if phases.is_empty() { String::new() } else { format!(" ({})", phases.join(", ")) }
    ))?;
    if let Some(c) = m.compile_ms {
        out::line(format!(
            "compile:    {c:.1} ms{}",
            m.extension_ms
                .map(|x| format!(", {x:.1} ms in builds while holding the device"))
                .unwrap_or_default()
        ))?;
    }
    if let Some(t) = &m.triton {
        out::line(format!(
            "triton:     warm-up {:.1} ms {} ({}); kernel binaries compiled: {} in the warm-up, {} in the checks, {} while timed",
            t.warmup_ms,
            if t.off_slot { "off the timing slot" } else { "holding the device alone" },
            t.kernels.join(", "),
            t.compiled_in_warmup,
            t.compiled_in_checks,
            t.compiled_while_timed
        ))?;
    }
    if !m.checks.is_empty() {
        let mut t = style::table();
        t.set_header(["seed", "when", "passed", "max abs", "max rel", "mismatches", "ms"]);
        for c in &m.checks {
            let num = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3e}"));
            t.add_row([
                c.seed.to_string(),
                if c.timed { "timed".into() } else { "before timing".to_owned() },
                if c.passed { "yes".into() } else { style::out("no", Paint::Error) },
                num(c.max_abs),
                num(c.max_rel),
                c.mismatches.to_string(),
                ms(c.candidate_ms),
            ]);
        }
        out::line("checks:")?;
        out::line(t)?;
    }
    if let Some(t) = &m.timing {
        out::line(format!(
            "timing:     {} blocks of {} calls; cudal1's own clock: {}{}",
            t.blocks,
            t.calls_per_block,
            t.outer_speedup.map_or("-".into(), |s| format!("{s:.3}x")),
            t.remeasured
                .as_ref()
                .map(|r| format!("; measured again: {}", r.why))
                .unwrap_or_default()
        ))?;
    }
    for f in &m.findings {
        out::line(format!("finding:    {}", serde_json::to_string(f).unwrap_or_default()))?;
    }
    match m.log_tail.as_deref().filter(|l| !l.trim().is_empty()) {
        Some(log) => {
            out::line("log:")?;
            for l in log.lines() {
                out::line(format!("    {l}"))?;
            }
        }
        None => out::line("log:        (none)")?,
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
        Some(WindowUsed::SpinCouldHide { spin_us, candidate_ms }) => format!(
            ", from an idle GPU to the end of the synchronisation: a {spin_us:.0} us spin could have hidden work of a {:.0} us call on other streams",
            candidate_ms * 1e3
        ),
        Some(WindowUsed::Host) | None => String::new(),
    }
}

/// One line of the batch table.
pub struct Row<'a> {
    pub evaluation: &'a Evaluation,
    /// Its row in the store (`cudal1 show ID`).
    pub id: Option<i64>,
    pub expect: Option<&'a Expectation>,
    pub reused: bool,
    /// Another system's claimed speedups (`eval --from`).
    pub claimed: Option<&'a serde_json::Value>,
    /// `eval --baseline`: the speedup against the baseline, as the table shows it.
    pub vs_baseline: Option<String>,
}

pub fn expectation_met(e: &Evaluation, expect: Option<&Expectation>) -> Option<bool> {
    expect.map(|x| x.met(e.verdict.as_str(), e.speedup.as_ref().map(|s| s.median)))
}

/// The table of a batch; `missing` rows (task, label, why) had nothing to evaluate; with
/// `baseline`, a column of speedups against it.
pub fn print_table(
    rows: &[Row<'_>],
    missing: &[(&str, &str, &str)],
    baseline: Option<&str>,
) -> io::Result<()> {
    let claims = rows.iter().any(|r| r.claimed.is_some());
    let vs_header = baseline.map(|b| format!("vs {b} [95% CI]"));
    // Below 120 columns the times give way to the reason (`cudal1 show` has them).
    let times = style::width().is_none_or(|w| w >= 120);
    let mut t = style::table();
    let mut header = vec!["id", "task", "candidate", "verdict", "speedup [95% CI]"];
    if claims {
        header.push("claimed");
    }
    if let Some(h) = &vs_header {
        header.push(h);
    }
    if times {
        header.extend(["ref ms", "cand ms"]);
    }
    header.push("reason");
    t.set_header(&header);
    let at_least =
        |n: u16| comfy_table::ColumnConstraint::LowerBoundary(comfy_table::Width::Fixed(n));
    let constraints = [
        ("id", comfy_table::ColumnConstraint::ContentWidth),
        ("verdict", at_least(13)),
        ("speedup [95% CI]", at_least(6)),
        ("reason", at_least(20)),
    ];
    for (name, c) in constraints {
        if let Some(i) = header.iter().position(|h| *h == name) {
            t.column_mut(i).expect("a column per header").set_constraint(c);
        }
    }
    for r in rows {
        let e = r.evaluation;
        let mut verdict = e.verdict.to_string();
        if let Some(false) = expectation_met(e, r.expect) {
            verdict.push_str(&format!(
                " (expected {})",
                r.expect.map(|x| x.verdict.as_str()).unwrap_or("")
            ));
        }
        if r.reused {
            verdict.push_str(" *");
        }
        let label = std::path::Path::new(&e.candidate)
            .file_name()
            .map_or(e.candidate.clone(), |f| f.to_string_lossy().into_owned());
        let mut cells = vec![
            comfy_table::Cell::new(r.id.map_or("-".into(), |i| i.to_string())),
            comfy_table::Cell::new(&e.task),
            comfy_table::Cell::new(label),
            style::verdict_cell(e.verdict, verdict),
            comfy_table::Cell::new(speedup_text(e)),
        ];
        if claims {
            let claimed =
                r.claimed.and_then(|c| c.get("score_default")).and_then(serde_json::Value::as_f64);
            cells.push(comfy_table::Cell::new(claimed.map_or("-".into(), |c| format!("{c:.2}x"))));
        }
        if vs_header.is_some() {
            cells.push(comfy_table::Cell::new(r.vs_baseline.clone().unwrap_or_else(|| "-".into())));
        }
        if times {
            cells.extend([ms(e.ref_ms), ms(e.candidate_ms)].map(comfy_table::Cell::new));
        }
        cells.push(comfy_table::Cell::new(reason_summary(&e.reason)));
        t.add_row(cells);
    }
    for (task, label, why) in missing {
        let mut cells = vec![
            "-".to_owned(),
            (*task).to_owned(),
            (*label).to_owned(),
            "no code".into(),
            "-".into(),
        ];
        if claims {
            cells.push("-".into());
        }
        if vs_header.is_some() {
            cells.push("-".into());
        }
        if times {
            cells.extend(["-".into(), "-".into()]);
        }
        cells.push((*why).to_owned());
        t.add_row(cells);
    }
    out::line(t)
}

/// A summary line: `fast_p` by the interval's lower bound first, KernelBench's (by the median)
/// beside it.
pub fn print_summary(title: &str, s: &SuiteSummary) -> io::Result<()> {
    let fast: Vec<String> = s
        .fast_p
        .iter()
        .map(|(p, f)| {
            let lower = s.fast_p_lower.iter().find(|(q, _)| q == p).map_or(0.0, |(_, l)| *l);
            format!("fast_{p} = {:.1}% ({:.1}% by the median)", lower * 100.0, f * 100.0)
        })
        .collect();
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
