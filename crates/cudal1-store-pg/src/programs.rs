//! The program database and the prompts shown, on PostgreSQL: the same rows as the SQLite store.

use cudal1_store::{NewProgram, ProgramKey, ProgramScore, PromptRecord, StoredProgram};
use postgres::{GenericClient, Row};

use crate::schema::NOW_TEXT;
use crate::Decode;

const SELECT: &str =
    "SELECT id, created_at, task_hash, code_hash, settings_hash, code, run_id, round,
    parent_ids, verdict, reason, reason_class, speedup_median, speedup_ci_low, speedup_ci_high,
    evaluation, trajectory, turn, own_share FROM programs";

/// Inserts unless the key is taken; returns the id under the key (the first program wins).
pub(crate) fn insert(c: &mut impl GenericClient, p: &NewProgram) -> Result<i64, postgres::Error> {
    let parents = serde_json::Value::from(p.parent_ids.clone()).to_string();
    let inserted = c.query_opt(
        &format!(
            "INSERT INTO programs (created_at, task_hash, code_hash, settings_hash, code, run_id, round,
                parent_ids, verdict, reason, reason_class, speedup_median, speedup_ci_low,
                speedup_ci_high, evaluation, trajectory, turn)
            VALUES ({NOW_TEXT}, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
            ON CONFLICT (task_hash, code_hash, settings_hash) DO NOTHING RETURNING id"
        ),
        &[
            &p.key.task_hash,
            &p.key.code_hash,
            &p.key.settings_hash,
            &p.code,
            &p.run_id,
            &i64::from(p.round),
            &parents,
            &p.verdict,
            &p.reason,
            &p.reason_class,
            &p.speedup_median,
            &p.speedup_ci_low,
            &p.speedup_ci_high,
            &p.evaluation.to_string(),
            &p.trajectory,
            &i64::from(p.turn),
        ],
    )?;
    match inserted {
        Some(row) => Ok(row.get(0)),
        None => c
            .query_one("SELECT id FROM programs WHERE task_hash = $1 AND code_hash = $2 AND settings_hash = $3", &[&p.key.task_hash, &p.key.code_hash, &p.key.settings_hash])
            .map(|r| r.get(0)),
    }
}

pub(crate) fn find(
    c: &mut impl GenericClient,
    key: &ProgramKey,
) -> Result<Option<Row>, postgres::Error> {
    c.query_opt(
        &format!("{SELECT} WHERE task_hash = $1 AND code_hash = $2 AND settings_hash = $3"),
        &[&key.task_hash, &key.code_hash, &key.settings_hash],
    )
}

pub(crate) fn by_id(c: &mut impl GenericClient, id: i64) -> Result<Option<Row>, postgres::Error> {
    c.query_opt(&format!("{SELECT} WHERE id = $1"), &[&id])
}

pub(crate) fn for_task(
    c: &mut impl GenericClient,
    task_hash: &str,
    settings_hash: &str,
) -> Result<Vec<Row>, postgres::Error> {
    c.query(
        &format!("{SELECT} WHERE task_hash = $1 AND settings_hash = $2 ORDER BY id"),
        &[&task_hash, &settings_hash],
    )
}

pub(crate) fn ranked(
    c: &mut impl GenericClient,
    task_hash: &str,
    settings_hash: &str,
    as_of: Option<i64>,
) -> Result<Vec<ProgramScore>, postgres::Error> {
    let rows = c.query(
        "SELECT id, speedup_median FROM programs WHERE task_hash = $1 AND settings_hash = $2
            AND verdict = 'correct' AND speedup_median IS NOT NULL AND id <= $3 ORDER BY id",
        &[&task_hash, &settings_hash, &as_of.unwrap_or(i64::MAX)],
    )?;
    Ok(rows
        .iter()
        .map(|r| ProgramScore { id: r.get(0), speedup: r.get(1) })
        .filter(|p| p.speedup.is_finite())
        .collect())
}

pub(crate) fn last_id(c: &mut impl GenericClient) -> Result<i64, postgres::Error> {
    c.query_one("SELECT coalesce(max(id), 0)::BIGINT FROM programs", &[]).map(|r| r.get(0))
}

pub(crate) fn record_prompt(
    c: &mut impl GenericClient,
    p: &PromptRecord,
) -> Result<(), postgres::Error> {
    let ids = serde_json::Value::from(p.exemplar_ids.clone()).to_string();
    c.execute(
        &format!(
            "INSERT INTO prompts (id, created_at, task_hash, settings_hash, exemplar_ids, as_of)
            VALUES ($1, {NOW_TEXT}, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING"
        ),
        &[&p.id, &p.task_hash, &p.settings_hash, &ids, &p.as_of],
    )
    .map(|_| ())
}

pub(crate) fn find_prompt(
    c: &mut impl GenericClient,
    id: &str,
) -> Result<Option<Row>, postgres::Error> {
    c.query_opt(
        "SELECT id, task_hash, settings_hash, exemplar_ids, as_of FROM prompts WHERE id = $1",
        &[&id],
    )
}

pub(crate) fn decode_prompt(
    r: &Row,
    d: &Decode<'_>,
) -> Result<PromptRecord, cudal1_store::StoreError> {
    let id: String = r.get(0);
    Ok(PromptRecord {
        exemplar_ids: d.json_as("prompts", &id, "exemplar_ids", &r.get::<_, String>(3))?,
        task_hash: r.get(1),
        settings_hash: r.get(2),
        as_of: r.get(4),
        id,
    })
}

pub(crate) fn decode(r: &Row, d: &Decode<'_>) -> Result<StoredProgram, cudal1_store::StoreError> {
    let id: i64 = r.get(0);
    let row = id.to_string();
    Ok(StoredProgram {
        id,
        created_at: r.get(1),
        key: ProgramKey { task_hash: r.get(2), code_hash: r.get(3), settings_hash: r.get(4) },
        code: r.get(5),
        run_id: r.get(6),
        round: u32::try_from(r.get::<_, i64>(7)).unwrap_or(u32::MAX),
        trajectory: r.get(16),
        turn: u32::try_from(r.get::<_, i64>(17)).unwrap_or(u32::MAX),
        parent_ids: d.json_as("programs", &row, "parent_ids", &r.get::<_, String>(8))?,
        verdict: r.get(9),
        reason: r.get(10),
        reason_class: r.get(11),
        speedup_median: r.get(12),
        speedup_ci_low: r.get(13),
        speedup_ci_high: r.get(14),
        evaluation: d.json_as("programs", &row, "evaluation", &r.get::<_, String>(15))?,
        own_share: r.get(18),
    })
}

pub(crate) fn set_own_share(
    c: &mut impl GenericClient,
    id: i64,
    share: f64,
) -> Result<bool, postgres::Error> {
    c.execute("UPDATE programs SET own_share = $1 WHERE id = $2", &[&share, &id]).map(|n| n > 0)
}
