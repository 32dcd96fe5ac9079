//! The job queue on PostgreSQL. Workers take jobs with `FOR UPDATE SKIP LOCKED`, so two workers
//! never take the same job and never wait on each other; leases are kept by the server's clock;
//! every change that a waiter cares about sends a `NOTIFY` in its own transaction.

use std::time::Duration;

use cudal1_store::{
    Acceptance, Artifact, Claim, ClaimedJob, Completion, Enqueued, JobKey, JobState, JobStatus,
    NewJob, ProgramKey, QueueCounts, Stage, StoreError,
};
use postgres::{Client, GenericClient, Row};

use crate::schema::NOW_TEXT;
use crate::{Decode, CHANNEL};

pub(crate) fn enqueue(
    c: &mut Client,
    jobs: &[NewJob],
) -> Result<Vec<(i64, String, bool)>, postgres::Error> {
    let mut tx = c.transaction()?;
    let mut out = vec![(0, String::new(), false); jobs.len()];
    let mut created_any = false;
    // Rows are inserted in the order of their keys: two requests whose jobs overlap then wait on
    // each other's rows in one order, never in a cycle (a deadlock, which PostgreSQL would break
    // by failing one of them).
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&jobs[a].key, &jobs[b].key);
        (&x.task_hash, &x.candidate_hash, &x.settings_hash, &x.gpu_class, &x.judge).cmp(&(
            &y.task_hash,
            &y.candidate_hash,
            &y.settings_hash,
            &y.gpu_class,
            &y.judge,
        ))
    });
    for place in order {
        let j = &jobs[place];
        let parents = serde_json::Value::from(j.parent_ids.clone()).to_string();
        let inserted = tx.query_opt(
            &format!(
                "INSERT INTO jobs (created_at, task_hash, candidate_hash, settings_hash, gpu_class,
                    settings_family, task_name, task_source, candidate_source, program_code_hash,
                    program_settings, parent_ids, mode, settings, priority, stage, state, max_attempts, judge)
                VALUES ({NOW_TEXT}, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'queued', $16, $17)
                ON CONFLICT (task_hash, candidate_hash, settings_hash, gpu_class, judge) DO NOTHING RETURNING id"
            ),
            &[
                &j.key.task_hash,
                &j.key.candidate_hash,
                &j.key.settings_hash,
                &j.key.gpu_class,
                &j.settings_family,
                &j.task_name,
                &j.task_source,
                &j.candidate_source,
                &j.program_key.code_hash,
                &j.program_key.settings_hash,
                &parents,
                &j.mode,
                &j.settings.to_string(),
                &j.priority,
                &j.stage.as_str(),
                &i32::try_from(j.max_attempts).unwrap_or(i32::MAX),
                &j.key.judge,
            ],
        )?;
        match inserted {
            Some(r) => {
                created_any = true;
                out[place] = (r.get(0), "queued".to_owned(), true);
            }
            None => {
                // Given up because workers went away (no worker left on it): no result to hand
                // out again, so asking again queues it again. A failure a worker reported stays.
                let requeued = tx.query_opt(
                    "UPDATE jobs SET state = 'queued', stage = $5, attempts = 0, worker = NULL, lease_until = NULL,
                        error = NULL, finished_at = NULL, artifact = NULL, artifact_env = NULL
                    WHERE task_hash = $1 AND candidate_hash = $2 AND settings_hash = $3 AND gpu_class = $4
                        AND judge = $6 AND state = 'failed' AND worker IS NULL
                    RETURNING id",
                    &[&j.key.task_hash, &j.key.candidate_hash, &j.key.settings_hash, &j.key.gpu_class, &j.stage.as_str(), &j.key.judge],
                )?;
                if let Some(r) = requeued {
                    created_any = true;
                    out[place] = (r.get(0), "queued".to_owned(), true);
                    continue;
                }
                let r = tx.query_one(
                    "SELECT id, state FROM jobs WHERE task_hash = $1 AND candidate_hash = $2 AND settings_hash = $3 AND gpu_class = $4 AND judge = $5",
                    &[&j.key.task_hash, &j.key.candidate_hash, &j.key.settings_hash, &j.key.gpu_class, &j.key.judge],
                )?;
                out[place] = (r.get(0), r.get(1), false);
            }
        }
    }
    if created_any {
        tx.execute("SELECT pg_notify($1, 'q')", &[&CHANNEL])?;
    }
    tx.commit()?;
    Ok(out)
}

