//! Records of optimize runs: a run per task (and settings and output directory), its finished
//! rounds, and every LLM sample with what became of it. Together with the program database
//! they let an interrupted run resume where it stopped.

use std::path::Path;

use rusqlite::{named_params, params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use crate::error::{query_error, StoreError};
use crate::json;
use crate::rows::{self, RawRow};

/// A run to record; the store writes its `created_at`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    pub id: String,
    pub task_hash: String,
    pub task_name: String,
    pub task_path: String,
    pub settings_hash: String,
    pub settings: serde_json::Value,
    /// The loop's options when the run began.
    pub config: serde_json::Value,
}

/// A recorded run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRun {
    pub id: String,
    pub created_at: String,
    /// Set each time an invocation ends the run; `None` while the first one runs or if it died.
    pub finished_at: Option<String>,
    pub stop_reason: Option<String>,
    pub task_hash: String,
    pub task_name: String,
    pub task_path: String,
    pub settings_hash: String,
    pub settings: serde_json::Value,
    pub config: serde_json::Value,
}

/// A finished round and its totals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewRound {
    pub run_id: String,
    /// 1-based.
    pub round: u32,
    pub samples: u32,
    /// Samples whose reply held a program.
    pub valid: u32,
    /// Samples whose program is correct.
    pub correct: u32,
    /// Programs evaluated for the first time in this round.
    pub new_programs: u32,
    /// The best correct program of the run so far, and its speedup.
    pub best_program_id: Option<i64>,
    pub best_speedup: Option<f64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub wall_ms: f64,
}

/// A recorded round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRound {
    pub finished_at: String,
    #[serde(flatten)]
    pub round: NewRound,
}

/// One LLM request and what became of its reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewSample {
    pub run_id: String,
    pub round: u32,
    /// 0-based within the round. With `optimize --turns`, a slot is a trajectory: its turns
    /// share the round and index.
    pub index: u32,
    /// 1-based turn within the slot's trajectory (1 without `--turns`).
    #[serde(default = "crate::program::first_turn")]
    pub turn: u32,
    /// Which prompt template: `first`, `contrastive` or `refine`.
    pub prompt_kind: String,
    /// The programs shown as exemplars.
    pub exemplar_ids: Vec<i64>,
    pub model: Option<String>,
    /// The raw reply text; `None` when no reply came.
    pub reply: Option<String>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub latency_ms: Option<f64>,
    /// `program`, `no_code` or `llm_error`.
    pub outcome: String,
    /// Why there is no program (extraction failure, LLM error).
    pub reason: Option<String>,
    /// The normalised-source hash of the extracted program, which finds it in `programs`.
    pub code_hash: Option<String>,
}

/// A recorded sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredSample {
    pub id: i64,
    pub created_at: String,
    #[serde(flatten)]
    pub sample: NewSample,
}

/// Records the run unless it exists; returns the run as stored (an existing run keeps its
/// original creation time and config).
pub(crate) fn begin_run(
    conn: &Connection,
    path: &Path,
    r: &NewRun,
) -> Result<StoredRun, StoreError> {
    conn.execute(
        "INSERT INTO optimize_runs (id, created_at, task_hash, task_name, task_path,
            settings_hash, settings, config)
         VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (id) DO NOTHING",
        params![
            r.id,
            r.task_hash,
            r.task_name,
            r.task_path,
            r.settings_hash,
            json::encode(&r.settings),
            json::encode(&r.config)
        ],
    )
    .map_err(|e| query_error(path, "begin_run", e))?;
    find_run(conn, path, &r.id)?
        .ok_or_else(|| StoreError::UnknownRun { path: path.to_path_buf(), run_id: r.id.clone() })
}

/// Every optimize run's id, the most recently created first.
pub(crate) fn run_ids(conn: &Connection, path: &Path) -> Result<Vec<String>, StoreError> {
    let err = |e| query_error(path, "run_ids", e);
    let mut stmt = conn
        .prepare_cached("SELECT id FROM optimize_runs ORDER BY created_at DESC, rowid DESC")
        .map_err(err)?;
    let ids = stmt
        .query_map([], |r| r.get(0))
        .map_err(err)?
        .collect::<Result<Vec<String>, _>>()
        .map_err(err)?;
    Ok(ids)
}

