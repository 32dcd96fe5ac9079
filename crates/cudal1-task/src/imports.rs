//! Other systems' published outputs, read as they are released.
//!
//! [`read_cuda_l1`] reads CUDA-L1's files (`optimized_cuda_code/<gpu>.json`): JSON lines of
//! `{level_id, task_id, ref_code, custom_code, score_*}`, or the same rows grouped by level as
//! `{"1": [{task_id, ref_code, custom_code, score}], ...}`. Every row comes back, including those
//! whose code is missing or `null`, so that a caller can report them as such.

use crate::TaskError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One row of a release.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedRow {
    /// `file:LINE` for JSON lines, `file:level L row N` for the grouped form.
    pub at: String,
    pub level: u32,
    pub id: u32,
    /// The reference the row was measured against.
    pub reference: Option<String>,
    /// The candidate; `None` when the release has none for this task.
    pub code: Option<String>,
    /// The release's claimed speedups by name (`score_default`, `score_torch_compile_default`,
    /// ...; the grouped form's `score` is named `score_default`).
    pub claimed: BTreeMap<String, f64>,
}

/// Reads a CUDA-L1 release file. Rows that are not objects or lack a level or task id are
/// problems, not failures of the whole file.
pub fn read_cuda_l1(path: &Path) -> Result<(Vec<ImportedRow>, Vec<TaskError>), TaskError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| TaskError::Read { path: path.to_owned(), source })?;
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let problem =
        |at: &str, reason: String| TaskError::Candidates { path: PathBuf::from(at), reason };
    // The grouped form is one JSON object whose values are arrays.
    if let Ok(Value::Object(groups)) = serde_json::from_str::<Value>(&text) {
        if groups.values().all(Value::is_array) {
            for (level, group) in &groups {
                let Ok(level) = level.parse::<u32>() else {
                    problems.push(problem(
                        &path.display().to_string(),
                        format!("`{level}` is not a level number"),
                    ));
                    continue;
                };
                for (n, row) in group.as_array().into_iter().flatten().enumerate() {
                    let at = format!("{}:level {level} row {}", path.display(), n + 1);
                    match row_of(&at, row, Some(level)) {
                        Ok(r) => rows.push(r),
                        Err(reason) => problems.push(problem(&at, reason)),
                    }
                }
            }
            return Ok((rows, problems));
        }
    }
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{}", path.display(), n + 1);
        match serde_json::from_str::<Value>(line)
            .map_err(|e| format!("not JSON: {e}"))
            .and_then(|v| row_of(&at, &v, None))
        {
            Ok(r) => rows.push(r),
            Err(reason) => problems.push(problem(&at, reason)),
        }
    }
    if rows.is_empty() && problems.is_empty() {
        return Err(TaskError::Candidates {
            path: path.to_owned(),
            reason: "no rows: expected CUDA-L1's JSON lines or rows grouped by level".into(),
        });
    }
    Ok((rows, problems))
}

fn row_of(at: &str, v: &Value, level: Option<u32>) -> Result<ImportedRow, String> {
    let obj = v.as_object().ok_or("not a JSON object")?;
    let number =
        |key: &str| obj.get(key).and_then(as_number).and_then(|x| u32::try_from(x as i64).ok());
    let level = level.or_else(|| number("level_id")).ok_or("no `level_id`")?;
    let id = number("task_id").ok_or("no `task_id`")?;
    let text = |key: &str| {
        obj.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty() && *s != "None")
            .map(str::to_owned)
    };
    let mut claimed = BTreeMap::new();
    for (k, v) in obj {
        if let (true, Some(x)) = (k.starts_with("score"), as_number(v)) {
            let name = if k == "score" { "score_default".to_owned() } else { k.clone() };
            claimed.insert(name, x);
        }
    }
    Ok(ImportedRow {
        at: at.to_owned(),
        level,
        id,
        reference: text("ref_code"),
        code: text("custom_code"),
        claimed,
    })
}

/// A number, or a string holding one (`"2.750"`).
fn as_number(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .filter(|x: &f64| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_lines_with_null_code_and_numeric_strings() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h100.json");
        let rows = [
            r#"{"level_id": 1, "task_id": 3, "ref_code": "REF", "custom_code": "CODE", "score_default": 2.5, "score_cuda_graph": "1.25"}"#,
            r#"{"level_id": 1, "task_id": 4, "ref_code": "REF", "custom_code": null, "score_default": null}"#,
            r#"not json"#,
            r#"{"task_id": 9}"#,
        ];
        std::fs::write(&file, rows.join("\n")).unwrap();
        let (rows, problems) = read_cuda_l1(&file).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].level, rows[0].id, rows[0].code.as_deref()), (1, 3, Some("CODE")));
        assert_eq!(rows[0].claimed["score_default"], 2.5);
        assert_eq!(rows[0].claimed["score_cuda_graph"], 1.25);
        assert_eq!(rows[1].code, None);
        assert!(rows[1].claimed.is_empty());
        assert_eq!(problems.len(), 2);
        assert!(problems[1].to_string().contains("level_id"), "{}", problems[1]);
    }

    #[test]
    fn reads_rows_grouped_by_level() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("codes.json");
        std::fs::write(
            &file,
            r#"{"2": [{"task_id": 7, "ref_code": "R", "custom_code": "C", "score": "3.100"}]}"#,
        )
        .unwrap();
        let (rows, problems) = read_cuda_l1(&file).unwrap();
        assert!(problems.is_empty());
        assert_eq!((rows[0].level, rows[0].id), (2, 7));
        assert_eq!(rows[0].claimed["score_default"], 3.1);
        assert!(rows[0].at.ends_with("level 2 row 1"), "{}", rows[0].at);
    }
}
