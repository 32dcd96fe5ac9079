//! Starting runner processes (trusted or sandboxed) and calling them with typed requests.

use crate::settings::Device;
use cudal1_protocol::{parse_reply, Request, RunnerError};
use cudal1_supervisor::{
    Sandbox, SpawnError, SpawnOptions, Worker, WorkerError, WorkerSpec, Zygote,
};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What every runner process needs: the interpreter and the installed runner package.
#[derive(Debug, Clone)]
pub struct RunnerEnv {
    pub python: PathBuf,
    /// Directories the interpreter reads from (its prefix and base prefix).
    pub python_dirs: Vec<PathBuf>,
    /// The directory to put on `PYTHONPATH` (holds `cudal1_runner/`).
    pub package_root: PathBuf,
    /// `TORCH_CUDA_ARCH_LIST` for extension builds, e.g. `9.0`; compile workers see no GPU, so
    /// they must be told, and the candidate process must see the same value for the build to be reused.
    pub cuda_arch: Option<String>,
    /// The visible GPUs' names as torch reports them, by index (`NVIDIA H100 80GB HBM3`): their
    /// class is part of every result's key ([`crate::judge`]).
    pub gpu_names: Vec<String>,
    /// Where runners keep Python's compiled bytecode (`PYTHONPYCACHEPREFIX`): written by trusted
    /// runners only, read by all. Without it every runner compiles what it imports from source
    /// where the installation has no `__pycache__` (an image installed with `--no-compile`, or
    /// one whose `PYTHONDONTWRITEBYTECODE` kept them from being written): 2-6 s of CPU per process
    /// for torch and sympy on the H100 machines (docs/bench/2026-11-24-gpu-session12).
    pub bytecode: Option<PathBuf>,
    /// Reference and candidate runners are forked from a fork server that has imported torch
    /// once ([`cudal1_supervisor::Zygote`]) instead of each starting an interpreter: milliseconds
    /// instead of seconds of CPU per runner. Compile workers always start afresh.
    pub forks: bool,
    /// What the parent's `CUDA_VISIBLE_DEVICES` names for each GPU it shows, by index (`["2"]`
    /// where it says `2`); empty where it is unset, and GPU `n` is then `n`. A runner sees only
    /// its device's GPU, named as the parent's variable names it: `--device cuda:0` under
    /// `CUDA_VISIBLE_DEVICES=2` is the machine's GPU 2, not its GPU 0.
    pub gpu_ids: Vec<String>,
}

/// The GPU names a `CUDA_VISIBLE_DEVICES` value lists, in order (indices, `GPU-<uuid>` or MIG
/// names, passed on as written); none for an unset variable.
pub fn visible_gpu_ids(value: Option<&str>) -> Vec<String> {
    value
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
        .unwrap_or_default()
}

impl RunnerEnv {
    /// How a runner names the parent's GPU `n` in its own `CUDA_VISIBLE_DEVICES`.
    pub fn gpu_id(&self, n: u32) -> String {
        self.gpu_ids.get(n as usize).cloned().unwrap_or_else(|| n.to_string())
    }

    /// The environment for runners of `interpreter`, with the runner package installed under
    /// `cache`. Extension builds target the first visible GPU's architecture.
    pub fn prepare(
        interpreter: &cudal1_python::Interpreter,
        cache: &Path,
    ) -> std::io::Result<RunnerEnv> {
        let package_root = cudal1_python::RUNNER.install(cache)?;
        let probe = &interpreter.probe;
        let mut python_dirs = vec![probe.prefix.clone(), probe.base_prefix.clone()];
        // A virtual environment's interpreter is a link into its base installation.
        if let Some(dir) = std::fs::canonicalize(&interpreter.path)
            .ok()
            .and_then(|real| real.parent()?.parent().map(Path::to_owned))
        {
            python_dirs.push(dir);
        }
        let bytecode = cache.join("bytecode");
        std::fs::create_dir_all(&bytecode)?;
        Ok(RunnerEnv {
            python: interpreter.path.clone(),
            python_dirs,
            package_root,
            cuda_arch: probe.gpus.first().cloned(),
            gpu_names: probe.gpu_names.clone(),
            bytecode: Some(bytecode),
            forks: true,
            gpu_ids: visible_gpu_ids(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref()),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Reference,
    Candidate,
    Compile,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Reference => "reference",
            Role::Candidate => "candidate",
            Role::Compile => "compile",
        }
    }
}

/// One process to start.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub role: Role,
    pub label: String,
    pub device: &'a Device,
    /// Its working directory, `HOME` and `TMPDIR`; the only place a sandboxed runner may write
    /// besides `extensions` (which a candidate may only read).
    pub scratch: &'a Path,
    pub extensions: Option<&'a Path>,
    /// Files it must read besides the system, Python and the runner (the task, the candidate).
    pub reads: Vec<PathBuf>,
    pub sandbox: bool,
    pub memory_bytes: Option<u64>,
    /// The process is never timed (checks of `--mode correctness`, `tasks check`): its CUDA
    /// context gets one hardware queue ([`UNTIMED_QUEUES`]).
    pub untimed: bool,
}

