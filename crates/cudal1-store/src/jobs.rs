//! The evaluation job queue on SQLite: one writer at a time, so a claim is one `IMMEDIATE`
//! transaction that fails abandoned jobs and takes the next ones. Leases are kept in seconds by
//! the database's own clock. Signals reach subscribers in this process only; waiters in other
//! processes poll.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row, TransactionBehavior};

use crate::api::{
    Acceptance, Artifact, Claim, ClaimedJob, Completion, Enqueued, JobKey, JobState, JobStatus,
    NewJob, QueueCounts, Stage,
};
use crate::error::{query_error, StoreError};
use crate::json;
use crate::program::{self, ProgramKey};

const NOW: &str = "unixepoch('subsec')";

pub(crate) fn enqueue(
    conn: &mut Connection,
    path: &Path,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>, StoreError> {
    let err = |e| query_error(path, "enqueue", e);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        let parents = serde_json::Value::from(j.parent_ids.clone());
        let inserted: Option<i64> = tx
            .prepare_cached(
                "INSERT INTO jobs (created_at, task_hash, candidate_hash, settings_hash, gpu_class,
                    settings_family, task_name, task_source, candidate_source, program_code_hash,
                    program_settings, parent_ids, mode, settings, priority, stage, state, max_attempts, judge)
                VALUES (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
                    ?11, ?12, ?13, ?14, ?15, 'queued', ?16, ?17)
                ON CONFLICT (task_hash, candidate_hash, settings_hash, gpu_class, judge) DO NOTHING
                RETURNING id",
            )
            .map_err(err)?
            .query_row(
                params![
                    j.key.task_hash,
                    j.key.candidate_hash,
                    j.key.settings_hash,
                    j.key.gpu_class,
                    j.settings_family,
                    j.task_name,
                    j.task_source,
                    j.candidate_source,
                    j.program_key.code_hash,
                    j.program_key.settings_hash,
                    json::encode(&parents),
                    j.mode,
                    json::encode(&j.settings),
                    j.priority,
                    j.stage.as_str(),
                    j.max_attempts,
                    j.key.judge,
                ],
                |r| r.get(0),
            )
            .optional()
            .map_err(err)?;
        let e = match inserted {
            Some(id) => Enqueued { id, state: JobState::Queued, created: true },
            None => {
                let (id, state): (i64, String) = tx
                    .prepare_cached("SELECT id, state FROM jobs WHERE task_hash = ?1 AND candidate_hash = ?2 AND settings_hash = ?3 AND gpu_class = ?4 AND judge = ?5")
                    .map_err(err)?
                    .query_row(params![j.key.task_hash, j.key.candidate_hash, j.key.settings_hash, j.key.gpu_class, j.key.judge], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(err)?;
                // Given up because workers went away (the reaper leaves no worker): that is no
                // result to hand out again, so asking again queues the job again. A failure a
                // worker reported (the task's reference failed) stays.
                let requeued = state == JobState::Failed.as_str()
                    && tx
                        .prepare_cached(REQUEUE_FAILED)
                        .map_err(err)?
                        .execute(params![id, j.stage.as_str()])
                        .map_err(err)?
                        == 1;
                if requeued {
                    Enqueued { id, state: JobState::Queued, created: true }
                } else {
                    Enqueued { id, state: state_of(&state, path, id)?, created: false }
                }
            }
        };
        out.push(e);
    }
    tx.commit().map_err(err)?;
    Ok(out)
}

/// Jobs of this class of GPU waiting (or abandoned by their worker) since before jobs were keyed
/// by their judge (`judge = ''`, schema 8): nothing has judged them yet, so they are taken under
/// the claiming worker's judge, the same row and id, so that whoever waits on them gets the
/// result. One whose work was queued again under that judge meanwhile (a twin) is failed, naming
/// the twin; its ids come back with the other failures.
fn adopt_unjudged(tx: &rusqlite::Transaction<'_>, c: &Claim) -> rusqlite::Result<Vec<i64>> {
    let waiting = format!("judge = '' AND gpu_class = ?2 AND (state = 'queued' OR (state = 'running' AND lease_until < {NOW}))");
    let twin = "SELECT k.id FROM jobs k WHERE k.task_hash = jobs.task_hash AND k.candidate_hash = jobs.candidate_hash
        AND k.settings_hash = jobs.settings_hash AND k.gpu_class = jobs.gpu_class AND k.judge = ?1";
    tx.prepare_cached(&format!(
        "UPDATE jobs SET judge = ?1 WHERE {waiting} AND NOT EXISTS ({twin})"
    ))?
    .execute(params![c.judge, c.gpu_class])?;
    tx.prepare_cached(&format!(
        "UPDATE jobs SET state = 'failed', finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), lease_until = NULL,
            error = 'queued before jobs carried their judge, and queued again since as job ' || ({twin}) || ', which does it'
        WHERE {waiting} AND EXISTS ({twin}) RETURNING id"
    ))?
    .query_map(params![c.judge, c.gpu_class], |r| r.get(0))?
    .collect()
}

