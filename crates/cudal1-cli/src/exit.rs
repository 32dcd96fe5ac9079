//! Exit statuses, one table for every command (the README has it too):
//!
//! | status | meaning |
//! | --- | --- |
//! | 0 | done: every job got its verdict (any verdict; verdicts are data) |
//! | 1 | done, with problems to look at: a verdict differs from its `expect=` line (`--check-expectations`), input rows were skipped (malformed, unknown task, no code), a reference failed so some candidates got no verdict, a task is degenerate or could not be checked, or every LLM request failed |
//! | 2 | error: bad arguments or input, or cudal1 itself failed; the message says what to do |
//! | 130 | interrupted (Ctrl-C or SIGTERM): what finished is saved, and the same command resumes |

use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Done,
    Problems,
    Interrupted,
}

impl Status {
    /// The more serious of two statuses.
    pub fn and(self, other: Status) -> Status {
        self.max(other)
    }

    /// `Problems` when `problem` holds.
    pub fn problems_if(problem: bool) -> Status {
        if problem {
            Status::Problems
        } else {
            Status::Done
        }
    }
}

impl From<Status> for ExitCode {
    fn from(s: Status) -> ExitCode {
        match s {
            Status::Done => ExitCode::SUCCESS,
            Status::Problems => ExitCode::from(1),
            Status::Interrupted => ExitCode::from(130),
        }
    }
}

/// Errors: bad input, or cudal1 itself failed.
pub const ERROR: u8 = 2;
