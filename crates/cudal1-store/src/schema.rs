//! The schema and its migrations, versioned through `PRAGMA user_version`.
//!
//! Migration `i` (0-based) takes the schema from version `i` to `i + 1`. Append new migrations
//! (programs and rounds for the optimize loop, ...); never edit one that has shipped.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{open_error, query_error, StoreError};

/// Marks a file as a cudal1 store ("cuL1"), so that another application's database is refused.
pub(crate) const APPLICATION_ID: i32 = 0x6375_4c31;

const MIGRATIONS: &[&str] = &[
    // 0 -> 1: evaluations and batches.
    "
    CREATE TABLE batches (
        id              TEXT PRIMARY KEY NOT NULL,
        created_at      TEXT NOT NULL,
        finished_at     TEXT,
        settings        TEXT NOT NULL,
        suite_path      TEXT NOT NULL,
        candidates_path TEXT NOT NULL,
        summary         TEXT
    );
    CREATE TABLE evaluations (
        id              INTEGER PRIMARY KEY,
        created_at      TEXT NOT NULL,
        -- Bumped on every insert or replacement: orders most-recent-first where created_at
        -- (millisecond resolution) ties.
        recorded_seq    INTEGER NOT NULL,
        task_hash       TEXT NOT NULL,
        candidate_hash  TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        -- A free label, not a foreign key: an evaluation may be recorded before its batch.
        batch_id        TEXT,
        task_name       TEXT NOT NULL,
        task_path       TEXT NOT NULL,
        candidate_label TEXT NOT NULL,
        verdict         TEXT NOT NULL,
        reason          TEXT NOT NULL,
        speedup_median  REAL,
        speedup_ci_low  REAL,
        speedup_ci_high REAL,
        ref_ms          REAL,
        candidate_ms    REAL,
        device          TEXT NOT NULL,
        environment     TEXT NOT NULL,
        settings        TEXT NOT NULL,
        measurements    TEXT NOT NULL,
        duration_ms     REAL NOT NULL
    );
    CREATE UNIQUE INDEX evaluations_key ON evaluations (task_hash, candidate_hash, settings_hash);
    CREATE INDEX evaluations_batch ON evaluations (batch_id);
    CREATE INDEX evaluations_recorded ON evaluations (recorded_seq);
    ",
    // 1 -> 2: the optimize loop's program database, runs, rounds and samples.
    "
    CREATE TABLE programs (
        id              INTEGER PRIMARY KEY,
        created_at      TEXT NOT NULL,
        task_hash       TEXT NOT NULL,
        -- normalized_hash of the code: comments and layout do not make a new program.
        code_hash       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        code            TEXT NOT NULL,
        run_id          TEXT NOT NULL,
        round           INTEGER NOT NULL,
        -- JSON array of the program ids shown as exemplars when this one was written.
        parent_ids      TEXT NOT NULL,
        verdict         TEXT NOT NULL,
        reason          TEXT NOT NULL,
        reason_class    TEXT NOT NULL,
        speedup_median  REAL,
        speedup_ci_low  REAL,
        speedup_ci_high REAL,
        evaluation      TEXT NOT NULL
    );
    CREATE UNIQUE INDEX programs_key ON programs (task_hash, code_hash, settings_hash);
    CREATE TABLE optimize_runs (
        id              TEXT PRIMARY KEY NOT NULL,
        created_at      TEXT NOT NULL,
        finished_at     TEXT,
        stop_reason     TEXT,
        task_hash       TEXT NOT NULL,
        task_name       TEXT NOT NULL,
        task_path       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        settings        TEXT NOT NULL,
        config          TEXT NOT NULL
    );
    CREATE TABLE optimize_rounds (
        run_id            TEXT NOT NULL,
        round             INTEGER NOT NULL,
        finished_at       TEXT NOT NULL,
        samples           INTEGER NOT NULL,
        valid             INTEGER NOT NULL,
        correct           INTEGER NOT NULL,
        new_programs      INTEGER NOT NULL,
        best_program_id   INTEGER,
        best_speedup      REAL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost_usd          REAL NOT NULL,
        wall_ms           REAL NOT NULL,
        PRIMARY KEY (run_id, round)
    );
    CREATE TABLE optimize_samples (
        id                INTEGER PRIMARY KEY,
        created_at        TEXT NOT NULL,
        run_id            TEXT NOT NULL,
        round             INTEGER NOT NULL,
        idx               INTEGER NOT NULL,
        prompt_kind       TEXT NOT NULL,
        exemplar_ids      TEXT NOT NULL,
        model             TEXT,
        reply             TEXT,
        finish_reason     TEXT,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost_usd          REAL NOT NULL,
        latency_ms        REAL,
        outcome           TEXT NOT NULL,
        reason            TEXT,
        code_hash         TEXT
    );
    CREATE UNIQUE INDEX optimize_samples_slot ON optimize_samples (run_id, round, idx);
    ",
    // 2 -> 3: task checks (`tasks check` resumes from them).
    "
    CREATE TABLE task_checks (
        task_hash       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        task_name       TEXT NOT NULL,
        created_at      TEXT NOT NULL,
        result          TEXT NOT NULL,
        PRIMARY KEY (task_hash, settings_hash)
    );
    ",
    // 3 -> 4: the evaluation job queue of `serve` and `worker`, and the prompts shown.
    "
    CREATE TABLE jobs (
        id                INTEGER PRIMARY KEY,
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
        -- JSON array of the program ids shown in the prompt the code answered.
        parent_ids        TEXT NOT NULL,
        mode              TEXT NOT NULL,
        settings          TEXT NOT NULL,
        priority          INTEGER NOT NULL,
        stage             TEXT NOT NULL,
        state             TEXT NOT NULL,
        attempts          INTEGER NOT NULL DEFAULT 0,
        max_attempts      INTEGER NOT NULL,
        worker            TEXT,
        -- Seconds since the epoch, by this database's clock.
        lease_until       REAL,
        finished_at       TEXT,
        verdict           TEXT,
        result            TEXT,
        error             TEXT,
        program_id        INTEGER,
        discarded         INTEGER NOT NULL DEFAULT 0,
        artifact          BLOB,
        artifact_env      TEXT
    );
    CREATE UNIQUE INDEX jobs_key ON jobs (task_hash, candidate_hash, settings_hash, gpu_class);
    CREATE INDEX jobs_claim ON jobs (state, gpu_class, stage, priority DESC, id);
    CREATE TABLE prompts (
        id              TEXT PRIMARY KEY NOT NULL,
        created_at      TEXT NOT NULL,
        task_hash       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        exemplar_ids    TEXT NOT NULL,
        as_of           INTEGER NOT NULL
    );
    ",
    // 4 -> 5: baselines per task, settings, class of device and name (`cudal1 baselines`).
    "
    CREATE TABLE baselines (
        task_hash       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        gpu_class       TEXT NOT NULL,
        name            TEXT NOT NULL,
        task_name       TEXT NOT NULL,
        created_at      TEXT NOT NULL,
        status          TEXT NOT NULL,
        reason          TEXT NOT NULL,
        speedup_median  REAL,
        speedup_ci_low  REAL,
        speedup_ci_high REAL,
        baseline_ms     REAL,
        reference_ms    REAL,
        evaluation      TEXT NOT NULL,
        PRIMARY KEY (task_hash, settings_hash, gpu_class, name)
    );
    ",
    // 5 -> 6: for `report`: programs' text by content hash, another system's claims per batch,
    // and every evaluation a batch showed (reused ones keep the batch_id they were recorded with).
    "
    CREATE TABLE batch_evaluations (
        batch_id        TEXT NOT NULL,
        evaluation_id   INTEGER NOT NULL,
        -- As the batch named them (a reused evaluation keeps the names it was recorded under).
        task_name       TEXT NOT NULL,
        candidate_label TEXT NOT NULL,
        PRIMARY KEY (batch_id, evaluation_id)
    );
    CREATE TABLE sources (
        hash            TEXT PRIMARY KEY NOT NULL,
        text            TEXT NOT NULL
    );
    CREATE TABLE claims (
        batch_id        TEXT NOT NULL,
        task_hash       TEXT NOT NULL,
        candidate_hash  TEXT NOT NULL,
        claimed         TEXT NOT NULL,
        PRIMARY KEY (batch_id, task_hash, candidate_hash)
    );
    ",
    // 6 -> 7: Nsight Compute profiles per task, program and class of device (`cudal1 profile`).
    "
    CREATE TABLE profiles (
        task_hash       TEXT NOT NULL,
        program         TEXT NOT NULL,
        gpu_class       TEXT NOT NULL,
        task_name       TEXT NOT NULL,
        label           TEXT NOT NULL,
        created_at      TEXT NOT NULL,
        brief           TEXT NOT NULL,
        profile         TEXT NOT NULL,
        PRIMARY KEY (task_hash, program, gpu_class)
    );
    ",
    // 7 -> 8: results carry what judged them (the judging version and the class of GPU), and a
    // result is reused only by the same judge. Older rows get empty values: they stay listed but
    // no key of a build that records judges finds them, so their work is judged again.
    "
    ALTER TABLE evaluations ADD COLUMN judge TEXT NOT NULL DEFAULT '';
    ALTER TABLE evaluations ADD COLUMN gpu_class TEXT NOT NULL DEFAULT '';
    DROP INDEX evaluations_key;
    CREATE UNIQUE INDEX evaluations_key ON evaluations (task_hash, candidate_hash, settings_hash, judge, gpu_class);
    ALTER TABLE jobs ADD COLUMN judge TEXT NOT NULL DEFAULT '';
    DROP INDEX jobs_key;
    CREATE UNIQUE INDEX jobs_key ON jobs (task_hash, candidate_hash, settings_hash, gpu_class, judge);
    CREATE TABLE baselines_judged (
        task_hash       TEXT NOT NULL,
        settings_hash   TEXT NOT NULL,
        gpu_class       TEXT NOT NULL,
        judge           TEXT NOT NULL,
        name            TEXT NOT NULL,
        task_name       TEXT NOT NULL,
        created_at      TEXT NOT NULL,
        status          TEXT NOT NULL,
        reason          TEXT NOT NULL,
        speedup_median  REAL,
        speedup_ci_low  REAL,
        speedup_ci_high REAL,
        baseline_ms     REAL,
        reference_ms    REAL,
        evaluation      TEXT NOT NULL,
        PRIMARY KEY (task_hash, settings_hash, gpu_class, judge, name)
    );
    INSERT INTO baselines_judged (task_hash, settings_hash, gpu_class, judge, name, task_name, created_at,
            status, reason, speedup_median, speedup_ci_low, speedup_ci_high, baseline_ms, reference_ms, evaluation)
        SELECT task_hash, settings_hash, gpu_class, '', name, task_name, created_at, status, reason,
            speedup_median, speedup_ci_low, speedup_ci_high, baseline_ms, reference_ms, evaluation FROM baselines;
    DROP TABLE baselines;
    ALTER TABLE baselines_judged RENAME TO baselines;
    ",
    // 8 -> 9: refinement turns (`optimize --turns`): a sample slot of a round is a trajectory of
    // up to K programs, each turn's prompt showing the previous turn's verdict. Samples are keyed
    // by their turn too; a program records the trajectory and turn that first wrote it. Older
    // rows are turn 1 of their slot (what they were), programs of other commands have no
    // trajectory.
    "
    ALTER TABLE optimize_samples ADD COLUMN turn INTEGER NOT NULL DEFAULT 1;
    DROP INDEX optimize_samples_slot;
    CREATE UNIQUE INDEX optimize_samples_slot ON optimize_samples (run_id, round, idx, turn);
    ALTER TABLE programs ADD COLUMN trajectory TEXT;
    ALTER TABLE programs ADD COLUMN turn INTEGER NOT NULL DEFAULT 1;
    ",
    // 9 -> 10: the own-kernel share of an evaluation (`eval --own-share`): the part of its GPU
    // time in kernels it built itself, and the split per kernel (JSON); and of a program (the
    // `speedup-own-kernels` reward). Older rows have none.
    "
    ALTER TABLE evaluations ADD COLUMN own_share REAL;
    ALTER TABLE evaluations ADD COLUMN own_kernels TEXT;
    ALTER TABLE programs ADD COLUMN own_share REAL;
    ",
];

