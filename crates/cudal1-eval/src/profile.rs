//! Nsight Compute profiles: where a program's GPU time goes, kernel by kernel.
//!
//! A [`Profiler`] runs `ncu` over `python -m cudal1_runner.profile`, which imports the program,
//! builds its model, warms it up, and calls it between `cudaProfilerStart` and `cudaProfilerStop`
//! (`--profile-from-start off`), so that only those calls' kernels are profiled. ncu writes its
//! CSV (one row per kernel launch and metric) to a log file, which [`parse_ncu_csv`] reads; the
//! launches are summed per kernel into a [`Profile`]: each kernel's share of the GPU time,
//! achieved compute and memory throughput (percent of peak), achieved occupancy, registers and
//! launch shape.
//!
//! A profile informs people and prompts; it never decides a verdict. ncu starts the program and
//! injects itself into it, so the evaluation's sandbox cannot hold the two; instead the program
//! confines itself before any of its code runs ([`Profiler::sandbox`]: `cudal1 sandbox-exec`,
//! Landlock, seccomp, rlimits): it writes only its scratch directory, reads only what a runner
//! reads (its published builds included), and keeps the network (ncu talks to it). Its
//! environment is the runner's, scrubbed; clocks are left alone (`--clock-control none`). The run
//! is a [`cudal1_supervisor::Job`]: its own process group, killed with it at the time limit or on
//! cancel. It holds its device alone through the device's gate ([`crate::hold_alone`]), as a timed
//! evaluation does, so that no evaluation runs beside it.
//!
//! ```
//! use cudal1_eval::profile::{parse_ncu_csv, Profile};
//!
//! let log = "==PROF== Connected to process 7\n\
//! \"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n\
//! \"0\",\"7\",\"python3\",\"127.0.0.1\",\"k\",\"1\",\"7\",\"(256, 1, 1)\",\"(64, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"nsecond\",\"2,048\"\n";
//! let launches = parse_ncu_csv(log).unwrap();
//! let profile = Profile::from_launches(&launches, 1);
//! assert_eq!(profile.kernels[0].time_ns, 2048.0);
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cudal1_supervisor::{Job, JobEnd, JobError, JobOutput, JobSpec};

use serde::{Deserialize, Serialize};

use crate::runner::RunnerEnv;
use crate::settings::Device;

/// Kernel time.
pub const DURATION: &str = "gpu__time_duration.sum";
/// Achieved compute (SM) throughput, percent of peak.
pub const COMPUTE: &str = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
/// Achieved memory throughput (the busiest of DRAM, L2 and L1), percent of peak.
pub const MEMORY: &str = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
/// DRAM throughput, percent of peak.
pub const DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
/// Achieved occupancy: active warps, percent of the most an SM holds.
pub const OCCUPANCY: &str = "sm__warps_active.avg.pct_of_peak_sustained_active";
/// Registers per thread.
pub const REGISTERS: &str = "launch__registers_per_thread";

/// The metrics asked of ncu.
pub const METRICS: [&str; 6] = [DURATION, COMPUTE, MEMORY, DRAM, OCCUPANCY, REGISTERS];

/// One kernel launch as ncu reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelLaunch {
    /// ncu's launch id (the `ID` column).
    pub id: u64,
    pub name: String,
    pub block: String,
    pub grid: String,
    /// Metric name to value, in base units (time in nanoseconds).
    pub metrics: BTreeMap<String, f64>,
}

/// One kernel (every launch of one name) in a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelSummary {
    pub name: String,
    pub launches: u32,
    /// GPU time of all its launches, nanoseconds.
    pub time_ns: f64,
    /// Its part of the profile's GPU time, 0 to 1.
    pub share: f64,
    /// Time-weighted over its launches; `None` where ncu gave no value.
    pub compute_pct: Option<f64>,
    pub memory_pct: Option<f64>,
    pub dram_pct: Option<f64>,
    pub occupancy_pct: Option<f64>,
    pub registers: Option<f64>,
    /// The launch shape of its longest launch, as ncu writes it: `(256, 1, 1)`.
    pub block: String,
    pub grid: String,
    /// The readable name (`c++filt`'s) of a mangled [`KernelSummary::name`], where it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demangled: Option<String>,
}

