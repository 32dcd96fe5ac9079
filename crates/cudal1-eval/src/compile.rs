//! Building `load_inline` extensions ahead of GPU time, in sandboxed CPU-only processes, cached by
//! the candidate's content hash so a program is never built twice.

use crate::failure::judge_call_error;
use crate::runner::{CallError, Launch, Role, RunnerClient, RunnerEnv};
use crate::settings::{Device, EvalSettings};
use crate::verdict::{Judgement, Verdict};
use cudal1_protocol::{CompileRequest, ErrorKind, Hello};
use cudal1_task::{Candidate, Task};
use std::path::{Path, PathBuf};
use std::time::Instant;

const BUILT: &str = ".cudal1-built";
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
    Built { dir: PathBuf, ms: f64, cached: bool, missed: Vec<String> },
    Failed { judgement: Judgement, ms: f64 },
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
}

/// Builds the candidate's extensions, or answers from the cache.
pub fn compile(env: &RunnerEnv, task: &Task, candidate: &Candidate, cache: &CompileCache, settings: &EvalSettings, work_root: &Path) -> CompileOutcome {
    if !needs_compile(&candidate.source) {
        return CompileOutcome::NotNeeded;
    }
    let dir = cache.dir_for(candidate);
    // One build per program, also across cudal1 processes sharing the cache (an `eval` beside a
    // `serve`): the others wait for it and then find it built, rather than building the same
    // directory at once or starting a candidate whose build is still under way.
    let _lock = lock(&dir);
    if let Ok(text) = std::fs::read_to_string(dir.join(BUILT)) {
        let marker: Marker = serde_json::from_str(&text).unwrap_or_default();
        return CompileOutcome::Built { dir, ms: 0.0, cached: true, missed: marker.missed };
    }
    // A failure recorded without its compiler output (by an older cudal1) is built again, so that
    // the verdict keeps the output.
    if let (Ok(reason), Ok(log)) = (std::fs::read_to_string(dir.join(FAILED)), std::fs::read_to_string(dir.join(FAILED_LOG))) {
        return CompileOutcome::Failed { judgement: Judgement::new(Verdict::CompileError, "compile_error", reason).with_log(Some(log)), ms: 0.0 };
    }
    remove_stale_batons(&dir);
    let started = Instant::now();
    let outcome = build(env, task, candidate, &dir, settings, work_root);
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match outcome {
        Ok(missed) => {
            let marker = serde_json::to_string(&Marker { missed: missed.clone() }).expect("plain data");
            let _ = std::fs::write(dir.join(BUILT), marker);
            CompileOutcome::Built { dir, ms, cached: false, missed }
        }
        Err(judgement) => {
            // Only a real build failure is final; a crash or a timeout may be the machine's fault.
            if judgement.class == "compile_error" {
                let _ = std::fs::write(dir.join(FAILED), &judgement.reason);
                if let Some(log) = &judgement.log {
                    let _ = std::fs::write(dir.join(FAILED_LOG), log);
                }
            }
            CompileOutcome::Failed { judgement, ms }
        }
    }
}

/// An exclusive lock on `<dir>.lock`, held until dropped; none when the file cannot be made (the
/// build then goes ahead unguarded, as before locks existed). Whatever else builds into a
/// program's directory (a profile) takes it too.
pub fn lock(dir: &Path) -> Option<nix::fcntl::Flock<std::fs::File>> {
    let path = dir.with_extension("lock");
    std::fs::create_dir_all(path.parent()?).ok()?;
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).ok()?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).ok()
}

/// Removes the `lock` files torch's builds leave in `<dir>/<extension>/` when a build is killed (a
/// timeout, Ctrl-C): every later build of that extension would wait on one forever. Called while
/// holding [`lock`], so no build of this program is under way.
fn remove_stale_batons(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let baton = entry.path().join("lock");
        if baton.is_file() {
            tracing::info!(path = %baton.display(), "removing a build lock left by a stopped build");
            let _ = std::fs::remove_file(baton);
        }
    }
}

/// Builds; the build calls it could not make happen come back.
fn build(env: &RunnerEnv, task: &Task, candidate: &Candidate, ext_dir: &Path, settings: &EvalSettings, work_root: &Path) -> Result<Vec<String>, Judgement> {
    let internal = |e: std::io::Error| Judgement::new(Verdict::RuntimeError, "internal", format!("cudal1 could not prepare the build: {e}"));
    std::fs::create_dir_all(ext_dir).map_err(internal)?;
    let scratch = tempfile::Builder::new().prefix("compile-").tempdir_in(work_root).map_err(internal)?;
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
    let result = client
        .call(&Hello {}, crate::runner::HELLO_TIMEOUT)
        .and_then(|_| client.call(&CompileRequest { candidate: file, reference: task_path }, settings.compile_timeout));
    let outcome = match result {
        Ok(reply) => {
            if !reply.missed.is_empty() {
                tracing::info!(candidate = %candidate.label, missed = ?reply.missed, "builds the compile pool could not make happen ahead");
            }
            Ok(reply.missed)
        }
        Err(CallError::Runner(e)) if e.kind == ErrorKind::CompileError => {
            let log = Some(e.message.clone());
            Err(Judgement::new(Verdict::CompileError, "compile_error", format!("the extension does not build:\n{}", trim_log(&e.message))).with_log(log))
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
    fn trims_logs_to_error_lines() {
        let log = "building\n[1/2] c++ ...\nfoo.cpp:3:1: error: expected ';'\nninja: build stopped\nfoo.cpp:3:1: error: expected ';'\n";
        assert_eq!(trim_log(log), "foo.cpp:3:1: error: expected ';'");
    }
}
