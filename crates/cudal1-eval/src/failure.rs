//! How a failed call becomes a verdict.

use crate::runner::CallError;
use crate::verdict::{Judgement, Verdict};
use cudal1_protocol::ErrorKind;
use cudal1_supervisor::{human_bytes, LimitHit, WorkerError};

/// The class of a judgement that is no verdict: the machine ran out of memory, and the program
/// was not the cause ([`crate::candidate::Unjudged::Host`]).
pub const HOST_OUT_OF_MEMORY: &str = "host_out_of_memory";

/// The class of a judgement that is no verdict: a candidate's runner process failed twice before
/// any of the candidate's code ran (killed from outside, or the interpreter could not start).
pub const RUNNER_DID_NOT_START: &str = "runner_did_not_start";

/// Whether a call failed because the machine ran out of memory (not for the process's own
/// limit): no verdict can be drawn from it.
pub fn host_out_of_memory(err: &CallError) -> bool {
    matches!(
        err,
        CallError::Worker(WorkerError::Exited { limit: Some(LimitHit::HostMemory { .. }), .. })
    )
}

/// Maps the way a call failed while `doing` something to a verdict with a reason.
pub fn judge_call_error(err: &CallError, doing: &str, stderr: &str) -> Judgement {
    let with_stderr = |msg: String| {
        let tail = crate::reference::tail(stderr);
        if tail.trim().is_empty() {
            msg
        } else {
            format!("{msg}\n--- stderr (last lines) ---\n{tail}")
        }
    };
    match err {
        CallError::Runner(e) => {
            let (verdict, class) = match e.kind {
                ErrorKind::CompileError => (Verdict::CompileError, "compile_error"),
                ErrorKind::MissingSymbol => (Verdict::RuntimeError, "missing_symbol"),
                ErrorKind::Oom => (Verdict::RuntimeError, "out_of_memory"),
                ErrorKind::CudaError => (Verdict::RuntimeError, "cuda_error"),
                ErrorKind::LoadError => (Verdict::RuntimeError, "load_error"),
                _ => (Verdict::RuntimeError, "exception"),
            };
            let what = match e.kind {
                ErrorKind::Oom => "ran out of memory",
                ErrorKind::CudaError => "hit a CUDA error",
                ErrorKind::MissingSymbol => "is missing a definition",
                _ => "raised an exception",
            };
            // The reason keeps the first lines; the whole message and the traceback go to the log.
            let log = [e.traceback.as_deref().unwrap_or(""), if first_lines(&e.message, 12) == e.message.trim_end() { "" } else { &e.message }]
                .iter()
                .filter(|t| !t.trim().is_empty())
                .map(|t| t.trim_end())
                .collect::<Vec<_>>()
                .join("\n");
            Judgement::new(verdict, class, format!("{what} while {doing}: {}", first_lines(&e.message, 12))).with_log(Some(log))
        }
        CallError::Worker(WorkerError::Timeout { after, .. }) => Judgement::new(
            Verdict::Timeout,
            "timeout",
            format!("did not finish {doing} within {:.1} s; its process group was killed", after.as_secs_f64()),
        ),
        CallError::Worker(WorkerError::Exited { limit: Some(LimitHit::Memory { limit_bytes, peak_bytes }), .. }) => Judgement::new(
            Verdict::RuntimeError,
            "out_of_memory",
            with_stderr(format!(
                "ran out of memory while {doing}: it went over its memory limit of {}{} and its processes were killed",
                human_bytes(*limit_bytes),
                peak_bytes.map(|p| format!(" (it reached {})", human_bytes(p))).unwrap_or_default()
            )),
        ),
        CallError::Worker(WorkerError::Exited { limit: Some(LimitHit::HostMemory { peak_bytes }), .. }) => Judgement::new(
            Verdict::RuntimeError,
            HOST_OUT_OF_MEMORY,
            format!(
                "the machine ran out of memory while it was {doing}: the kernel's OOM killer ended its process{}",
                peak_bytes.map(|p| format!(", which held {}", human_bytes(p))).unwrap_or_default()
            ),
        ),
        CallError::Worker(WorkerError::Exited { outcome, .. }) => Judgement::new(
            Verdict::RuntimeError,
            "crash",
            with_stderr(format!("its process died while {doing} ({outcome})")),
        ),
        CallError::Worker(WorkerError::LineTooLong { .. }) | CallError::Worker(WorkerError::Protocol { .. }) | CallError::Protocol(_) => {
            Judgement::new(
                Verdict::Exploit,
                "protocol_tampering",
                format!("wrote to the runner's private protocol channel while {doing}: {err}"),
            )
        }
        CallError::Worker(e) => Judgement::new(Verdict::RuntimeError, "crash", with_stderr(format!("failed while {doing}: {e}"))),
        CallError::Refused(why) => Judgement::new(Verdict::RuntimeError, "internal", format!("cudal1 refused to run it: {why}")),
        CallError::Spawn(e) => Judgement::new(Verdict::RuntimeError, "internal", format!("cudal1 could not start its process: {e}")),
    }
}

fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= n {
        text.trim_end().to_owned()
    } else {
        format!("{}\n… ({} more lines)", lines[..n].join("\n"), lines.len() - n)
    }
}
