//! How a failed call becomes a verdict.

use crate::runner::CallError;
use crate::verdict::{Judgement, Verdict};
use cudal1_protocol::ErrorKind;
use cudal1_supervisor::WorkerError;

/// Maps the way a call failed while `doing` something to a verdict with a reason.
pub fn judge_call_error(err: &CallError, doing: &str, stderr: &str) -> Judgement {
    let with_stderr = |msg: String| {
        let tail = crate::reference::tail(stderr);
        if tail.trim().is_empty() { msg } else { format!("{msg}\n--- stderr (last lines) ---\n{tail}") }
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