/// A job given up for want of workers, queued again from scratch.
const REQUEUE_FAILED: &str =
    "UPDATE jobs SET state = 'queued', stage = ?2, attempts = 0, worker = NULL, lease_until = NULL,
        error = NULL, finished_at = NULL, artifact = NULL, artifact_env = NULL
    WHERE id = ?1 AND state = 'failed' AND worker IS NULL";

/// Fails abandoned jobs, then takes the next ones; returns the jobs taken and the ids failed.
pub(crate) fn claim(
    conn: &mut Connection,
    path: &Path,
    c: &Claim,
) -> Result<(Vec<ClaimedJob>, Vec<i64>), StoreError> {
    let err = |e| query_error(path, "claim", e);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
    let reaped: Vec<i64> = tx
        .prepare_cached(&format!(
            "UPDATE jobs SET state = 'failed', finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                error = 'given up: ' || attempts || ' workers took this job and went away (their leases expired)',
                lease_until = NULL, worker = NULL
            WHERE state = 'running' AND lease_until < {NOW} AND attempts >= max_attempts RETURNING id"
        ))
        .map_err(err)?
        .query_map([], |r| r.get(0))
        .map_err(err)?
        .collect::<Result<_, _>>()
        .map_err(err)?;
    let mut reaped = reaped;
    reaped.extend(adopt_unjudged(&tx, c).map_err(err)?);
    // The stages' marks follow the six fixed parameters; no stage matches nothing.
    let stages: Vec<rusqlite::types::Value> =
        c.stages.iter().map(|s| s.as_str().to_owned().into()).collect();
    let marks = if stages.is_empty() {
        "NULL".to_owned()
    } else {
        (7..7 + stages.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
    };
    let sql = format!(
        "UPDATE jobs SET state = 'running', worker = ?1, attempts = attempts + 1, lease_until = {NOW} + ?2
        WHERE id IN (SELECT id FROM jobs
            WHERE (state = 'queued' OR (state = 'running' AND lease_until < {NOW}))
              AND attempts < max_attempts AND gpu_class = ?3 AND judge = ?6 AND (?4 IS NULL OR settings_family = ?4) AND stage IN ({marks})
            ORDER BY priority DESC, id LIMIT ?5)
        RETURNING {CLAIMED}"
    );
    let mut values: Vec<rusqlite::types::Value> = vec![
        c.worker.clone().into(),
        c.lease.as_secs_f64().into(),
        c.gpu_class.clone().into(),
        c.family.clone().map_or(rusqlite::types::Value::Null, Into::into),
        i64::try_from(c.limit).unwrap_or(i64::MAX).into(),
        c.judge.clone().into(),
    ];
    values.extend(stages);
    let mut jobs = tx
        .prepare(&sql)
        .map_err(err)?
        .query_map(params_from_iter(values), claimed_from_row)
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    tx.commit().map_err(err)?;
    jobs.sort_by_key(|j: &RawClaimed| (std::cmp::Reverse(j.0.priority), j.0.id));
    let jobs = jobs.into_iter().map(|r| r.decode(path)).collect::<Result<_, _>>()?;
    Ok((jobs, reaped))
}

const CLAIMED: &str = "id, task_hash, candidate_hash, settings_hash, gpu_class, settings_family, task_name,
    task_source, candidate_source, mode, settings, stage, attempts, artifact, artifact_env, priority,
    program_code_hash, program_settings, parent_ids, judge";

/// A claimed job with its settings, stage and parents still as text.
struct RawClaimed(ClaimedJob, String, String, String);

impl RawClaimed {
    fn decode(self, path: &Path) -> Result<ClaimedJob, StoreError> {
        let RawClaimed(mut job, settings, stage, parents) = self;
        let row = job.id.to_string();
        job.settings = json::decode(&settings, path, "jobs", &row, "settings")?;
        job.parent_ids = json::decode_as(&parents, path, "jobs", &row, "parent_ids")?;
        job.stage = Stage::parse(&stage).ok_or_else(|| corrupt(path, job.id, "stage", &stage))?;
        Ok(job)
    }
}

fn claimed_from_row(r: &Row<'_>) -> rusqlite::Result<RawClaimed> {
    let archive: Option<Vec<u8>> = r.get(13)?;
    let environment: Option<String> = r.get(14)?;
    let job = ClaimedJob {
        id: r.get(0)?,
        key: JobKey {
            task_hash: r.get(1)?,
            candidate_hash: r.get(2)?,
            settings_hash: r.get(3)?,
            gpu_class: r.get(4)?,
            judge: r.get(19)?,
        },
        settings_family: r.get(5)?,
        task_name: r.get(6)?,
        task_source: r.get(7)?,
        candidate_source: r.get(8)?,
        mode: r.get(9)?,
        settings: serde_json::Value::Null,
        program_key: ProgramKey {
            task_hash: r.get(1)?,
            code_hash: r.get(16)?,
            settings_hash: r.get(17)?,
        },
        parent_ids: Vec::new(),
        stage: Stage::Run,
        priority: r.get(15)?,
        attempt: r.get(12)?,
        artifact: archive
            .zip(environment)
            .map(|(archive, environment)| Artifact { environment, archive }),
    };
    Ok(RawClaimed(job, r.get(10)?, r.get(11)?, r.get(18)?))
}

pub(crate) fn heartbeat(
    conn: &Connection,
    path: &Path,
    worker: &str,
    ids: &[i64],
    lease: Duration,
) -> Result<Vec<i64>, StoreError> {
    let err = |e| query_error(path, "heartbeat", e);
    let mut held = Vec::new();
    let mut stmt = conn
        .prepare_cached(&format!("UPDATE jobs SET lease_until = {NOW} + ?1 WHERE id = ?2 AND worker = ?3 AND state = 'running' RETURNING id"))
        .map_err(err)?;
    for id in ids {
        if let Some(id) = stmt
            .query_row(params![lease.as_secs_f64(), id, worker], |r| r.get::<_, i64>(0))
            .optional()
            .map_err(err)?
        {
            held.push(id);
        }
    }
    Ok(held)
}

pub(crate) fn complete(
    conn: &mut Connection,
    path: &Path,
    id: i64,
    worker: &str,
    c: &Completion,
) -> Result<bool, StoreError> {
    let err = |e| query_error(path, "complete", e);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
    let row: Option<(String, Option<String>)> = tx
        .prepare_cached("SELECT state, worker FROM jobs WHERE id = ?1")
        .map_err(err)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(err)?;
    let Some((state, holder)) = row else { return Ok(false) };
    match c.acceptance(&state, holder.as_deref(), worker) {
        Acceptance::Write => {}
        Acceptance::Again => return Ok(true),
        Acceptance::Discard => {
            tx.execute("UPDATE jobs SET discarded = discarded + 1 WHERE id = ?1", [id])
                .map_err(err)?;
            tx.commit().map_err(err)?;
            return Ok(false);
        }
    }
    match c {
        Completion::Evaluated { evaluation, verdict, program } => {
            let program_id = match program {
                Some(p) => Some(program::insert(&tx, path, p)?),
                None => None,
            };
            tx.prepare_cached(
                "UPDATE jobs SET state = 'done', worker = ?2, verdict = ?3, result = ?4, program_id = ?5,
                    lease_until = NULL, artifact = NULL, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                WHERE id = ?1",
            )
            .map_err(err)?
            .execute(params![id, worker, verdict, json::encode(evaluation), program_id])
            .map_err(err)?;
        }
        Completion::Failed { error } | Completion::Unrunnable { error } => {
            let by = c.kept_worker(worker);
            tx.prepare_cached(
                "UPDATE jobs SET state = 'failed', worker = ?2, error = ?3, lease_until = NULL, artifact = NULL,
                    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                WHERE id = ?1",
            )
            .map_err(err)?
            .execute(params![id, by, error])
            .map_err(err)?;
        }
    }
    tx.commit().map_err(err)?;
    Ok(true)
}

pub(crate) fn release(
    conn: &Connection,
    path: &Path,
    id: i64,
    worker: &str,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE jobs SET state = 'queued', worker = NULL, lease_until = NULL, attempts = max(attempts - 1, 0)
        WHERE id = ?1 AND worker = ?2 AND state = 'running'",
    )
    .and_then(|mut s| s.execute(params![id, worker]))
    .map(|_| ())
    .map_err(|e| query_error(path, "release", e))
}

