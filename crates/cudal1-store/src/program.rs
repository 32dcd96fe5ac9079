//! The program database of the optimize loop: one row per distinct program of a task, keyed by
//! its normalised-source hash and the evaluation settings, with the verdict it got.

use std::path::Path;

use rusqlite::{named_params, params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use crate::api::{ProgramScore, PromptRecord};
use crate::error::{query_error, StoreError};
use crate::json;
use crate::rows::{self, RawRow};

/// What makes two programs the same: the task, the program's normalised-source hash, and the
/// settings it was evaluated under (a CPU speedup says nothing about a GPU one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProgramKey {
    pub task_hash: String,
    pub code_hash: String,
    pub settings_hash: String,
}

/// An evaluated program to record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewProgram {
    pub key: ProgramKey,
    /// The program as the LLM wrote it (not normalised).
    pub code: String,
    /// The run and round that first produced it.
    pub run_id: String,
    pub round: u32,
    /// The trajectory (`optimize --turns`: the run's sample slot, `RUN/ROUND/INDEX`) and its
    /// 1-based turn that first produced it; `None` and 1 for programs written outside one.
    #[serde(default)]
    pub trajectory: Option<String>,
    #[serde(default = "first_turn")]
    pub turn: u32,
    /// The exemplars (program ids) shown in the prompt that produced it: its lineage.
    pub parent_ids: Vec<i64>,
    pub verdict: String,
    pub reason: String,
    pub reason_class: String,
    pub speedup_median: Option<f64>,
    pub speedup_ci_low: Option<f64>,
    pub speedup_ci_high: Option<f64>,
    /// The whole evaluation, as the evaluator reported it.
    pub evaluation: serde_json::Value,
}

/// A recorded program: its row id and time of recording, and every field of [`NewProgram`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredProgram {
    pub id: i64,
    /// RFC 3339, UTC, millisecond precision.
    pub created_at: String,
    pub key: ProgramKey,
    pub code: String,
    pub run_id: String,
    pub round: u32,
    #[serde(default)]
    pub trajectory: Option<String>,
    #[serde(default = "first_turn")]
    pub turn: u32,
    pub parent_ids: Vec<i64>,
    pub verdict: String,
    pub reason: String,
    pub reason_class: String,
    pub speedup_median: Option<f64>,
    pub speedup_ci_low: Option<f64>,
    pub speedup_ci_high: Option<f64>,
    pub evaluation: serde_json::Value,
    /// The share of its GPU time in kernels it built itself (0 to 1), where it was measured.
    #[serde(default)]
    pub own_share: Option<f64>,
}

/// The turn of rows written before turns existed, and of programs written outside a trajectory.
pub(crate) fn first_turn() -> u32 {
    1
}

const SELECT: &str = "SELECT id, created_at, task_hash, code_hash, settings_hash, code, run_id,
    round, parent_ids, verdict, reason, reason_class, speedup_median, speedup_ci_low,
    speedup_ci_high, evaluation, trajectory, turn, own_share FROM programs";