/// Where a program's GPU time goes during its profiled calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The profiled calls of the model.
    pub calls: u32,
    pub launches: u32,
    /// GPU time of every launch, nanoseconds (kernels only: no copies, no host time).
    pub total_ns: f64,
    /// Longest first.
    pub kernels: Vec<KernelSummary>,
    /// Kernels are named by their mangled names (namespaces, templates and arguments: exact, as
    /// the own-kernel share needs them, [`crate::own`]); profiles made before are not.
    #[serde(default)]
    pub mangled: bool,
}

impl Profile {
    /// Sums launches per kernel name.
    #[must_use]
    pub fn from_launches(launches: &[KernelLaunch], calls: u32) -> Profile {
        struct Acc<'a> {
            launches: u32,
            time: f64,
            weighted: BTreeMap<&'static str, (f64, f64)>,
            longest: (f64, &'a KernelLaunch),
        }
        let mut by_name: BTreeMap<&str, Acc<'_>> = BTreeMap::new();
        for l in launches {
            let t = l.metrics.get(DURATION).copied().unwrap_or(0.0);
            let acc = by_name.entry(l.name.as_str()).or_insert_with(|| Acc {
                launches: 0,
                time: 0.0,
                weighted: BTreeMap::new(),
                longest: (-1.0, l),
            });
            acc.launches += 1;
            acc.time += t;
            if t > acc.longest.0 {
                acc.longest = (t, l);
            }
            for m in [COMPUTE, MEMORY, DRAM, OCCUPANCY, REGISTERS] {
                if let Some(v) = l.metrics.get(m) {
                    // Weighted by time; a launch ncu timed at zero still counts once.
                    let w = t.max(f64::MIN_POSITIVE);
                    let e = acc.weighted.entry(m).or_insert((0.0, 0.0));
                    e.0 += v * w;
                    e.1 += w;
                }
            }
        }
        let total_ns: f64 = by_name.values().map(|a| a.time).sum();
        let mut kernels: Vec<KernelSummary> = by_name
            .into_iter()
            .map(|(name, a)| {
                let avg = |m: &str| a.weighted.get(m).map(|(s, w)| s / w);
                KernelSummary {
                    name: name.to_owned(),
                    launches: a.launches,
                    time_ns: a.time,
                    share: if total_ns > 0.0 { a.time / total_ns } else { 0.0 },
                    compute_pct: avg(COMPUTE),
                    memory_pct: avg(MEMORY),
                    dram_pct: avg(DRAM),
                    occupancy_pct: avg(OCCUPANCY),
                    registers: avg(REGISTERS),
                    block: a.longest.1.block.clone(),
                    grid: a.longest.1.grid.clone(),
                    demangled: None,
                }
            })
            .collect();
        kernels.sort_by(|a, b| b.time_ns.total_cmp(&a.time_ns).then_with(|| a.name.cmp(&b.name)));
        Profile { calls, launches: launches.len() as u32, total_ns, kernels, mangled: false }
    }

    /// Fills in readable names of mangled kernel names with `c++filt` where it is installed
    /// (binutils); without it, names stay mangled.
    pub fn demangle(&mut self) {
        let names: Vec<&str> = self.kernels.iter().map(|k| k.name.as_str()).collect();
        let Some(readable) = demangle_names(&names) else { return };
        for (k, r) in self.kernels.iter_mut().zip(readable) {
            k.demangled = (r != k.name).then_some(r);
        }
    }

