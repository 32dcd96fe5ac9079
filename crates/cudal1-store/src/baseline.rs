//! Baselines (`cudal1 baselines`): what eager PyTorch, `torch.compile` in each mode and CUDA graphs
//! achieve on a task, measured by the same protocol as candidates. One row per task, settings,
//! class of device, judging version and baseline name; measuring again replaces the row.

use std::path::Path;

use rusqlite::{named_params, Connection, Row};
use serde::{Deserialize, Serialize};

use crate::error::{query_error, StoreError};
use crate::json;
use crate::rows::{self, RawRow};

/// What makes two baseline measurements the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BaselineKey {
    pub task_hash: String,
    /// The evaluation settings' hash, as evaluations are keyed.
    pub settings_hash: String,
    /// The class of GPU it was measured on, as the job queue names it (`cpu` for the CPU).
    pub gpu_class: String,
    /// The judging version that measured it (`cudal1_eval::judge_version`); empty in rows
    /// recorded before judges were recorded.
    pub judge: String,
    /// `eager`, `compile-default`, `compile-reduce-overhead`, `compile-max-autotune`,
    /// `cuda-graphs`.
    pub name: String,
}

/// Whether a baseline could be measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaselineStatus {
    /// Correct on every seed and timed: the numbers are set.
    Measured,
    /// It failed on this task (or cannot run on this device); `reason` says why.
    Failed,
}

impl BaselineStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BaselineStatus::Measured => "measured",
            BaselineStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<BaselineStatus> {
        match text {
            "measured" => Some(BaselineStatus::Measured),
            "failed" => Some(BaselineStatus::Failed),
            _ => None,
        }
    }
}

/// A baseline measurement to record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewBaseline {
    pub key: BaselineKey,
    /// `level1/12_Name`.
    pub task_name: String,
    pub status: BaselineStatus,
    /// Why it failed, or how it was measured.
    pub reason: String,
    /// Speedup over eager PyTorch (reference time / baseline time): median and interval. `eager`
    /// itself is 1 by definition.
    pub speedup_median: Option<f64>,
    pub speedup_ci_low: Option<f64>,
    pub speedup_ci_high: Option<f64>,
    /// Median time of one call of the baseline and of the eager reference, in milliseconds.
    pub baseline_ms: Option<f64>,
    pub reference_ms: Option<f64>,
    /// The evaluation the numbers come from, as `eval --json` prints one (`null` when none ran).
    pub evaluation: serde_json::Value,
}

/// A recorded baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredBaseline {
    /// RFC 3339, UTC, millisecond precision.
    pub created_at: String,
    pub baseline: NewBaseline,
}

/// Which baselines [`crate::Store::baselines`] returns: every field that is set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaselineFilter {
    pub task_hash: Option<String>,
    pub settings_hash: Option<String>,
    pub gpu_class: Option<String>,
    pub judge: Option<String>,
    pub name: Option<String>,
}

impl BaselineFilter {
    /// Every baseline of one task.
    #[must_use]
    pub fn task(task_hash: &str) -> BaselineFilter {
        BaselineFilter { task_hash: Some(task_hash.to_owned()), ..BaselineFilter::default() }
    }
}

