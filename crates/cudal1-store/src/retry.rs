//! Retrying the open sequence when another process holds the file.
//!
//! SQLite's busy timeout covers ordinary statements, but some steps of opening a fresh file
//! (switching it to WAL while another connection does the same) return `SQLITE_BUSY` at once
//! to avoid a deadlock. Those are retried here with a short backoff, within the same budget.

use std::time::{Duration, Instant};

use crate::error::StoreError;

/// Calls `attempt` until it succeeds, fails with something other than [`StoreError::Busy`], or
/// `budget` has passed.
pub(crate) fn on_busy<T>(
    budget: Duration,
    mut attempt: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let deadline = Instant::now() + budget;
    let mut pause = Duration::from_millis(2);
    loop {
        match attempt() {
            Err(StoreError::Busy { operation, .. }) if Instant::now() + pause < deadline => {
                tracing::debug!(operation, ?pause, "store busy while opening; retrying");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn busy() -> StoreError {
        StoreError::Busy {
            path: PathBuf::from("x.db"),
            operation: "switch to WAL mode",
            timeout_ms: 0,
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                None,
            ),
        }
    }

    #[test]
    fn busy_attempts_are_retried_until_one_succeeds() {
        let mut calls = 0;
        let result = on_busy(Duration::from_secs(5), || {
            calls += 1;
            if calls < 3 {
                Err(busy())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(result.unwrap(), 3);
    }

    #[test]
    fn other_errors_are_returned_at_once() {
        let mut calls = 0;
        let result: Result<(), _> = on_busy(Duration::from_secs(5), || {
            calls += 1;
            Err(StoreError::ForeignDatabase { path: PathBuf::from("x.db") })
        });
        assert!(matches!(result, Err(StoreError::ForeignDatabase { .. })));
        assert_eq!(calls, 1);
    }

    #[test]
    fn a_spent_budget_returns_the_busy_error() {
        let mut calls = 0;
        let result: Result<(), _> = on_busy(Duration::ZERO, || {
            calls += 1;
            Err(busy())
        });
        assert!(matches!(result, Err(StoreError::Busy { .. })));
        assert_eq!(calls, 1);
    }
}
