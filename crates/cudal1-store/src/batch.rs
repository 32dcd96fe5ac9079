//! Batch records: one row per `evaluate` run over a suite, finished with a summary.

use std::path::Path;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::{query_error, StoreError};
use crate::json;

/// A batch to record; the store writes its `created_at`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewBatch {
    pub id: String,
    pub settings: serde_json::Value,
    pub suite_path: String,
    pub candidates_path: String,
}

/// A recorded batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredBatch {
    pub id: String,
    /// RFC 3339, UTC, millisecond precision.
    pub created_at: String,
    /// Set by `finish_batch`; `None` while the batch runs (or if it was abandoned).
    pub finished_at: Option<String>,
    pub settings: serde_json::Value,
    pub suite_path: String,
    pub candidates_path: String,
    pub summary: Option<serde_json::Value>,
}

pub(crate) fn create(conn: &Connection, path: &Path, b: &NewBatch) -> Result<(), StoreError> {
    let result = conn.execute(
        "INSERT INTO batches (id, created_at, settings, suite_path, candidates_path)
         VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?2, ?3, ?4)",
        params![b.id, json::encode(&b.settings), b.suite_path, b.candidates_path],
    );
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
            Err(StoreError::BatchExists { path: path.to_path_buf(), batch_id: b.id.clone() })
        }
        Err(e) => Err(query_error(path, "create_batch", e)),
    }
}

/// Records the summary and finish time; finishing again replaces both.
pub(crate) fn finish(
    conn: &Connection,
    path: &Path,
    batch_id: &str,
    summary: &serde_json::Value,
) -> Result<(), StoreError> {
    let changed = conn
        .execute(
            "UPDATE batches SET summary = ?2, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
             WHERE id = ?1",
            params![batch_id, json::encode(summary)],
        )
        .map_err(|e| query_error(path, "finish_batch", e))?;
    if changed == 0 {
        return Err(StoreError::UnknownBatch {
            path: path.to_path_buf(),
            batch_id: batch_id.to_owned(),
        });
    }
    Ok(())
}

pub(crate) fn find(
    conn: &Connection,
    path: &Path,
    batch_id: &str,
) -> Result<Option<StoredBatch>, StoreError> {
    type Raw = (String, String, Option<String>, String, String, String, Option<String>);
    let raw: Option<Raw> = conn
        .query_row(
            "SELECT id, created_at, finished_at, settings, suite_path, candidates_path, summary
             FROM batches WHERE id = ?1",
            [batch_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)),
        )
        .optional()
        .map_err(|e| query_error(path, "find_batch", e))?;
    let Some((id, created_at, finished_at, settings, suite_path, candidates_path, summary)) = raw
    else {
        return Ok(None);
    };
    let settings = json::decode(&settings, path, "batches", &id, "settings")?;
    let summary = summary.map(|s| json::decode(&s, path, "batches", &id, "summary")).transpose()?;
    Ok(Some(StoredBatch {
        id,
        created_at,
        finished_at,
        settings,
        suite_path,
        candidates_path,
        summary,
    }))
}

/// Every batch id, the most recently created first.
pub(crate) fn ids(conn: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    let err = |e| query_error(path, "batch_ids", e);
    let mut stmt = conn
        .prepare_cached("SELECT id FROM batches ORDER BY created_at DESC, rowid DESC")
        .map_err(err)?;
    let ids = stmt
        .query_map([], |r| r.get(0))
        .map_err(err)?
        .collect::<Result<Vec<String>, _>>()
        .map_err(err)?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::migrated as conn;

    fn batch(id: &str) -> NewBatch {
        NewBatch {
            id: id.into(),
            settings: serde_json::json!({"atol": 1e-4}),
            suite_path: "tasks".into(),
            candidates_path: "solutions".into(),
        }
    }

    #[test]
    fn a_duplicate_id_is_refused_and_the_first_batch_kept() {
        let conn = conn();
        create(&conn, Path::new("a.db"), &batch("b1")).unwrap();
        let mut second = batch("b1");
        second.suite_path = "other".into();
        let err = create(&conn, Path::new("a.db"), &second).unwrap_err();
        assert!(
            matches!(&err, StoreError::BatchExists { batch_id, .. } if batch_id == "b1"),
            "{err:?}"
        );
        assert_eq!(find(&conn, Path::new("a.db"), "b1").unwrap().unwrap().suite_path, "tasks");
    }

    #[test]
    fn finishing_an_unknown_batch_is_an_error() {
        let err = finish(&conn(), Path::new("a.db"), "nope", &serde_json::json!({})).unwrap_err();
        assert!(
            matches!(&err, StoreError::UnknownBatch { batch_id, .. } if batch_id == "nope"),
            "{err:?}"
        );
    }

    #[test]
    fn batch_ids_come_newest_first() {
        let conn = conn();
        for id in ["old", "new"] {
            create(&conn, Path::new("a.db"), &batch(id)).unwrap();
        }
        assert_eq!(ids(&conn, Path::new("a.db")).unwrap(), ["new", "old"]);
    }

    #[test]
    fn an_unfinished_batch_has_no_summary() {
        let conn = conn();
        create(&conn, Path::new("a.db"), &batch("b")).unwrap();
        let got = find(&conn, Path::new("a.db"), "b").unwrap().unwrap();
        assert_eq!((got.finished_at, got.summary), (None, None));
    }
}
