use super::Progress;
use crate::batch::{Item, Row};
use crate::report;
use crate::style::{self, Paint};
use cudal1_eval::{Event, EventKind, JobOutcome};

/// A batch's progress, by [`Progress`]'s rule (a bar on a terminal, throttled lines
/// elsewhere), and, for batches on a terminal, a line per finished candidate.
pub struct BatchProgress {
    pub progress: Progress,
    lines: bool,
}

impl BatchProgress {
    pub fn new(total: usize, done: usize, lines: bool) -> BatchProgress {
        let progress = Progress::new("evaluate", total as u64);
        progress.set_position(done as u64);
        if done > 0 && lines {
            progress
                .on_terminal(&format!("resuming: {done} of {total} candidates already evaluated"));
        }
        BatchProgress { progress, lines }
    }

    pub fn event(&mut self, item: &Item, event: &Event) {
        let label = report::short_label(&item.candidate.label);
        match &event.kind {
            EventKind::Queued { .. } => {}
            EventKind::Compiling => {
                tracing::info!(candidate = %item.candidate.label, "compiling");
                self.status(format!("compiling {label}"));
            }
            EventKind::Compiled { ms, cached, ok } => {
                tracing::info!(candidate = %item.candidate.label, ms, cached, ok, "compiled");
            }
            // Logged too (`-v`), so that a run that seems stuck says what holds the device.
            EventKind::Started { device } => {
                tracing::info!(candidate = %item.candidate.label, %device, "started");
                self.status(format!("{label} on {device}"));
            }
            EventKind::WaitingForMemory(wait) => {
                let why = if wait.alone {
                    "more than the budget: it will run alone"
                } else {
                    "waiting for the running jobs"
                };
                tracing::info!(candidate = %item.candidate.label, need = %wait.need.describe(), reserved = %wait.reserved.describe(), alone = wait.alone, "waiting for memory");
                self.status(format!("{label} waits for memory ({}; {why})", wait.need.describe()));
            }
            EventKind::Timing => {
                tracing::info!(candidate = %item.candidate.label, "timing");
                self.status(format!("timing {label}"));
            }
            EventKind::Finished(outcome) => {
                self.progress.inc();
                let line = match outcome {
                    // Said by `finished`, which knows the row's id.
                    JobOutcome::Evaluated(_) => None,
                    JobOutcome::TaskFailed { error, .. } => Some(format!(
                        "reference failed for {label}: {}",
                        error.lines().next().unwrap_or("")
                    )),
                    JobOutcome::HostFailed { error } => Some(format!(
                        "no verdict for {label}: {}",
                        error.lines().next().unwrap_or("")
                    )),
                    _ => None,
                };
                if let Some(line) = line {
                    self.say(line);
                }
            }
        }
    }

    /// A line per finished candidate: its id, verdict, speedup, task and file.
    pub fn finished(&self, item: &Item, row: &Row) {
        let e = &row.evaluation;
        let verdict = style::err(&format!("{:<13}", e.verdict.as_str()), Paint::Verdict(e.verdict));
        let id = row.id.map_or("-".into(), |i| i.to_string());
        self.say(format!(
            "{id:>5} {verdict} {:>24}  {}  {}",
            report::speedup_text(e),
            item.task.key(),
            report::short_label(&item.candidate.label)
        ));
    }

    /// What is under way: on the bar, and in a log now and then.
    fn status(&self, line: String) {
        self.progress.progress(&line, false);
    }

    /// A line above the bar; on a terminal only, as the bar (stderr that is a file or pipe gets
    /// the table or JSON on stdout instead).
    fn say(&self, line: String) {
        if self.lines {
            self.progress.on_terminal(&line);
        }
    }
}