pub(crate) fn decode_enqueued(
    rows: Vec<(i64, String, bool)>,
    d: &Decode<'_>,
) -> Result<Vec<Enqueued>, StoreError> {
    rows.into_iter()
        .map(|(id, state, created)| Ok(Enqueued { id, state: d.state(id, &state)?, created }))
        .collect()
}

const CLAIMED: &str = "j.id, j.task_hash, j.candidate_hash, j.settings_hash, j.gpu_class, j.settings_family,
    j.task_name, j.task_source, j.candidate_source, j.mode, j.settings, j.stage, j.attempts, j.artifact,
    j.artifact_env, j.priority, j.program_code_hash, j.program_settings, j.parent_ids, j.judge";

/// Fails jobs whose last lease expired after their last allowed attempt, then takes jobs.
pub(crate) fn claim(c: &mut Client, claim: &Claim) -> Result<Vec<Row>, postgres::Error> {
    let mut tx = c.transaction()?;
    tx.execute(
        &format!(
            "WITH gone AS (
                SELECT id FROM jobs WHERE state = 'running' AND lease_until < now() AND attempts >= max_attempts
                FOR UPDATE SKIP LOCKED),
            failed AS (
                UPDATE jobs j SET state = 'failed', finished_at = {NOW_TEXT}, lease_until = NULL, worker = NULL,
                    error = 'given up: ' || j.attempts || ' workers took this job and went away (their leases expired)'
                FROM gone WHERE j.id = gone.id RETURNING j.id)
            SELECT pg_notify($1, 'f:' || id) FROM failed"
        ),
        &[&CHANNEL],
    )?;
    // Jobs waiting since before jobs were keyed by their judge (`judge = ''`): taken under the
    // claimer's judge (same row, same id), or failed naming the twin queued under it since.
    let waiting = "judge = '' AND gpu_class = $2 AND (state = 'queued' OR (state = 'running' AND lease_until < now()))";
    let twin = "SELECT k.id FROM jobs k WHERE k.task_hash = j.task_hash AND k.candidate_hash = j.candidate_hash
        AND k.settings_hash = j.settings_hash AND k.gpu_class = j.gpu_class AND k.judge = $1";
    tx.execute(
        &format!("UPDATE jobs j SET judge = $1 WHERE {waiting} AND NOT EXISTS ({twin})"),
        &[&claim.judge, &claim.gpu_class],
    )?;
    tx.execute(
        &format!(
            "WITH superseded AS (
                UPDATE jobs j SET state = 'failed', finished_at = {NOW_TEXT}, lease_until = NULL,
                    error = 'queued before jobs carried their judge, and queued again since as job ' || ({twin}) || ', which does it'
                WHERE {waiting} AND EXISTS ({twin}) RETURNING j.id)
            SELECT pg_notify($3, 'f:' || id) FROM superseded"
        ),
        &[&claim.judge, &claim.gpu_class, &CHANNEL],
    )?;
    let stages: Vec<&str> = claim.stages.iter().map(|s| s.as_str()).collect();
    let limit = i64::try_from(claim.limit).unwrap_or(i64::MAX);
    let rows = tx.query(
        &format!(
            "WITH picked AS (
                SELECT id FROM jobs
                WHERE (state = 'queued' OR (state = 'running' AND lease_until < now()))
                  AND attempts < max_attempts AND gpu_class = $1 AND judge = $7 AND stage = ANY($2)
                  AND ($3::TEXT IS NULL OR settings_family = $3)
                ORDER BY priority DESC, id LIMIT $4
                FOR UPDATE SKIP LOCKED)
            UPDATE jobs j SET state = 'running', worker = $5, attempts = j.attempts + 1,
                lease_until = now() + make_interval(secs => $6)
            FROM picked WHERE j.id = picked.id
            RETURNING {CLAIMED}"
        ),
        &[
            &claim.gpu_class,
            &stages,
            &claim.family,
            &limit,
            &claim.worker,
            &claim.lease.as_secs_f64(),
            &claim.judge,
        ],
    )?;
    tx.commit()?;
    Ok(rows)
}

