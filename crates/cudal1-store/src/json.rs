//! JSON columns: stored as TEXT, decoded with errors that name the row and column.

use std::path::Path;

use crate::error::StoreError;

pub(crate) fn encode(value: &serde_json::Value) -> String {
    // A `Value` always serializes: its map keys are strings and it holds no NaN.
    value.to_string()
}

pub(crate) fn decode(
    text: &str,
    path: &Path,
    table: &'static str,
    row: &str,
    column: &'static str,
) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|source| StoreError::CorruptJson {
        path: path.to_path_buf(),
        table,
        row: row.to_owned(),
        column,
        source,
    })
}

/// As [`decode`], into a typed value.
pub(crate) fn decode_as<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
    table: &'static str,
    row: &str,
    column: &'static str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|source| StoreError::CorruptJson {
        path: path.to_path_buf(),
        table,
        row: row.to_owned(),
        column,
        source,
    })
}