/// The schema version this build writes.
pub(crate) fn current_version() -> i64 {
    i64::try_from(MIGRATIONS.len()).expect("migration count fits in i64")
}

/// Brings the database to [`current_version`], refusing files that are newer or not ours.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    // Fast path without a write lock: an up-to-date store opened by many processes at once.
    let (version, app_id) = read_header(conn, path)?;
    if version == current_version() && app_id == APPLICATION_ID {
        return Ok(());
    }
    // IMMEDIATE takes the write lock up front, so two processes opening a fresh file cannot both
    // migrate it; the header is read again under the lock.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| open_error(path, "begin the migration", e))?;
    let (version, app_id) = read_header(&tx, path)?;
    check_ownership(&tx, path, version, app_id)?;
    if version > current_version() {
        return Err(StoreError::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: current_version(),
        });
    }
    for (from, sql) in (0_i64..).zip(MIGRATIONS).skip(usize::try_from(version).unwrap_or(0)) {
        tracing::info!(path = %path.display(), from, to = from + 1, "migrating store schema");
        tx.execute_batch(sql).map_err(|source| StoreError::Migrate {
            path: path.to_path_buf(),
            from,
            to: from + 1,
            source,
        })?;
    }
    tx.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {};",
        current_version()
    ))
    .map_err(|e| query_error(path, "migrate", e))?;
    tx.commit().map_err(|e| query_error(path, "migrate", e))
}

