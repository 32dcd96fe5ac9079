//! Evaluation records: one row per (task, candidate, settings, judge, GPU class) key, replaced on
//! re-evaluation.

use std::path::Path;

use rusqlite::{named_params, Connection, Row};
use serde::{Deserialize, Serialize};

use crate::error::{query_error, StoreError};
use crate::json;
use crate::rows::{self, RawRow};

/// What makes two evaluations the same: content hashes of the task, the candidate and the
/// settings that can change a verdict, and who judged: the judging version and the class of GPU.
/// A row of another judge is kept and listed, but never found under this judge's key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EvalKey {
    pub task_hash: String,
    pub candidate_hash: String,
    pub settings_hash: String,
    /// The judging version (`cudal1_eval::judge_version`); empty in rows recorded before judges
    /// were recorded.
    pub judge: String,
    /// The class of GPU it was judged on (`cpu`); empty in rows recorded before.
    pub gpu_class: String,
}

/// An evaluation to record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewEvaluation {
    pub key: EvalKey,
    pub batch_id: Option<String>,
    pub task_name: String,
    pub task_path: String,
    pub candidate_label: String,
    pub verdict: String,
    pub reason: String,
    pub speedup_median: Option<f64>,
    pub speedup_ci_low: Option<f64>,
    pub speedup_ci_high: Option<f64>,
    pub ref_ms: Option<f64>,
    pub candidate_ms: Option<f64>,
    /// `"cpu"` or `"cuda:0"`.
    pub device: String,
    /// GPU name, driver, torch, CUDA and Python versions.
    pub environment: serde_json::Value,
    /// Tolerances, budgets and seeds used.
    pub settings: serde_json::Value,
    /// Raw per-call timings, comparison statistics, findings.
    pub measurements: serde_json::Value,
    pub duration_ms: f64,
}

/// A recorded evaluation: its row id and time of recording, and every field of [`NewEvaluation`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredEvaluation {
    pub id: i64,
    /// RFC 3339, UTC, millisecond precision (`2026-11-21T10:04:05.123Z`).
    pub created_at: String,
    pub key: EvalKey,
    pub batch_id: Option<String>,
    pub task_name: String,
    pub task_path: String,
    pub candidate_label: String,
    pub verdict: String,
    pub reason: String,
    pub speedup_median: Option<f64>,
    pub speedup_ci_low: Option<f64>,
    pub speedup_ci_high: Option<f64>,
    pub ref_ms: Option<f64>,
    pub candidate_ms: Option<f64>,
    pub device: String,
    pub environment: serde_json::Value,
    pub settings: serde_json::Value,
    pub measurements: serde_json::Value,
    pub duration_ms: f64,
    /// The share of its GPU time in kernels it built itself, 0 to 1, where it was measured
    /// (`eval --own-share`; `cudal1_eval::own`), and how it was split.
    #[serde(default)]
    pub own_share: Option<f64>,
    #[serde(default)]
    pub own_kernels: Option<serde_json::Value>,
}

impl StoredEvaluation {
    /// The recorded fields without the row id and timestamp, e.g. to record them again.
    #[must_use]
    pub fn to_new(&self) -> NewEvaluation {
        NewEvaluation {
            key: self.key.clone(),
            batch_id: self.batch_id.clone(),
            task_name: self.task_name.clone(),
            task_path: self.task_path.clone(),
            candidate_label: self.candidate_label.clone(),
            verdict: self.verdict.clone(),
            reason: self.reason.clone(),
            speedup_median: self.speedup_median,
            speedup_ci_low: self.speedup_ci_low,
            speedup_ci_high: self.speedup_ci_high,
            ref_ms: self.ref_ms,
            candidate_ms: self.candidate_ms,
            device: self.device.clone(),
            environment: self.environment.clone(),
            settings: self.settings.clone(),
            measurements: self.measurements.clone(),
            duration_ms: self.duration_ms,
        }
    }
}

const SELECT: &str = "SELECT id, created_at, task_hash, candidate_hash, settings_hash, batch_id,
    task_name, task_path, candidate_label, verdict, reason, speedup_median, speedup_ci_low,
    speedup_ci_high, ref_ms, candidate_ms, device, environment, settings, measurements, duration_ms,
    judge, gpu_class, own_share, own_kernels
    FROM evaluations";