    /// A few lines for a person or a prompt: the totals, then the `top` longest kernels with
    /// their share of the time and what bounds them.
    #[must_use]
    pub fn brief(&self, top: usize) -> String {
        let calls =
            if self.calls == 1 { "1 call".to_owned() } else { format!("{} calls", self.calls) };
        let mut out = format!(
            "{} kernel launch{} ({} distinct kernel{}) in {calls}, {} of GPU time.",
            self.launches,
            if self.launches == 1 { "" } else { "es" },
            self.kernels.len(),
            if self.kernels.len() == 1 { "" } else { "s" },
            duration_text(self.total_ns)
        );
        for k in self.kernels.iter().take(top) {
            let mut facts = Vec::new();
            if let Some(v) = k.compute_pct {
                facts.push(format!("compute {v:.0}% of peak"));
            }
            if let Some(v) = k.memory_pct {
                facts.push(format!("memory {v:.0}% of peak"));
            }
            if let Some(v) = k.dram_pct {
                facts.push(format!("DRAM {v:.0}%"));
            }
            if let Some(v) = k.occupancy_pct {
                facts.push(format!("achieved occupancy {v:.0}%"));
            }
            if let Some(v) = k.registers {
                facts.push(format!("{v:.0} registers/thread"));
            }
            facts.push(format!("grid {} block {}", k.grid, k.block));
            let launches =
                if k.launches == 1 { String::new() } else { format!(", {} launches", k.launches) };
            out.push_str(&format!(
                "\n- {:.0}% `{}` ({}{launches}): {}",
                k.share * 100.0,
                short_name(k.demangled.as_deref().unwrap_or(&k.name), 100),
                duration_text(k.time_ns),
                facts.join(", ")
            ));
        }
        if self.kernels.len() > top {
            let rest: f64 = self.kernels[top..].iter().map(|k| k.share).sum();
            out.push_str(&format!(
                "\n- {:.0}% in {} other kernel{}",
                rest * 100.0,
                self.kernels.len() - top,
                if self.kernels.len() - top == 1 { "" } else { "s" }
            ));
        }
        out
    }
}

/// How long a tool asked one question (`c++filt`, `ncu --help`) may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// `program args` run under the supervisor with its output kept, at most [`TOOL_TIMEOUT`];
/// `None` where it cannot be started, fails to end in time or cannot be read back.
fn ask_tool(program: &Path, args: &[&str], stdin: Option<Vec<u8>>) -> Option<JobEnd> {
    let spec = JobSpec {
        label: format!("`{}`", program.display()),
        program: program.to_owned(),
        args: args.iter().map(OsString::from).collect(),
        cwd: None,
        env: None,
        stdin,
        output: JobOutput::Capture,
    };
    Job::run(spec, TOOL_TIMEOUT, None)
        .map_err(|e| tracing::debug!(error = %e, "a tool gave no answer"))
        .ok()
}

/// `names` through `c++filt`, one per line in order; `None` where it is missing or fails.
fn demangle_names(names: &[&str]) -> Option<Vec<String>> {
    if names.iter().any(|n| n.contains('\n')) {
        return None;
    }
    let input = names.join("\n") + "\n";
    let out = ask_tool(Path::new("c++filt"), &[], Some(input.into_bytes()))?;
    let lines: Vec<String> =
        String::from_utf8(out.stdout).ok()?.lines().map(str::to_owned).collect();
    (out.status.success() && lines.len() == names.len()).then_some(lines)
}

/// `1.23 ms`, `45.6 µs`, `789 ns`.
#[must_use]
pub fn duration_text(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// A kernel name cut to `max` characters (C++ template names run to thousands).
#[must_use]
pub fn short_name(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        return name.to_owned();
    }
    let mut s: String = name.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(
        "Nsight Compute (`ncu`) was not found on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or /opt/nvidia/nsight-compute; \
         install it (it ships with the CUDA toolkit) or name where it is"
    )]
    NcuNotFound,
    #[error("`{}` is not an executable file: pass the path of Nsight Compute's `ncu`", .0.display())]
    NcuNotExecutable(PathBuf),
    #[error("profiling needs a CUDA device; this run is on the CPU")]
    NeedsGpu,
    #[error("could not start `{}`: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the profiled run did not end within {}s (ncu replays each kernel once per metric pass: give it longer)", .0.as_secs())]
    Timeout(Duration),
    #[error("profiling was interrupted")]
    Cancelled,
    #[error("the program failed before it could be profiled ({kind}): {message}")]
    Program { kind: String, message: String },
    #[error("ncu failed ({status}): {tail}")]
    Ncu { status: String, tail: String },
    #[error("ncu's output could not be read: {0}")]
    Parse(String),
    #[error("ncu profiled no kernel: the profiled calls launched none on the GPU, or ncu could not read the counters. Its log ends: {0}")]
    NoKernels(String),
    #[error("profiler scratch space: {0}")]
    Io(#[from] std::io::Error),
}

