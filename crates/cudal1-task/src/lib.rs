//! Loading and static validation of KernelBench-format programs; no processes are started here.
//!
//! The main type is [`Task`]: a reference program (`class Model`, `get_inputs()`,
//! `get_init_inputs()`) read from a file, parsed, checked and identified by a content hash.
//! [`Candidate`] is the same for a rewrite that must define `class ModelNew`. [`load_suite`] walks a
//! directory in KernelBench's layout (`level1/12_Name.py`), and [`match_candidates`] pairs a
//! directory or JSONL file of candidates with the tasks of a suite, and [`read_cuda_l1`] reads
//! another system's published release.
//!
//! ```no_run
//! let task = cudal1_task::Task::load(std::path::Path::new("tasks/level1/1_Square_matmul.py"))?;
//! assert_eq!(task.key(), "level1/1_Square_matmul");
//! # Ok::<(), cudal1_task::TaskError>(())
//! ```

mod bypass;
mod candidates;
mod hash;
mod imports;
mod layout;
mod screen;
mod syntax;
pub mod synth;

pub use bypass::triton_kernels;
pub use candidates::{
    expectation, match_candidates, parse_generation_name, CandidateSource, Expectation,
    MatchedCandidate,
};
pub use hash::content_hash;
pub use imports::{read_cuda_l1, ImportedRow};
pub use layout::{load_suite, parse_file_name, Suite, TaskName};
pub use screen::{kernel_kinds, screen, KernelKinds, ScreenFinding, Screening};
pub use syntax::{find_definitions, Definitions, SyntaxProblem};

use std::path::{Path, PathBuf};

/// Why a program could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("cannot read `{path}`")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` has a syntax error at line {line}, column {column}: {snippet}")]
    Syntax { path: PathBuf, line: usize, column: usize, snippet: String },
    #[error(
        "`{path}` defines no {what}; a KernelBench {role} must define {what} at the top level"
    )]
    Missing { path: PathBuf, what: &'static str, role: &'static str },
    #[error("`{path}` is not a directory of tasks: {reason}")]
    NotASuite { path: PathBuf, reason: String },
    #[error("candidates `{path}`: {reason}")]
    Candidates { path: PathBuf, reason: String },
}

/// A reference program in the KernelBench format.
#[derive(Debug, Clone)]
pub struct Task {
    pub path: PathBuf,
    pub name: TaskName,
    pub source: String,
    /// sha256 of the source, hex.
    pub hash: String,
}

impl Task {
    /// Reads and checks a reference program: it must parse and define `Model`, `get_inputs` and
    /// `get_init_inputs` at the top level.
    pub fn load(path: &Path) -> Result<Task, TaskError> {
        let source = read(path)?;
        Self::from_source(path, source)
    }

    pub fn from_source(path: &Path, source: String) -> Result<Task, TaskError> {
        let defs = checked_definitions(path, &source)?;
        for (present, what) in [
            (defs.classes.iter().any(|c| c == "Model"), "`class Model`"),
            (defs.functions.iter().any(|f| f == "get_inputs"), "`def get_inputs()`"),
            (defs.functions.iter().any(|f| f == "get_init_inputs"), "`def get_init_inputs()`"),
        ] {
            if !present {
                return Err(TaskError::Missing { path: path.to_owned(), what, role: "task" });
            }
        }
        Ok(Task {
            name: TaskName::from_path(path),
            hash: content_hash(&source),
            path: path.to_owned(),
            source,
        })
    }

    /// `level1/12_Name` when the file follows KernelBench's layout, else its file stem.
    pub fn key(&self) -> String {
        self.name.key()
    }

    /// A task whose source came from elsewhere (another system's release, a job from another
    /// machine), written once to `<root>/<hash prefix>/<key>.py` so that runners can load it and
    /// it keeps its name (`key` as [`Task::key`] gives it, e.g. `level1/12_Name`).
    pub fn materialize(root: &Path, key: &str, source: String) -> Result<Task, TaskError> {
        let hash = content_hash(&source);
        let safe = !key.is_empty()
            && key.split('/').all(|part| {
                !part.is_empty() && part != "." && part != ".." && !part.contains('\\')
            });
        if !safe {
            return Err(TaskError::Missing {
                path: PathBuf::from(key),
                what: "a task name of the form `level1/12_Name`",
                role: "job",
            });
        }
        let file = root.join(&hash[..16]).join(format!("{key}.py"));
        let task = Task::from_source(&file, source)?;
        if !file.is_file() {
            let write = || -> std::io::Result<()> {
                std::fs::create_dir_all(file.parent().expect("a file in a folder"))?;
                // Written beside and renamed, so that a reader never sees half a file.
                let partial = file.with_extension(format!("py.{}", std::process::id()));
                std::fs::write(&partial, &task.source)?;
                std::fs::rename(&partial, &file)
            };
            write().map_err(|source| TaskError::Read { path: file.clone(), source })?;
        }
        Ok(task)
    }
}