/// Inserts `p` unless a program with the same key exists; either way returns the id of the
/// program stored under that key (the first one recorded wins: a program is evaluated once).
pub(crate) fn insert(conn: &Connection, path: &Path, p: &NewProgram) -> Result<i64, StoreError> {
    for (field, value) in [
        ("speedup_median", p.speedup_median),
        ("speedup_ci_low", p.speedup_ci_low),
        ("speedup_ci_high", p.speedup_ci_high),
    ] {
        if value.is_some_and(f64::is_nan) {
            return Err(StoreError::NotANumber { task_name: p.key.task_hash.clone(), field });
        }
    }
    let err = |source| query_error(path, "insert_program", source);
    let parents = serde_json::Value::from(p.parent_ids.clone());
    conn.prepare_cached(
        "INSERT INTO programs (created_at, task_hash, code_hash, settings_hash, code, run_id,
            round, parent_ids, verdict, reason, reason_class, speedup_median, speedup_ci_low,
            speedup_ci_high, evaluation, trajectory, turn)
        VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), :task_hash, :code_hash, :settings_hash,
            :code, :run_id, :round, :parent_ids, :verdict, :reason, :reason_class,
            :speedup_median, :speedup_ci_low, :speedup_ci_high, :evaluation, :trajectory, :turn)
        ON CONFLICT (task_hash, code_hash, settings_hash) DO NOTHING",
    )
    .map_err(err)?
    .execute(named_params! {
        ":task_hash": p.key.task_hash,
        ":code_hash": p.key.code_hash,
        ":settings_hash": p.key.settings_hash,
        ":code": p.code,
        ":run_id": p.run_id,
        ":round": p.round,
        ":parent_ids": json::encode(&parents),
        ":verdict": p.verdict,
        ":reason": p.reason,
        ":reason_class": p.reason_class,
        ":speedup_median": p.speedup_median,
        ":speedup_ci_low": p.speedup_ci_low,
        ":speedup_ci_high": p.speedup_ci_high,
        ":evaluation": json::encode(&p.evaluation),
        ":trajectory": p.trajectory,
        ":turn": p.turn,
    })
    .map_err(err)?;
    conn.prepare_cached(
        "SELECT id FROM programs WHERE task_hash = ?1 AND code_hash = ?2 AND settings_hash = ?3",
    )
    .map_err(err)?
    .query_row([&p.key.task_hash, &p.key.code_hash, &p.key.settings_hash], |r| r.get(0))
    .map_err(err)
}

pub(crate) fn find(
    conn: &Connection,
    path: &Path,
    key: &ProgramKey,
) -> Result<Option<StoredProgram>, StoreError> {
    let sql = format!("{SELECT} WHERE task_hash = ?1 AND code_hash = ?2 AND settings_hash = ?3");
    rows::one::<RawProgram>(
        conn,
        path,
        "find_program",
        &sql,
        [&key.task_hash, &key.code_hash, &key.settings_hash],
    )
}

pub(crate) fn by_id(
    conn: &Connection,
    path: &Path,
    id: i64,
) -> Result<Option<StoredProgram>, StoreError> {
    rows::one::<RawProgram>(conn, path, "program", &format!("{SELECT} WHERE id = ?1"), [id])
}

/// Every program of a task evaluated under one settings hash, oldest first.
pub(crate) fn for_task(
    conn: &Connection,
    path: &Path,
    task_hash: &str,
    settings_hash: &str,
) -> Result<Vec<StoredProgram>, StoreError> {
    let sql = format!("{SELECT} WHERE task_hash = ?1 AND settings_hash = ?2 ORDER BY id");
    rows::all::<RawProgram>(conn, path, "programs_for_task", &sql, [task_hash, settings_hash])
}

/// Correct programs with a finite speedup and an id up to `as_of`, oldest first.
pub(crate) fn ranked(
    conn: &Connection,
    path: &Path,
    task_hash: &str,
    settings_hash: &str,
    as_of: Option<i64>,
) -> Result<Vec<ProgramScore>, StoreError> {
    let err = |e| query_error(path, "ranked_programs", e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, speedup_median FROM programs WHERE task_hash = ?1 AND settings_hash = ?2
                AND verdict = 'correct' AND speedup_median IS NOT NULL AND id <= ?3 ORDER BY id",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map(params![task_hash, settings_hash, as_of.unwrap_or(i64::MAX)], |r| {
            Ok(ProgramScore { id: r.get(0)?, speedup: r.get(1)? })
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    Ok(rows.into_iter().filter(|p| p.speedup.is_finite()).collect())
}

pub(crate) fn last_id(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    conn.query_row("SELECT ifnull(max(id), 0) FROM programs", [], |r| r.get(0))
        .map_err(|e| query_error(path, "last_program_id", e))
}

pub(crate) fn record_prompt(
    conn: &Connection,
    path: &Path,
    p: &PromptRecord,
) -> Result<(), StoreError> {
    let ids = serde_json::Value::from(p.exemplar_ids.clone());
    conn.prepare_cached(
        "INSERT INTO prompts (id, created_at, task_hash, settings_hash, exemplar_ids, as_of)
        VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?2, ?3, ?4, ?5) ON CONFLICT (id) DO NOTHING",
    )
    .and_then(|mut s| s.execute(params![p.id, p.task_hash, p.settings_hash, json::encode(&ids), p.as_of]))
    .map(|_| ())
    .map_err(|e| query_error(path, "record_prompt", e))
}