/// Inserts, or replaces the baseline with the same key.
pub(crate) fn upsert(conn: &Connection, path: &Path, b: &NewBaseline) -> Result<(), StoreError> {
    let numbers = [
        ("speedup_median", b.speedup_median),
        ("speedup_ci_low", b.speedup_ci_low),
        ("speedup_ci_high", b.speedup_ci_high),
        ("baseline_ms", b.baseline_ms),
        ("reference_ms", b.reference_ms),
    ];
    if let Some((field, _)) = numbers.into_iter().find(|(_, v)| v.is_some_and(f64::is_nan)) {
        return Err(StoreError::NotANumber { task_name: b.task_name.clone(), field });
    }
    conn.prepare_cached(
        "INSERT INTO baselines (task_hash, settings_hash, gpu_class, judge, name, task_name, created_at,
             status, reason, speedup_median, speedup_ci_low, speedup_ci_high, baseline_ms, reference_ms, evaluation)
         VALUES (:task_hash, :settings_hash, :gpu_class, :judge, :name, :task_name, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
             :status, :reason, :speedup_median, :speedup_ci_low, :speedup_ci_high, :baseline_ms, :reference_ms, :evaluation)
         ON CONFLICT (task_hash, settings_hash, gpu_class, judge, name) DO UPDATE SET
             task_name = excluded.task_name, created_at = excluded.created_at, status = excluded.status,
             reason = excluded.reason, speedup_median = excluded.speedup_median,
             speedup_ci_low = excluded.speedup_ci_low, speedup_ci_high = excluded.speedup_ci_high,
             baseline_ms = excluded.baseline_ms, reference_ms = excluded.reference_ms,
             evaluation = excluded.evaluation",
    )
    .and_then(|mut stmt| {
        stmt.execute(named_params! {
            ":task_hash": b.key.task_hash,
            ":settings_hash": b.key.settings_hash,
            ":gpu_class": b.key.gpu_class,
            ":judge": b.key.judge,
            ":name": b.key.name,
            ":task_name": b.task_name,
            ":status": b.status.as_str(),
            ":reason": b.reason,
            ":speedup_median": b.speedup_median,
            ":speedup_ci_low": b.speedup_ci_low,
            ":speedup_ci_high": b.speedup_ci_high,
            ":baseline_ms": b.baseline_ms,
            ":reference_ms": b.reference_ms,
            ":evaluation": json::encode(&b.evaluation),
        })
    })
    .map(|_| ())
    .map_err(|e| query_error(path, "record_baseline", e))
}

const SELECT: &str = "SELECT task_hash, settings_hash, gpu_class, name, task_name, created_at, status, reason,
    speedup_median, speedup_ci_low, speedup_ci_high, baseline_ms, reference_ms, evaluation, judge FROM baselines";

pub(crate) fn find(
    conn: &Connection,
    path: &Path,
    key: &BaselineKey,
) -> Result<Option<StoredBaseline>, StoreError> {
    let sql = format!("{SELECT} WHERE task_hash = ?1 AND settings_hash = ?2 AND gpu_class = ?3 AND judge = ?4 AND name = ?5");
    rows::one::<RawBaseline>(
        conn,
        path,
        "find_baseline",
        &sql,
        [&key.task_hash, &key.settings_hash, &key.gpu_class, &key.judge, &key.name],
    )
}

/// The matching baselines, by task name, then name.
pub(crate) fn matching(
    conn: &Connection,
    path: &Path,
    f: &BaselineFilter,
) -> Result<Vec<StoredBaseline>, StoreError> {
    let sql = format!(
        "{SELECT} WHERE (?1 IS NULL OR task_hash = ?1) AND (?2 IS NULL OR settings_hash = ?2)
            AND (?3 IS NULL OR gpu_class = ?3) AND (?4 IS NULL OR name = ?4) AND (?5 IS NULL OR judge = ?5)
         ORDER BY task_name, task_hash, settings_hash, gpu_class, name, judge"
    );
    rows::all::<RawBaseline>(
        conn,
        path,
        "baselines",
        &sql,
        [&f.task_hash, &f.settings_hash, &f.gpu_class, &f.name, &f.judge],
    )
}

struct RawBaseline {
    key: BaselineKey,
    task_name: String,
    created_at: String,
    status: String,
    reason: String,
    numbers: [Option<f64>; 5],
    evaluation: String,
}