/// Why a call did not produce a reply.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{}", .0.message)]
    Runner(RunnerError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error("could not start the runner: {0}")]
    Spawn(#[from] SpawnError),
    #[error("the runner broke the protocol: {0}")]
    Protocol(String),
    /// cudal1 did not make the call: the work would not fit ([`crate::memory`]).
    #[error("{0}")]
    Refused(crate::memory::TooLarge),
}

impl CallError {
    /// What can be done about it, where something can ([`crate::memory::Remedy`]); best first.
    pub fn remedies(&self) -> Vec<crate::memory::Remedy> {
        match self {
            CallError::Refused(too_large) => too_large.remedies(),
            _ => Vec::new(),
        }
    }
}

/// A running runner process, enlisted in the supervisor's live-child registry under its scratch
/// directory and its role ([`kill_under`]).
pub struct RunnerClient {
    worker: Worker,
}

/// The nice value of a process that checks (no timing) started ahead of its turn: where many
/// interpreters start at once (every lane of a correctness run), those whose turn it is get the
/// cores first.
pub const AHEAD_NICE: i32 = 10;

/// How long a runner may take to start and answer `Hello` (an interpreter importing torch on a
/// busy machine).
pub const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Kills the whole process group of every runner working below `root` (an engine's scratch
/// directory), now and whenever one starts there later; their callers then get errors at once.
/// For stopping immediately: a second Ctrl-C, or an engine dropped mid-run. The supervisor's
/// registry does it ([`cudal1_supervisor::kill_under`]).
pub fn kill_under(root: &Path) {
    cudal1_supervisor::kill_under(root);
}

/// As [`kill_under`], for extension builds only (the compile role, with every compiler it
/// started): a build takes tens of seconds, and a cancelled engine has no use for it.
pub fn kill_builds_under(root: &Path) {
    cudal1_supervisor::kill_class_under(root, Role::Compile.as_str());
}

/// The environment of a Python child that runs task or candidate code, built from scratch:
/// nothing of the user's leaks into it except what toolchains need to be found. `scratch` is its
/// HOME and TMPDIR; `sees_gpu`: the device's GPU is visible (a compile worker sees none);
/// `trusted`: no candidate code runs in it (a reference), so it may write the bytecode cache
/// that every runner reads ([`RunnerEnv::bytecode`]). A process that runs a candidate's code
/// only reads it: bytecode it wrote would run in the trusted processes.
pub fn environment(
    env: &RunnerEnv,
    scratch: &Path,
    device: &Device,
    sees_gpu: bool,
    extensions: Option<&Path>,
    trusted: bool,
    untimed: bool,
) -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = Vec::new();
    let mut set =
        |k: &str, v: &dyn AsRef<std::ffi::OsStr>| vars.push((k.into(), v.as_ref().to_owned()));
    // CUDA_DEVICE_ORDER: a GPU's number in CUDA_VISIBLE_DEVICES below means what it means to
    // the parent only under the parent's ordering.
    for key in
        ["PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_DEVICE_ORDER", "LANG", "TERM"]
    {
        if let Some(v) = std::env::var_os(key) {
            set(key, &v);
        }
    }
    set("HOME", &scratch);
    set("TMPDIR", &scratch);
    // Triton's kernel binaries go where cudal1 counts them (a compile in a timed window shows).
    set("TRITON_CACHE_DIR", &triton_cache(scratch));
    set("PYTHONPATH", &env.package_root);
    if let Some(dir) = &env.bytecode {
        set("PYTHONPYCACHEPREFIX", dir);
    }
    if !(trusted && env.bytecode.is_some()) {
        set("PYTHONDONTWRITEBYTECODE", &"1");
    }
    set("PYTHONUNBUFFERED", &"1");
    set("PYTHONHASHSEED", &"0");
    // OpenMP's workers sleep after a parallel region instead of spinning: spinning burns CPU
    // between requests, which the idle guard rightly reports as work done behind the timer.
    set("OMP_WAIT_POLICY", &"PASSIVE");
    // numpy's OpenBLAS (torch imports numpy) starts a thread per core at import, and they spin
    // before they sleep: on 16 cores, `import torch` took 3.6-4.2 s of CPU with them and 1.8-2.4 s
    // without (docs/bench/2026-11-25-gpu-session14). PyTorch's own operators do not use it.
    set("OPENBLAS_NUM_THREADS", &"1");
    set("PYTHONNOUSERSITE", &"1");
    // Inductor compiles inside the process, not in a pool of worker processes: that pool starts
    // in the background at the first `torch.compile` and its workers (one per core, each importing
    // torch) work while the other side is timed, which the idle guard reports as work behind the
    // timer (every `torch.compile` baseline on the H100, docs/bench/2026-11-24-gpu-session10).
    // The kernels are the same; only the compile is serial.
    set("TORCHINDUCTOR_COMPILE_THREADS", &"1");
    let visible = match device {
        Device::Cuda(n) if sees_gpu => env.gpu_id(*n),
        _ => String::new(),
    };
    set("CUDA_VISIBLE_DEVICES", &visible);
    if untimed && !visible.is_empty() {
        set("CUDA_DEVICE_MAX_CONNECTIONS", &UNTIMED_QUEUES);
    }
    if *device == Device::Cpu {
        // One intra-op thread on the CPU: a thread pool on oversubscribed cores (a CI machine,
        // the other runner) stalls for milliseconds at random, which swamps the measurement.
        set("OMP_NUM_THREADS", &"1");
        set("MKL_NUM_THREADS", &"1");
    }
    if let Some(arch) = &env.cuda_arch {
        set("TORCH_CUDA_ARCH_LIST", arch);
    }
    if let Some(ext) = extensions {
        set("TORCH_EXTENSIONS_DIR", &ext);
    }
    vars
}