pub(crate) fn find_run(
    conn: &Connection,
    path: &Path,
    run_id: &str,
) -> Result<Option<StoredRun>, StoreError> {
    type Raw = (
        String,
        String,
        Option<String>,
        Option<String>,
        String,
        String,
        String,
        String,
        String,
        String,
    );
    let raw: Option<Raw> = conn
        .query_row(
            "SELECT id, created_at, finished_at, stop_reason, task_hash, task_name, task_path,
                settings_hash, settings, config FROM optimize_runs WHERE id = ?1",
            [run_id],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                ))
            },
        )
        .optional()
        .map_err(|e| query_error(path, "find_run", e))?;
    let Some((
        id,
        created_at,
        finished_at,
        stop_reason,
        task_hash,
        task_name,
        task_path,
        settings_hash,
        settings,
        config,
    )) = raw
    else {
        return Ok(None);
    };
    Ok(Some(StoredRun {
        settings: json::decode(&settings, path, "optimize_runs", &id, "settings")?,
        config: json::decode(&config, path, "optimize_runs", &id, "config")?,
        id,
        created_at,
        finished_at,
        stop_reason,
        task_hash,
        task_name,
        task_path,
        settings_hash,
    }))
}

pub(crate) fn finish_run(
    conn: &Connection,
    path: &Path,
    run_id: &str,
    stop_reason: &str,
) -> Result<(), StoreError> {
    let changed = conn
        .execute(
            "UPDATE optimize_runs SET stop_reason = ?2,
                finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1",
            params![run_id, stop_reason],
        )
        .map_err(|e| query_error(path, "finish_run", e))?;
    if changed == 0 {
        return Err(StoreError::UnknownRun { path: path.to_path_buf(), run_id: run_id.to_owned() });
    }
    Ok(())
}

/// Records a finished round; finishing the same round again replaces its totals.
pub(crate) fn finish_round(conn: &Connection, path: &Path, r: &NewRound) -> Result<(), StoreError> {
    if r.best_speedup.is_some_and(f64::is_nan) || r.cost_usd.is_nan() || r.wall_ms.is_nan() {
        return Err(StoreError::NotANumber { task_name: r.run_id.clone(), field: "round totals" });
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO optimize_rounds (run_id, round, finished_at, samples, valid,
            correct, new_programs, best_program_id, best_speedup, prompt_tokens,
            completion_tokens, cost_usd, wall_ms)
        VALUES (:run_id, :round, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), :samples, :valid,
            :correct, :new_programs, :best_program_id, :best_speedup, :prompt_tokens,
            :completion_tokens, :cost_usd, :wall_ms)",
    )
    .and_then(|mut stmt| {
        stmt.execute(named_params! {
            ":run_id": r.run_id,
            ":round": r.round,
            ":samples": r.samples,
            ":valid": r.valid,
            ":correct": r.correct,
            ":new_programs": r.new_programs,
            ":best_program_id": r.best_program_id,
            ":best_speedup": r.best_speedup,
            ":prompt_tokens": r.prompt_tokens,
            ":completion_tokens": r.completion_tokens,
            ":cost_usd": r.cost_usd,
            ":wall_ms": r.wall_ms,
        })
    })
    .map_err(|e| query_error(path, "finish_round", e))?;
    Ok(())
}