impl RawRow for RawBaseline {
    type Decoded = StoredBaseline;

    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            key: BaselineKey {
                task_hash: row.get(0)?,
                settings_hash: row.get(1)?,
                gpu_class: row.get(2)?,
                judge: row.get(14)?,
                name: row.get(3)?,
            },
            task_name: row.get(4)?,
            created_at: row.get(5)?,
            status: row.get(6)?,
            reason: row.get(7)?,
            numbers: [row.get(8)?, row.get(9)?, row.get(10)?, row.get(11)?, row.get(12)?],
            evaluation: row.get(13)?,
        })
    }

    fn decode(self, path: &Path) -> Result<StoredBaseline, StoreError> {
        let row = format!(
            "{}/{}/{}/{}/{}",
            self.key.task_hash,
            self.key.settings_hash,
            self.key.gpu_class,
            self.key.judge,
            self.key.name
        );
        let status =
            BaselineStatus::parse(&self.status).ok_or_else(|| StoreError::CorruptValue {
                path: path.to_path_buf(),
                table: "baselines",
                row: row.clone(),
                column: "status",
                value: self.status.clone(),
            })?;
        let evaluation = json::decode(&self.evaluation, path, "baselines", &row, "evaluation")?;
        let [speedup_median, speedup_ci_low, speedup_ci_high, baseline_ms, reference_ms] =
            self.numbers;
        Ok(StoredBaseline {
            created_at: self.created_at,
            baseline: NewBaseline {
                key: self.key,
                task_name: self.task_name,
                status,
                reason: self.reason,
                speedup_median,
                speedup_ci_low,
                speedup_ci_high,
                baseline_ms,
                reference_ms,
                evaluation,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline(task: &str, name: &str, gpu_class: &str, speedup: Option<f64>) -> NewBaseline {
        NewBaseline {
            key: BaselineKey {
                task_hash: task.into(),
                settings_hash: "s".into(),
                gpu_class: gpu_class.into(),
                judge: "1.judge".into(),
                name: name.into(),
            },
            task_name: format!("level1/{task}"),
            status: if speedup.is_some() {
                BaselineStatus::Measured
            } else {
                BaselineStatus::Failed
            },
            reason: if speedup.is_some() {
                "correct".into()
            } else {
                "CUDA graphs need a GPU".into()
            },
            speedup_median: speedup,
            speedup_ci_low: speedup.map(|s| s * 0.9),
            speedup_ci_high: speedup.map(|s| s * 1.1),
            baseline_ms: speedup.map(|s| 2.0 / s),
            reference_ms: Some(2.0),
            evaluation: serde_json::json!({"verdict": "correct"}),
        }
    }

    #[test]
    fn baselines_are_found_by_key_filtered_and_replaced() {
        let conn = crate::schema::tests::migrated();
        let path = Path::new(":memory:");
        upsert(&conn, path, &baseline("b", "eager", "cpu", Some(1.0))).unwrap();
        upsert(&conn, path, &baseline("a", "compile-default", "cpu", Some(1.5))).unwrap();
        upsert(&conn, path, &baseline("a", "cuda-graphs", "cpu", None)).unwrap();
        upsert(&conn, path, &baseline("a", "eager", "h100", Some(1.0))).unwrap();

        let all = matching(&conn, path, &BaselineFilter::default()).unwrap();
        let names: Vec<_> = all
            .iter()
            .map(|b| {
                (
                    b.baseline.task_name.as_str(),
                    b.baseline.key.name.as_str(),
                    b.baseline.key.gpu_class.as_str(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("level1/a", "compile-default", "cpu"),
                ("level1/a", "cuda-graphs", "cpu"),
                ("level1/a", "eager", "h100"),
                ("level1/b", "eager", "cpu")
            ]
        );

        let of_a_on_cpu = matching(
            &conn,
            path,
            &BaselineFilter { gpu_class: Some("cpu".into()), ..BaselineFilter::task("a") },
        )
        .unwrap();
        assert_eq!(of_a_on_cpu.len(), 2);
        let failed = &of_a_on_cpu[1].baseline;
        assert_eq!(
            (failed.status, failed.speedup_median, failed.reason.as_str()),
            (BaselineStatus::Failed, None, "CUDA graphs need a GPU")
        );

        // Measured again: replaced, not added.
        let again = baseline("a", "compile-default", "cpu", Some(2.5));
        upsert(&conn, path, &again).unwrap();
        let got = find(&conn, path, &again.key).unwrap().unwrap();
        assert_eq!(got.baseline, again);
        assert_eq!(matching(&conn, path, &BaselineFilter::default()).unwrap().len(), 4);
        let other_settings = BaselineKey { settings_hash: "other".into(), ..again.key.clone() };
        assert!(find(&conn, path, &other_settings).unwrap().is_none());
        // Measured by another judging version: not this judge's baseline.
        let older_judge = BaselineKey { judge: "0.judge".into(), ..again.key.clone() };
        assert!(find(&conn, path, &older_judge).unwrap().is_none());
    }

    #[test]
    fn a_nan_speedup_is_refused() {
        let conn = crate::schema::tests::migrated();
        let path = Path::new(":memory:");
        let e = upsert(&conn, path, &baseline("a", "eager", "cpu", Some(f64::NAN))).unwrap_err();
        assert!(matches!(e, StoreError::NotANumber { field: "speedup_median", .. }), "{e:?}");
    }
}
