use super::Progress;
use cudal1_optimize::{Event, Outcome};

/// `1.23x`, or `-` where there is none.
fn speedup_text(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}x"))
}

/// `optimize`'s events: a [`Progress`] per round on stderr (a bar over its replies on a terminal, throttled
/// lines elsewhere), a line per sample or program worth telling, and a line per finished round.
#[derive(Default)]
pub struct OptimizeReporter {
    bar: Option<Progress>,
    evaluating: usize,
    best: Option<f64>,
    /// Programs left without a verdict because the machine failed.
    pub unjudged: usize,
}

impl OptimizeReporter {
    pub fn clear(&mut self) {
        if let Some(mut bar) = self.bar.take() {
            bar.finish();
        }
    }

    fn say(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.plain(&line),
            None => eprintln!("{line}"),
        }
    }

    fn refresh(&self) {
        if let Some(bar) = &self.bar {
            bar.progress(
                &format!("evaluating {}, best so far {}", self.evaluating, speedup_text(self.best)),
                false,
            );
        }
    }

    pub fn on_event(&mut self, event: Event) {
        match event {
            Event::RunStarted {
                run_id,
                task,
                finished_rounds,
                recorded_samples,
                pending_evaluations,
            } => {
                if finished_rounds > 0 || recorded_samples > 0 {
                    self.say(format!(
                        "{task}: resuming run {run_id} ({finished_rounds} round(s) finished, {recorded_samples} sample(s) recorded, {pending_evaluations} program(s) left to evaluate)"
                    ));
                } else {
                    self.say(format!("{task}: run {run_id}"));
                }
                self.evaluating = pending_evaluations;
            }
            Event::RoundStarted { round, requests, already_recorded, kind } => {
                self.clear();
                self.bar = Some(Progress::new(&format!("round {round}"), u64::from(requests)));
                if already_recorded > 0 {
                    self.say(format!("round {round}: {already_recorded} sample(s) already recorded, {requests} to go ({} prompt)", kind.as_str()));
                }
                self.refresh();
            }
            Event::TurnsStarted { round, requests } => {
                if let Some(bar) = &self.bar {
                    bar.inc_length(u64::from(requests));
                }
                self.say(format!("round {round}: {requests} trajectory(ies) go on with the previous verdict in the prompt"));
                self.refresh();
            }
            Event::SampleRecorded {
                round,
                index,
                turn,
                outcome,
                reason,
                queued,
                known_program,
                ..
            } => {
                let index =
                    if turn > 1 { format!("{index} turn {turn}") } else { index.to_string() };
                if let Some(bar) = &self.bar {
                    bar.inc();
                }
                if queued {
                    self.evaluating += 1;
                }
                if let Some(id) = known_program {
                    self.say(format!("  round {round} sample {index}: program #{id} again (evaluated before, not again)"));
                }
                if outcome != Outcome::Program {
                    let reason = reason.unwrap_or_default();
                    self.say(format!(
                        "  round {round} sample {index}: {}: {}",
                        outcome.as_str(),
                        reason.lines().next().unwrap_or("")
                    ));
                }
                self.refresh();
            }
            Event::ProgramEvaluated {
                round,
                program_id,
                verdict,
                speedup,
                reason,
                written,
                in_language,
            } => {
                self.evaluating = self.evaluating.saturating_sub(1);
                let correct = verdict == cudal1_eval::Verdict::Correct;
                // The run's best counts only programs in its language (the library says which),
                // as the round lines and the summary do.
                if correct && in_language {
                    self.best = match (self.best, speedup) {
                        (Some(b), Some(s)) => Some(b.max(s)),
                        (b, s) => b.or(s),
                    };
                }
                let first =
                    reason.lines().next().unwrap_or("").chars().take(100).collect::<String>();
                let other = if correct && !in_language {
                    format!(
                        " ({}: another language than the prompts ask for, never the best)",
                        written.describe()
                    )
                } else {
                    String::new()
                };
                self.say(format!(
                    "  round {round} program #{program_id}: {verdict} {}{other} {first}",
                    speedup_text(speedup)
                ));
                self.refresh();
            }
            Event::HostFailed { error } => {
                self.evaluating = self.evaluating.saturating_sub(1);
                self.unjudged += 1;
                self.say(format!(
                    "  no verdict (evaluated again on the next run): {}",
                    error.lines().next().unwrap_or("")
                ));
            }
            Event::ReferenceFailed { error } => {
                self.evaluating = self.evaluating.saturating_sub(1);
                self.say(format!(
                    "  the reference failed (a fresh one starts): {}",
                    error.lines().next().unwrap_or("")
                ));
            }
            Event::Profiling { round, programs } => {
                self.say(format!("round {round}: profiling {programs} program(s) with Nsight Compute for the prompts"));
            }
            Event::ProfileFailed { program_id, error } => {
                let what = program_id
                    .map_or_else(|| "the reference".to_owned(), |id| format!("program #{id}"));
                self.say(format!(
                    "  {what} could not be profiled (prompts show it without): {}",
                    error.lines().next().unwrap_or("")
                ));
            }
            Event::RoundFinished { totals: t } => {
                self.clear();
                let rate = if t.samples > 0 {
                    100.0 * f64::from(t.correct) / f64::from(t.samples)
                } else {
                    0.0
                };
                self.best = t.best_speedup.or(self.best);
                eprintln!(
                    "round {}: {} samples, {} with a program, {} correct ({rate:.0}%), best so far {}, {} tokens",
                    t.round,
                    t.samples,
                    t.valid,
                    t.correct,
                    speedup_text(t.best_speedup),
                    t.prompt_tokens + t.completion_tokens
                );
            }
            Event::Stopped { reason } => {
                self.clear();
                eprintln!("stopped: {}", reason.describe());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudal1_search::Written;

    fn evaluated(program_id: i64, speedup: f64, written: Written, in_language: bool) -> Event {
        Event::ProgramEvaluated {
            round: 1,
            program_id,
            verdict: cudal1_eval::Verdict::Correct,
            speedup: Some(speedup),
            reason: String::new(),
            written,
            in_language,
        }
    }

    #[test]
    fn the_best_so_far_counts_only_programs_in_the_runs_language() {
        let mut r = OptimizeReporter::default();
        r.on_event(evaluated(1, 3.0, Written::Cuda, false));
        assert_eq!(r.best, None, "a faster CUDA program in a Triton run is not its best");
        r.on_event(evaluated(2, 1.5, Written::Triton, true));
        r.on_event(evaluated(3, 1.2, Written::PyTorch, true));
        assert_eq!(r.best, Some(1.5));
    }
}
