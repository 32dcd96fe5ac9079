//! Finding a Python with PyTorch, as a typed request with a recorded source.

use cudal1_supervisor::{Job, JobError, JobOutput, JobSpec};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the interpreter came from, so that errors and logs can say why this one was used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Named by the caller ([`PythonRequest::flag`]); how it was named is the caller's to say.
    Flag,
    EnvVar,
    VirtualEnv,
    DotVenv(PathBuf),
    Path,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => write!(f, "your choice of interpreter"),
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
    /// A directory that remembers probes ([`cached_probe`]); without one, every search probes.
    pub probe_cache: Option<PathBuf>,
}

/// What the embedded probe script reported.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
    /// Their memory in bytes, as torch reports it (`total_memory`).
    #[serde(default)]
    pub gpu_memory: Vec<u64>,
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

/// Why no interpreter could be used. What to do about it is [`PythonError::remedies`], data that
/// each front end says in its own words.
#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    #[error("no Python interpreter with PyTorch found; searched: {}", searched.join("; "))]
    NotFound { searched: Vec<String> },
    #[error("`{path}` (from {source_kind}) cannot import torch: {error}")]
    NoTorch { path: PathBuf, source_kind: Source, error: String },
    #[error("`{path}` (from {source_kind}) did not answer the probe: {detail}")]
    Probe { path: PathBuf, source_kind: Source, detail: String },
}

/// What can be done about a [`PythonError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// Create the project's environment (`.venv`, with PyTorch) with its setup script.
    RunSetup,
    /// Install PyTorch into the interpreter at `python`.
    InstallTorch { python: PathBuf },
    /// Name an interpreter that has PyTorch.
    ChooseInterpreter,
}

impl PythonError {
    /// What to do, best first.
    pub fn remedies(&self) -> Vec<Remedy> {
        match self {
            PythonError::NotFound { .. } => vec![Remedy::RunSetup, Remedy::ChooseInterpreter],
            PythonError::NoTorch { path, .. } => {
                vec![Remedy::InstallTorch { python: path.clone() }, Remedy::ChooseInterpreter]
            }
            PythonError::Probe { .. } => Vec::new(),
        }
    }
}

