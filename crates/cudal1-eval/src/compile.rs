//! Building `load_inline` extensions ahead of GPU time, in sandboxed CPU-only processes, cached by
//! the candidate's content hash so a program is never built twice.
//!
//! Builds are published whole or not at all. The pool builds a program into a fresh directory
//! beside the cache's entries and renames it into place only once every build returned; a build
//! killed half-way (a timeout, Ctrl-C, the machine's OOM killer) leaves at most that directory,
//! which is never used. A published entry holds the marker [`BUILT`] (of [`FORMAT`]) and the
//! compile role's record of what it built, [`BUILDS`]: each build's fingerprint (its arguments)
//! and the library it made. A candidate's process loads those libraries directly, without
//! ninja, from an entry it may only read; a build the pool did not make goes to the candidate's
//! own scratch directory. An entry that is not such a published build (one an older cudal1 built
//! in place, or one whose library is missing) is built again by the pool, off any device's time.

use crate::failure::judge_call_error;
use crate::runner::{CallError, Launch, Role, RunnerClient, RunnerEnv};
use crate::settings::{Device, EvalSettings};
use crate::verdict::{Judgement, Verdict};
use cudal1_protocol::{CompileRequest, ErrorKind, Hello};
use cudal1_task::{Candidate, Task};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The marker of a published build: `{"format": 3, "missed": [...]}`.
pub const BUILT: &str = ".cudal1-built";
/// What the compile role built, as `{fingerprint: {"library": relative path, "kind": ...}}`
/// (`cudal1_runner.extensions.BUILDS_FILE`).
pub const BUILDS: &str = ".cudal1-builds.json";
/// The version of the published layout: entries of an older one are built again. 1 (no number):
/// built in place, loaded through ninja; 2: builds recorded by fingerprints that counted the
/// numbers in an extension's name, which a process outside a PID namespace (the profiling driver)
/// asks for differently.
pub const FORMAT: u32 = 3;
const FAILED: &str = ".cudal1-failed";
/// The failed build's whole output, beside [`FAILED`].
const FAILED_LOG: &str = ".cudal1-failed.log";

/// Does this program build extensions when imported?
pub fn needs_compile(source: &str) -> bool {
    source.contains("load_inline") || source.contains("cpp_extension")
}

/// `<root>/<candidate hash>/`: one `TORCH_EXTENSIONS_DIR` per program.
#[derive(Debug, Clone)]
pub struct CompileCache {
    pub root: PathBuf,
}

impl CompileCache {
    pub fn dir_for(&self, candidate: &Candidate) -> PathBuf {
        self.root.join(&candidate.hash[..32])
    }
}

#[derive(Debug, Clone)]
pub enum CompileOutcome {
    NotNeeded,
    /// `missed`: build calls the pool could not make happen ahead (`line 42 in ModelNew.forward`);
    /// the candidate builds those in its own process, on its device's time.
    Built {
        dir: PathBuf,
        ms: f64,
        cached: bool,
        missed: Vec<String>,
    },
    Failed {
        judgement: Judgement,
        ms: f64,
    },
}

impl CompileOutcome {
    pub fn extensions_dir(&self) -> Option<&Path> {
        match self {
            CompileOutcome::Built { dir, .. } => Some(dir),
            _ => None,
        }
    }

    /// Build calls left for the candidate's own process.
    pub fn missed(&self) -> &[String] {
        match self {
            CompileOutcome::Built { missed, .. } => missed,
            _ => &[],
        }
    }
}

/// What the `.cudal1-built` marker remembers of a build.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Marker {
    #[serde(default)]
    missed: Vec<String>,
    /// [`FORMAT`]; absent (0) in entries of an older cudal1.
    #[serde(default)]
    format: u32,
}

/// One library in [`BUILDS`].
#[derive(Debug, serde::Deserialize)]
struct BuildRecord {
    library: PathBuf,
}

/// The missed builds of the published, complete build in `dir`; `None` when `dir` holds none:
/// nothing, a failure, an older cudal1's entry, or one whose recorded libraries are not all there.
pub fn published(dir: &Path) -> Option<Vec<String>> {
    let marker: Marker =
        serde_json::from_str(&std::fs::read_to_string(dir.join(BUILT)).ok()?).ok()?;
    if marker.format < FORMAT {
        return None;
    }
    let builds: std::collections::BTreeMap<String, BuildRecord> =
        serde_json::from_str(&std::fs::read_to_string(dir.join(BUILDS)).ok()?).ok()?;
    let inside = |p: &Path| p.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    builds
        .values()
        .all(|b| {
            inside(&b.library)
                && dir.join(&b.library).metadata().is_ok_and(|m| m.is_file() && m.len() > 0)
        })
        .then_some(marker.missed)
}