fn read_header(conn: &Connection, path: &Path) -> Result<(i64, i32), StoreError> {
    let version = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| open_error(path, "read the schema version", e))?;
    let app_id = conn
        .query_row("PRAGMA application_id", [], |row| row.get(0))
        .map_err(|e| open_error(path, "read the application id", e))?;
    Ok((version, app_id))
}

/// A file is ours if it carries our application id, or is empty (a fresh or zero-byte file).
fn check_ownership(
    conn: &Connection,
    path: &Path,
    version: i64,
    app_id: i32,
) -> Result<(), StoreError> {
    if app_id == APPLICATION_ID {
        return Ok(());
    }
    let objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))
        .map_err(|e| open_error(path, "inspect the schema", e))?;
    if app_id == 0 && version == 0 && objects == 0 {
        return Ok(());
    }
    Err(StoreError::ForeignDatabase { path: path.to_path_buf() })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn memory() -> Connection {
        Connection::open_in_memory().unwrap()
    }

    /// A database in memory at the current schema, for the store's unit tests.
    pub(crate) fn migrated() -> Connection {
        let mut conn = memory();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        conn
    }

    fn header(conn: &Connection) -> (i64, i32) {
        read_header(conn, Path::new(":memory:")).unwrap()
    }

    #[test]
    fn migrating_an_empty_database_sets_version_and_id() {
        let mut conn = memory();
        assert_eq!(header(&conn), (0, 0));
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!(header(&conn), (current_version(), APPLICATION_ID));
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            tables,
            [
                "baselines",
                "batch_evaluations",
                "batches",
                "claims",
                "evaluations",
                "jobs",
                "optimize_rounds",
                "optimize_runs",
                "optimize_samples",
                "profiles",
                "programs",
                "prompts",
                "sources",
                "task_checks"
            ]
        );
    }

    #[test]
    fn migrating_twice_is_a_no_op() {
        let mut conn = memory();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        conn.execute_batch("INSERT INTO batches VALUES ('b', 'now', NULL, '{}', 's', 'c', NULL)")
            .unwrap();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        let n: i64 = conn.query_row("SELECT count(*) FROM batches", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn a_version_1_store_gains_the_optimize_tables_and_keeps_its_rows() {
        let mut conn = memory();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1;
             INSERT INTO batches VALUES ('kept', 'now', NULL, '{{}}', 's', 'c', NULL);"
        ))
        .unwrap();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!(header(&conn).0, current_version());
        let kept: i64 = conn
            .query_row("SELECT count(*) FROM batches WHERE id = 'kept'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, 1);
        let programs: i64 =
            conn.query_row("SELECT count(*) FROM programs", [], |r| r.get(0)).unwrap();
        assert_eq!(programs, 0);
    }

    #[test]
    fn a_version_7_store_keeps_its_results_readable_but_never_reused() {
        let mut conn = memory();
        for sql in &MIGRATIONS[..7] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 7;
             INSERT INTO evaluations (created_at, recorded_seq, task_hash, candidate_hash, settings_hash, batch_id,
                 task_name, task_path, candidate_label, verdict, reason, speedup_median, device, environment,
                 settings, measurements, duration_ms)
                 VALUES ('2026-11-01T00:00:00.000Z', 1, 't', 'c', 's', 'b', 'level1/1_A', 'a.py', 'cand.py',
                 'correct', 'old', 14.0, 'cuda:0', '{{}}', '{{}}', '{{}}', 1.0);
             INSERT INTO baselines VALUES ('t', 's', 'nvidia-h100', 'eager', 'level1/1_A', 'now', 'measured', '',
                 1.0, 1.0, 1.0, 1.0, 1.0, 'null');
             INSERT INTO jobs (created_at, task_hash, candidate_hash, settings_hash, gpu_class, settings_family,
                 task_name, task_source, candidate_source, program_code_hash, program_settings, parent_ids, mode,
                 settings, priority, stage, state, max_attempts, verdict, result)
                 VALUES ('now', 't', 'c', 's', 'cpu', 'f', 'level1/1_A', 'src', 'code', 'h', 'p', '[]', 'full', '{{}}',
                 0, 'run', 'done', 3, 'correct', '{{}}');"
        ))
        .unwrap();
        migrate(&mut conn, Path::new("old.db")).unwrap();
        assert_eq!(header(&conn).0, current_version());
        let path = Path::new("old.db");
        // Listed, with no judge...
        let listed = crate::evaluation::all(&conn, path).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (
                listed[0].verdict.as_str(),
                listed[0].speedup_median,
                listed[0].key.judge.as_str(),
                listed[0].key.gpu_class.as_str()
            ),
            ("correct", Some(14.0), "", "")
        );
        // ... and found by no judge's key.
        let key = crate::EvalKey {
            judge: "1.0123456789ab".into(),
            gpu_class: "nvidia-h100".into(),
            ..listed[0].key.clone()
        };
        assert!(crate::evaluation::find(&conn, path, &key).unwrap().is_none());
        let baselines =
            crate::baseline::matching(&conn, path, &crate::BaselineFilter::default()).unwrap();
        assert_eq!(baselines.len(), 1);
        let key = crate::BaselineKey {
            judge: "1.0123456789ab".into(),
            ..baselines[0].baseline.key.clone()
        };
        assert!(crate::baseline::find(&conn, path, &key).unwrap().is_none());
        let jobs = crate::jobs::status(&conn, path, &[1]).unwrap();
        assert_eq!((jobs[0].verdict.as_deref(), jobs[0].key.judge.as_str()), (Some("correct"), ""));
    }

    #[test]
    fn a_version_8_store_reads_its_samples_and_programs_as_turn_1() {
        let mut conn = memory();
        for sql in &MIGRATIONS[..8] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 8;
             INSERT INTO optimize_samples (created_at, run_id, round, idx, prompt_kind, exemplar_ids,
                 prompt_tokens, completion_tokens, cost_usd, outcome, code_hash)
                 VALUES ('now', 'r', 1, 0, 'first', '[]', 10, 5, 0.0, 'program', 'h');
             INSERT INTO programs (created_at, task_hash, code_hash, settings_hash, code, run_id, round,
                 parent_ids, verdict, reason, reason_class, speedup_median, evaluation)
                 VALUES ('now', 't', 'h', 's', 'code', 'r', 1, '[]', 'correct', 'ok', 'ok', 1.5, 'null');"
        ))
        .unwrap();
        let path = Path::new("old.db");
        migrate(&mut conn, path).unwrap();
        assert_eq!(header(&conn).0, current_version());
        let samples = crate::search::samples(&conn, path, "r").unwrap();
        assert_eq!((samples.len(), samples[0].sample.turn), (1, 1));
        let programs = crate::program::for_task(&conn, path, "t", "s").unwrap();
        assert_eq!((programs[0].turn, programs[0].trajectory.as_deref()), (1, None));
        // A later turn of the same slot is a new row.
        let next = crate::NewSample { turn: 2, ..samples[0].sample.clone() };
        crate::search::insert_sample(&conn, path, &next).unwrap();
        assert_eq!(crate::search::samples(&conn, path, "r").unwrap().len(), 2);
    }

    #[test]
    fn a_version_9_store_keeps_its_evaluations_without_a_share_and_records_one() {
        let mut conn = memory();
        for sql in &MIGRATIONS[..9] {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 9;
             INSERT INTO evaluations (created_at, recorded_seq, task_hash, candidate_hash, settings_hash, batch_id,
                 task_name, task_path, candidate_label, verdict, reason, speedup_median, device, environment,
                 settings, measurements, duration_ms, judge, gpu_class)
                 VALUES ('2026-11-01T00:00:00.000Z', 1, 't', 'c', 's', 'b', 'level1/1_A', 'a.py', 'cand.py',
                 'correct', 'ok', 2.0, 'cuda:0', '{{}}', '{{}}', '{{}}', 1.0, 'j', 'nvidia-h100');"
        ))
        .unwrap();
        let path = Path::new("old.db");
        migrate(&mut conn, path).unwrap();
        assert_eq!(header(&conn).0, current_version());
        let old = crate::evaluation::all(&conn, path).unwrap();
        assert_eq!(
            (old.len(), old[0].speedup_median, old[0].own_share, old[0].own_kernels.clone()),
            (1, Some(2.0), None, None)
        );
        let split = serde_json::json!({"kernels": [{"name": "k", "origin": "own"}]});
        assert!(crate::evaluation::set_own_share(&conn, path, old[0].id, 0.75, &split).unwrap());
        assert!(!crate::evaluation::set_own_share(&conn, path, old[0].id + 1, 0.5, &split).unwrap());
        assert!(crate::evaluation::set_own_share(&conn, path, old[0].id, 1.5, &split).is_err());
        let now = crate::evaluation::by_id(&conn, path, old[0].id).unwrap().unwrap();
        assert_eq!((now.own_share, now.own_kernels.clone()), (Some(0.75), Some(split)));
        let programs = crate::program::for_task(&conn, path, "t", "s").unwrap();
        assert!(programs.is_empty());
        // Judged again under the same key: the share of the old verdict goes with it.
        crate::evaluation::upsert(&conn, path, &now.to_new()).unwrap();
        assert_eq!(
            crate::evaluation::by_id(&conn, path, old[0].id).unwrap().unwrap().own_share,
            None
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let mut conn = memory();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        conn.execute_batch(&format!("PRAGMA user_version = {}", current_version() + 1)).unwrap();
        let e = migrate(&mut conn, Path::new("x.db")).unwrap_err();
        assert!(
            matches!(e, StoreError::SchemaTooNew { found, supported, .. } if found == current_version() + 1 && supported == current_version()),
            "{e:?}"
        );
    }

    #[test]
    fn another_applications_database_is_refused() {
        let mut conn = memory();
        conn.execute_batch("CREATE TABLE notes (body TEXT)").unwrap();
        let e = migrate(&mut conn, Path::new("notes.db")).unwrap_err();
        assert!(matches!(e, StoreError::ForeignDatabase { .. }), "{e:?}");

        let mut conn = memory();
        conn.execute_batch("PRAGMA application_id = 42").unwrap();
        let e = migrate(&mut conn, Path::new("other.db")).unwrap_err();
        assert!(matches!(e, StoreError::ForeignDatabase { .. }), "{e:?}");
    }

    #[test]
    fn a_failed_migration_rolls_back() {
        let mut conn = memory();
        // A clashing table makes migration 0 -> 1 fail part-way, after "batches" was created.
        // It also marks the file as foreign, so pretend it is ours to reach the migration step.
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; CREATE TABLE evaluations (x)"
        ))
        .unwrap();
        let e = migrate(&mut conn, Path::new("x.db")).unwrap_err();
        assert!(matches!(e, StoreError::Migrate { from: 0, to: 1, .. }), "{e:?}");
        let batches: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema WHERE name = 'batches'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(batches, 0);
        assert_eq!(header(&conn).0, 0);
    }
}