/// A candidate rewrite: must parse and define `class ModelNew` at the top level.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Where the code came from: a file path, or `file.jsonl:LINE`.
    pub label: String,
    pub source: String,
    pub hash: String,
}

impl Candidate {
    pub fn load(path: &Path) -> Result<Candidate, TaskError> {
        let source = read(path)?;
        Ok(Candidate::from_source(path.display().to_string(), source))
    }

    /// Builds a candidate without judging it: a candidate that fails [`Candidate::check`] still
    /// gets a verdict, it is not an input error.
    pub fn from_source(label: String, source: String) -> Candidate {
        Candidate { hash: content_hash(&source), label, source }
    }

    /// Static check: parses and defines `ModelNew`.
    pub fn check(&self) -> Result<(), TaskError> {
        let path = PathBuf::from(&self.label);
        let defs = checked_definitions(&path, &self.source)?;
        if defs.classes.iter().any(|c| c == "ModelNew") {
            Ok(())
        } else {
            Err(TaskError::Missing { path, what: "`class ModelNew`", role: "candidate" })
        }
    }
}

fn read(path: &Path) -> Result<String, TaskError> {
    std::fs::read_to_string(path)
        .map_err(|source| TaskError::Read { path: path.to_owned(), source })
}

fn checked_definitions(path: &Path, source: &str) -> Result<Definitions, TaskError> {
    find_definitions(source).map_err(|p| TaskError::Syntax {
        path: path.to_owned(),
        line: p.line,
        column: p.column,
        snippet: p.snippet,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_materialized_task_keeps_its_name_and_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let task = Task::materialize(dir.path(), "level2/7_Name", GOOD.to_owned()).unwrap();
        assert_eq!(task.key(), "level2/7_Name");
        assert_eq!(std::fs::read_to_string(&task.path).unwrap(), GOOD);
        let again = Task::materialize(dir.path(), "level2/7_Name", GOOD.to_owned()).unwrap();
        assert_eq!(again.path, task.path);
        for bad in ["../x", "level1/../../etc", "", "a//b", "/abs"] {
            assert!(Task::materialize(dir.path(), bad, GOOD.to_owned()).is_err(), "{bad}");
        }
    }

    const GOOD: &str = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\ndef get_inputs():\n    return [torch.randn(4)]\n\ndef get_init_inputs():\n    return []\n";

    #[test]
    fn loads_a_good_task_with_its_hash() {
        let t = Task::from_source(Path::new("level1/3_Double.py"), GOOD.to_owned()).unwrap();
        assert_eq!(t.key(), "level1/3_Double");
        assert_eq!(t.hash, content_hash(GOOD));
        assert_eq!(t.hash.len(), 64);
    }

    #[test]
    fn names_each_missing_definition() {
        for (needle, what) in [
            ("class Model(", "`class Model`"),
            ("def get_inputs(", "`def get_inputs()`"),
            ("def get_init_inputs(", "`def get_init_inputs()`"),
        ] {
            let broken =
                GOOD.replace(needle, &needle.replace("Model", "Other").replace("get_", "make_"));
            let err = Task::from_source(Path::new("t.py"), broken).unwrap_err();
            match err {
                TaskError::Missing { what: w, .. } => assert_eq!(w, what),
                other => panic!("expected Missing, got {other}"),
            }
        }
    }

    #[test]
    fn reports_syntax_error_position() {
        let src = "import torch\nclass Model(torch.nn.Module)\n    pass\n";
        match Task::from_source(Path::new("bad.py"), src.to_owned()).unwrap_err() {
            TaskError::Syntax { line, .. } => assert_eq!(line, 2),
            other => panic!("expected Syntax, got {other}"),
        }
    }

    #[test]
    fn candidate_needs_model_new() {
        let c = Candidate::from_source("c.py".into(), GOOD.to_owned());
        assert!(matches!(c.check(), Err(TaskError::Missing { what: "`class ModelNew`", .. })));
        let c =
            Candidate::from_source("c.py".into(), GOOD.replace("class Model(", "class ModelNew("));
        c.check().unwrap();
    }
}
