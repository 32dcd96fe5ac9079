use super::Progress;
use cudal1_train::TrainEvent;

/// A training stage's events: a bar over its steps, a line per phase and per step with the
/// metrics named in `keys`.
pub struct TrainReporter {
    progress: Progress,
    keys: &'static [&'static str],
}

impl TrainReporter {
    pub fn new(what: &str, keys: &'static [&'static str]) -> TrainReporter {
        TrainReporter { progress: Progress::new(what, 0), keys }
    }

    pub fn event(&mut self, e: TrainEvent) {
        let p = &self.progress;
        match e {
            TrainEvent::StepStarted { step, of } => {
                p.set_length(of);
                p.set_position(step - 1);
            }
            TrainEvent::Phase { step, phase } => p.phase(&format!("step {step}: {phase}")),
            TrainEvent::Progress { done, of, what } => {
                p.progress(&format!("{done}/{of} {what}"), done == of);
            }
            TrainEvent::StepFinished { step, metrics } => {
                p.set_position(step);
                let parts: Vec<String> = self
                    .keys
                    .iter()
                    .filter_map(|k| {
                        let v = metrics.get(*k)?;
                        Some(match v.as_f64() {
                            Some(x) if x.fract() != 0.0 => format!("{k} {x:.4}"),
                            _ => format!("{k} {v}"),
                        })
                    })
                    .collect();
                p.say(&format!("step {step}: {}", parts.join(", ")));
            }
            TrainEvent::Committed { step } => tracing::info!(step, "committed"),
            TrainEvent::Resumed { step } => p.say(&format!("resuming after step {step}")),
            TrainEvent::Reused { what } => p.say(&format!("using {what} again")),
        }
    }

    pub fn finish(&mut self) {
        self.progress.finish();
    }
}
