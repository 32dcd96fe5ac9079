//! Task checks (`cudal1 tasks check`): one row per task and check settings, so that a check
//! stopped by Ctrl-C resumes without checking again what it had finished.

use std::path::Path;

use rusqlite::{named_params, Connection, Row};
use serde::{Deserialize, Serialize};

use crate::error::{query_error, StoreError};
use crate::json;
use crate::rows::{self, RawRow};

/// A finished check to record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewTaskCheck {
    pub task_hash: String,
    /// The settings that decide a check (device kind, tolerance, seeds), hashed.
    pub settings_hash: String,
    pub task_name: String,
    /// The check as its command prints it.
    pub result: serde_json::Value,
}

/// A recorded check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredTaskCheck {
    /// RFC 3339, UTC, millisecond precision.
    pub created_at: String,
    pub check: NewTaskCheck,
}

/// Inserts, or replaces the check with the same task and settings.
pub(crate) fn upsert(conn: &Connection, path: &Path, c: &NewTaskCheck) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO task_checks (task_hash, settings_hash, task_name, created_at, result)
         VALUES (:task_hash, :settings_hash, :task_name, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), :result)
         ON CONFLICT (task_hash, settings_hash) DO UPDATE SET
             task_name = excluded.task_name, created_at = excluded.created_at, result = excluded.result",
    )
    .and_then(|mut stmt| {
        stmt.execute(named_params! {
            ":task_hash": c.task_hash,
            ":settings_hash": c.settings_hash,
            ":task_name": c.task_name,
            ":result": json::encode(&c.result),
        })
    })
    .map(|_| ())
    .map_err(|e| query_error(path, "insert_task_check", e))
}

pub(crate) fn find(
    conn: &Connection,
    path: &Path,
    task_hash: &str,
    settings_hash: &str,
) -> Result<Option<StoredTaskCheck>, StoreError> {
    rows::one::<RawTaskCheck>(
        conn,
        path,
        "find_task_check",
        "SELECT task_hash, settings_hash, task_name, created_at, result FROM task_checks WHERE task_hash = ?1 AND settings_hash = ?2",
        [task_hash, settings_hash],
    )
}

struct RawTaskCheck {
    task_hash: String,
    settings_hash: String,
    task_name: String,
    created_at: String,
    result: String,
}

impl RawRow for RawTaskCheck {
    type Decoded = StoredTaskCheck;

    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            task_hash: row.get(0)?,
            settings_hash: row.get(1)?,
            task_name: row.get(2)?,
            created_at: row.get(3)?,
            result: row.get(4)?,
        })
    }

    fn decode(self, path: &Path) -> Result<StoredTaskCheck, StoreError> {
        let key = format!("{}/{}", self.task_hash, self.settings_hash);
        let result = json::decode(&self.result, path, "task_checks", &key, "result")?;
        Ok(StoredTaskCheck {
            created_at: self.created_at,
            check: NewTaskCheck {
                task_hash: self.task_hash,
                settings_hash: self.settings_hash,
                task_name: self.task_name,
                result,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_is_found_by_task_and_settings_and_replaced_by_a_new_one() {
        let conn = crate::schema::tests::migrated();
        let path = Path::new(":memory:");
        let check = |flags: serde_json::Value| NewTaskCheck {
            task_hash: "t".into(),
            settings_hash: "s".into(),
            task_name: "level1/1_X".into(),
            result: serde_json::json!({"flags": flags}),
        };
        assert!(find(&conn, path, "t", "s").unwrap().is_none());
        upsert(&conn, path, &check(serde_json::json!([]))).unwrap();
        upsert(&conn, path, &check(serde_json::json!(["near_zero"]))).unwrap();
        let got = find(&conn, path, "t", "s").unwrap().unwrap();
        assert_eq!(got.check.result["flags"][0], "near_zero");
        assert!(find(&conn, path, "t", "other").unwrap().is_none());
    }
}
