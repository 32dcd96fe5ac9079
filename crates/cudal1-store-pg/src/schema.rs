//! The schema on PostgreSQL, versioned in `cudal1_meta`. Migrations run in one transaction under
//! an advisory lock, so processes starting together migrate once. Append new migrations; never
//! edit one that has shipped.

use postgres::Client;

/// Serialises migrations across processes ("cuL1").
const LOCK: i64 = 0x6375_4c31;

/// Column types follow the SQLite schema: JSON is kept as text (bit-exact floats), times as
/// `timestamptz`, and `created_at`/`finished_at` as RFC 3339 text like SQLite's.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: programs, prompts, jobs.
    "
    CREATE TABLE programs (
        id              BIGSERIAL PRIMARY KEY,
        created_at      TEXT NOT NULL,
        task_hash       TEXT NOT NULL,
        code_hash       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        code            TEXT NOT NULL,
        run_id          TEXT NOT NULL,
        round           BIGINT NOT NULL,
        parent_ids      TEXT NOT NULL,
        verdict         TEXT NOT NULL,
        reason          TEXT NOT NULL,
        reason_class    TEXT NOT NULL,
        speedup_median  DOUBLE PRECISION,
        speedup_ci_low  DOUBLE PRECISION,
        speedup_ci_high DOUBLE PRECISION,
        evaluation      TEXT NOT NULL,
        UNIQUE (task_hash, code_hash, settings_hash)
    );
    CREATE INDEX programs_ranked ON programs (task_hash, settings_hash, id) WHERE verdict = 'correct';
    CREATE TABLE prompts (
        id              TEXT PRIMARY KEY,
        created_at      TEXT NOT NULL,
        task_hash       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        exemplar_ids    TEXT NOT NULL,
        as_of           BIGINT NOT NULL
    );
    CREATE TABLE jobs (
        id                BIGSERIAL PRIMARY KEY,
        created_at        TEXT NOT NULL,
        task_hash         TEXT NOT NULL,
        candidate_hash    TEXT NOT NULL,
        settings_hash     TEXT NOT NULL,
        gpu_class         TEXT NOT NULL,
        settings_family   TEXT NOT NULL,
        task_name         TEXT NOT NULL,
        task_source       TEXT NOT NULL,
        candidate_source  TEXT NOT NULL,
        program_code_hash TEXT NOT NULL,
        program_settings  TEXT NOT NULL,
        parent_ids        TEXT NOT NULL,
        mode              TEXT NOT NULL,
        settings          TEXT NOT NULL,
        priority          INTEGER NOT NULL,
        stage             TEXT NOT NULL,
        state             TEXT NOT NULL,
        attempts          INTEGER NOT NULL DEFAULT 0,
        max_attempts      INTEGER NOT NULL,
        worker            TEXT,
        lease_until       TIMESTAMPTZ,
        finished_at       TEXT,
        verdict           TEXT,
        result            TEXT,
        error             TEXT,
        program_id        BIGINT,
        discarded         INTEGER NOT NULL DEFAULT 0,
        artifact          BYTEA,
        artifact_env      TEXT,
        UNIQUE (task_hash, candidate_hash, settings_hash, gpu_class)
    );
    CREATE INDEX jobs_claim ON jobs (gpu_class, stage, priority DESC, id) WHERE state IN ('queued', 'running');
    ",
    // 1 -> 2: a job is keyed by the judging version that must judge it too (workers take only
    // their own version's jobs); jobs queued before get an empty one, which no worker takes and
    // no request asks for again.
    "
    ALTER TABLE jobs ADD COLUMN judge TEXT NOT NULL DEFAULT '';
    DO $$
    DECLARE name TEXT;
    BEGIN
        SELECT conname INTO name FROM pg_constraint WHERE conrelid = 'jobs'::regclass AND contype = 'u';
        EXECUTE format('ALTER TABLE jobs DROP CONSTRAINT %I', name);
    END $$;
    ALTER TABLE jobs ADD CONSTRAINT jobs_key UNIQUE (task_hash, candidate_hash, settings_hash, gpu_class, judge);
    ",
    // 2 -> 3: a program records the trajectory and turn that first wrote it (`optimize --turns`,
    // as in the SQLite store); older programs are turn 1 of no trajectory.
    "
    ALTER TABLE programs ADD COLUMN trajectory TEXT;
    ALTER TABLE programs ADD COLUMN turn BIGINT NOT NULL DEFAULT 1;
    ",
    // 3 -> 4: a program's own-kernel share (the part of its GPU time in kernels it built itself,
    // as in the SQLite store); older programs have none.
    "
    ALTER TABLE programs ADD COLUMN own_share DOUBLE PRECISION;
    ",
];

pub(crate) fn current_version() -> i64 {
    i64::try_from(MIGRATIONS.len()).expect("migration count fits in i64")
}

/// What migrating found.
pub(crate) enum Migrated {
    Ok,
    /// The database was made by a newer cudal1.
    TooNew {
        found: i64,
    },
}

