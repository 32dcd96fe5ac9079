//! Nsight Compute profiles (`cudal1 profile`, `optimize --profile`): where one program's GPU time
//! goes on one class of GPU. One row per task, program and class of device; profiling again
//! replaces the row. The profile itself is JSON (`cudal1_eval::profile::Profile`); `brief` is
//! its text for people and prompts.

use std::path::Path;

use rusqlite::{named_params, Connection, Row};
use serde::{Deserialize, Serialize};

use crate::error::{query_error, StoreError};
use crate::json;
use crate::rows::{self, RawRow};

/// The program of a task's reference, in [`ProfileKey::program`].
pub const REFERENCE_PROGRAM: &str = "reference";

/// What makes two profiles the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProfileKey {
    pub task_hash: String,
    /// The candidate's hash (as evaluations key it), or [`REFERENCE_PROGRAM`] for the task's own
    /// `Model`.
    pub program: String,
    /// The class of GPU, as the job queue names it.
    pub gpu_class: String,
}

/// A profile to record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewProfile {
    pub key: ProfileKey,
    /// `level1/12_Name`.
    pub task_name: String,
    /// The candidate as the user named it (a file name), or `reference`.
    pub label: String,
    pub brief: String,
    pub profile: serde_json::Value,
}

/// A recorded profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredProfile {
    /// RFC 3339, UTC, millisecond precision.
    pub created_at: String,
    pub profile: NewProfile,
}

pub(crate) fn upsert(conn: &Connection, path: &Path, p: &NewProfile) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO profiles (task_hash, program, gpu_class, task_name, label, created_at, brief, profile)
         VALUES (:task_hash, :program, :gpu_class, :task_name, :label, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), :brief, :profile)
         ON CONFLICT (task_hash, program, gpu_class) DO UPDATE SET
             task_name = excluded.task_name, label = excluded.label, created_at = excluded.created_at,
             brief = excluded.brief, profile = excluded.profile",
    )
    .and_then(|mut stmt| {
        stmt.execute(named_params! {
            ":task_hash": p.key.task_hash,
            ":program": p.key.program,
            ":gpu_class": p.key.gpu_class,
            ":task_name": p.task_name,
            ":label": p.label,
            ":brief": p.brief,
            ":profile": json::encode(&p.profile),
        })
    })
    .map(|_| ())
    .map_err(|e| query_error(path, "record_profile", e))
}

const SELECT: &str = "SELECT task_hash, program, gpu_class, task_name, label, created_at, brief, profile FROM profiles";

pub(crate) fn find(
    conn: &Connection,
    path: &Path,
    key: &ProfileKey,
) -> Result<Option<StoredProfile>, StoreError> {
    let sql = format!("{SELECT} WHERE task_hash = ?1 AND program = ?2 AND gpu_class = ?3");
    rows::one::<RawProfile>(
        conn,
        path,
        "find_profile",
        &sql,
        [&key.task_hash, &key.program, &key.gpu_class],
    )
}

/// Every profile, or those of one task, by task name, then label.
pub(crate) fn matching(
    conn: &Connection,
    path: &Path,
    task_hash: Option<&str>,
) -> Result<Vec<StoredProfile>, StoreError> {
    let sql = format!("{SELECT} WHERE (?1 IS NULL OR task_hash = ?1) ORDER BY task_name, task_hash, label, program, gpu_class");
    rows::all::<RawProfile>(conn, path, "profiles", &sql, [task_hash])
}

struct RawProfile {
    key: ProfileKey,
    task_name: String,
    label: String,
    created_at: String,
    brief: String,
    profile: String,
}

impl RawRow for RawProfile {
    type Decoded = StoredProfile;

    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            key: ProfileKey {
                task_hash: row.get(0)?,
                program: row.get(1)?,
                gpu_class: row.get(2)?,
            },
            task_name: row.get(3)?,
            label: row.get(4)?,
            created_at: row.get(5)?,
            brief: row.get(6)?,
            profile: row.get(7)?,
        })
    }

    fn decode(self, path: &Path) -> Result<StoredProfile, StoreError> {
        let row = format!("{}/{}/{}", self.key.task_hash, self.key.program, self.key.gpu_class);
        let profile = json::decode(&self.profile, path, "profiles", &row, "profile")?;
        Ok(StoredProfile {
            created_at: self.created_at,
            profile: NewProfile {
                key: self.key,
                task_name: self.task_name,
                label: self.label,
                brief: self.brief,
                profile,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::migrated;

    fn new(task: &str, program: &str, brief: &str) -> NewProfile {
        NewProfile {
            key: ProfileKey {
                task_hash: task.into(),
                program: program.into(),
                gpu_class: "NVIDIA H100".into(),
            },
            task_name: format!("level1/{task}"),
            label: program.into(),
            brief: brief.into(),
            profile: serde_json::json!({"total_ns": 10.0, "kernels": []}),
        }
    }

    #[test]
    fn profiles_are_replaced_by_key_and_listed_by_task() {
        let conn = migrated();
        let p = Path::new(":memory:");
        upsert(&conn, p, &new("a", REFERENCE_PROGRAM, "first")).unwrap();
        upsert(&conn, p, &new("a", "c1", "candidate")).unwrap();
        upsert(&conn, p, &new("b", REFERENCE_PROGRAM, "other task")).unwrap();
        upsert(&conn, p, &new("a", REFERENCE_PROGRAM, "again")).unwrap();
        let found = find(&conn, p, &new("a", REFERENCE_PROGRAM, "").key).unwrap().unwrap();
        assert_eq!(found.profile.brief, "again");
        assert_eq!(found.profile.profile["total_ns"], 10.0);
        assert_eq!(matching(&conn, p, Some("a")).unwrap().len(), 2);
        assert_eq!(matching(&conn, p, None).unwrap().len(), 3);
        assert!(find(&conn, p, &new("c", REFERENCE_PROGRAM, "").key).unwrap().is_none());
    }
}