/// Finds `ncu`: `explicit` if given, else PATH, `$CUDA_HOME/bin`, `/usr/local/cuda/bin`, then the
/// newest `/opt/nvidia/nsight-compute/*/ncu`.
pub fn locate_ncu(explicit: Option<&Path>) -> Result<PathBuf, ProfileError> {
    if let Some(p) = explicit {
        return if is_executable(p) {
            Ok(p.to_owned())
        } else {
            Err(ProfileError::NcuNotExecutable(p.to_owned()))
        };
    }
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = std::env::var_os(var) {
            dirs.push(PathBuf::from(home).join("bin"));
        }
    }
    dirs.push("/usr/local/cuda/bin".into());
    if let Some(p) = dirs.iter().map(|d| d.join("ncu")).find(|p| is_executable(p)) {
        return Ok(p);
    }
    let mut installed: Vec<PathBuf> = std::fs::read_dir("/opt/nvidia/nsight-compute")
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path().join("ncu")))
                .filter(|p| is_executable(p))
                .collect()
        })
        .unwrap_or_default();
    installed.sort();
    installed.pop().ok_or(ProfileError::NcuNotFound)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Asked between polls of a profiled run: `true` ends it (Ctrl-C).
#[derive(Clone)]
pub struct Cancel(pub std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cancel")
    }
}

/// How to profile.
#[derive(Debug, Clone)]
pub struct Profiler {
    pub ncu: PathBuf,
    /// Calls before profiling starts (builds, autotuning, caches).
    pub warmup: u32,
    /// Calls profiled.
    pub calls: u32,
    /// For the whole profiled run, ncu's replays included.
    pub timeout: Duration,
    /// A `cudal1` binary whose `sandbox-exec` confines the program before it runs (Landlock,
    /// seccomp, rlimits, no capabilities): writes only to its scratch directory, reads only
    /// what a runner may (its published builds included). `None`: the program runs unconfined.
    pub sandbox: Option<PathBuf>,
    pub cancel: Option<Cancel>,
}

/// One program to profile: the task, and the candidate (its `ModelNew`) or none (the task's `Model`).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub task: &'a Path,
    pub candidate: Option<&'a Path>,
    pub device: &'a Device,
    pub seed: u64,
    /// Where its extension builds go: the compile cache's directory for this program
    /// ([`crate::CompileCache::dir_for`]), so that a build made for its evaluation is found.
    pub extensions: Option<&'a Path>,
}

impl Profiler {
    #[must_use]
    pub fn new(ncu: PathBuf) -> Profiler {
        Profiler {
            ncu,
            warmup: 3,
            calls: 1,
            timeout: Duration::from_secs(300),
            sandbox: None,
            cancel: None,
        }
    }