/// Builds the candidate's extensions, or answers from the cache.
pub fn compile(
    env: &RunnerEnv,
    task: &Task,
    candidate: &Candidate,
    cache: &CompileCache,
    settings: &EvalSettings,
    work_root: &Path,
) -> CompileOutcome {
    compile_until(env, task, candidate, cache, settings, work_root, &|| false)
}

/// As [`compile`], giving up waiting for another build of the same program once `stop` says so
/// (an engine cancelled by Ctrl-C); a build of its own under way is ended by killing its runner
/// ([`crate::runner::kill_builds_under`]).
pub fn compile_until(
    env: &RunnerEnv,
    task: &Task,
    candidate: &Candidate,
    cache: &CompileCache,
    settings: &EvalSettings,
    work_root: &Path,
    stop: &dyn Fn() -> bool,
) -> CompileOutcome {
    if !needs_compile(&candidate.source) {
        return CompileOutcome::NotNeeded;
    }
    let dir = cache.dir_for(candidate);
    // One build per program, also across cudal1 processes sharing the cache (an `eval` beside a
    // `serve`): the others wait for it and then find it built, rather than building the same
    // directory at once or starting a candidate whose build is still under way.
    let Ok(_lock) = lock_until(&dir, stop) else {
        let judgement = Judgement::new(
            Verdict::RuntimeError,
            "internal",
            "stopped while another build of the same program was under way",
        );
        return CompileOutcome::Failed { judgement, ms: 0.0 };
    };
    if stop() {
        let judgement =
            Judgement::new(Verdict::RuntimeError, "internal", "stopped before the build started");
        return CompileOutcome::Failed { judgement, ms: 0.0 };
    }
    if let Some(missed) = published(&dir) {
        return CompileOutcome::Built { dir, ms: 0.0, cached: true, missed };
    }
    // A failure recorded without its compiler output (by an older cudal1) is built again, so that
    // the verdict keeps the output.
    if let (Ok(reason), Ok(log)) =
        (std::fs::read_to_string(dir.join(FAILED)), std::fs::read_to_string(dir.join(FAILED_LOG)))
    {
        return CompileOutcome::Failed {
            judgement: Judgement::new(Verdict::CompileError, "compile_error", reason)
                .with_log(Some(log)),
            ms: 0.0,
        };
    }
    if dir.exists() {
        tracing::info!(dir = %dir.display(), "an extension entry that is not a complete published build (a killed build, or an older cudal1's): building it again");
    }
    let internal = |e: std::io::Error| CompileOutcome::Failed {
        judgement: Judgement::new(
            Verdict::RuntimeError,
            "internal",
            format!("cudal1 could not prepare the build in `{}`: {e}", cache.root.display()),
        ),
        ms: 0.0,
    };
    let staging = match staging_dir(cache, candidate) {
        Ok(s) => s,
        Err(e) => return internal(e),
    };
    let started = Instant::now();
    let outcome = build(env, task, candidate, staging.path(), settings, work_root);
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match outcome {
        Ok(missed) => {
            remove_locks(staging.path());
            let marker = serde_json::to_string(&Marker { missed: missed.clone(), format: FORMAT })
                .expect("plain data");
            if let Err(e) = std::fs::write(staging.path().join(BUILT), marker)
                .and_then(|()| publish(staging, &dir))
            {
                return internal(e);
            }
            CompileOutcome::Built { dir, ms, cached: false, missed }
        }
        Err(judgement) => {
            // Only a real build failure is final (published, so that it is not built again); a
            // crash or a timeout may be the machine's fault, and its half-made build is dropped.
            if judgement.class == "compile_error" {
                let recorded = std::fs::write(staging.path().join(FAILED), &judgement.reason)
                    .and_then(|()| {
                        std::fs::write(
                            staging.path().join(FAILED_LOG),
                            judgement.log.as_deref().unwrap_or(""),
                        )
                    })
                    .and_then(|()| publish(staging, &dir));
                if let Err(e) = recorded {
                    tracing::warn!(dir = %dir.display(), error = %e, "could not record a failed build; it will be built again");
                }
            }
            CompileOutcome::Failed { judgement, ms }
        }
    }
}