pub(crate) fn rounds(
    conn: &Connection,
    path: &Path,
    run_id: &str,
) -> Result<Vec<StoredRound>, StoreError> {
    let err = |e| query_error(path, "rounds_for_run", e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT finished_at, run_id, round, samples, valid, correct, new_programs,
                best_program_id, best_speedup, prompt_tokens, completion_tokens, cost_usd, wall_ms
             FROM optimize_rounds WHERE run_id = ?1 ORDER BY round",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map([run_id], |r| {
            Ok(StoredRound {
                finished_at: r.get(0)?,
                round: NewRound {
                    run_id: r.get(1)?,
                    round: r.get(2)?,
                    samples: r.get(3)?,
                    valid: r.get(4)?,
                    correct: r.get(5)?,
                    new_programs: r.get(6)?,
                    best_program_id: r.get(7)?,
                    best_speedup: r.get(8)?,
                    prompt_tokens: r.get(9)?,
                    completion_tokens: r.get(10)?,
                    cost_usd: r.get(11)?,
                    wall_ms: r.get(12)?,
                },
            })
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    Ok(rows)
}

/// Records a sample; a second sample with the same run, round, index and turn is an error
/// ([`StoreError::SampleExists`]), unless the one recorded is a failed request (`llm_error`):
/// then the new one takes its place (a later turn sent again keeps its slot).
pub(crate) fn insert_sample(
    conn: &Connection,
    path: &Path,
    s: &NewSample,
) -> Result<i64, StoreError> {
    if s.cost_usd.is_nan() || s.latency_ms.is_some_and(f64::is_nan) {
        return Err(StoreError::NotANumber {
            task_name: s.run_id.clone(),
            field: "sample cost or latency",
        });
    }
    let exemplars = serde_json::Value::from(s.exemplar_ids.clone());
    let result = conn
        .prepare_cached(
            "INSERT INTO optimize_samples (created_at, run_id, round, idx, turn, prompt_kind,
                exemplar_ids, model, reply, finish_reason, prompt_tokens, completion_tokens,
                cost_usd, latency_ms, outcome, reason, code_hash)
            VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), :run_id, :round, :idx, :turn,
                :prompt_kind, :exemplar_ids, :model, :reply, :finish_reason, :prompt_tokens,
                :completion_tokens, :cost_usd, :latency_ms, :outcome, :reason, :code_hash)
            ON CONFLICT (run_id, round, idx, turn) DO UPDATE SET
                created_at = excluded.created_at, prompt_kind = excluded.prompt_kind,
                exemplar_ids = excluded.exemplar_ids, model = excluded.model,
                reply = excluded.reply, finish_reason = excluded.finish_reason,
                prompt_tokens = excluded.prompt_tokens,
                completion_tokens = excluded.completion_tokens, cost_usd = excluded.cost_usd,
                latency_ms = excluded.latency_ms, outcome = excluded.outcome,
                reason = excluded.reason, code_hash = excluded.code_hash
            WHERE optimize_samples.outcome = 'llm_error'
            RETURNING id",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                named_params! {
                    ":run_id": s.run_id,
                    ":round": s.round,
                    ":idx": s.index,
                    ":turn": s.turn,
                    ":prompt_kind": s.prompt_kind,
                    ":exemplar_ids": json::encode(&exemplars),
                    ":model": s.model,
                    ":reply": s.reply,
                    ":finish_reason": s.finish_reason,
                    ":prompt_tokens": s.prompt_tokens,
                    ":completion_tokens": s.completion_tokens,
                    ":cost_usd": s.cost_usd,
                    ":latency_ms": s.latency_ms,
                    ":outcome": s.outcome,
                    ":reason": s.reason,
                    ":code_hash": s.code_hash,
                },
                |r| r.get(0),
            )
        });
    match result {
        Ok(id) => Ok(id),
        Err(rusqlite::Error::QueryReturnedNoRows) => Err(StoreError::SampleExists {
            path: path.to_path_buf(),
            run_id: s.run_id.clone(),
            round: s.round,
            index: s.index,
        }),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) => {
            Err(StoreError::SampleExists {
                path: path.to_path_buf(),
                run_id: s.run_id.clone(),
                round: s.round,
                index: s.index,
            })
        }
        Err(e) => Err(query_error(path, "insert_sample", e)),
    }
}

/// Every sample of a run, by round and index.
pub(crate) fn samples(
    conn: &Connection,
    path: &Path,
    run_id: &str,
) -> Result<Vec<StoredSample>, StoreError> {
    let sql = "SELECT id, created_at, run_id, round, idx, prompt_kind, exemplar_ids, model, reply,
            finish_reason, prompt_tokens, completion_tokens, cost_usd, latency_ms, outcome,
            reason, code_hash, turn
         FROM optimize_samples WHERE run_id = ?1 ORDER BY round, idx, turn";
    rows::all::<RawSample>(conn, path, "samples_for_run", sql, [run_id])
}

struct RawSample {
    id: i64,
    created_at: String,
    exemplar_ids: String,
    sample: NewSample,
}

