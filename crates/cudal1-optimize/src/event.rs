//! What the loop reports while it runs. The library prints nothing: the caller gets every
//! [`Event`] through a callback and decides what people see (progress bars, JSON, logs).

use cudal1_eval::Verdict;
use cudal1_search::Written;
use cudal1_store::NewRound;

use crate::plan::PromptKind;
use crate::stop::StopReason;
use crate::tally::Outcome;

#[derive(Debug, Clone)]
pub enum Event {
    RunStarted {
        run_id: String,
        task: String,
        /// Rounds finished by earlier invocations.
        finished_rounds: u32,
        /// Samples recorded by earlier invocations.
        recorded_samples: usize,
        /// Programs left unevaluated by an earlier invocation, evaluated first.
        pending_evaluations: usize,
    },
    RoundStarted {
        round: u32,
        /// Requests this invocation sends in this round.
        requests: u32,
        /// Samples of this round recorded by an earlier invocation.
        already_recorded: u32,
        kind: PromptKind,
    },
    /// The round's trajectories (`--turns`) whose last turn is judged and not good enough send
    /// their next turns, each prompt showing the previous turn's verdict.
    TurnsStarted {
        round: u32,
        requests: u32,
    },
    SampleRecorded {
        round: u32,
        index: u32,
        turn: u32,
        outcome: Outcome,
        reason: Option<String>,
        tokens: u64,
        /// The program was sent for evaluation (not a duplicate of a known one).
        queued: bool,
        /// The program is one the database already holds.
        known_program: Option<i64>,
    },
    ProgramEvaluated {
        round: u32,
        program_id: i64,
        verdict: Verdict,
        speedup: Option<f64>,
        reason: String,
        /// What the program is written in (read from its code).
        written: Written,
        /// Whether the run counts it as its own: a program a prompt in the run's language may
        /// show ([`cudal1_search::Language::may_show`]), the rule the rounds' best and the
        /// summary's follow. A correct program in the other language is never the best so far.
        in_language: bool,
    },
    /// The reference failed while judging one program; the next starts a fresh reference.
    ReferenceFailed {
        error: String,
    },
    /// The machine failed while a program was judged (it ran out of memory, or the runner died
    /// before the program was loaded; not the program's fault): it
    /// has no verdict, and the next invocation evaluates it again.
    HostFailed {
        error: String,
    },
    /// Programs are being profiled for the round's prompts (`--profile`): the reference (once)
    /// and each program the prompts show that was not profiled yet.
    Profiling {
        round: u32,
        programs: usize,
    },
    /// A program (`None`: the reference) could not be profiled; prompts show it without a profile.
    ProfileFailed {
        program_id: Option<i64>,
        error: String,
    },
    RoundFinished {
        totals: NewRound,
    },
    Stopped {
        reason: StopReason,
    },
}
