//! The store's error type; every variant names the database path and says what to do.

use std::path::{Path, PathBuf};

use rusqlite::ErrorCode;

/// An error from [`crate::Store`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot open the store `{}`: its directory `{}` does not exist; create the directory or choose another database path",
        .path.display(), .dir.display()
    )]
    MissingDirectory { path: PathBuf, dir: PathBuf },

    #[error(
        "cannot open the store `{}`: the file is not an SQLite database; move it away or choose another database path",
        .path.display()
    )]
    NotADatabase {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error(
        "cannot open the store `{}`: it is an SQLite database that belongs to another application; choose another database path",
        .path.display()
    )]
    ForeignDatabase { path: PathBuf },

    #[error(
        "cannot open the store `{}`: check that the path is a file you can read and write",
        .path.display()
    )]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error(
        "the store `{}` has schema version {found}, newer than this build understands ({supported}); upgrade cudal1 or choose another database path",
        .path.display()
    )]
    SchemaTooNew { path: PathBuf, found: i64, supported: i64 },

    #[error("cannot migrate the store `{}` from schema version {from} to {to}", .path.display())]
    Migrate {
        path: PathBuf,
        from: i64,
        to: i64,
        #[source]
        source: rusqlite::Error,
    },

    #[error(
        "the store `{}` stayed locked by another writer for longer than {timeout_ms} ms during `{operation}`; retry once the other process is done",
        .path.display()
    )]
    Busy {
        path: PathBuf,
        operation: &'static str,
        timeout_ms: u64,
        #[source]
        source: rusqlite::Error,
    },

    #[error("store operation `{operation}` failed on `{}`", .path.display())]
    Query {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    #[error(
        "column `{column}` of {table} row `{row}` in the store `{}` does not hold valid JSON",
        .path.display()
    )]
    CorruptJson {
        path: PathBuf,
        table: &'static str,
        row: String,
        column: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error(
        "column `{column}` of {table} row `{row}` in the store `{}` holds `{value}`, which this build does not know",
        .path.display()
    )]
    CorruptValue {
        path: PathBuf,
        table: &'static str,
        row: String,
        column: &'static str,
        value: String,
    },

    /// A database server could not be reached; what to check (the server, the URL) is each
    /// front end's to say.
    #[error("cannot connect to the store `{store}`")]
    Connect {
        store: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    #[error("store operation `{operation}` failed on `{store}`")]
    Backend {
        store: String,
        operation: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    #[error(
        "cannot store the evaluation of task `{task_name}`: field `{field}` is NaN; use None for a missing value"
    )]
    NotANumber { task_name: String, field: &'static str },

    #[error("cannot record an own-kernel share of {value} for evaluation {id}: a share lies between 0 and 1")]
    ShareOutOfRange { id: i64, value: f64 },

    #[error("batch `{batch_id}` already exists in the store `{}`; choose a new batch id", .path.display())]
    BatchExists { path: PathBuf, batch_id: String },

    #[error("batch `{batch_id}` does not exist in the store `{}`; create it with create_batch first", .path.display())]
    UnknownBatch { path: PathBuf, batch_id: String },

    #[error("optimize run `{run_id}` does not exist in the store `{}`; begin it with begin_run first", .path.display())]
    UnknownRun { path: PathBuf, run_id: String },

    #[error(
        "sample {index} of round {round} of optimize run `{run_id}` is already recorded in the store `{}`",
        .path.display()
    )]
    SampleExists { path: PathBuf, run_id: String, round: u32, index: u32 },
}

/// How long a writer waits for another process's lock before giving up.
pub(crate) const BUSY_TIMEOUT_MS: u64 = 15_000;

/// Wraps a failed statement, singling out lock contention so that the message says "retry".
pub(crate) fn query_error(
    path: &Path,
    operation: &'static str,
    source: rusqlite::Error,
) -> StoreError {
    match source.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy {
            path: path.to_path_buf(),
            operation,
            timeout_ms: BUSY_TIMEOUT_MS,
            source,
        },
        _ => StoreError::Query { path: path.to_path_buf(), operation, source },
    }
}

/// Wraps an error met while opening, configuring or migrating a file; `operation` names the
/// step, for lock contention.
pub(crate) fn open_error(
    path: &Path,
    operation: &'static str,
    source: rusqlite::Error,
) -> StoreError {
    match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => {
            StoreError::NotADatabase { path: path.to_path_buf(), source }
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            query_error(path, operation, source)
        }
        _ => StoreError::Open { path: path.to_path_buf(), source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_error(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn busy_and_locked_become_busy_errors() {
        let path = Path::new("/data/x.db");
        for code in [rusqlite::ffi::SQLITE_BUSY, rusqlite::ffi::SQLITE_LOCKED] {
            let e = query_error(path, "insert_evaluation", sqlite_error(code));
            assert!(matches!(e, StoreError::Busy { operation: "insert_evaluation", .. }), "{e:?}");
            assert!(e.to_string().contains("`/data/x.db`"), "{e}");
        }
        let e = query_error(path, "find_batch", sqlite_error(rusqlite::ffi::SQLITE_IOERR));
        assert!(matches!(e, StoreError::Query { operation: "find_batch", .. }), "{e:?}");
    }

    #[test]
    fn not_a_database_is_recognised_when_opening() {
        let path = Path::new("notes.txt");
        let e = open_error(path, "open", sqlite_error(rusqlite::ffi::SQLITE_NOTADB));
        assert!(matches!(e, StoreError::NotADatabase { .. }), "{e:?}");
        let e = open_error(path, "open", sqlite_error(rusqlite::ffi::SQLITE_CANTOPEN));
        assert!(matches!(e, StoreError::Open { .. }), "{e:?}");
    }

    #[test]
    fn errors_keep_their_source() {
        use std::error::Error as _;
        let e = query_error(Path::new("a.db"), "op", sqlite_error(rusqlite::ffi::SQLITE_IOERR));
        assert!(e.source().is_some());
    }
}