impl RawRow for RawSample {
    type Decoded = StoredSample;

    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: r.get(0)?,
            created_at: r.get(1)?,
            exemplar_ids: r.get(6)?,
            sample: NewSample {
                run_id: r.get(2)?,
                round: r.get(3)?,
                index: r.get(4)?,
                turn: r.get(17)?,
                prompt_kind: r.get(5)?,
                exemplar_ids: Vec::new(),
                model: r.get(7)?,
                reply: r.get(8)?,
                finish_reason: r.get(9)?,
                prompt_tokens: r.get(10)?,
                completion_tokens: r.get(11)?,
                cost_usd: r.get(12)?,
                latency_ms: r.get(13)?,
                outcome: r.get(14)?,
                reason: r.get(15)?,
                code_hash: r.get(16)?,
            },
        })
    }

    fn decode(mut self, path: &Path) -> Result<StoredSample, StoreError> {
        let row = self.id.to_string();
        let value =
            json::decode(&self.exemplar_ids, path, "optimize_samples", &row, "exemplar_ids")?;
        self.sample.exemplar_ids =
            serde_json::from_value(value).map_err(|source| StoreError::CorruptJson {
                path: path.to_path_buf(),
                table: "optimize_samples",
                row,
                column: "exemplar_ids",
                source,
            })?;
        Ok(StoredSample { id: self.id, created_at: self.created_at, sample: self.sample })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::migrated as conn;

    const P: &str = ":memory:";

    fn run(id: &str) -> NewRun {
        NewRun {
            id: id.into(),
            task_hash: "t".into(),
            task_name: "level1/1_X".into(),
            task_path: "/tasks/level1/1_X.py".into(),
            settings_hash: "s".into(),
            settings: serde_json::json!({"device": "Cpu"}),
            config: serde_json::json!({"rounds": 2}),
        }
    }

    fn sample(round: u32, index: u32) -> NewSample {
        NewSample {
            run_id: "r".into(),
            round,
            index,
            turn: 1,
            prompt_kind: "first".into(),
            exemplar_ids: vec![4, 9],
            model: Some("m".into()),
            reply: Some("no code here".into()),
            finish_reason: Some("stop".into()),
            prompt_tokens: 100,
            completion_tokens: 20,
            cost_usd: 0.25,
            latency_ms: Some(12.5),
            outcome: "no_code".into(),
            reason: Some("no code block".into()),
            code_hash: None,
        }
    }

    #[test]
    fn a_run_is_recorded_once_and_keeps_its_config() {
        let conn = conn();
        let p = Path::new(P);
        let first = begin_run(&conn, p, &run("r")).unwrap();
        assert_eq!(first.config["rounds"], 2);
        assert_eq!(first.finished_at, None);
        let mut changed = run("r");
        changed.config = serde_json::json!({"rounds": 9});
        let again = begin_run(&conn, p, &changed).unwrap();
        assert_eq!(again, first);
        finish_run(&conn, p, "r", "rounds").unwrap();
        let done = find_run(&conn, p, "r").unwrap().unwrap();
        assert_eq!(done.stop_reason.as_deref(), Some("rounds"));
        assert!(done.finished_at.is_some());
        assert!(matches!(finish_run(&conn, p, "nope", "x"), Err(StoreError::UnknownRun { .. })));
    }

    #[test]
    fn rounds_come_back_in_order_and_can_be_replaced() {
        let conn = conn();
        let p = Path::new(P);
        let round = |n: u32, best: Option<f64>| NewRound {
            run_id: "r".into(),
            round: n,
            samples: 4,
            valid: 3,
            correct: 2,
            new_programs: 2,
            best_program_id: best.map(|_| 1),
            best_speedup: best,
            prompt_tokens: 10,
            completion_tokens: 5,
            cost_usd: 0.0,
            wall_ms: 1.5,
        };
        finish_round(&conn, p, &round(2, Some(3.0))).unwrap();
        finish_round(&conn, p, &round(1, None)).unwrap();
        finish_round(&conn, p, &round(2, Some(4.0))).unwrap();
        let got = rounds(&conn, p, "r").unwrap();
        assert_eq!(
            got.iter().map(|r| r.round.clone()).collect::<Vec<_>>(),
            vec![round(1, None), round(2, Some(4.0))]
        );
        assert!(rounds(&conn, p, "other").unwrap().is_empty());
    }

    #[test]
    fn samples_round_trip_and_are_unique_per_slot() {
        let conn = conn();
        let p = Path::new(P);
        insert_sample(&conn, p, &sample(2, 0)).unwrap();
        let mut program = sample(1, 1);
        program.outcome = "program".into();
        program.reason = None;
        program.code_hash = Some("abc".into());
        program.latency_ms = None;
        insert_sample(&conn, p, &program).unwrap();
        insert_sample(&conn, p, &sample(1, 0)).unwrap();
        let got: Vec<NewSample> =
            samples(&conn, p, "r").unwrap().into_iter().map(|s| s.sample).collect();
        assert_eq!(got, vec![sample(1, 0), program, sample(2, 0)]);
        let err = insert_sample(&conn, p, &sample(1, 0)).unwrap_err();
        assert!(matches!(err, StoreError::SampleExists { round: 1, index: 0, .. }), "{err:?}");
        // A later turn of a slot is its own row; a failed request's row is taken by its retry.
        let failed =
            NewSample { turn: 2, outcome: "llm_error".into(), reply: None, ..sample(1, 0) };
        let id = insert_sample(&conn, p, &failed).unwrap();
        let retried = NewSample { turn: 2, ..sample(1, 0) };
        assert_eq!(insert_sample(&conn, p, &retried).unwrap(), id);
        assert!(matches!(insert_sample(&conn, p, &retried), Err(StoreError::SampleExists { .. })));
        let got: Vec<(u32, u32, u32)> = samples(&conn, p, "r")
            .unwrap()
            .iter()
            .map(|s| (s.sample.round, s.sample.index, s.sample.turn))
            .collect();
        assert_eq!(got, vec![(1, 0, 1), (1, 0, 2), (1, 1, 1), (2, 0, 1)]);
        assert_eq!(samples(&conn, p, "r").unwrap()[1].sample, retried);
    }
}