    /// ncu's arguments before the program's command line.
    #[must_use]
    pub fn ncu_args(&self, log: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = [
            "--target-processes",
            "all",
            "--profile-from-start",
            "off",
            // Clocks as the evaluator sees them; locking them would also disturb other work on the GPU.
            "--clock-control",
            "none",
            "--csv",
            "--print-units",
            "base",
            // Exact kernel names (namespaces, templates, arguments): the own-kernel share
            // compares them with the symbols of the program's extensions.
            "--print-kernel-base",
            "mangled",
            "--metrics",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.push(METRICS.join(",").into());
        args.push("--log-file".into());
        args.push(log.into());
        args
    }

    /// Profiles `target` in `scratch` (a directory of its own).
    pub fn profile(
        &self,
        env: &RunnerEnv,
        target: Target<'_>,
        scratch: &Path,
    ) -> Result<Profile, ProfileError> {
        if *target.device == Device::Cpu {
            return Err(ProfileError::NeedsGpu);
        }
        let log = scratch.join("ncu.csv");
        let _ = std::fs::remove_file(&log);
        let mut args = self.ncu_args(&log);
        args.splice(0..0, self.hardening());
        let DriverRun { status, built_here } = run_driver(env, self, Some(&args), target, scratch)?;
        if !built_here.is_empty() {
            tracing::warn!(built = %built_here.join(", "), "the profiled program built extensions in its warm-up, not finding them among the compile pool's builds");
        }
        let text = std::fs::read_to_string(&log)
            .map_err(|e| ProfileError::Parse(format!("reading `{}`: {e}", log.display())))?;
        let launches = parse_ncu_csv(&text)?;
        if launches.is_empty() {
            return Err(ProfileError::NoKernels(format!(
                "ncu {status}; its log ends: {}",
                tail(&text, 800)
            )));
        }
        let mut profile = Profile::from_launches(&launches, self.calls);
        profile.mangled = true;
        profile.demangle();
        Ok(profile)
    }

    /// ncu's options that keep the program's own files out of what ncu reports, where this ncu
    /// knows them: no configuration file (ncu looks in its working directory and HOME, which are
    /// the program's) and no renaming of kernels (a rename file there could give a library
    /// kernel the name of one of the program's own).
    fn hardening(&self) -> Vec<OsString> {
        let help = ask_tool(&self.ncu, &["--help"], None)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mut args = Vec::new();
        if help.contains("--config-file ") || help.contains("--config-file\n") {
            args.extend(["--config-file".into(), "off".into()]);
        }
        if help.contains("--rename-kernels ") || help.contains("--rename-kernels\n") {
            args.extend(["--rename-kernels".into(), "0".into()]);
        }
        args
    }

    /// Runs the target's calls as [`Profiler::profile`] would (in the same confinement), without
    /// ncu: whether the program loads and runs under the profiling driver (on any device), and
    /// the extensions it built itself, not finding them among the compile pool's builds.
    pub fn dry_run(
        &self,
        env: &RunnerEnv,
        target: Target<'_>,
        scratch: &Path,
    ) -> Result<Vec<String>, ProfileError> {
        run_driver(env, self, None, target, scratch).map(|run| run.built_here)
    }
}

/// `cudal1 sandbox-exec`'s arguments that confine the driver of `target` (before `--`).
fn confinement(env: &RunnerEnv, target: &Target<'_>, scratch: &Path) -> Vec<OsString> {
    // ncu's injected library talks to its host: the network (loopback) and abstract sockets
    // outside stay reachable. It writes only its scratch directory (also its HOME and TMPDIR).
    let mut args: Vec<OsString> =
        ["sandbox-exec", "--network", "--outside-ipc", "--max-processes", "4096"]
            .iter()
            .map(OsString::from)
            .collect();
    let writes = vec![scratch.to_owned()];
    // Its published builds are only read (a build it makes itself goes to its own directory):
    // what it could write there, the program's later evaluations would load.
    let mut reads = vec![env.package_root.clone(), target.task.to_owned()];
    reads.extend(target.extensions.map(Path::to_owned));
    reads.extend(env.python_dirs.iter().cloned());
    reads.extend(target.candidate.map(Path::to_owned));
    for w in writes {
        args.extend(["--write".into(), w.into()]);
    }
    for r in reads {
        args.extend(["--read".into(), r.into()]);
    }
    args.push("--".into());
    args
}

/// What a run of the driver ended with.
struct DriverRun {
    status: std::process::ExitStatus,
    /// The program's claim (informative only): the extensions it built itself, not finding them
    /// published; at most 16 names of at most 200 characters.
    built_here: Vec<String>,
}

/// Runs the driver (under ncu when `ncu` holds its arguments).
fn run_driver(
    env: &RunnerEnv,
    profiler: &Profiler,
    ncu: Option<&[OsString]>,
    target: Target<'_>,
    scratch: &Path,
) -> Result<DriverRun, ProfileError> {
    // `scratch` is ours: ncu's log and the program's output go there. The program's own
    // directory (its cwd, HOME and TMPDIR, where it writes its status) is `scratch/work`, and a
    // confined program can neither write nor read outside it.
    std::fs::create_dir_all(scratch)?;
    let scratch = &std::path::absolute(scratch).unwrap_or_else(|_| scratch.to_owned());
    let work = scratch.join("work");
    std::fs::create_dir_all(&work)?;
    if let Some(ext) = target.extensions {
        std::fs::create_dir_all(ext)?;
    }
    let status_file = work.join("status.json");
    let _ = std::fs::remove_file(&status_file);
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let (task, candidate) = (abs(target.task), target.candidate.map(abs));
    let target = Target { task: &task, candidate: candidate.as_deref(), ..target };
    let mut driver: Vec<OsString> =
        vec![env.python.clone().into(), "-m".into(), "cudal1_runner.profile".into()];
    driver.extend(["--task".into(), task.clone().into()]);
    if let Some(c) = &candidate {
        driver.extend(["--candidate".into(), c.into()]);
    }
    let device = match target.device {
        Device::Cpu => "cpu".to_owned(),
        // CUDA_VISIBLE_DEVICES below leaves only the chosen GPU, as cuda:0.
        Device::Cuda(_) => "cuda:0".to_owned(),
    };
    driver.extend([
        "--device".into(),
        device.into(),
        "--seed".into(),
        target.seed.to_string().into(),
    ]);
    driver.extend([
        "--warmup".into(),
        profiler.warmup.to_string().into(),
        "--calls".into(),
        profiler.calls.to_string().into(),
    ]);
    driver.extend(["--status".into(), status_file.clone().into()]);
    let mut line: Vec<OsString> = Vec::new();
    if let Some(ncu_args) = ncu {
        line.push(profiler.ncu.clone().into());
        line.extend(ncu_args.iter().cloned());
    }
    if let Some(launcher) = &profiler.sandbox {
        line.push(launcher.clone().into());
        line.extend(confinement(env, &target, &work));
    }
    line.extend(driver);
    let program = PathBuf::from(&line[0]);
    let out_path = scratch.join("output.log");
    let cancel = profiler.cancel.as_ref().map(|c| Arc::clone(&c.0));
    let cancelled = move || cancel.as_ref().is_some_and(|c| c());
    // The device is held alone, through its gate, for the whole run: no evaluation of this
    // process runs on it meanwhile, and none is timed beside ncu's replays.
    let _alone = crate::engine::hold_alone(target.device, Some(&cancelled))
        .ok_or(ProfileError::Cancelled)?;
    let spec = JobSpec {
        label: "the profiled run".into(),
        program: program.clone(),
        args: line[1..].to_vec(),
        cwd: Some(work.clone()),
        env: Some(crate::runner::environment(
            env,
            &work,
            target.device,
            true,
            target.extensions,
            false,
            false,
        )),
        stdin: None,
        output: JobOutput::File(out_path.clone()),
    };
    // The supervisor runs it in a process group of its own, kills the group at the time limit or
    // when cancelled, and takes what the run left in it (ncu's helpers) with it when it ends.
    let status = match Job::run(spec, profiler.timeout, Some(&cancelled)) {
        Ok(end) => end.status,
        Err(JobError::Spawn { program, source }) => {
            return Err(ProfileError::Spawn { program, source })
        }
        Err(JobError::Timeout { .. }) => return Err(ProfileError::Timeout(profiler.timeout)),
        Err(JobError::Cancelled { .. }) => return Err(ProfileError::Cancelled),
        Err(JobError::Io { source, .. }) => return Err(ProfileError::Io(source)),
    };
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    // The status comes from the program's process: a claim, read without following links.
    match read_claim(&status_file).and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
    {
        Some(v) if v["ok"] == true => {
            let built_here = v["built_here"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str())
                .take(16)
                .map(|n| n.chars().take(200).collect())
                .collect();
            Ok(DriverRun { status, built_here })
        }
        Some(v) => Err(ProfileError::Program {
            kind: v["kind"].as_str().unwrap_or("internal").to_owned(),
            message: v["message"].as_str().unwrap_or("").to_owned(),
        }),
        None => Err(ProfileError::Ncu { status: status.to_string(), tail: tail(&output, 1500) }),
    }
}

/// A small regular file the program wrote, opened without following a link; `None` otherwise.
fn read_claim(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(1 << 20).read_to_string(&mut text).ok()?;
    Some(text)
}

fn tail(text: &str, max: usize) -> String {
    let t = text.trim_end();
    match t.char_indices().rev().nth(max) {
        Some((i, _)) => format!("…{}", &t[i..]),
        None => t.to_owned(),
    }
}

/// Reads ncu's CSV (`--csv`, the default details page: one row per launch and metric), skipping
/// the `==PROF==` lines and program output around it. Values are in the units ncu prints; times
/// are converted to nanoseconds and thousands separators dropped.
pub fn parse_ncu_csv(text: &str) -> Result<Vec<KernelLaunch>, ProfileError> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) =
        lines.iter().position(|l| l.starts_with("\"ID\"") && l.contains("\"Metric Name\""))
    else {
        if text.contains("==PROF==") || text.contains("==ERROR==") || text.trim().is_empty() {
            return Ok(Vec::new());
        }
        return Err(ProfileError::Parse(format!(
            "no header row in ncu's output: {}",
            tail(text, 400)
        )));
    };
    let body = lines[start..]
        .iter()
        .copied()
        .filter(|l| l.starts_with('"'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(body.as_bytes());
    let headers = reader.headers().map_err(|e| ProfileError::Parse(e.to_string()))?.clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| ProfileError::Parse(format!("no `{name}` column")))
    };
    let (id, kernel, block, grid, metric, unit, value) = (
        col("ID")?,
        col("Kernel Name")?,
        col("Block Size")?,
        col("Grid Size")?,
        col("Metric Name")?,
        col("Metric Unit")?,
        col("Metric Value")?,
    );
    let mut launches: BTreeMap<u64, KernelLaunch> = BTreeMap::new();
    for record in reader.records() {
        let r = record.map_err(|e| ProfileError::Parse(e.to_string()))?;
        let get = |i: usize| r.get(i).unwrap_or("");
        let Ok(launch_id) = get(id).trim().parse::<u64>() else { continue };
        let entry = launches.entry(launch_id).or_insert_with(|| KernelLaunch {
            id: launch_id,
            name: get(kernel).to_owned(),
            block: get(block).to_owned(),
            grid: get(grid).to_owned(),
            metrics: BTreeMap::new(),
        });
        let name = get(metric).trim();
        if name.is_empty() {
            continue;
        }
        if let Some(v) = metric_value(get(value), get(unit)) {
            entry.metrics.insert(name.to_owned(), v);
        }
    }
    Ok(launches.into_values().collect())
}

