//! How commands report progress on stderr, by one rule: on a terminal, a bar (spinner, elapsed
//! time, position, the phase under way) with lines printed above it; elsewhere (a log file, a
//! cluster's job output) plain lines, each phase once, progress inside a phase at most once per
//! [`LOG_EVERY`], and while a phase gives no news at all, a line saying it is still under way
//! and for how long. [`Progress`] holds the rule; each kind of event has a small reporter on top
//! of it, in this module and nowhere else: [`BatchProgress`] for `eval`'s and `baselines`'
//! batches, [`OptimizeReporter`] for `optimize`, [`TrainReporter`] for training stages,
//! [`WorkerReporter`] for queue workers. No other file draws a bar or declares a reporter (a test
//! checks).

mod batch;
mod optimize;
mod train;
mod worker;

pub use batch::BatchProgress;
pub use optimize::OptimizeReporter;
pub use train::TrainReporter;
pub use worker::WorkerReporter;

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a log (no terminal) gets a line within one phase.
pub const LOG_EVERY: Duration = Duration::from_secs(15);

/// What the log has been told: when it last got a line, and the phase under way.
#[derive(Default)]
struct Told {
    last_line: Option<Instant>,
    phase: Option<(String, Instant)>,
}

/// The one progress rule (see the module's documentation).
pub struct Progress {
    bar: ProgressBar,
    what: String,
    told: Arc<Mutex<Told>>,
    stop: Arc<AtomicBool>,
    heartbeat: Option<JoinHandle<()>>,
}

impl Progress {
    /// Progress of `what` (a stage's name, shown before each log line) over `len` steps (0 while
    /// unknown).
    pub fn new(what: &str, len: u64) -> Progress {
        Progress::with_interval(what, len, LOG_EVERY)
    }

    fn with_interval(what: &str, len: u64, every: Duration) -> Progress {
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {prefix} {msg}",
            )
            .expect("valid template"),
        );
        bar.set_prefix(what.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        let told = Arc::new(Mutex::new(Told::default()));
        let stop = Arc::new(AtomicBool::new(false));
        // Where no bar is drawn, a phase without news still gets a line now and then.
        let heartbeat = bar.is_hidden().then(|| {
            let (told, stop, what) = (Arc::clone(&told), Arc::clone(&stop), what.to_owned());
            std::thread::Builder::new()
                .name("progress".into())
                .spawn(move || heartbeat(&told, &stop, &what, every))
                .expect("the system can start a thread")
        });
        Progress { bar, what: what.to_owned(), told, stop, heartbeat }
    }

    /// A line above the bar, or in the log where no bar is drawn.
    pub fn say(&self, line: &str) {
        if self.bar.is_hidden() {
            self.told.lock().expect("not poisoned").last_line = Some(Instant::now());
            eprintln!("[{}] {line}", self.what);
        } else {
            self.bar.println(line);
        }
    }

    /// `line` as it is (no stage's name before it), above the bar or in the log: for reporters
    /// whose lines are read as they stand.
    pub fn plain(&self, line: &str) {
        if self.bar.is_hidden() {
            self.told.lock().expect("not poisoned").last_line = Some(Instant::now());
        }
        self.bar.suspend(|| eprintln!("{line}"));
    }

    /// A line for a person watching, above the bar; the log gets none (what it needs comes at
    /// the end, as a table).
    pub fn on_terminal(&self, line: &str) {
        self.bar.println(line);
    }

    /// A phase begins: the bar shows it; the log gets a line, and while the phase lasts without
    /// other news, a line per [`LOG_EVERY`] with the time it has taken.
    pub fn phase(&self, phase: &str) {
        self.told.lock().expect("not poisoned").phase = Some((phase.to_owned(), Instant::now()));
        if self.bar.is_hidden() {
            self.say(phase);
        }
        self.bar.set_message(phase.to_owned());
    }

    /// Progress inside a phase: on the bar, and in the log at most once per [`LOG_EVERY`]
    /// (always when `last`).
    pub fn progress(&self, line: &str, last: bool) {
        self.bar.set_message(line.to_owned());
        if !self.bar.is_hidden() {
            return;
        }
        let now = Instant::now();
        let due = self
            .told
            .lock()
            .expect("not poisoned")
            .last_line
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
        if last || due {
            self.say(line);
        }
    }

    pub fn set_length(&self, len: u64) {
        self.bar.set_length(len);
    }

    /// `more` steps on top of the length.
    pub fn inc_length(&self, more: u64) {
        self.bar.inc_length(more);
    }

    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Prints through `f` without tearing the bar.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Clears the bar and stops the log's heartbeat.
    pub fn finish(&mut self) {
        self.bar.finish_and_clear();
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.heartbeat.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Says, every `every` without news, which phase is still under way and for how long.
fn heartbeat(told: &Mutex<Told>, stop: &AtomicBool, what: &str, every: Duration) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::park_timeout(every / 4);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mut t = told.lock().expect("not poisoned");
        let quiet = t.last_line.is_none_or(|l| l.elapsed() >= every);
        if let (true, Some((phase, since))) = (quiet, &t.phase) {
            eprintln!("[{what}] {phase}: still under way after {}", elapsed(since.elapsed()));
            t.last_line = Some(Instant::now());
        }
    }
}

/// `42s`, `3m 05s`, `1h 02m`.
fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(elapsed(Duration::from_secs(42)), "42s");
        assert_eq!(elapsed(Duration::from_secs(185)), "3m 05s");
        assert_eq!(elapsed(Duration::from_secs(3725)), "1h 02m");
    }

    #[test]
    fn a_quiet_phase_gets_a_heartbeat_until_the_progress_finishes() {
        // Tests run without a terminal on stderr: the log rule applies.
        let mut p = Progress::with_interval("test", 0, Duration::from_millis(40));
        assert!(p.bar.is_hidden());
        p.phase("step 0: generate");
        let said = p.told.lock().unwrap().last_line.unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let later = p.told.lock().unwrap().last_line.unwrap();
        assert!(later > said, "the heartbeat spoke while the phase was quiet");
        p.finish();
        assert!(p.heartbeat.is_none());
        let last = p.told.lock().unwrap().last_line;
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(p.told.lock().unwrap().last_line, last, "silent once finished");
    }
}