pub(crate) fn find_prompt(
    conn: &Connection,
    path: &Path,
    id: &str,
) -> Result<Option<PromptRecord>, StoreError> {
    let err = |e| query_error(path, "find_prompt", e);
    let row: Option<(String, String, String, i64)> = conn
        .prepare_cached(
            "SELECT task_hash, settings_hash, exemplar_ids, as_of FROM prompts WHERE id = ?1",
        )
        .map_err(err)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()
        .map_err(err)?;
    row.map(|(task_hash, settings_hash, ids, as_of)| {
        let exemplar_ids = crate::json::decode_as(&ids, path, "prompts", id, "exemplar_ids")?;
        Ok(PromptRecord { id: id.to_owned(), task_hash, settings_hash, exemplar_ids, as_of })
    })
    .transpose()
}

/// A row as SQLite returns it; JSON columns are decoded afterwards so errors can name them.
struct RawProgram {
    id: i64,
    created_at: String,
    key: ProgramKey,
    code: String,
    run_id: String,
    round: u32,
    trajectory: Option<String>,
    turn: u32,
    own_share: Option<f64>,
    parent_ids: String,
    verdict: String,
    reason: String,
    reason_class: String,
    speedup_median: Option<f64>,
    speedup_ci_low: Option<f64>,
    speedup_ci_high: Option<f64>,
    evaluation: String,
}

impl RawRow for RawProgram {
    type Decoded = StoredProgram;

    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            created_at: row.get(1)?,
            key: ProgramKey {
                task_hash: row.get(2)?,
                code_hash: row.get(3)?,
                settings_hash: row.get(4)?,
            },
            code: row.get(5)?,
            run_id: row.get(6)?,
            round: row.get(7)?,
            parent_ids: row.get(8)?,
            verdict: row.get(9)?,
            reason: row.get(10)?,
            reason_class: row.get(11)?,
            speedup_median: row.get(12)?,
            speedup_ci_low: row.get(13)?,
            speedup_ci_high: row.get(14)?,
            evaluation: row.get(15)?,
            trajectory: row.get(16)?,
            turn: row.get(17)?,
            own_share: row.get(18)?,
        })
    }

    fn decode(self, path: &Path) -> Result<StoredProgram, StoreError> {
        let row = self.id.to_string();
        let parent_ids = json::decode_as(&self.parent_ids, path, "programs", &row, "parent_ids")?;
        Ok(StoredProgram {
            evaluation: json::decode(&self.evaluation, path, "programs", &row, "evaluation")?,
            parent_ids,
            id: self.id,
            created_at: self.created_at,
            key: self.key,
            code: self.code,
            run_id: self.run_id,
            round: self.round,
            trajectory: self.trajectory,
            turn: self.turn,
            verdict: self.verdict,
            reason: self.reason,
            reason_class: self.reason_class,
            speedup_median: self.speedup_median,
            speedup_ci_low: self.speedup_ci_low,
            speedup_ci_high: self.speedup_ci_high,
            own_share: self.own_share,
        })
    }
}