pub(crate) fn advance(
    conn: &Connection,
    path: &Path,
    id: i64,
    worker: &str,
    a: Option<&Artifact>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE jobs SET stage = 'run', state = 'queued', worker = NULL, lease_until = NULL, attempts = 0,
            artifact = ?3, artifact_env = ?4
        WHERE id = ?1 AND worker = ?2 AND state = 'running' AND stage = 'compile'",
    )
    .and_then(|mut s| s.execute(params![id, worker, a.map(|a| &a.archive), a.map(|a| &a.environment)]))
    .map(|_| ())
    .map_err(|e| query_error(path, "advance", e))
}

pub(crate) fn status(
    conn: &Connection,
    path: &Path,
    ids: &[i64],
) -> Result<Vec<JobStatus>, StoreError> {
    let err = |e| query_error(path, "job_status", e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, task_hash, candidate_hash, settings_hash, gpu_class, task_name, mode, state, stage,
                attempts, worker, verdict, result, error, program_id, discarded, judge FROM jobs WHERE id = ?1",
        )
        .map_err(err)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let raw = stmt
            .query_row([id], |r| {
                Ok((
                    JobStatus {
                        id: r.get(0)?,
                        key: JobKey {
                            task_hash: r.get(1)?,
                            candidate_hash: r.get(2)?,
                            settings_hash: r.get(3)?,
                            gpu_class: r.get(4)?,
                            judge: r.get(16)?,
                        },
                        task_name: r.get(5)?,
                        mode: r.get(6)?,
                        state: JobState::Queued,
                        stage: Stage::Run,
                        attempts: r.get(9)?,
                        worker: r.get(10)?,
                        verdict: r.get(11)?,
                        result: None,
                        error: r.get(13)?,
                        program_id: r.get(14)?,
                        discarded: r.get(15)?,
                    },
                    r.get::<_, String>(7)?,
                    r.get::<_, String>(8)?,
                    r.get::<_, Option<String>>(12)?,
                ))
            })
            .optional()
            .map_err(err)?;
        if let Some((mut s, state, stage, result)) = raw {
            s.state = state_of(&state, path, s.id)?;
            s.stage = Stage::parse(&stage).ok_or_else(|| corrupt(path, s.id, "stage", &stage))?;
            s.result = result
                .map(|t| json::decode(&t, path, "jobs", &s.id.to_string(), "result"))
                .transpose()?;
            out.push(s);
        }
    }
    Ok(out)
}

pub(crate) fn counts(conn: &Connection, path: &Path) -> Result<QueueCounts, StoreError> {
    let err = |e| query_error(path, "queue_counts", e);
    let mut counts = QueueCounts::default();
    let mut stmt =
        conn.prepare_cached("SELECT state, count(*) FROM jobs GROUP BY state").map_err(err)?;
    let rows =
        stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?))).map_err(err)?;
    for row in rows {
        let (state, n) = row.map_err(err)?;
        match JobState::parse(&state) {
            Some(JobState::Queued) => counts.queued = n,
            Some(JobState::Running) => counts.running = n,
            Some(JobState::Done) => counts.done = n,
            Some(JobState::Failed) => counts.failed = n,
            None => {}
        }
    }
    Ok(counts)
}

fn state_of(text: &str, path: &Path, id: i64) -> Result<JobState, StoreError> {
    JobState::parse(text).ok_or_else(|| corrupt(path, id, "state", text))
}

fn corrupt(path: &Path, id: i64, column: &'static str, value: &str) -> StoreError {
    StoreError::CorruptValue {
        path: path.to_path_buf(),
        table: "jobs",
        row: id.to_string(),
        column,
        value: value.to_owned(),
    }
}