pub(crate) fn migrate(client: &mut Client) -> Result<Migrated, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cudal1_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    )?;
    let version: i64 = tx
        .query_opt("SELECT value FROM cudal1_meta WHERE key = 'schema_version'", &[])?
        .map_or(0, |r| r.get::<_, String>(0).parse().unwrap_or(0));
    if version > current_version() {
        return Ok(Migrated::TooNew { found: version });
    }
    for (from, sql) in (0_i64..).zip(MIGRATIONS).skip(usize::try_from(version).unwrap_or(0)) {
        tracing::info!(from, to = from + 1, "migrating the PostgreSQL schema");
        tx.batch_execute(sql)?;
    }
    tx.execute(
        "INSERT INTO cudal1_meta (key, value) VALUES ('schema_version', $1)
        ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&current_version().to_string()],
    )?;
    tx.commit()?;
    Ok(Migrated::Ok)
}

/// `created_at` as the SQLite store writes it: RFC 3339, UTC, milliseconds.
pub(crate) const NOW_TEXT: &str =
    "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_server::TestPostgres;

    #[test]
    fn a_version_1_database_keeps_its_jobs_and_keys_new_ones_by_judge() {
        let server = match TestPostgres::start() {
            Ok(s) => s,
            Err(why) => {
                assert!(std::env::var_os("CUDAL1_REQUIRE_PG").is_none(), "{why}");
                eprintln!("skipping: {why}");
                return;
            }
        };
        let mut c = Client::connect(&server.url(), postgres::NoTls).unwrap();
        c.batch_execute(MIGRATIONS[0]).unwrap();
        c.batch_execute(
            "CREATE TABLE cudal1_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO cudal1_meta VALUES ('schema_version', '1');
             INSERT INTO jobs (created_at, task_hash, candidate_hash, settings_hash, gpu_class, settings_family,
                 task_name, task_source, candidate_source, program_code_hash, program_settings, parent_ids, mode,
                 settings, priority, stage, state, max_attempts, verdict, result)
                 VALUES ('now', 't', 'c', 's', 'cpu', 'f', 'level1/1_A', 'src', 'code', 'h', 'p', '[]', 'full', '{}',
                 0, 'run', 'done', 3, 'correct', '{}');",
        )
        .unwrap();
        assert!(matches!(migrate(&mut c).unwrap(), Migrated::Ok));
        let old: Vec<(String, String)> = c
            .query("SELECT verdict, judge FROM jobs", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(old, [("correct".to_owned(), String::new())]);
        // The same key under a judging version is another job.
        let n = c
            .execute(
                "INSERT INTO jobs (created_at, task_hash, candidate_hash, settings_hash, gpu_class, settings_family,
                     task_name, task_source, candidate_source, program_code_hash, program_settings, parent_ids, mode,
                     settings, priority, stage, state, max_attempts, judge)
                 VALUES ('now', 't', 'c', 's', 'cpu', 'f', 'level1/1_A', 'src', 'code', 'h', 'p', '[]', 'full', '{}',
                     0, 'run', 'queued', 3, '1.now')
                 ON CONFLICT (task_hash, candidate_hash, settings_hash, gpu_class, judge) DO NOTHING",
                &[],
            )
            .unwrap();
        assert_eq!(n, 1);
        assert!(matches!(migrate(&mut c).unwrap(), Migrated::Ok), "migrating again is a no-op");
    }

    #[test]
    fn a_version_2_database_reads_its_programs_as_turn_1() {
        let server = match TestPostgres::start() {
            Ok(s) => s,
            Err(why) => {
                assert!(std::env::var_os("CUDAL1_REQUIRE_PG").is_none(), "{why}");
                eprintln!("skipping: {why}");
                return;
            }
        };
        let mut c = Client::connect(&server.url(), postgres::NoTls).unwrap();
        c.batch_execute(MIGRATIONS[0]).unwrap();
        c.batch_execute(MIGRATIONS[1]).unwrap();
        c.batch_execute(
            "CREATE TABLE cudal1_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO cudal1_meta VALUES ('schema_version', '2');
             INSERT INTO programs (created_at, task_hash, code_hash, settings_hash, code, run_id, round,
                 parent_ids, verdict, reason, reason_class, evaluation)
                 VALUES ('now', 't', 'h', 's', 'code', 'r', 1, '[]', 'correct', 'ok', 'ok', 'null');",
        )
        .unwrap();
        assert!(matches!(migrate(&mut c).unwrap(), Migrated::Ok));
        let row = crate::programs::for_task(&mut c, "t", "s").unwrap().remove(0);
        let (trajectory, turn): (Option<String>, i64) = (row.get(16), row.get(17));
        assert_eq!((trajectory, turn), (None, 1));
        // Version 4: the program has no own-kernel share until one is recorded.
        let id: i64 = row.get(0);
        assert_eq!(row.get::<_, Option<f64>>(18), None);
        assert!(crate::programs::set_own_share(&mut c, id, 0.25).unwrap());
        let row = crate::programs::for_task(&mut c, "t", "s").unwrap().remove(0);
        assert_eq!(row.get::<_, Option<f64>>(18), Some(0.25));
    }
}