/// Records the own-kernel share of the program `id`; `false` when there is none.
pub(crate) fn set_own_share(
    conn: &Connection,
    path: &Path,
    id: i64,
    share: f64,
) -> Result<bool, StoreError> {
    if !(0.0..=1.0).contains(&share) {
        return Err(StoreError::ShareOutOfRange { id, value: share });
    }
    conn.execute("UPDATE programs SET own_share = ?1 WHERE id = ?2", rusqlite::params![share, id])
        .map(|n| n > 0)
        .map_err(|e| query_error(path, "set_program_own_share", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::migrated as conn;

    fn program(code_hash: &str, speedup: Option<f64>) -> NewProgram {
        NewProgram {
            key: ProgramKey {
                task_hash: "t".into(),
                code_hash: code_hash.into(),
                settings_hash: "s".into(),
            },
            code: format!("class ModelNew: pass  # {code_hash}\n"),
            run_id: "run".into(),
            round: 2,
            trajectory: Some("run/2/0".into()),
            turn: 3,
            parent_ids: vec![7, 3],
            verdict: "correct".into(),
            reason: "matches".into(),
            reason_class: "ok".into(),
            speedup_median: speedup,
            speedup_ci_low: speedup.map(|s| s - 0.1),
            speedup_ci_high: speedup.map(|s| s + 0.1),
            evaluation: serde_json::json!({"verdict": "correct"}),
        }
    }

    #[test]
    fn the_first_program_under_a_key_wins() {
        let conn = conn();
        let p = Path::new(":memory:");
        let first = insert(&conn, p, &program("a", Some(2.0))).unwrap();
        let mut again = program("a", Some(9.0));
        again.verdict = "incorrect".into();
        assert_eq!(insert(&conn, p, &again).unwrap(), first);
        let got = find(&conn, p, &again.key).unwrap().unwrap();
        assert_eq!(got.id, first);
        assert_eq!(got.speedup_median, Some(2.0));
        assert_eq!(got.verdict, "correct");
        assert_eq!(got.parent_ids, vec![7, 3]);
    }

    #[test]
    fn a_programs_own_share_is_recorded_after_it_and_read_back() {
        let conn = conn();
        let p = Path::new(":memory:");
        let id = insert(&conn, p, &program("a", Some(2.0))).unwrap();
        assert_eq!(by_id(&conn, p, id).unwrap().unwrap().own_share, None);
        assert!(set_own_share(&conn, p, id, 0.9).unwrap());
        assert_eq!(by_id(&conn, p, id).unwrap().unwrap().own_share, Some(0.9));
        assert!(!set_own_share(&conn, p, id + 1, 0.9).unwrap());
        assert!(matches!(
            set_own_share(&conn, p, id, f64::NAN),
            Err(StoreError::ShareOutOfRange { .. })
        ));
    }

    #[test]
    fn programs_of_a_task_are_listed_per_settings_oldest_first() {
        let conn = conn();
        let p = Path::new(":memory:");
        let a = insert(&conn, p, &program("a", Some(1.0))).unwrap();
        let mut other_settings = program("b", None);
        other_settings.key.settings_hash = "gpu".into();
        insert(&conn, p, &other_settings).unwrap();
        let c = insert(&conn, p, &program("c", None)).unwrap();
        let ids: Vec<i64> = for_task(&conn, p, "t", "s").unwrap().iter().map(|x| x.id).collect();
        assert_eq!(ids, vec![a, c]);
        assert_eq!(by_id(&conn, p, c).unwrap().unwrap().speedup_median, None);
        assert!(by_id(&conn, p, 999).unwrap().is_none());
    }

    #[test]
    fn nan_speedups_are_refused() {
        let err =
            insert(&conn(), Path::new(":memory:"), &program("a", Some(f64::NAN))).unwrap_err();
        assert!(matches!(err, StoreError::NotANumber { field: "speedup_median", .. }), "{err:?}");
    }

    #[test]
    fn corrupt_parent_ids_name_the_column() {
        let conn = conn();
        let id = insert(&conn, Path::new(":memory:"), &program("a", None)).unwrap();
        conn.execute("UPDATE programs SET parent_ids = '{\"x\": 1}' WHERE id = ?1", [id]).unwrap();
        let err = by_id(&conn, Path::new("p.db"), id).unwrap_err();
        assert!(matches!(err, StoreError::CorruptJson { column: "parent_ids", .. }), "{err:?}");
    }
}
