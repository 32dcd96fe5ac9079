//! What people read: errors, verdict lines, tables and summaries.

use cudal1_eval::window::WindowUsed;
use cudal1_eval::Evaluation;
use cudal1_stats::SuiteSummary;
use cudal1_task::Expectation;

/// `error:` / `Caused by:` / `hint:`, as the user should see them.
pub fn print_error(err: &anyhow::Error) {
    let mut chain = err.chain();
    let top = chain.next().map(|e| e.to_string()).unwrap_or_default();
    let (top, hint) = split_hint(&top);
    eprintln!("error: {top}");
    let mut hints: Vec<String> = hint.into_iter().collect();
    for cause in chain {
        let (text, h) = split_hint(&cause.to_string());
        eprintln!("  Caused by: {text}");
        hints.extend(h);
    }
    for h in hints {
        eprintln!("hint: {h}");
    }
}

fn split_hint(text: &str) -> (String, Option<String>) {
    match text.split_once("\nhint: ") {
        Some((a, b)) => (a.to_owned(), Some(b.to_owned())),
        None => (text.to_owned(), None),
    }
}

pub fn speedup_text(e: &Evaluation) -> String {
    match e.speedup {
        Some(s) => format!("{:.2}x [{:.2}, {:.2}]", s.median, s.ci_low, s.ci_high),
        None => "-".into(),
    }
}

fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.4}"))
}

pub fn print_single(e: &Evaluation) {
    println!("task:       {}", e.task);
    println!("candidate:  {}", e.candidate);
    println!("verdict:    {}", e.verdict);
    println!("reason:     {}", e.reason.replace('\n', "\n            "));
    if e.speedup.is_some() {
        println!("speedup:    {} (median, 95% CI)", speedup_text(e));
        println!("time:       reference {} ms, candidate {} ms (median per call{})", ms(e.ref_ms), ms(e.candidate_ms), window_text(e));
    }
    let env = &e.environment;
    println!(
        "device:     {}{} (torch {}, CUDA {}, driver {})",
        e.device,
        env.gpu.as_ref().map(|g| format!(" = {g}")).unwrap_or_default(),
        env.torch,
        env.cuda.as_deref().unwrap_or("-"),
        env.driver.as_deref().unwrap_or("-")
    );
    for w in &e.warnings {
        println!("warning:    [{}] {}", w.class, w.message);
    }
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
}

pub fn expectation_met(e: &Evaluation, expect: Option<&Expectation>) -> Option<bool> {
    expect.map(|x| x.verdict == e.verdict.as_str())
}

pub fn print_table(rows: &[Row<'_>]) {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header(["task", "candidate", "verdict", "speedup [95% CI]", "ref ms", "cand ms", "reason"]);
    for r in rows {
        let e = r.evaluation;
        let mut verdict = e.verdict.to_string();
        if let Some(false) = expectation_met(e, r.expect) {
            verdict.push_str(&format!(" (expected {})", r.expect.map(|x| x.verdict.as_str()).unwrap_or("")));
        }
        if r.reused {
            verdict.push_str(" *");
        }
        let reason: String = e.reason.lines().next().unwrap_or("").chars().take(90).collect();
        let label = std::path::Path::new(&e.candidate).file_name().map_or(e.candidate.clone(), |f| f.to_string_lossy().into_owned());
        t.add_row([e.task.clone(), label, verdict, speedup_text(e), ms(e.ref_ms), ms(e.candidate_ms), reason]);
    }
    println!("{t}");
}

pub fn print_summary(title: &str, s: &SuiteSummary) {
    let fast: Vec<String> = s.fast_p.iter().map(|(p, f)| format!("fast_{p} = {:.1}%", f * 100.0)).collect();
    let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3}x"));
    println!(
        "{title}: {} of {} correct ({:.1}%), {}; speedup mean {}, median {}, geomean {}{}",
        s.correct,
        s.tasks,
        s.correct_rate * 100.0,
        fast.join(", "),
        opt(s.mean_speedup),
        opt(s.median_speedup),
        opt(s.geomean_speedup),
        if s.excluded > 0 { format!(" ({} excluded)", s.excluded) } else { String::new() }
    );
}
