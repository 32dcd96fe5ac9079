//! The cudal1 store on PostgreSQL: [`PgStore`] implements the store's [`JobQueue`] and
//! [`ProgramDatabase`] for work spread over many machines (`cudal1 serve --queue URL` and
//! `cudal1 worker --queue URL` on each GPU machine). SQLite stays the single-machine default.
//!
//! Jobs are keyed by task, code, settings and GPU class and inserted idempotently; workers take
//! them with `FOR UPDATE SKIP LOCKED` under a lease they renew; an expired lease puts the job back,
//! too many attempts fail it with a recorded reason, and the first result written wins.
//! Finished jobs are announced with `NOTIFY`, which a listener thread turns into
//! [`QueueSignal`]s. Every operation retries on a new connection while the server is
//! unreachable (a restart), up to [`PgStore::retry_for`].
//!
//! ```no_run
//! use cudal1_store::JobQueue;
//! let store = cudal1_store_pg::PgStore::connect("postgres://cudal1@db-host/cudal1")?;
//! println!("{}: {:?}", store.describe(), store.counts()?);
//! # Ok::<(), cudal1_store::StoreError>(())
//! ```

mod listen;
mod pool;
mod programs;
mod queue;
mod schema;
#[cfg(feature = "test-server")]
pub mod test_server;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Once};
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver};
use cudal1_store::{
    Artifact, Claim, ClaimedJob, Completion, Enqueued, JobQueue, JobState, JobStatus, NewJob,
    NewProgram, ProgramDatabase, ProgramKey, ProgramScore, PromptRecord, QueueCounts, QueueSignal,
    StoreError, StoredProgram,
};

/// The notification channel of the job queue.
pub(crate) const CHANNEL: &str = "cudal1_jobs";

/// A handle on one PostgreSQL database. `Send + Sync`; clones of the `Arc` share connections.
pub struct PgStore {
    pool: Arc<pool::Pool>,
    subscribers: Arc<listen::Subscribers>,
    listener: Once,
}

impl PgStore {
    /// Connects (waiting up to 30 s for a server that is starting), and creates or migrates
    /// the schema.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_with(url, Duration::from_secs(30))
    }

    /// As [`PgStore::connect`]; operations keep retrying for `retry_for` while the server is
    /// unreachable before they fail.
    pub fn connect_with(url: &str, retry_for: Duration) -> Result<PgStore, StoreError> {
        let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| {
            StoreError::Connect { store: redact(url), source: Box::new(e) }
        })?;
        config.connect_timeout(Duration::from_secs(5)).keepalives(true).application_name("cudal1");
        let describe = describe(&config);
        let pool = Arc::new(pool::Pool::new(config, describe.clone(), retry_for));
        let migrated = pool.run("migrate", schema::migrate)?;
        if let schema::Migrated::TooNew { found } = migrated {
            return Err(StoreError::SchemaTooNew {
                path: PathBuf::from(describe),
                found,
                supported: schema::current_version(),
            });
        }
        Ok(PgStore { pool, subscribers: Arc::default(), listener: Once::new() })
    }

    /// How long operations retry while the server is unreachable.
    pub fn retry_for(&self) -> Duration {
        self.pool.retry_for
    }

    fn decode(&self) -> Decode<'_> {
        Decode { store: &self.pool.describe }
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.subscribers.stop.store(true, Ordering::SeqCst);
    }
}

/// `postgres://user@host:port/db`, never the password.
fn describe(config: &postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().map(|p| format!(":{p}")).unwrap_or_default();
    let user = config.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    format!("postgres://{user}{host}{port}/{}", config.get_dbname().unwrap_or(""))
}

/// A URL that did not parse, without anything that may be a password.
fn redact(url: &str) -> String {
    match url.split_once('@') {
        Some((_, rest)) => format!("postgres://…@{rest}"),
        None => url.to_owned(),
    }
}

/// Decoding rows, with errors that name the store.
pub(crate) struct Decode<'a> {
    store: &'a str,
}

impl Decode<'_> {
    pub(crate) fn json_as<T: serde::de::DeserializeOwned>(
        &self,
        table: &'static str,
        row: &str,
        column: &'static str,
        text: &str,
    ) -> Result<T, StoreError> {
        serde_json::from_str(text).map_err(|source| StoreError::CorruptJson {
            path: PathBuf::from(self.store),
            table,
            row: row.to_owned(),
            column,
            source,
        })
    }

    pub(crate) fn corrupt(&self, id: i64, column: &'static str, value: &str) -> StoreError {
        StoreError::CorruptValue {
            path: PathBuf::from(self.store),
            table: "jobs",
            row: id.to_string(),
            column,
            value: value.to_owned(),
        }
    }

    pub(crate) fn state(&self, id: i64, text: &str) -> Result<JobState, StoreError> {
        JobState::parse(text).ok_or_else(|| self.corrupt(id, "state", text))
    }
}

impl ProgramDatabase for PgStore {
    fn insert_program(&self, p: &NewProgram) -> Result<i64, StoreError> {
        self.pool.run("insert_program", |c| programs::insert(c, p))
    }

