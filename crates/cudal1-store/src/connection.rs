//! Opening an SQLite connection with the settings every store handle needs.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::{open_error, StoreError, BUSY_TIMEOUT_MS};

/// Opens (creating if needed) the database file at `path` and configures it.
pub(crate) fn open_file(path: &Path) -> Result<Connection, StoreError> {
    // SQLite reports a missing directory as a bare "unable to open database file"; say it plainly.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(StoreError::MissingDirectory {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
            });
        }
    }
    let conn = Connection::open(path).map_err(|e| open_error(path, "open the file", e))?;
    configure(&conn, path, true)?;
    Ok(conn)
}

/// Opens a private in-memory database, for tests and dry runs.
pub(crate) fn open_memory(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_in_memory().map_err(|e| open_error(path, "open in memory", e))?;
    configure(&conn, path, false)?;
    Ok(conn)
}

/// Busy timeout first, so that later statements wait for other processes instead of failing;
/// WAL so that readers never block the single writer, and two processes can share the file.
fn configure(conn: &Connection, path: &Path, wal: bool) -> Result<(), StoreError> {
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
        .map_err(|e| open_error(path, "set the busy timeout", e))?;
    if wal {
        // The first real read of the file happens here, so a non-SQLite file fails here.
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(|e| open_error(path, "switch to WAL mode", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %path.display(), mode, "SQLite refused WAL mode; concurrent writers will wait longer");
        }
        // NORMAL is durable across application crashes in WAL mode and much faster than FULL.
        conn.execute_batch("PRAGMA synchronous = NORMAL")
            .map_err(|e| open_error(path, "set synchronous mode", e))?;
    }
    Ok(())
}