/// The Triton cache of a runner whose scratch directory is `scratch` (`TRITON_CACHE_DIR`): one per
/// process, never shared, so that no program can leave a kernel binary for another to load.
pub fn triton_cache(scratch: &Path) -> PathBuf {
    scratch.join("triton")
}

/// The kernel binaries (`*.cubin`, `*.hsaco`) in a Triton cache: one per compiled kernel. The
/// candidate's process can write there, so the count is its claim, and only ever held against
/// itself; it stops at [`TRITON_COUNT_LIMIT`] entries, so that no directory of millions of files
/// holds the trusted side up.
pub fn triton_binaries(cache: &Path) -> usize {
    let mut seen = 0usize;
    let mut binaries = 0usize;
    let Ok(groups) = std::fs::read_dir(cache) else { return 0 };
    for group in groups.flatten() {
        seen += 1;
        // Not followed through links: only the cache's own directories, one level deep.
        if seen > TRITON_COUNT_LIMIT || !group.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(group.path()) else { continue };
        for file in files.flatten() {
            seen += 1;
            if seen > TRITON_COUNT_LIMIT {
                break;
            }
            let name = file.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".cubin") || name.ends_with(".hsaco") {
                binaries += 1;
            }
        }
    }
    binaries
}

/// How many entries of a Triton cache [`triton_binaries`] looks at, at most.
pub const TRITON_COUNT_LIMIT: usize = 20_000;

/// Hardware work queues (`CUDA_DEVICE_MAX_CONNECTIONS`) of a process that is never timed. The
/// driver makes and ends contexts one at a time per device, and a correctness run makes one per
/// candidate: with one queue instead of the default eight, an H100 made 24 contexts at once in
/// 1.45 s instead of 3.94 s and ended them in 0.56 s instead of 1.54 s
/// (docs/bench/2026-11-26-gpu-session16). Streams then share one queue: results are the same, but
/// kernels of two streams no longer run at the same time, so a program that needs them to (one
/// spinning on a flag that another stream's kernel sets) hangs and is judged `timeout`; CUDA never
/// promised that they would. Timed processes keep the driver's default, as users run them.
pub const UNTIMED_QUEUES: &str = "1";