pub(crate) fn decode_claimed(r: &Row, d: &Decode<'_>) -> Result<ClaimedJob, StoreError> {
    let id: i64 = r.get(0);
    let stage: String = r.get(11);
    let archive: Option<Vec<u8>> = r.get(13);
    let environment: Option<String> = r.get(14);
    Ok(ClaimedJob {
        id,
        key: JobKey {
            task_hash: r.get(1),
            candidate_hash: r.get(2),
            settings_hash: r.get(3),
            gpu_class: r.get(4),
            judge: r.get(19),
        },
        settings_family: r.get(5),
        task_name: r.get(6),
        task_source: r.get(7),
        candidate_source: r.get(8),
        mode: r.get(9),
        settings: d.json_as("jobs", &id.to_string(), "settings", &r.get::<_, String>(10))?,
        program_key: ProgramKey {
            task_hash: r.get(1),
            code_hash: r.get(16),
            settings_hash: r.get(17),
        },
        parent_ids: d.json_as("jobs", &id.to_string(), "parent_ids", &r.get::<_, String>(18))?,
        stage: Stage::parse(&stage).ok_or_else(|| d.corrupt(id, "stage", &stage))?,
        attempt: u32::try_from(r.get::<_, i32>(12)).unwrap_or(0),
        artifact: archive
            .zip(environment)
            .map(|(archive, environment)| Artifact { environment, archive }),
        priority: r.get(15),
    })
}