pub(crate) fn find(
    conn: &Connection,
    path: &Path,
    key: &EvalKey,
) -> Result<Option<StoredEvaluation>, StoreError> {
    let sql = format!("{SELECT} WHERE task_hash = ?1 AND candidate_hash = ?2 AND settings_hash = ?3 AND judge = ?4 AND gpu_class = ?5");
    rows::one::<RawEvaluation>(
        conn,
        path,
        "find_evaluation",
        &sql,
        [&key.task_hash, &key.candidate_hash, &key.settings_hash, &key.judge, &key.gpu_class],
    )
}

/// Inserts, or replaces every field of the row with the same key (keeping its id).
pub(crate) fn upsert(conn: &Connection, path: &Path, e: &NewEvaluation) -> Result<i64, StoreError> {
    check_numbers(e)?;
    let err = |source| query_error(path, "insert_evaluation", source);
    let sql = "INSERT INTO evaluations (created_at, recorded_seq, task_hash, candidate_hash, settings_hash,
            batch_id, task_name, task_path, candidate_label, verdict, reason, speedup_median,
            speedup_ci_low, speedup_ci_high, ref_ms, candidate_ms, device, environment, settings,
            measurements, duration_ms, judge, gpu_class)
        VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
            (SELECT ifnull(max(recorded_seq), 0) + 1 FROM evaluations), :task_hash, :candidate_hash, :settings_hash,
            :batch_id, :task_name, :task_path, :candidate_label, :verdict, :reason, :speedup_median,
            :speedup_ci_low, :speedup_ci_high, :ref_ms, :candidate_ms, :device, :environment,
            :settings, :measurements, :duration_ms, :judge, :gpu_class)
        ON CONFLICT (task_hash, candidate_hash, settings_hash, judge, gpu_class) DO UPDATE SET
            created_at = excluded.created_at, recorded_seq = excluded.recorded_seq,
            batch_id = excluded.batch_id,
            task_name = excluded.task_name, task_path = excluded.task_path,
            candidate_label = excluded.candidate_label, verdict = excluded.verdict,
            reason = excluded.reason, speedup_median = excluded.speedup_median,
            speedup_ci_low = excluded.speedup_ci_low, speedup_ci_high = excluded.speedup_ci_high,
            ref_ms = excluded.ref_ms, candidate_ms = excluded.candidate_ms,
            device = excluded.device, environment = excluded.environment,
            settings = excluded.settings, measurements = excluded.measurements,
            duration_ms = excluded.duration_ms,
            own_share = NULL, own_kernels = NULL
        RETURNING id";
    conn.prepare_cached(sql)
        .map_err(err)?
        .query_row(
            named_params! {
                ":task_hash": e.key.task_hash,
                ":candidate_hash": e.key.candidate_hash,
                ":settings_hash": e.key.settings_hash,
                ":judge": e.key.judge,
                ":gpu_class": e.key.gpu_class,
                ":batch_id": e.batch_id,
                ":task_name": e.task_name,
                ":task_path": e.task_path,
                ":candidate_label": e.candidate_label,
                ":verdict": e.verdict,
                ":reason": e.reason,
                ":speedup_median": e.speedup_median,
                ":speedup_ci_low": e.speedup_ci_low,
                ":speedup_ci_high": e.speedup_ci_high,
                ":ref_ms": e.ref_ms,
                ":candidate_ms": e.candidate_ms,
                ":device": e.device,
                ":environment": json::encode(&e.environment),
                ":settings": json::encode(&e.settings),
                ":measurements": json::encode(&e.measurements),
                ":duration_ms": e.duration_ms,
            },
            |row| row.get(0),
        )
        .map_err(err)
}

/// The evaluation with this row id.
pub(crate) fn by_id(
    conn: &Connection,
    path: &Path,
    id: i64,
) -> Result<Option<StoredEvaluation>, StoreError> {
    let sql = format!("{SELECT} WHERE id = ?1");
    rows::one::<RawEvaluation>(conn, path, "evaluation", &sql, [id])
}

/// Every evaluation, oldest row first.
pub(crate) fn all(conn: &Connection, path: &Path) -> Result<Vec<StoredEvaluation>, StoreError> {
    let sql = format!("{SELECT} ORDER BY id");
    rows::all::<RawEvaluation>(conn, path, "all_evaluations", &sql, [])
}