const PROBE: &str = r#"
import json, sys
info = {"executable": sys.executable, "version": sys.version.split()[0], "prefix": sys.prefix,
        "base_prefix": sys.base_prefix, "torch": None, "torch_error": None, "cuda": None, "gpus": [],
        "gpu_names": [], "gpu_memory": [], "torch_dir": None}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["torch_dir"] = torch.__path__[0]
    if torch.cuda.is_available():
        info["gpus"] = ["%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
        info["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["gpu_memory"] = [torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())]
except Exception as e:
    info["torch_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(info))
"#;

/// Candidates in order of precedence; the first that exists is probed, and it must have torch.
fn candidates(req: &PythonRequest) -> Vec<(Source, PathBuf)> {
    let mut out = Vec::new();
    if let Some(p) = &req.flag {
        out.push((Source::Flag, explicit(p)));
    }
    if let Some(p) = std::env::var_os("CUDAL1_PYTHON") {
        out.push((Source::EnvVar, explicit(Path::new(&p))));
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

/// An interpreter named by the user, as a path runners can be started from: a bare command name
/// (`python3`, as people write it) is looked up on `PATH`, and a relative path is taken from the
/// working directory. Links are kept: a virtual environment's `bin/python` is one, and only
/// through it does the interpreter find the environment's packages.
fn explicit(p: &Path) -> PathBuf {
    let bare = p.components().count() == 1 && !p.as_os_str().to_string_lossy().contains('/');
    if bare {
        if let Some(found) = p.to_str().and_then(which) {
            return found;
        }
    }
    if p.is_relative() {
        if let Ok(cwd) = std::env::current_dir() {
            return cwd.join(p);
        }
    }
    p.to_path_buf()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()))
}

/// Finds and probes the interpreter. An explicit choice (flag or variable) that fails is an
/// error rather than a silent fall-through: the user asked for it.
pub fn find_interpreter(req: &PythonRequest) -> Result<Interpreter, PythonError> {
    let mut searched = Vec::new();
    for (source, path) in candidates(req) {
        if !path.exists() {
            if matches!(source, Source::Flag | Source::EnvVar) {
                return Err(PythonError::Probe {
                    path,
                    source_kind: source,
                    detail: "no such file".into(),
                });
            }
            searched.push(format!("{source} (absent)"));
            continue;
        }
        let probe = match &req.probe_cache {
            Some(dir) => cached_probe(&path, dir),
            None => probe(&path),
        };
        let probe = probe.map_err(|detail| PythonError::Probe {
            path: path.clone(),
            source_kind: source.clone(),
            detail,
        })?;
        if let Some(error) = probe.torch_error.clone().filter(|_| probe.torch.is_none()) {
            if matches!(
                source,
                Source::Flag | Source::EnvVar | Source::VirtualEnv | Source::DotVenv(_)
            ) {
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

/// A probe remembered in `dir`, else a fresh one, remembered when it found torch. Probing imports
/// torch and asks the driver about every GPU: 1-3 s, paid by every command. A remembered probe is
/// used only while everything it depends on is unchanged ([`probe_key`]): the interpreter's file,
/// its environment's `pyvenv.cfg`, the variables that change what Python and CUDA see, the boot,
/// the NVIDIA driver, and torch's installed `version.py`.
pub fn cached_probe(path: &Path, dir: &Path) -> Result<Probe, String> {
    let Some(key) = probe_key(path) else { return probe(path) };
    let file = dir.join(format!("{key}.json"));
    if let Some(remembered) =
        std::fs::read(&file).ok().and_then(|b| serde_json::from_slice::<Remembered>(&b).ok())
    {
        if remembered.torch_stamp == torch_stamp(&remembered.probe) {
            tracing::debug!(python = %path.display(), file = %file.display(), "a remembered probe");
            return Ok(remembered.probe);
        }
    }
    let fresh = probe(path)?;
    if fresh.torch.is_some() {
        let remembered = Remembered { torch_stamp: torch_stamp(&fresh), probe: fresh.clone() };
        // Remembering is an optimisation: a cache that cannot be written costs a probe next time.
        let written = std::fs::create_dir_all(dir).and_then(|()| {
            let tmp = tempfile::NamedTempFile::new_in(dir)?;
            serde_json::to_writer(&tmp, &remembered)?;
            tmp.persist(&file).map(|_| ()).map_err(|e| e.error)
        });
        if let Err(e) = written {
            tracing::debug!(error = %e, dir = %dir.display(), "cannot remember the Python probe");
        }
    }
    Ok(fresh)
}

#[derive(Serialize, Deserialize)]
struct Remembered {
    /// Torch's `version.py` when probed (size and modification time): a reinstall changes it.
    torch_stamp: Option<String>,
    probe: Probe,
}

/// Variables that change which Python modules load or which GPUs CUDA shows.
const PROBE_VARIABLES: [&str; 8] = [
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSAFEPATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
];

/// What a probe of `path` depends on, hashed; `None` where the interpreter's file cannot be read.
fn probe_key(path: &Path) -> Option<String> {
    let real = std::fs::canonicalize(path).ok()?;
    let mut h = Sha256::new();
    let mut add = |label: &str, value: &[u8]| {
        h.update(label.as_bytes());
        h.update((value.len() as u64).to_le_bytes());
        h.update(value);
    };
    // A probe that asks more is a different probe.
    add("script", PROBE.as_bytes());
    add("path", path.as_os_str().as_encoded_bytes());
    add("real", real.as_os_str().as_encoded_bytes());
    add("exe", stamp(&real)?.as_bytes());
    // A virtual environment's configuration sits beside its bin/.
    let cfg = path.parent().and_then(Path::parent).map(|d| d.join("pyvenv.cfg"));
    add("pyvenv", cfg.as_deref().and_then(stamp).unwrap_or_default().as_bytes());
    for var in PROBE_VARIABLES {
        add(
            var,
            std::env::var_os(var)
                .map(|v| v.as_encoded_bytes().to_vec())
                .unwrap_or_default()
                .as_slice(),
        );
    }
    for file in ["/proc/sys/kernel/random/boot_id", "/proc/driver/nvidia/version"] {
        add(file, &std::fs::read(file).unwrap_or_default());
    }
    let digest = h.finalize();
    Some(digest.iter().take(16).map(|b| format!("{b:02x}")).collect())
}

/// A file's size and modification time, as text.
fn stamp(path: &Path) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let modified = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(format!("{}:{}", m.len(), modified.as_nanos()))
}

fn torch_stamp(probe: &Probe) -> Option<String> {
    probe.torch_dir.as_ref().and_then(|d| stamp(&d.join("version.py")))
}

/// How long the probe may take: importing torch and asking the driver about every GPU, on a busy
/// machine. A probe that outlives it (an interpreter stuck in a driver call) is killed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

fn probe(path: &Path) -> Result<Probe, String> {
    probe_within(path, PROBE_TIMEOUT)
}

/// The probe, run under the supervisor: in its own process group, killed with it and reaped at
/// `timeout`.
fn probe_within(path: &Path, timeout: Duration) -> Result<Probe, String> {
    let spec = JobSpec {
        label: format!("the probe of `{}`", path.display()),
        program: path.to_owned(),
        args: vec!["-c".into(), PROBE.into()],
        cwd: None,
        env: None,
        stdin: None,
        output: JobOutput::Capture,
    };
    let out = Job::run(spec, timeout, None).map_err(|e| match e {
        JobError::Spawn { source, .. } => source.to_string(),
        other => other.to_string(),
    })?;
    if !out.status.success() {
        return Err(format!(
            "exit {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("unexpected answer `{line}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_named_path_is_an_error_saying_it_was_named_and_naming_no_flag() {
        let req = PythonRequest { flag: Some("/nonexistent/python".into()), ..Default::default() };
        let err = find_interpreter(&req).unwrap_err();
        assert!(matches!(err, PythonError::Probe { source_kind: Source::Flag, .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with("`/nonexistent/python` (from your choice of interpreter)")
                && text.ends_with("no such file"),
            "{text}"
        );
        assert!(!text.contains("--python"), "a library names no flag: {text}");
    }

    #[test]
    fn a_bare_command_name_is_found_on_path_and_a_relative_path_from_here() {
        // `CUDAL1_PYTHON=python3`, as people write it: "no such file" before.
        let Some(python3) = which("python3") else { return };
        let found =
            candidates(&PythonRequest { flag: Some("python3".into()), ..Default::default() });
        assert_eq!(found[0], (Source::Flag, python3));
        assert!(found[0].1.is_absolute());
        let relative = candidates(&PythonRequest {
            flag: Some(".venv/bin/python".into()),
            ..Default::default()
        });
        assert_eq!(relative[0].1, std::env::current_dir().unwrap().join(".venv/bin/python"));
        // A name found nowhere stays as given, and is reported as missing.
        let missing = candidates(&PythonRequest {
            flag: Some("no-such-python-anywhere".into()),
            ..Default::default()
        });
        assert!(missing[0].1.ends_with("no-such-python-anywhere"));
    }

    #[test]
    fn an_interpreter_without_torch_is_named_in_the_error() {
        // A throwaway virtual environment has no torch.
        let Some(python3) = which("python3") else { return };
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("env");
        let ok = std::process::Command::new(&python3)
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(ok.success());
        let req = PythonRequest { flag: Some(venv.join("bin/python")), ..Default::default() };
        let err = find_interpreter(&req).unwrap_err();
        match &err {
            PythonError::NoTorch { error, .. } => assert!(error.contains("torch"), "{error}"),
            other => panic!("expected NoTorch, got {other}"),
        }
        // What to do is data: install torch into that interpreter, or choose another.
        assert_eq!(
            err.remedies(),
            [Remedy::InstallTorch { python: venv.join("bin/python") }, Remedy::ChooseInterpreter]
        );
        assert!(!err.to_string().contains("hint"), "{err}");
    }

    /// A stand-in interpreter: a script that answers the probe with `torch_dir`'s torch (or none)
    /// and counts its runs in `runs`.
    fn fake_python(dir: &Path, torch_dir: Option<&Path>, runs: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let torch = match torch_dir {
            Some(d) => format!(r#""torch": "2.0", "torch_dir": "{}""#, d.display()),
            None => r#""torch": null, "torch_error": "ModuleNotFoundError""#.to_owned(),
        };
        let script = dir.join("python");
        let body = format!(
            "#!/bin/sh\necho run >> {}\necho '{{\"executable\": \"x\", \"version\": \"3\", \"prefix\": \"/\", \"base_prefix\": \"/\", {torch}}}'\n",
            runs.display()
        );
        std::fs::write(&script, body).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        script
    }

    fn count(runs: &Path) -> usize {
        std::fs::read_to_string(runs).map(|s| s.lines().count()).unwrap_or(0)
    }

    #[test]
    fn a_probe_is_remembered_until_the_interpreter_or_torch_changes() {
        let dir = tempfile::tempdir().unwrap();
        let torch = dir.path().join("torch");
        std::fs::create_dir(&torch).unwrap();
        std::fs::write(torch.join("version.py"), "__version__ = '2.0'\n").unwrap();
        let runs = dir.path().join("runs");
        let python = fake_python(dir.path(), Some(&torch), &runs);
        let cache = dir.path().join("cache");
        let first = cached_probe(&python, &cache).unwrap();
        assert_eq!(first.torch.as_deref(), Some("2.0"));
        assert_eq!(cached_probe(&python, &cache).unwrap(), first);
        assert_eq!(count(&runs), 1, "the second answer is the remembered one");
        // torch reinstalled: its version.py changes.
        std::fs::write(torch.join("version.py"), "__version__ = '2.0.1'\n").unwrap();
        cached_probe(&python, &cache).unwrap();
        assert_eq!(count(&runs), 2);
        cached_probe(&python, &cache).unwrap();
        assert_eq!(count(&runs), 2);
        // Another interpreter at the same path.
        std::fs::write(&python, std::fs::read_to_string(&python).unwrap() + "# rebuilt\n").unwrap();
        cached_probe(&python, &cache).unwrap();
        assert_eq!(count(&runs), 3);
    }

    #[test]
    fn an_interpreter_without_torch_is_probed_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let python = fake_python(dir.path(), None, &runs);
        let cache = dir.path().join("cache");
        for _ in 0..2 {
            assert!(cached_probe(&python, &cache).unwrap().torch.is_none());
        }
        assert_eq!(count(&runs), 2, "what may be installed next is found at once");
    }

    #[test]
    fn a_probe_that_hangs_is_killed_at_its_timeout() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // An interpreter stuck before it answers, with a child of its own that holds the output.
        let pids = dir.path().join("pids");
        let python = dir.path().join("python");
        std::fs::write(
            &python,
            format!("#!/bin/sh\nsleep 300 &\necho $$ $! > {}\nwait\n", pids.display()),
        )
        .unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let err = probe_within(&python, Duration::from_millis(500)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert!(err.contains("did not end within 0.5s"), "{err}");
        // Both the interpreter and what it started are gone (reaped, or a zombie of init's).
        let text = std::fs::read_to_string(&pids).unwrap();
        for pid in text.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().unwrap_or("").split_whitespace().next();
            assert!(matches!(state, None | Some("Z" | "X")), "{pid} still runs: {stat}");
        }
    }

    #[test]
    fn finds_dot_venv_above_the_start_dir() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        let req = PythonRequest { start_dir: Some(nested), ..Default::default() };
        let list = candidates(&req);
        assert!(list
            .iter()
            .any(|(s, p)| matches!(s, Source::DotVenv(_))
                && p == &dir.path().join(".venv/bin/python")));
    }
}
