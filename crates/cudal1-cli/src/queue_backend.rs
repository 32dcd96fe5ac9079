//! Where jobs and programs live: the SQLite store of this machine (the default), or a PostgreSQL
//! database shared by many machines (`--queue postgres://...`).

use anyhow::{bail, Context, Result};
use cudal1_store::{JobQueue, ServeStore, Store};
use cudal1_store_pg::PgStore;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub enum Backend {
    Sqlite(Arc<Store>),
    Postgres(Arc<PgStore>),
}

impl Backend {
    /// Opens `queue` when given, else the SQLite file `db`; PostgreSQL operations retry for
    /// `retry_for` while the server is unreachable.
    pub fn open(queue: Option<&str>, db: &Path, retry_for: Duration) -> Result<Backend> {
        match queue {
            Some(url) => {
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                    bail!("`--queue {url}` is not a PostgreSQL URL\nhint: use `postgres://USER@HOST:PORT/DB`, or leave `--queue` out to use the SQLite store `--db`");
                }
                Ok(Backend::Postgres(Arc::new(PgStore::connect_with(url, retry_for)?)))
            }
            None => Ok(Backend::Sqlite(Arc::new(
                Store::open(db).with_context(|| format!("opening the store `{}`", db.display()))?,
            ))),
        }
    }

    pub fn queue(&self) -> Arc<dyn JobQueue> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn JobQueue>,
            Backend::Postgres(p) => Arc::clone(p) as Arc<dyn JobQueue>,
        }
    }

    pub fn serve_store(&self) -> Arc<dyn ServeStore> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn ServeStore>,
            Backend::Postgres(p) => Arc::clone(p) as Arc<dyn ServeStore>,
        }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self, Backend::Postgres(_))
    }
}
