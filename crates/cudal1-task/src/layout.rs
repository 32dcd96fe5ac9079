//! KernelBench's directory layout: `levelL/ID_Name.py`.

use crate::{Task, TaskError};
use std::path::{Path, PathBuf};

/// Where a task sits in a suite: `level1/12_Name` gives level 1, id 12, name `Name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct TaskName {
    pub level: Option<u32>,
    pub id: Option<u32>,
    pub name: String,
    /// The file stem, e.g. `12_Name`.
    pub stem: String,
}

impl TaskName {
    pub fn from_path(path: &Path) -> TaskName {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let level = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|d| d.to_str())
            .and_then(parse_level_dir);
        let (id, name) = match parse_file_name(&stem) {
            Some((id, name)) => (Some(id), name),
            None => (None, stem.clone()),
        };
        TaskName { level, id, name, stem }
    }

    /// `level1/12_Name`, or the bare stem outside the layout.
    pub fn key(&self) -> String {
        match self.level {
            Some(l) => format!("level{l}/{}", self.stem),
            None => self.stem.clone(),
        }
    }
}

/// `12_Name` → (12, "Name").
pub fn parse_file_name(stem: &str) -> Option<(u32, String)> {
    let (id, name) = stem.split_once('_')?;
    let id = id.parse().ok()?;
    Some((id, name.to_owned()))
}

fn parse_level_dir(dir: &str) -> Option<u32> {
    dir.strip_prefix("level")?.parse().ok()
}

/// The tasks of a suite, and the files that looked like tasks but did not load.
#[derive(Debug, Default)]
pub struct Suite {
    pub tasks: Vec<Task>,
    pub problems: Vec<TaskError>,
}

/// Loads every `levelL/ID_Name.py` under `dir` (searched recursively, so a KernelBench checkout's
/// root, its `KernelBench/` folder or one level folder all work), sorted by level and id.
/// A single file is a suite of one.
pub fn load_suite(dir: &Path) -> Result<Suite, TaskError> {
    if dir.is_file() {
        return Task::load(dir).map(|t| Suite { tasks: vec![t], problems: vec![] });
    }
    if !dir.is_dir() {
        return Err(TaskError::NotASuite {
            path: dir.to_owned(),
            reason: "no such directory".into(),
        });
    }
    let mut files = Vec::new();
    collect(dir, &mut files).map_err(|source| TaskError::Read { path: dir.to_owned(), source })?;
    let mut suite = Suite::default();
    for file in files {
        match Task::load(&file) {
            Ok(t) => suite.tasks.push(t),
            Err(e) => suite.problems.push(e),
        }
    }
    if suite.tasks.is_empty() && suite.problems.is_empty() {
        return Err(TaskError::NotASuite {
            path: dir.to_owned(),
            reason: "no `levelN/ID_Name.py` files below it (KernelBench's layout)".into(),
        });
    }
    suite.tasks.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(suite)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let in_level = dir.file_name().and_then(|d| d.to_str()).and_then(parse_level_dir).is_some();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "__pycache__" {
            continue;
        }
        if path.is_dir() {
            collect(&path, out)?;
        } else if in_level
            && name.ends_with(".py")
            && parse_file_name(name.trim_end_matches(".py")).is_some()
        {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_kernelbench_paths() {
        let n = TaskName::from_path(Path::new("/x/KernelBench/level2/17_Conv2d_ReLU.py"));
        assert_eq!((n.level, n.id, n.name.as_str()), (Some(2), Some(17), "Conv2d_ReLU"));
        assert_eq!(n.key(), "level2/17_Conv2d_ReLU");
        let n = TaskName::from_path(Path::new("my_model.py"));
        assert_eq!((n.level, n.id, n.key().as_str()), (None, None, "my_model"));
    }
}