/// Evaluations recorded under `batch_id`, in the order they were first recorded.
pub(crate) fn for_batch(
    conn: &Connection,
    path: &Path,
    batch_id: &str,
) -> Result<Vec<StoredEvaluation>, StoreError> {
    let sql = format!("{SELECT} WHERE batch_id = ?1 ORDER BY id");
    rows::all::<RawEvaluation>(conn, path, "evaluations_for_batch", &sql, [batch_id])
}

/// Every evaluation a batch showed: those recorded under its id and those it reused, oldest row
/// first.
/// Each evaluation carries the task name and candidate label the batch gave it.
pub(crate) fn members(
    conn: &Connection,
    path: &Path,
    batch_id: &str,
) -> Result<Vec<StoredEvaluation>, StoreError> {
    let sql = "SELECT e.id, e.created_at, e.task_hash, e.candidate_hash, e.settings_hash, e.batch_id,
        coalesce(m.task_name, e.task_name), e.task_path, coalesce(m.candidate_label, e.candidate_label),
        e.verdict, e.reason, e.speedup_median, e.speedup_ci_low, e.speedup_ci_high, e.ref_ms,
        e.candidate_ms, e.device, e.environment, e.settings, e.measurements, e.duration_ms,
        e.judge, e.gpu_class, e.own_share, e.own_kernels
        FROM evaluations e LEFT JOIN batch_evaluations m ON m.evaluation_id = e.id AND m.batch_id = ?1
        WHERE e.batch_id = ?1 OR m.batch_id IS NOT NULL ORDER BY e.id";
    rows::all::<RawEvaluation>(conn, path, "batch_evaluations", sql, [batch_id])
}

/// Records that a batch showed these evaluations (new or reused): `(id, task name, candidate
/// label)` as the batch named them.
pub(crate) fn add_members(
    conn: &mut Connection,
    path: &Path,
    batch_id: &str,
    members: &[(i64, &str, &str)],
) -> Result<(), StoreError> {
    let err = |e| query_error(path, "add_batch_evaluations", e);
    let tx = conn.transaction().map_err(err)?;
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO batch_evaluations (batch_id, evaluation_id, task_name, candidate_label) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (batch_id, evaluation_id) DO UPDATE SET task_name = excluded.task_name, candidate_label = excluded.candidate_label",
            )
            .map_err(err)?;
        for (id, task, label) in members {
            stmt.execute(rusqlite::params![batch_id, id, task, label]).map_err(err)?;
        }
    }
    tx.commit().map_err(err)
}

/// The `limit` most recently recorded (or replaced) evaluations, newest first.
pub(crate) fn recent(
    conn: &Connection,
    path: &Path,
    limit: usize,
) -> Result<Vec<StoredEvaluation>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = format!("{SELECT} ORDER BY recorded_seq DESC LIMIT ?1");
    rows::all::<RawEvaluation>(conn, path, "recent_evaluations", &sql, [limit])
}

/// SQLite stores NaN as NULL, which would come back as `None` or break `NOT NULL`: refuse it.
fn check_numbers(e: &NewEvaluation) -> Result<(), StoreError> {
    let fields = [
        ("speedup_median", e.speedup_median),
        ("speedup_ci_low", e.speedup_ci_low),
        ("speedup_ci_high", e.speedup_ci_high),
        ("ref_ms", e.ref_ms),
        ("candidate_ms", e.candidate_ms),
        ("duration_ms", Some(e.duration_ms)),
    ];
    match fields.into_iter().find(|(_, v)| v.is_some_and(f64::is_nan)) {
        Some((field, _)) => Err(StoreError::NotANumber { task_name: e.task_name.clone(), field }),
        None => Ok(()),
    }
}

/// A row as SQLite returns it; JSON columns are decoded afterwards so that a corrupt column
/// gets an error that names it.
struct RawEvaluation {
    id: i64,
    created_at: String,
    key: EvalKey,
    batch_id: Option<String>,
    task_name: String,
    task_path: String,
    candidate_label: String,
    verdict: String,
    reason: String,
    speedup_median: Option<f64>,
    speedup_ci_low: Option<f64>,
    speedup_ci_high: Option<f64>,
    ref_ms: Option<f64>,
    candidate_ms: Option<f64>,
    device: String,
    environment: String,
    settings: String,
    measurements: String,
    duration_ms: f64,
    own_share: Option<f64>,
    own_kernels: Option<String>,
}

