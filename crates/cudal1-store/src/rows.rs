//! Typed lookups: a query whose rows are read, then decoded (their JSON columns checked), with
//! errors that name the store's operation. Every table's `find`/`for_*` reads go through here.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, Params, Row};

use crate::error::{query_error, StoreError};

/// A row as read from SQLite, before its JSON columns are decoded.
pub(crate) trait RawRow: Sized {
    type Decoded;
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self>;
    fn decode(self, path: &Path) -> Result<Self::Decoded, StoreError>;
}

/// The first row of `sql`, if any.
pub(crate) fn one<R: RawRow>(
    conn: &Connection,
    path: &Path,
    operation: &'static str,
    sql: &str,
    params: impl Params,
) -> Result<Option<R::Decoded>, StoreError> {
    let err = |e| query_error(path, operation, e);
    let raw = conn
        .prepare_cached(sql)
        .map_err(err)?
        .query_row(params, R::from_row)
        .optional()
        .map_err(err)?;
    raw.map(|r| r.decode(path)).transpose()
}

/// Every row of `sql`, in its order.
pub(crate) fn all<R: RawRow>(
    conn: &Connection,
    path: &Path,
    operation: &'static str,
    sql: &str,
    params: impl Params,
) -> Result<Vec<R::Decoded>, StoreError> {
    let err = |e| query_error(path, operation, e);
    let mut stmt = conn.prepare_cached(sql).map_err(err)?;
    let raws = stmt
        .query_map(params, R::from_row)
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    raws.into_iter().map(|r| r.decode(path)).collect()
}