/// Set to `1` for a sandboxed runner that gets a `/tmp` of its own (`cudal1_supervisor`'s
/// `private_tmp_available`): its audit then takes what it does below `/tmp` for its own business
/// (`cudal1_runner.audit`), not a look for other processes' files.
pub const PRIVATE_TMP_VAR: &str = "CUDAL1_PRIVATE_TMP";

/// Variables a forked runner sets for itself before it runs anything: the zygote's own values of
/// these are never seen. Every other variable is read as the interpreter starts or as torch is
/// imported (`PYTHONPATH`, `OMP_NUM_THREADS`, ...), so a runner is forked only from a zygote that
/// started with the same values.
const SET_AFTER_FORK: [&str; 8] = [
    "HOME",
    "TMPDIR",
    PRIVATE_TMP_VAR,
    "TRITON_CACHE_DIR",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "TORCH_EXTENSIONS_DIR",
    "PYTHONDONTWRITEBYTECODE",
];

/// A fork server with no runner and no request for this long ends (it holds an interpreter with
/// torch imported: hundreds of MB); the next runner wanted starts another.
const ZYGOTE_IDLE_SECONDS: u32 = 30;

/// The running fork servers, by interpreter, the environment they started with, and whether
/// they fork candidates or references.
static ZYGOTES: std::sync::Mutex<Vec<(PathBuf, Vec<(OsString, OsString)>, bool, Zygote)>> =
    std::sync::Mutex::new(Vec::new());

/// The fork server for runners of `env` with the environment `vars`, started if none runs; `None`
/// where one cannot be started. Candidates and references come from different fork servers:
/// processes forked from one share its memory layout (where its libraries were mapped), and a
/// candidate must learn nothing of the reference's process, which reads what the candidate wrote.
fn zygote_for(env: &RunnerEnv, vars: &[(OsString, OsString)], candidates: bool) -> Option<Zygote> {
    let mut base: Vec<(OsString, OsString)> =
        vars.iter().filter(|(k, _)| !SET_AFTER_FORK.iter().any(|s| k == s)).cloned().collect();
    base.sort();
    let mut zygotes = ZYGOTES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // One that ended (a crash, the machine short of memory) is started again; one that found
    // threads after its imports stays, so that runners of its kind start their own interpreters.
    zygotes.retain(|(_, _, _, z)| z.dead().is_none() || z.unfit());
    if let Some((_, _, _, z)) = zygotes
        .iter()
        .find(|(python, b, s, _)| *python == env.python && *b == base && *s == candidates)
    {
        return (!z.unfit()).then(|| z.clone());
    }
    let mut own = base.clone();
    let temp = std::env::temp_dir();
    own.push(("HOME".into(), temp.clone().into()));
    own.push(("TMPDIR".into(), temp.into()));
    let args = [
        "-m",
        "cudal1_runner.zygote",
        "--preload",
        "cudal1_runner.preload",
        "--idle",
        &ZYGOTE_IDLE_SECONDS.to_string(),
    ]
    .map(OsString::from);
    match Zygote::start(&env.python, &args, &env.package_root, &own) {
        Ok(z) => {
            zygotes.push((env.python.clone(), base, candidates, z.clone()));
            Some(z)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a fork server; runners start their own interpreters");
            None
        }
    }
}

/// Ends every fork server this process started and waits until each has been reaped (their
/// runners die with them), so that none is left for init to adopt when cudal1 exits. Runners
/// wanted afterwards start new ones.
pub fn end_fork_servers() {
    let zygotes: Vec<Zygote> = ZYGOTES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .drain(..)
        .map(|(_, _, _, z)| z)
        .collect();
    for z in &zygotes {
        z.shutdown();
    }
    for z in zygotes {
        if !z.end(std::time::Duration::from_secs(2)) {
            tracing::warn!(pid = z.pid(), "a fork server could not be reaped");
        }
    }
}

/// Starts the fork servers that runners of `env` on `device` will be forked from, so that their
/// imports are done by the time the first runner is wanted.
pub fn prestart(env: &RunnerEnv, device: &Device) {
    if env.forks {
        let vars = environment(env, &std::env::temp_dir(), device, true, None, false, false);
        for candidates in [false, true] {
            let _ = zygote_for(env, &vars, candidates);
        }
    }
}

