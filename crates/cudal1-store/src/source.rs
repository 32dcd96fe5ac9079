//! What a report needs beside the evaluations: the programs' text by content hash (a task's
//! reference and each candidate, so that code and diffs outlive the files they came from), and
//! another system's claimed numbers for the candidates of a batch (`eval --from cuda-l1`).

use std::path::Path;

use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

use crate::error::{query_error, StoreError};
use crate::json;

/// Another system's claims for one candidate of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimRecord {
    pub batch_id: String,
    pub task_hash: String,
    pub candidate_hash: String,
    /// The release's numbers as read (`{"score_default": 2.5, ...}`).
    pub claimed: serde_json::Value,
}

/// Records each `(hash, text)` unless its hash is recorded already.
pub(crate) fn record_sources(
    conn: &mut Connection,
    path: &Path,
    sources: &[(&str, &str)],
) -> Result<(), StoreError> {
    let err = |e| query_error(path, "record_sources", e);
    let tx = conn.transaction().map_err(err)?;
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO sources (hash, text) VALUES (?1, ?2) ON CONFLICT (hash) DO NOTHING",
            )
            .map_err(err)?;
        for (hash, text) in sources {
            stmt.execute(params![hash, text]).map_err(err)?;
        }
    }
    tx.commit().map_err(err)
}

pub(crate) fn source(
    conn: &Connection,
    path: &Path,
    hash: &str,
) -> Result<Option<String>, StoreError> {
    let err = |e| query_error(path, "source", e);
    let mut stmt = conn.prepare_cached("SELECT text FROM sources WHERE hash = ?1").map_err(err)?;
    let mut rows = stmt.query_map([hash], |r| r.get(0)).map_err(err)?;
    rows.next().transpose().map_err(err)
}

/// Records claims, replacing those of the same batch, task and candidate.
pub(crate) fn record_claims(
    conn: &mut Connection,
    path: &Path,
    claims: &[ClaimRecord],
) -> Result<(), StoreError> {
    let err = |e| query_error(path, "record_claims", e);
    let tx = conn.transaction().map_err(err)?;
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO claims (batch_id, task_hash, candidate_hash, claimed) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (batch_id, task_hash, candidate_hash) DO UPDATE SET claimed = excluded.claimed",
            )
            .map_err(err)?;
        for c in claims {
            stmt.execute(params![
                c.batch_id,
                c.task_hash,
                c.candidate_hash,
                json::encode(&c.claimed)
            ])
            .map_err(err)?;
        }
    }
    tx.commit().map_err(err)
}

pub(crate) fn claims(
    conn: &Connection,
    path: &Path,
    batch_id: &str,
) -> Result<Vec<ClaimRecord>, StoreError> {
    let err = |e| query_error(path, "claims", e);
    let mut stmt = conn.prepare_cached("SELECT task_hash, candidate_hash, claimed FROM claims WHERE batch_id = ?1 ORDER BY rowid").map_err(err)?;
    let raw = stmt
        .query_map([batch_id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    raw.into_iter()
        .map(|(task_hash, candidate_hash, claimed)| {
            let claimed = json::decode(
                &claimed,
                path,
                "claims",
                &format!("{batch_id}/{candidate_hash}"),
                "claimed",
            )?;
            Ok(ClaimRecord { batch_id: batch_id.to_owned(), task_hash, candidate_hash, claimed })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::migrated as conn;

    #[test]
    fn a_source_is_kept_once_by_its_hash() {
        let mut conn = conn();
        let p = Path::new("a.db");
        record_sources(&mut conn, p, &[("h1", "first"), ("h1", "second"), ("h2", "other")])
            .unwrap();
        assert_eq!(source(&conn, p, "h1").unwrap().as_deref(), Some("first"));
        assert_eq!(source(&conn, p, "h2").unwrap().as_deref(), Some("other"));
        assert_eq!(source(&conn, p, "none").unwrap(), None);
    }

    #[test]
    fn claims_are_per_batch_and_replaced() {
        let mut conn = conn();
        let p = Path::new("a.db");
        let claim = |batch: &str, score: f64| ClaimRecord {
            batch_id: batch.into(),
            task_hash: "t".into(),
            candidate_hash: "c".into(),
            claimed: serde_json::json!({"score_default": score}),
        };
        record_claims(&mut conn, p, &[claim("b1", 2.0), claim("b2", 3.0)]).unwrap();
        record_claims(&mut conn, p, &[claim("b1", 2.5)]).unwrap();
        assert_eq!(claims(&conn, p, "b1").unwrap(), vec![claim("b1", 2.5)]);
        assert_eq!(claims(&conn, p, "b2").unwrap(), vec![claim("b2", 3.0)]);
        assert!(claims(&conn, p, "b3").unwrap().is_empty());
    }
}