impl RawRow for RawEvaluation {
    type Decoded = StoredEvaluation;

    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            created_at: row.get(1)?,
            key: EvalKey {
                task_hash: row.get(2)?,
                candidate_hash: row.get(3)?,
                settings_hash: row.get(4)?,
                judge: row.get(21)?,
                gpu_class: row.get(22)?,
            },
            batch_id: row.get(5)?,
            task_name: row.get(6)?,
            task_path: row.get(7)?,
            candidate_label: row.get(8)?,
            verdict: row.get(9)?,
            reason: row.get(10)?,
            speedup_median: row.get(11)?,
            speedup_ci_low: row.get(12)?,
            speedup_ci_high: row.get(13)?,
            ref_ms: row.get(14)?,
            candidate_ms: row.get(15)?,
            device: row.get(16)?,
            environment: row.get(17)?,
            settings: row.get(18)?,
            measurements: row.get(19)?,
            duration_ms: row.get(20)?,
            own_share: row.get(23)?,
            own_kernels: row.get(24)?,
        })
    }

    fn decode(self, path: &Path) -> Result<StoredEvaluation, StoreError> {
        let row = self.id.to_string();
        let column = |column, text: &str| json::decode(text, path, "evaluations", &row, column);
        Ok(StoredEvaluation {
            environment: column("environment", &self.environment)?,
            settings: column("settings", &self.settings)?,
            measurements: column("measurements", &self.measurements)?,
            id: self.id,
            created_at: self.created_at,
            key: self.key,
            batch_id: self.batch_id,
            task_name: self.task_name,
            task_path: self.task_path,
            candidate_label: self.candidate_label,
            verdict: self.verdict,
            reason: self.reason,
            speedup_median: self.speedup_median,
            speedup_ci_low: self.speedup_ci_low,
            speedup_ci_high: self.speedup_ci_high,
            ref_ms: self.ref_ms,
            candidate_ms: self.candidate_ms,
            device: self.device,
            duration_ms: self.duration_ms,
            own_share: self.own_share,
            own_kernels: self
                .own_kernels
                .as_deref()
                .map(|t| column("own_kernels", t))
                .transpose()?,
        })
    }
}