impl RunnerClient {
    pub fn spawn(env: &RunnerEnv, launch: Launch<'_>) -> Result<RunnerClient, CallError> {
        let mut vars = environment(
            env,
            launch.scratch,
            launch.device,
            launch.role != Role::Compile,
            launch.extensions,
            launch.role == Role::Reference,
            launch.untimed,
        );
        if launch.role == Role::Compile {
            let jobs = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
            vars.push(("MAX_JOBS".into(), jobs.to_string().into()));
        }
        if launch.sandbox && cudal1_supervisor::private_tmp_available() {
            vars.push((PRIVATE_TMP_VAR.into(), "1".into()));
        }
        let mut write_paths = vec![launch.scratch.to_owned()];
        let mut read_paths = vec![launch.scratch.to_owned(), env.package_root.clone()];
        read_paths.extend(env.python_dirs.iter().cloned());
        read_paths.extend(env.bytecode.iter().cloned());
        read_paths.extend(launch.reads.iter().cloned());
        if let Some(ext) = launch.extensions {
            // A candidate only reads its published builds (crate::compile): what it could write
            // there, its later evaluations would load. The compile role builds into its own
            // fresh directory.
            if launch.role != Role::Candidate {
                write_paths.push(ext.to_owned());
            }
            read_paths.push(ext.to_owned());
        }
        let sandbox = Sandbox {
            enabled: launch.sandbox,
            network: !launch.sandbox,
            write_paths,
            read_paths: if launch.sandbox { read_paths } else { Vec::new() },
            cpu_seconds: None,
            memory_bytes: if launch.sandbox { launch.memory_bytes } else { None },
            max_processes: if launch.sandbox { Some(4096) } else { None },
            outside_ipc: false,
        };
        let spec = WorkerSpec {
            label: launch.label,
            program: env.python.clone(),
            args: vec![
                "-m".into(),
                "cudal1_runner".into(),
                "--role".into(),
                launch.role.as_str().into(),
            ],
            cwd: launch.scratch.to_owned(),
            env: vars,
            sandbox,
        };
        let zygote = if env.forks && launch.role != Role::Compile {
            zygote_for(env, &spec.env, launch.role == Role::Candidate)
        } else {
            None
        };
        let worker = match zygote {
            Some(zygote) => Worker::spawn_forked(spec.clone(), SpawnOptions::default(), &zygote).or_else(|e| {
                tracing::warn!(error = %e, "forking the runner failed; starting an interpreter for it");
                Worker::spawn(spec)
            })?,
            None => Worker::spawn(spec)?,
        };
        let mut worker = worker;
        worker.enlist(launch.scratch, launch.role.as_str());
        Ok(RunnerClient { worker })
    }

    /// Stops every process of the runner's group (SIGSTOP) between requests; [`RunnerClient::resume`]
    /// lets them go on.
    pub fn pause(&self) {
        self.worker.pause();
    }

    pub fn resume(&self) {
        self.worker.resume();
    }

    /// Sends one request and waits for its reply.
    pub fn call<R: Request>(
        &mut self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Reply, CallError> {
        let reply = self.worker.request(request.to_json(), timeout)?;
        match parse_reply::<R::Reply>(reply) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(CallError::Runner(e)),
            Err(detail) => Err(CallError::Protocol(detail)),
        }
    }