pub(crate) fn heartbeat(
    c: &mut Client,
    worker: &str,
    ids: &[i64],
    lease: Duration,
) -> Result<Vec<i64>, postgres::Error> {
    let rows = c.query(
        "UPDATE jobs SET lease_until = now() + make_interval(secs => $1)
        WHERE id = ANY($2) AND worker = $3 AND state = 'running' RETURNING id",
        &[&lease.as_secs_f64(), &ids, &worker],
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Writes the first result; a later one (or a retry of one whose reply was lost) changes nothing.
pub(crate) fn complete(
    c: &mut Client,
    id: i64,
    worker: &str,
    completion: &Completion,
) -> Result<bool, postgres::Error> {
    let mut tx = c.transaction()?;
    let Some(row) =
        tx.query_opt("SELECT state, worker FROM jobs WHERE id = $1 FOR UPDATE", &[&id])?
    else {
        return Ok(false);
    };
    let (state, holder): (String, Option<String>) = (row.get(0), row.get(1));
    match completion.acceptance(&state, holder.as_deref(), worker) {
        Acceptance::Write => {}
        Acceptance::Again => return Ok(true),
        Acceptance::Discard => {
            tx.execute("UPDATE jobs SET discarded = discarded + 1 WHERE id = $1", &[&id])?;
            tx.commit()?;
            return Ok(false);
        }
    }
    match completion {
        Completion::Evaluated { evaluation, verdict, program } => {
            let program_id = match program {
                Some(p) => Some(crate::programs::insert(&mut tx, p)?),
                None => None,
            };
            tx.execute(
                &format!(
                    "UPDATE jobs SET state = 'done', worker = $2, verdict = $3, result = $4, program_id = $5,
                        lease_until = NULL, artifact = NULL, finished_at = {NOW_TEXT} WHERE id = $1"
                ),
                &[&id, &worker, verdict, &evaluation.to_string(), &program_id],
            )?;
        }
        Completion::Failed { error } | Completion::Unrunnable { error } => {
            let by = completion.kept_worker(worker);
            tx.execute(
                &format!(
                    "UPDATE jobs SET state = 'failed', worker = $2, error = $3, lease_until = NULL, artifact = NULL,
                        finished_at = {NOW_TEXT} WHERE id = $1"
                ),
                &[&id, &by, error],
            )?;
        }
    }
    tx.execute("SELECT pg_notify($1, 'f:' || $2::BIGINT)", &[&CHANNEL, &id])?;
    tx.commit()?;
    Ok(true)
}

pub(crate) fn release(c: &mut Client, id: i64, worker: &str) -> Result<(), postgres::Error> {
    let mut tx = c.transaction()?;
    let n = tx.execute(
        "UPDATE jobs SET state = 'queued', worker = NULL, lease_until = NULL, attempts = greatest(attempts - 1, 0)
        WHERE id = $1 AND worker = $2 AND state = 'running'",
        &[&id, &worker],
    )?;
    if n > 0 {
        tx.execute("SELECT pg_notify($1, 'q')", &[&CHANNEL])?;
    }
    tx.commit()
}

pub(crate) fn advance(
    c: &mut Client,
    id: i64,
    worker: &str,
    a: Option<&Artifact>,
) -> Result<(), postgres::Error> {
    let mut tx = c.transaction()?;
    let n = tx.execute(
        "UPDATE jobs SET stage = 'run', state = 'queued', worker = NULL, lease_until = NULL, attempts = 0,
            artifact = $3, artifact_env = $4
        WHERE id = $1 AND worker = $2 AND state = 'running' AND stage = 'compile'",
        &[&id, &worker, &a.map(|a| &a.archive), &a.map(|a| &a.environment)],
    )?;
    if n > 0 {
        tx.execute("SELECT pg_notify($1, 'q')", &[&CHANNEL])?;
    }
    tx.commit()
}

pub(crate) fn status(c: &mut impl GenericClient, ids: &[i64]) -> Result<Vec<Row>, postgres::Error> {
    c.query(
        "SELECT id, task_hash, candidate_hash, settings_hash, gpu_class, task_name, mode, state, stage,
            attempts, worker, verdict, result, error, program_id, discarded, judge FROM jobs WHERE id = ANY($1)",
        &[&ids],
    )
}

pub(crate) fn decode_status(r: &Row, d: &Decode<'_>) -> Result<JobStatus, StoreError> {
    let id: i64 = r.get(0);
    let state: String = r.get(7);
    let stage: String = r.get(8);
    let result: Option<String> = r.get(12);
    Ok(JobStatus {
        id,
        key: JobKey {
            task_hash: r.get(1),
            candidate_hash: r.get(2),
            settings_hash: r.get(3),
            gpu_class: r.get(4),
            judge: r.get(16),
        },
        task_name: r.get(5),
        mode: r.get(6),
        state: d.state(id, &state)?,
        stage: Stage::parse(&stage).ok_or_else(|| d.corrupt(id, "stage", &stage))?,
        attempts: u32::try_from(r.get::<_, i32>(9)).unwrap_or(0),
        worker: r.get(10),
        verdict: r.get(11),
        result: result.map(|t| d.json_as("jobs", &id.to_string(), "result", &t)).transpose()?,
        error: r.get(13),
        program_id: r.get(14),
        discarded: u32::try_from(r.get::<_, i32>(15)).unwrap_or(0),
    })
}

pub(crate) fn counts(c: &mut Client) -> Result<QueueCounts, postgres::Error> {
    let mut counts = QueueCounts::default();
    for r in c.query("SELECT state, count(*) FROM jobs GROUP BY state", &[])? {
        let n = u64::try_from(r.get::<_, i64>(1)).unwrap_or(0);
        match JobState::parse(r.get(0)) {
            Some(JobState::Queued) => counts.queued = n,
            Some(JobState::Running) => counts.running = n,
            Some(JobState::Done) => counts.done = n,
            Some(JobState::Failed) => counts.failed = n,
            None => {}
        }
    }
    Ok(counts)
}