/// A fresh directory to build `candidate` into, beside the entries of `cache` (so that it can be
/// renamed into place). Directories that builds killed half-way left for this program are
/// removed first: the caller holds the program's [`lock`], so none of them is in use.
fn staging_dir(cache: &CompileCache, candidate: &Candidate) -> std::io::Result<tempfile::TempDir> {
    std::fs::create_dir_all(&cache.root)?;
    let prefix = format!(".build-{}-", &candidate.hash[..32]);
    for entry in std::fs::read_dir(&cache.root)?.flatten() {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            tracing::info!(path = %entry.path().display(), "removing a build that was stopped half-way");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    tempfile::Builder::new().prefix(&prefix).tempdir_in(&cache.root)
}

/// Removes the `lock` files torch's builds leave in `<staging>/<extension>/` (its newer versions
/// always leave one): the build is over, its process gone, and a published entry is only read.
fn remove_locks(staging: &Path) {
    for entry in std::fs::read_dir(staging).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(entry.path().join("lock"));
    }
}

/// Puts the finished build in `staging` at `dir` in one step, replacing what was there (an
/// incomplete entry, which is then removed). Called under `dir`'s [`lock`].
pub fn publish(staging: tempfile::TempDir, dir: &Path) -> std::io::Result<()> {
    let staging = staging.keep();
    let result = replace_dir(&staging, dir);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

fn replace_dir(staging: &Path, dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return std::fs::rename(staging, dir);
    }
    // Swapped atomically where the kernel can (a reader sees the old entry or the new one), else
    // the old one is moved aside first.
    let swapped =
        nix::fcntl::renameat2(None, staging, None, dir, nix::fcntl::RenameFlags::RENAME_EXCHANGE)
            .is_ok();
    if !swapped {
        let aside = staging.with_extension("old");
        std::fs::rename(dir, &aside)?;
        std::fs::rename(staging, dir)?;
        let _ = std::fs::remove_dir_all(aside);
        return Ok(());
    }
    // `staging` now holds the old entry.
    let _ = std::fs::remove_dir_all(staging);
    Ok(())
}

/// An exclusive lock on `<dir>.lock`, held until dropped; none when the file cannot be made (the
/// build then goes ahead unguarded, as before locks existed). Whatever else builds into a
/// program's directory (a profile) takes it too.
pub fn lock(dir: &Path) -> Option<nix::fcntl::Flock<std::fs::File>> {
    let path = dir.with_extension("lock");
    std::fs::create_dir_all(path.parent()?).ok()?;
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).ok()?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).ok()
}

/// As [`lock`], trying every 100 ms until the lock is had or `stop` says to give up (`Err`).
fn lock_until(
    dir: &Path,
    stop: &dyn Fn() -> bool,
) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, ()> {
    let path = dir.with_extension("lock");
    let Some(file) = path.parent().and_then(|p| std::fs::create_dir_all(p).ok()).and_then(|()| {
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).ok()
    }) else {
        return Ok(None);
    };
    let mut file = file;
    loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(Some(held)),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
                if stop() {
                    return Err(());
                }
                file = f;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            // The build goes ahead unguarded, as in `lock`.
            Err(_) => return Ok(None),
        }
    }
}

/// Builds; the build calls it could not make happen come back.
fn build(
    env: &RunnerEnv,
    task: &Task,
    candidate: &Candidate,
    ext_dir: &Path,
    settings: &EvalSettings,
    work_root: &Path,
) -> Result<Vec<String>, Judgement> {
    let internal = |e: std::io::Error| {
        Judgement::new(
            Verdict::RuntimeError,
            "internal",
            format!("cudal1 could not prepare the build: {e}"),
        )
    };
    std::fs::create_dir_all(ext_dir).map_err(internal)?;
    let scratch =
        tempfile::Builder::new().prefix("compile-").tempdir_in(work_root).map_err(internal)?;
    let file = scratch.path().join("candidate.py");
    std::fs::write(&file, &candidate.source).map_err(internal)?;
    let task_path = crate::reference::absolute(&task.path);
    let mut client = RunnerClient::spawn(
        env,
        Launch {
            role: Role::Compile,
            label: format!("compile {}", candidate.label),
            device: &Device::Cpu,
            scratch: scratch.path(),
            extensions: Some(ext_dir),
            reads: vec![task_path.clone()],
            sandbox: settings.sandbox,
            memory_bytes: settings.memory_bytes,
            untimed: true,
        },
    )
    .map_err(|e| judge_call_error(&e, "starting the compiler", ""))?;
    let result = client.call(&Hello {}, crate::runner::HELLO_TIMEOUT).and_then(|_| {
        client.call(
            &CompileRequest { candidate: file, reference: task_path },
            settings.compile_timeout,
        )
    });
    let outcome = match result {
        Ok(reply) => {
            if !reply.missed.is_empty() {
                tracing::info!(candidate = %candidate.label, missed = ?reply.missed, "builds the compile pool could not make happen ahead");
            }
            Ok(reply.missed)
        }
        Err(CallError::Runner(e)) if e.kind == ErrorKind::CompileError => {
            let log = Some(e.message.clone());
            Err(Judgement::new(
                Verdict::CompileError,
                "compile_error",
                format!("the extension does not build:\n{}", trim_log(&e.message)),
            )
            .with_log(log))
        }
        Err(e) => {
            let mut j = judge_call_error(&e, "compiling", &client.stderr_tail());
            if j.verdict == Verdict::Timeout {
                j = Judgement::new(Verdict::CompileError, "compile_timeout", j.reason);
            }
            Err(j)
        }
    };
    client.shutdown();
    outcome
}