/// Records the own-kernel share of the evaluation `id` (replacing one recorded before); `false`
/// when there is no such evaluation. A re-evaluation of its key clears it.
pub(crate) fn set_own_share(
    conn: &Connection,
    path: &Path,
    id: i64,
    share: f64,
    kernels: &serde_json::Value,
) -> Result<bool, StoreError> {
    if !(0.0..=1.0).contains(&share) {
        return Err(StoreError::ShareOutOfRange { id, value: share });
    }
    let n = conn
        .execute(
            "UPDATE evaluations SET own_share = ?1, own_kernels = ?2 WHERE id = ?3",
            rusqlite::params![share, json::encode(kernels), id],
        )
        .map_err(|e| query_error(path, "set_own_share", e))?;
    Ok(n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::migrated as conn;

    fn sample(task: &str) -> NewEvaluation {
        NewEvaluation {
            key: EvalKey {
                task_hash: task.into(),
                candidate_hash: "c".into(),
                settings_hash: "s".into(),
                judge: "1.judge".into(),
                gpu_class: "cpu".into(),
            },
            batch_id: None,
            task_name: task.into(),
            task_path: format!("/tasks/{task}.py"),
            candidate_label: "cand".into(),
            verdict: "correct".into(),
            reason: String::new(),
            speedup_median: Some(1.5),
            speedup_ci_low: None,
            speedup_ci_high: None,
            ref_ms: None,
            candidate_ms: None,
            device: "cpu".into(),
            environment: serde_json::json!({}),
            settings: serde_json::json!({}),
            measurements: serde_json::json!([]),
            duration_ms: 1.0,
        }
    }

    #[test]
    fn a_batch_holds_its_own_evaluations_and_those_it_reused() {
        let mut conn = conn();
        let p = Path::new("a.db");
        let mut first = sample("t1");
        first.batch_id = Some("b1".into());
        let reused = upsert(&conn, p, &first).unwrap();
        let mut own = sample("t2");
        own.batch_id = Some("b2".into());
        let own = upsert(&conn, p, &own).unwrap();
        add_members(
            &mut conn,
            p,
            "b2",
            &[
                (reused, "level1/1_Renamed", "release.json:1"),
                (own, "t2", "cand"),
                (reused, "level1/1_Renamed", "release.json:1"),
            ],
        )
        .unwrap();
        let names = |b: &str| {
            members(&conn, p, b)
                .unwrap()
                .iter()
                .map(|e| (e.id, e.task_name.clone(), e.candidate_label.clone()))
                .collect::<Vec<_>>()
        };
        // The reused one under the name the second batch gave it; the first batch keeps its own.
        assert_eq!(
            names("b2"),
            [
                (reused, "level1/1_Renamed".into(), "release.json:1".into()),
                (own, "t2".into(), "cand".into())
            ]
        );
        assert_eq!(names("b1"), [(reused, "t1".into(), "cand".into())]);
        assert!(names("b3").is_empty());
    }

    #[test]
    fn nan_is_refused_naming_the_field() {
        let mut e = sample("t");
        e.ref_ms = Some(f64::NAN);
        let err = upsert(&conn(), Path::new(":memory:"), &e).unwrap_err();
        assert!(matches!(err, StoreError::NotANumber { field: "ref_ms", .. }), "{err:?}");
        e.ref_ms = None;
        e.duration_ms = f64::NAN;
        let err = upsert(&conn(), Path::new(":memory:"), &e).unwrap_err();
        assert!(matches!(err, StoreError::NotANumber { field: "duration_ms", .. }), "{err:?}");
    }

    #[test]
    fn evaluations_are_found_by_id_and_listed_oldest_first() {
        let conn = conn();
        let a = upsert(&conn, Path::new(":memory:"), &sample("a")).unwrap();
        let b = upsert(&conn, Path::new(":memory:"), &sample("b")).unwrap();
        assert_eq!(by_id(&conn, Path::new(":memory:"), b).unwrap().unwrap().task_name, "b");
        assert!(by_id(&conn, Path::new(":memory:"), b + 1).unwrap().is_none());
        let ids: Vec<i64> =
            all(&conn, Path::new(":memory:")).unwrap().iter().map(|e| e.id).collect();
        assert_eq!(ids, [a, b]);
    }

    #[test]
    fn infinities_round_trip() {
        let conn = conn();
        let mut e = sample("t");
        e.speedup_ci_high = Some(f64::INFINITY);
        e.speedup_ci_low = Some(f64::NEG_INFINITY);
        upsert(&conn, Path::new(":memory:"), &e).unwrap();
        let got = find(&conn, Path::new(":memory:"), &e.key).unwrap().unwrap();
        assert_eq!(got.speedup_ci_high, Some(f64::INFINITY));
        assert_eq!(got.speedup_ci_low, Some(f64::NEG_INFINITY));
    }

    #[test]
    fn corrupt_json_names_the_row_and_column() {
        let conn = conn();
        let id = upsert(&conn, Path::new(":memory:"), &sample("t")).unwrap();
        conn.execute("UPDATE evaluations SET settings = '{not json' WHERE id = ?1", [id]).unwrap();
        let err = find(&conn, Path::new("s.db"), &sample("t").key).unwrap_err();
        assert!(
            matches!(&err, StoreError::CorruptJson { column: "settings", row, .. } if *row == id.to_string()),
            "{err:?}"
        );
        assert!(err.to_string().contains("`s.db`"), "{err}");
    }

    #[test]
    fn created_at_is_rfc3339_utc() {
        let conn = conn();
        upsert(&conn, Path::new(":memory:"), &sample("t")).unwrap();
        let got = find(&conn, Path::new(":memory:"), &sample("t").key).unwrap().unwrap();
        let c = got.created_at.as_bytes();
        assert_eq!(c.len(), 24, "{}", got.created_at);
        assert_eq!(
            (c[4], c[7], c[10], c[13], c[16], c[19], c[23]),
            (b'-', b'-', b'T', b':', b':', b'.', b'Z')
        );
        assert!(got.created_at.starts_with("20"), "{}", got.created_at);
    }

    #[test]
    fn to_new_returns_the_recorded_fields() {
        let conn = conn();
        let e = sample("t");
        upsert(&conn, Path::new(":memory:"), &e).unwrap();
        assert_eq!(find(&conn, Path::new(":memory:"), &e.key).unwrap().unwrap().to_new(), e);
    }
}