    /// The runner's pid (its process group's too).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.worker.pid()
    }

    /// Sets the nice value of every thread of the runner's process group: [`AHEAD_NICE`] for a
    /// process started ahead of its turn, 0 when its turn comes. Best effort: going back to 0
    /// needs root or `CAP_SYS_NICE`, without which the process stays niced. Returns whether it
    /// took.
    pub fn set_nice(&self, nice: i32) -> bool {
        // SAFETY: setpriority has no memory-safety preconditions.
        unsafe {
            libc::setpriority(libc::PRIO_PGRP as _, self.worker.pid() as libc::id_t, nice) == 0
        }
    }

    /// Names the runner anew in its errors and logs (a reference given another task).
    pub fn relabel(&mut self, label: String) {
        self.worker.relabel(label);
    }

    pub fn stderr_tail(&self) -> String {
        self.worker.stderr_tail()
    }

    /// Processes of a sandboxed runner that left its process group (a daemon that escaped
    /// supervision); they are killed. See [`Worker::escaped`].
    pub fn escaped(&mut self) -> Vec<u32> {
        self.worker.escaped()
    }

    /// CPU time used so far by the runner, its descendants and the children they waited for:
    /// cudal1's own count, whatever the runner reports.
    pub fn cpu_time(&self) -> Duration {
        self.worker.cpu_time()
    }

    /// The most memory the runner has held so far (see [`Worker::peak_memory`]).
    pub fn peak_memory(&self) -> Option<u64> {
        self.worker.peak_memory()
    }

    /// Asks the runner to exit, then makes sure its whole process group is gone.
    pub fn shutdown(mut self) {
        let _ = self.call(&cudal1_protocol::Shutdown {}, Duration::from_secs(5));
        self.worker.terminate(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triton_binaries_counts_kernels_one_level_deep_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let cache = triton_cache(dir.path());
        assert_eq!(triton_binaries(&cache), 0, "no cache yet");
        for (group, files) in [
            ("A1", &["k.cubin", "k.ptx", "k.json", "__grp__k.json"][..]),
            ("B2", &["k.cubin", "k.ttir"][..]),
            ("C3", &["cuda_utils.so"][..]),
            ("D4", &["other.hsaco"][..]),
        ] {
            std::fs::create_dir_all(cache.join(group)).unwrap();
            for f in files {
                std::fs::write(cache.join(group).join(f), b"").unwrap();
            }
        }
        // Deeper, or behind a link, is not the cache's layout.
        std::fs::create_dir_all(cache.join("A1/deeper")).unwrap();
        std::fs::write(cache.join("A1/deeper/x.cubin"), b"").unwrap();
        std::os::unix::fs::symlink(cache.join("B2"), cache.join("E5")).unwrap();
        std::fs::write(cache.join("stray.cubin"), b"").unwrap();
        assert_eq!(triton_binaries(&cache), 3);
    }

    /// An environment with no interpreter behind it, for what `environment` makes of it.
    fn bare_env(dir: &Path) -> RunnerEnv {
        RunnerEnv {
            python: "/usr/bin/python3".into(),
            python_dirs: vec![],
            package_root: dir.join("package"),
            cuda_arch: None,
            gpu_names: vec![],
            bytecode: None,
            forks: false,
            gpu_ids: vec![],
        }
    }

    #[test]
    fn a_runner_sees_the_gpu_the_parents_visible_devices_name_at_its_index() {
        assert_eq!(visible_gpu_ids(None), Vec::<String>::new());
        assert_eq!(visible_gpu_ids(Some("2, GPU-5d1e,")), ["2", "GPU-5d1e"]);
        let dir = tempfile::tempdir().unwrap();
        let env = RunnerEnv { gpu_ids: visible_gpu_ids(Some("3,1")), ..bare_env(dir.path()) };
        let visible = |env: &RunnerEnv, device: &Device, sees_gpu: bool| {
            let vars = environment(env, dir.path(), device, sees_gpu, None, false, false);
            vars.into_iter().find(|(k, _)| k == "CUDA_VISIBLE_DEVICES").map(|(_, v)| v)
        };
        // cuda:0 and cuda:1 of a parent that sees the machine's GPUs 3 and 1.
        assert_eq!(visible(&env, &Device::Cuda(0), true), Some("3".into()));
        assert_eq!(visible(&env, &Device::Cuda(1), true), Some("1".into()));
        // A compile worker sees none; a parent with the variable unset numbers them itself.
        assert_eq!(visible(&env, &Device::Cuda(1), false), Some("".into()));
        let unset = RunnerEnv { gpu_ids: vec![], ..env };
        assert_eq!(visible(&unset, &Device::Cuda(1), true), Some("1".into()));
    }

    #[test]
    fn every_runner_has_its_own_triton_cache_in_its_scratch() {
        let dir = tempfile::tempdir().unwrap();
        let env = bare_env(dir.path());
        let vars = environment(&env, dir.path(), &Device::Cpu, false, None, false, false);
        let cache = vars.iter().find(|(k, _)| k == "TRITON_CACHE_DIR").map(|(_, v)| v.clone());
        assert_eq!(cache, Some(dir.path().join("triton").into_os_string()));
        assert!(SET_AFTER_FORK.contains(&"TRITON_CACHE_DIR"), "one fork server for all scratches");
    }
}