/// Compiler output is long; the errors are near the end.
fn trim_log(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    // torch's message repeats the compiler's output: each error line once.
    let mut errors: Vec<&str> = Vec::new();
    for l in lines.iter().copied().filter(|l| l.contains("error")) {
        if !errors.contains(&l) && errors.len() < 12 {
            errors.push(l);
        }
    }
    if errors.is_empty() {
        lines[lines.len().saturating_sub(20)..].join("\n")
    } else {
        errors.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_extension_builders() {
        assert!(needs_compile("from torch.utils.cpp_extension import load_inline"));
        assert!(!needs_compile("import torch\nclass ModelNew: pass"));
    }

    #[test]
    fn only_a_whole_build_of_this_format_counts_as_published() {
        let dir = tempfile::tempdir().unwrap();
        let entry = dir.path().join("entry");
        std::fs::create_dir_all(entry.join("ext")).unwrap();
        std::fs::write(entry.join("ext/ext.so"), b"\x7fELF").unwrap();
        assert_eq!(published(&entry), None, "no marker");
        // An older cudal1's marker: built in place, loaded through ninja.
        std::fs::write(entry.join(BUILT), r#"{"missed": []}"#).unwrap();
        assert_eq!(published(&entry), None, "an older format");
        std::fs::write(entry.join(BUILT), r#"{"missed": ["line 3"], "format": 2}"#).unwrap();
        std::fs::write(
            entry.join(BUILDS),
            r#"{"f1": {"library": "ext/ext.so", "kind": "python"}}"#,
        )
        .unwrap();
        assert_eq!(published(&entry), None, "format 2: its fingerprints counted a name's numbers");
        std::fs::remove_file(entry.join(BUILDS)).unwrap();
        std::fs::write(entry.join(BUILT), r#"{"missed": ["line 3"], "format": 3}"#).unwrap();
        assert_eq!(published(&entry), None, "no record of the builds");
        std::fs::write(entry.join(BUILDS), r#"{"f1": {"library": "ext/ext.so", "kind": "python"}, "f2": {"library": "other/other.so", "kind": "python"}}"#).unwrap();
        assert_eq!(published(&entry), None, "a recorded library is missing");
        std::fs::write(
            entry.join(BUILDS),
            r#"{"f1": {"library": "../ext/ext.so", "kind": "python"}}"#,
        )
        .unwrap();
        assert_eq!(published(&entry), None, "a library outside the entry");
        std::fs::write(
            entry.join(BUILDS),
            r#"{"f1": {"library": "ext/ext.so", "kind": "python"}}"#,
        )
        .unwrap();
        assert_eq!(published(&entry), Some(vec!["line 3".to_owned()]));
    }

    #[test]
    fn publishing_replaces_an_entry_whole_and_leaves_nothing_beside_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("entry");
        std::fs::create_dir_all(dir.join("ext")).unwrap();
        std::fs::write(dir.join("ext/lock"), b"").unwrap();
        let staging = tempfile::Builder::new().prefix(".build-x-").tempdir_in(root.path()).unwrap();
        std::fs::write(staging.path().join(BUILT), "new").unwrap();
        publish(staging, &dir).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join(BUILT)).unwrap(), "new");
        assert!(!dir.join("ext").exists(), "nothing of the old entry stays");
        let names: Vec<_> =
            std::fs::read_dir(root.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, ["entry"]);
    }

    #[test]
    fn trims_logs_to_error_lines() {
        let log = "building\n[1/2] c++ ...\nfoo.cpp:3:1: error: expected ';'\nninja: build stopped\nfoo.cpp:3:1: error: expected ';'\n";
        assert_eq!(trim_log(log), "foo.cpp:3:1: error: expected ';'");
    }
}