    fn find_program(&self, key: &ProgramKey) -> Result<Option<StoredProgram>, StoreError> {
        let row = self.pool.run("find_program", |c| programs::find(c, key))?;
        row.map(|r| programs::decode(&r, &self.decode())).transpose()
    }

    fn program(&self, id: i64) -> Result<Option<StoredProgram>, StoreError> {
        let row = self.pool.run("program", |c| programs::by_id(c, id))?;
        row.map(|r| programs::decode(&r, &self.decode())).transpose()
    }

    fn programs_for_task(
        &self,
        task_hash: &str,
        settings_hash: &str,
    ) -> Result<Vec<StoredProgram>, StoreError> {
        let rows = self
            .pool
            .run("programs_for_task", |c| programs::for_task(c, task_hash, settings_hash))?;
        rows.iter().map(|r| programs::decode(r, &self.decode())).collect()
    }

    fn ranked_programs(
        &self,
        task_hash: &str,
        settings_hash: &str,
        as_of: Option<i64>,
    ) -> Result<Vec<ProgramScore>, StoreError> {
        self.pool.run("ranked_programs", |c| programs::ranked(c, task_hash, settings_hash, as_of))
    }

    fn last_program_id(&self) -> Result<i64, StoreError> {
        self.pool.run("last_program_id", programs::last_id)
    }

    fn set_program_own_share(&self, id: i64, share: f64) -> Result<bool, StoreError> {
        if !(0.0..=1.0).contains(&share) {
            return Err(StoreError::ShareOutOfRange { id, value: share });
        }
        self.pool.run("set_program_own_share", |c| programs::set_own_share(c, id, share))
    }

    fn record_prompt(&self, p: &PromptRecord) -> Result<(), StoreError> {
        self.pool.run("record_prompt", |c| programs::record_prompt(c, p))
    }

    fn find_prompt(&self, id: &str) -> Result<Option<PromptRecord>, StoreError> {
        let row = self.pool.run("find_prompt", |c| programs::find_prompt(c, id))?;
        row.map(|r| programs::decode_prompt(&r, &self.decode())).transpose()
    }
}

impl JobQueue for PgStore {
    fn enqueue(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>, StoreError> {
        let rows = self.pool.run("enqueue", |c| queue::enqueue(c, jobs))?;
        queue::decode_enqueued(rows, &self.decode())
    }

    fn claim(&self, claim: &Claim) -> Result<Vec<ClaimedJob>, StoreError> {
        let rows = self.pool.run("claim", |c| queue::claim(c, claim))?;
        let mut jobs = rows
            .iter()
            .map(|r| queue::decode_claimed(r, &self.decode()))
            .collect::<Result<Vec<_>, _>>()?;
        jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
        Ok(jobs)
    }

    fn heartbeat(
        &self,
        worker: &str,
        ids: &[i64],
        lease: Duration,
    ) -> Result<Vec<i64>, StoreError> {
        self.pool.run("heartbeat", |c| queue::heartbeat(c, worker, ids, lease))
    }

    fn complete(&self, id: i64, worker: &str, completion: &Completion) -> Result<bool, StoreError> {
        self.pool.run("complete", |c| queue::complete(c, id, worker, completion))
    }

    fn release(&self, id: i64, worker: &str) -> Result<(), StoreError> {
        self.pool.run("release", |c| queue::release(c, id, worker))
    }

    fn advance(
        &self,
        id: i64,
        worker: &str,
        artifact: Option<&Artifact>,
    ) -> Result<(), StoreError> {
        self.pool.run("advance", |c| queue::advance(c, id, worker, artifact))
    }

    fn status(&self, ids: &[i64]) -> Result<Vec<JobStatus>, StoreError> {
        let rows = self.pool.run("job_status", |c| queue::status(c, ids))?;
        rows.iter().map(|r| queue::decode_status(r, &self.decode())).collect()
    }

    fn counts(&self) -> Result<QueueCounts, StoreError> {
        self.pool.run("queue_counts", queue::counts)
    }

    fn subscribe(&self) -> Receiver<QueueSignal> {
        let (tx, rx) = unbounded();
        self.subscribers.add(tx);
        self.listener.call_once(|| {
            let (pool, subs) = (Arc::clone(&self.pool), Arc::clone(&self.subscribers));
            std::thread::Builder::new()
                .name("pg-listen".into())
                .spawn(move || listen::run(&pool, &subs))
                .expect("the system can start a thread");
        });
        rx
    }

    fn describe(&self) -> String {
        self.pool.describe.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_never_show_the_password() {
        let config: postgres::Config = "postgres://me:secret@db.example:6543/jobs".parse().unwrap();
        assert_eq!(describe(&config), "postgres://me@db.example:6543/jobs");
        assert_eq!(redact("postgres://me:secret@db/x?bad"), "postgres://…@db/x?bad");
        assert!(!redact("postgres://me:secret@db").contains("secret"));
    }

    #[test]
    fn the_store_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PgStore>();
    }
}