/// A value in base units: times in nanoseconds; `n/a` and the like are `None`.
fn metric_value(text: &str, unit: &str) -> Option<f64> {
    let v: f64 = text.trim().replace(',', "").parse().ok()?;
    let scale = match unit.trim() {
        "usecond" | "us" => 1e3,
        "msecond" | "ms" => 1e6,
        "second" | "s" => 1e9,
        _ => 1.0,
    };
    v.is_finite().then_some(v * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"";

    fn row(id: u32, kernel: &str, metric: &str, unit: &str, value: &str) -> String {
        format!("\"{id}\",\"4242\",\"python3\",\"127.0.0.1\",\"{kernel}\",\"1\",\"7\",\"(256, 1, 1)\",\"(1024, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"{metric}\",\"{unit}\",\"{value}\"")
    }

    fn log() -> String {
        let mut lines = vec![
            "==PROF== Connected to process 4242 (/usr/bin/python3.12)".to_owned(),
            HEADER.to_owned(),
        ];
        // Launch 0 and 2 of one kernel, 1 of another; times in three units.
        for (id, k, t, unit, c, m, occ) in [
            (0, "void gemm<float>(float*, int)", "1,500", "nsecond", "80.5", "20", "40"),
            (1, "elementwise_add", "0.5", "usecond", "5", "90", "80"),
            (2, "void gemm<float>(float*, int)", "0.0005", "msecond", "60.5", "10", "20"),
        ] {
            lines.push(row(id, k, DURATION, unit, t));
            lines.push(row(id, k, COMPUTE, "%", c));
            lines.push(row(id, k, MEMORY, "%", m));
            lines.push(row(id, k, OCCUPANCY, "%", occ));
            lines.push(row(id, k, REGISTERS, "register/thread", "32"));
            lines.push(row(id, k, DRAM, "%", "n/a"));
        }
        lines.push("==PROF== Disconnected from process 4242".to_owned());
        lines.join("\n")
    }

    #[test]
    fn launches_are_read_with_units_and_separators() {
        let launches = parse_ncu_csv(&log()).unwrap();
        assert_eq!(launches.len(), 3);
        assert_eq!(launches[0].name, "void gemm<float>(float*, int)");
        assert_eq!(launches[0].metrics[DURATION], 1500.0);
        assert_eq!(launches[1].metrics[DURATION], 500.0);
        assert_eq!(launches[2].metrics[DURATION], 500.0);
        assert_eq!(launches[0].grid, "(1024, 1, 1)");
        assert!(!launches[0].metrics.contains_key(DRAM), "n/a is no value");
    }

    #[test]
    fn kernels_are_summed_and_weighted_by_time() {
        let p = Profile::from_launches(&parse_ncu_csv(&log()).unwrap(), 1);
        assert_eq!(p.launches, 3);
        assert_eq!(p.total_ns, 2500.0);
        assert_eq!(p.kernels.len(), 2);
        let gemm = &p.kernels[0];
        assert_eq!((gemm.launches, gemm.time_ns, gemm.share), (2, 2000.0, 0.8));
        // (80.5 * 1500 + 60.5 * 500) / 2000
        assert!((gemm.compute_pct.unwrap() - 75.5).abs() < 1e-9);
        assert!((gemm.occupancy_pct.unwrap() - 35.0).abs() < 1e-9);
        assert_eq!(gemm.dram_pct, None);
        let brief = p.brief(1);
        assert!(
            brief.starts_with(
                "3 kernel launches (2 distinct kernels) in 1 call, 2.5 µs of GPU time."
            ),
            "{brief}"
        );
        assert!(brief.contains("- 80% `void gemm<float>(float*, int)` (2.0 µs, 2 launches): compute 76% of peak, memory 18% of peak"), "{brief}");
        assert!(
            brief.contains("32 registers/thread, grid (1024, 1, 1) block (256, 1, 1)"),
            "{brief}"
        );
        assert!(brief.ends_with("- 20% in 1 other kernel"), "{brief}");
    }

    #[test]
    fn a_log_without_kernels_is_empty_and_garbage_is_an_error() {
        assert!(parse_ncu_csv(
            "==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n"
        )
        .unwrap()
        .is_empty());
        assert!(matches!(parse_ncu_csv("Segmentation fault"), Err(ProfileError::Parse(_))));
    }

    #[test]
    fn ncu_is_asked_for_the_profiled_range_with_clocks_left_alone() {
        let args: Vec<String> = Profiler::new("/x/ncu".into())
            .ncu_args(Path::new("/s/ncu.csv"))
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        for part in [
            "--profile-from-start off",
            "--clock-control none",
            "--print-kernel-base mangled",
            "--target-processes all",
            "--csv",
            "--log-file /s/ncu.csv",
        ] {
            assert!(joined.contains(part), "{joined}");
        }
        assert!(joined.contains(&METRICS.join(",")));
    }

    #[test]
    fn a_missing_or_unusable_ncu_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ncu");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(locate_ncu(Some(&file)), Err(ProfileError::NcuNotExecutable(_))));
        let msg = ProfileError::NcuNotFound.to_string();
        assert!(msg.contains("CUDA toolkit") && !msg.contains("--"), "no flag in a library: {msg}");
    }

    #[test]
    fn a_status_that_is_a_link_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (secret, status) = (dir.path().join("secret"), dir.path().join("status.json"));
        std::fs::write(&secret, "{\"ok\": true}").unwrap();
        std::os::unix::fs::symlink(&secret, &status).unwrap();
        assert_eq!(read_claim(&status), None);
        std::fs::remove_file(&status).unwrap();
        std::fs::write(&status, "{\"ok\": false}").unwrap();
        assert_eq!(read_claim(&status).as_deref(), Some("{\"ok\": false}"));
        assert_eq!(read_claim(dir.path()), None, "a directory");
    }

    #[test]
    fn mangled_names_are_shown_demangled_where_cxxfilt_is_installed() {
        let log = format!("{HEADER}\n{}", row(0, "_Z7row_sumPfi", DURATION, "nsecond", "10"));
        let mut p = Profile::from_launches(&parse_ncu_csv(&log).unwrap(), 1);
        p.demangle();
        if std::process::Command::new("c++filt").arg("--version").output().is_err() {
            return;
        }
        assert_eq!(p.kernels[0].demangled.as_deref(), Some("row_sum(float*, int)"));
        assert!(p.brief(1).contains("`row_sum(float*, int)`"), "{}", p.brief(1));
    }

    #[test]
    fn long_names_are_cut() {
        assert_eq!(short_name("abcdef", 4), "abc…");
        assert_eq!(short_name("abc", 4), "abc");
        assert_eq!(duration_text(1_234_567.0), "1.23 ms");
        assert_eq!(duration_text(999.0), "999 ns");
    }
}
