//! Ctrl-C and SIGTERM, the same everywhere: once, drain for a few seconds (what finishes within
//! [`GRACE`] is saved, nothing new starts, and the evaluations still running then are abandoned:
//! their processes are killed, nothing of them is stored, and the same command does them again);
//! twice, stop now. Either way the engines' scratch directories are removed and the command exits
//! with status 130. Extension builds under way in the compile pool are killed on the first press
//! (their jobs are cancelled anyway). Not bounded yet: a command's own work outside an engine (a
//! model generating) runs on after the first press until it ends or the second press comes.

use cudal1_eval::Canceller;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long the first press lets work under way finish before it is abandoned.
pub const GRACE: Duration = Duration::from_secs(3);
/// Milliseconds to use instead of [`GRACE`] (a longer drain where evaluations are slow).
pub const GRACE_VAR: &str = "CUDAL1_INTERRUPT_GRACE_MS";

/// [`GRACE`], or what [`GRACE_VAR`] says.
fn grace() -> Duration {
    std::env::var(GRACE_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(GRACE, Duration::from_millis)
}
/// How long a second press waits for killed work to end before exiting regardless.
const LAST_RESORT: Duration = Duration::from_secs(15);

#[derive(Default)]
pub struct Interrupt {
    presses: AtomicUsize,
    /// Set on the first press: loops stop starting work (LLM requests, new jobs).
    flag: AtomicBool,
    engines: Mutex<Vec<Canceller>>,
    under_way: Mutex<&'static str>,
}

/// The process's one interrupt state.
static STATE: OnceLock<Arc<Interrupt>> = OnceLock::new();

impl Interrupt {
    /// Whether Ctrl-C (or SIGTERM) has arrived.
    pub fn interrupted(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// The flag a loop polls between steps.
    pub fn flag(&self) -> &AtomicBool {
        &self.flag
    }

    /// An engine to cancel on the first press, and kill [`GRACE`] later or on the second.
    pub fn watch(&self, canceller: Canceller) {
        if self.presses.load(Ordering::SeqCst) > 0 {
            canceller.cancel();
        }
        self.engines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(canceller);
    }

    fn press(&self) {
        let n = self.presses.fetch_add(1, Ordering::SeqCst);
        let engines =
            self.engines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match n {
            0 => {
                self.flag.store(true, Ordering::SeqCst);
                let what =
                    *self.under_way.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let grace = grace();
                eprintln!(
                    "\ninterrupted: finishing {what} that end within {} s (they are saved; the rest is abandoned, and the same command does it again); press Ctrl-C again to stop now",
                    grace.as_secs_f64()
                );
                engines.iter().for_each(Canceller::cancel);
                std::thread::spawn(move || {
                    std::thread::sleep(grace);
                    if let Some(state) =
                        STATE.get().filter(|s| s.presses.load(Ordering::SeqCst) == 1)
                    {
                        state
                            .engines
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .iter()
                            .for_each(Canceller::kill);
                    }
                });
            }
            1 => {
                eprintln!("\nstopping now: killing what runs and removing scratch files");
                engines.iter().for_each(Canceller::kill);
                std::thread::spawn(|| {
                    std::thread::sleep(LAST_RESORT);
                    std::process::exit(130);
                });
            }
            _ => std::process::exit(130),
        }
    }
}

/// The process's interrupt state; the handler is installed on first use. `under_way` names what
/// a first press lets finish ("the evaluations under way").
pub fn install(under_way: &'static str) -> Arc<Interrupt> {
    let state = STATE.get_or_init(|| {
        let state = Arc::new(Interrupt::default());
        let handler = Arc::clone(&state);
        if let Err(e) = ctrlc::set_handler(move || handler.press()) {
            tracing::warn!(error = %e, "could not install the Ctrl-C handler");
        }
        state
    });
    *state.under_way.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = under_way;
    Arc::clone(state)
}

/// Ends a profile under way when the run is interrupted.
pub fn profile_cancel(interrupt: &Arc<Interrupt>) -> cudal1_eval::profile::Cancel {
    let i = Arc::clone(interrupt);
    cudal1_eval::profile::Cancel(Arc::new(move || i.interrupted()))
}
