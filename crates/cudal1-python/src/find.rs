//! Finding a Python with PyTorch, as a typed request with a recorded source.

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the interpreter came from, so that errors and logs can say why this one was used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag,
    EnvVar,
    VirtualEnv,
    DotVenv(PathBuf),
    Path,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => write!(f, "the --python flag"),
            Source::EnvVar => write!(f, "the CUDAL1_PYTHON variable"),
            Source::VirtualEnv => write!(f, "the active virtual environment (VIRTUAL_ENV)"),
            Source::DotVenv(dir) => write!(f, "`{}`", dir.display()),
            Source::Path => write!(f, "`python3` on PATH"),
        }
    }
}

/// What the user asked for; unset fields fall through to the next source.
#[derive(Debug, Clone, Default)]
pub struct PythonRequest {
    pub flag: Option<PathBuf>,
    /// Where to start looking for `.venv` (normally the working directory).
    pub start_dir: Option<PathBuf>,
}

/// What the embedded probe script reported.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Probe {
    pub executable: PathBuf,
    pub version: String,
    pub prefix: PathBuf,
    pub base_prefix: PathBuf,
    pub torch: Option<String>,
    pub torch_error: Option<String>,
    pub cuda: Option<String>,
    /// Compute capabilities of the visible GPUs, e.g. `["9.0"]`.
    #[serde(default)]
    pub gpus: Vec<String>,
    /// Their names, e.g. `["NVIDIA H100 80GB HBM3"]`.
    #[serde(default)]
    pub gpu_names: Vec<String>,
    /// Where torch is installed (extension builds depend on it).
    #[serde(default)]
    pub torch_dir: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Interpreter {
    pub path: PathBuf,
    pub source: Source,
    pub probe: Probe,
}

#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    #[error("no Python interpreter with PyTorch found; searched: {}\nhint: run `bash scripts/setup.sh` to create `.venv` with PyTorch, or pass `--python PATH`", searched.join("; "))]
    NotFound { searched: Vec<String> },
    #[error("`{path}` (from {source_kind}) cannot import torch: {error}\nhint: install it with `{path} -m pip install torch`, or point `--python` at an environment that has it")]
    NoTorch { path: PathBuf, source_kind: Source, error: String },
    #[error("`{path}` (from {source_kind}) did not answer the probe: {detail}")]
    Probe { path: PathBuf, source_kind: Source, detail: String },
}

const PROBE: &str = r#"
import json, sys
info = {"executable": sys.executable, "version": sys.version.split()[0], "prefix": sys.prefix,
        "base_prefix": sys.base_prefix, "torch": None, "torch_error": None, "cuda": None, "gpus": [],
        "gpu_names": [], "torch_dir": None}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["torch_dir"] = torch.__path__[0]
    if torch.cuda.is_available():
        info["gpus"] = ["%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
        info["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except Exception as e:
    info["torch_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(info))
"#;

/// Candidates in order of precedence; the first that exists is probed, and it must have torch.
fn candidates(req: &PythonRequest) -> Vec<(Source, PathBuf)> {
    let mut out = Vec::new();
    if let Some(p) = &req.flag {
        out.push((Source::Flag, p.clone()));
    }
    if let Some(p) = std::env::var_os("CUDAL1_PYTHON") {
        out.push((Source::EnvVar, PathBuf::from(p)));
    }
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        out.push((Source::VirtualEnv, PathBuf::from(v).join("bin/python")));
    }
    let start = req.start_dir.clone().or_else(|| std::env::current_dir().ok());
    if let Some(start) = start {
        for dir in start.ancestors() {
            let venv = dir.join(".venv");
            out.push((Source::DotVenv(venv.clone()), venv.join("bin/python")));
        }
    }
    if let Some(p) = which("python3") {
        out.push((Source::Path, p));
    }
    out
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file())
    })
}

/// Finds and probes the interpreter. An explicit choice (flag or variable) that fails is an
/// error rather than a silent fall-through: the user asked for it.
pub fn find_interpreter(req: &PythonRequest) -> Result<Interpreter, PythonError> {
    let mut searched = Vec::new();
    for (source, path) in candidates(req) {
        if !path.exists() {
            if matches!(source, Source::Flag | Source::EnvVar) {
                return Err(PythonError::Probe { path, source_kind: source, detail: "no such file".into() });
            }
            searched.push(format!("{source} (absent)"));
            continue;
        }
        let probe = probe(&path).map_err(|detail| PythonError::Probe { path: path.clone(), source_kind: source.clone(), detail })?;
        if let Some(error) = probe.torch_error.clone().filter(|_| probe.torch.is_none()) {
            if matches!(source, Source::Flag | Source::EnvVar | Source::VirtualEnv | Source::DotVenv(_)) {
                return Err(PythonError::NoTorch { path, source_kind: source, error });
            }
            searched.push(format!("{source} (no torch)"));
            continue;
        }
        tracing::debug!(python = %path.display(), %source, torch = ?probe.torch, "found Python");
        return Ok(Interpreter { path, source, probe });
    }
    Err(PythonError::NotFound { searched })
}

fn probe(path: &Path) -> Result<Probe, String> {
    let out = Command::new(path).arg("-c").arg(PROBE).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("exit {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("unexpected answer `{line}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_flag_path_is_an_error_naming_the_flag() {
        let req = PythonRequest { flag: Some("/nonexistent/python".into()), start_dir: None };
        let err = find_interpreter(&req).unwrap_err();
        assert!(err.to_string().contains("--python"), "{err}");
    }

    #[test]
    fn an_interpreter_without_torch_is_named_in_the_error() {
        // A throwaway virtual environment has no torch.
        let Some(python3) = which("python3") else { return };
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("env");
        let ok = Command::new(&python3).args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
        assert!(ok.success());
        let req = PythonRequest { flag: Some(venv.join("bin/python")), start_dir: None };
        match find_interpreter(&req).unwrap_err() {
            PythonError::NoTorch { error, .. } => assert!(error.contains("torch"), "{error}"),
            other => panic!("expected NoTorch, got {other}"),
        }
    }

    #[test]
    fn finds_dot_venv_above_the_start_dir() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        let req = PythonRequest { flag: None, start_dir: Some(nested) };
        let list = candidates(&req);
        assert!(list.iter().any(|(s, p)| matches!(s, Source::DotVenv(_)) && p == &dir.path().join(".venv/bin/python")));
    }
}
