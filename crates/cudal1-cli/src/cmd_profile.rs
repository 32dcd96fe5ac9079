//! `cudal1 profile TASK [CANDIDATE ...]`: where each program's GPU time goes, from Nsight
//! Compute (`cudal1_eval::profile`), stored per task, program and class of GPU so that `report`
//! shows it and `optimize --profile` puts it in prompts. [`Profiling`] is the one place that
//! profiles and records; both commands use it.

use crate::args::DeviceFlag;
use crate::exit::Status;
use crate::out;
use anyhow::{bail, Context, Result};
use clap::Args;
use cudal1_eval::profile::{locate_ncu, Cancel, Profile, ProfileError, Profiler, Target};
use cudal1_eval::{CompileCache, Device, RunnerEnv};
use cudal1_python::Interpreter;
use cudal1_store::{NewProfile, ProfileKey, Store, StoredProgram, REFERENCE_PROGRAM};
use cudal1_task::{content_hash, Candidate, Task};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How Nsight Compute runs: `cudal1 profile` and `optimize --profile` share these.
#[derive(Args, Debug, Clone)]
pub struct NcuArgs {
    /// Nsight Compute's `ncu` (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, then
    /// /opt/nvidia/nsight-compute/*/).
    #[arg(long, value_name = "PATH")]
    pub ncu: Option<PathBuf>,
    /// Calls of the model before profiling starts (extension builds, autotuning, caches).
    #[arg(long, default_value_t = 3)]
    pub profile_warmup: u32,
    /// Calls of the model profiled.
    #[arg(long, default_value_t = 1)]
    pub profile_calls: u32,
    /// Seconds one profiled run may take, ncu's replays included.
    #[arg(long, default_value_t = 300.0)]
    pub profile_timeout: f64,
}

#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// The task: a reference program (KernelBench format).
    pub task: PathBuf,
    /// Candidate programs of the task (their `ModelNew`); the task's own `Model` is profiled too.
    pub candidates: Vec<PathBuf>,
    /// Leave the reference out.
    #[arg(long)]
    pub no_reference: bool,
    /// `cuda` or `cuda:N` (default: the first GPU).
    #[arg(long, value_parser = crate::args::parse_device)]
    pub device: Option<DeviceFlag>,
    #[command(flatten)]
    pub ncu: NcuArgs,
    /// Kernels shown per program.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Load and call each program as a profile would, without Nsight Compute (any device, the
    /// CPU too): a quick check before GPU time is spent.
    #[arg(long)]
    pub dry_run: bool,
    /// Profile again even when the store has a profile of the same task, program and GPU class.
    #[arg(long)]
    pub force: bool,
    /// Run the programs unconfined (by default each confines itself before it runs: it writes
    /// only to its scratch and build directories).
    #[arg(long)]
    pub no_sandbox: bool,
    /// One JSON object per program on stdout.
    #[arg(long)]
    pub json: bool,
    /// The SQLite store.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
    /// The Python interpreter with PyTorch (default: CUDAL1_PYTHON, VIRTUAL_ENV, .venv, python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where the runner package and built extensions are cached (default: ~/.cache/cudal1).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

/// A program of a task to profile.
pub enum Program<'a> {
    /// The task's own `Model`.
    Reference,
    /// A candidate file.
    File(&'a Candidate, &'a Path),
    /// A program of the database (optimize), written to the scratch directory to run.
    Stored(&'a StoredProgram),
    /// A candidate known by its text (a row of another system's release), written likewise.
    Source(&'a Candidate),
}

/// Profiles programs on one device and files them in the store.
pub struct Profiling<'a> {
    profiler: Profiler,
    env: &'a RunnerEnv,
    device: Device,
    class: String,
    store: &'a Store,
    scratch: tempfile::TempDir,
    /// Where evaluation put each program's builds.
    builds: CompileCache,
    force: bool,
}

/// How [`Profiling`] runs programs besides ncu's own flags.
pub struct Options {
    pub force: bool,
    /// Without ncu ([`Profiling::dry_run`] only).
    pub dry_run: bool,
    /// Programs confine themselves (`cudal1 sandbox-exec`).
    pub sandbox: bool,
    /// Ends a profile under way (Ctrl-C).
    pub cancel: Option<Cancel>,
}

/// Kernels in a stored brief (what prompts show).
const BRIEF_TOP: usize = 5;

impl<'a> Profiling<'a> {
    /// Finds ncu (unless `dry_run`), and names the GPU class profiles are filed under.
    pub fn new(
        args: &NcuArgs,
        env: &'a RunnerEnv,
        interp: &Interpreter,
        device: Device,
        cache: &Path,
        store: &'a Store,
        o: Options,
    ) -> Result<Self> {
        let ncu = if o.dry_run { PathBuf::from("ncu") } else { locate_ncu(args.ncu.as_deref())? };
        let timeout = Duration::try_from_secs_f64(args.profile_timeout)
            .ok()
            .filter(|d| !d.is_zero())
            .context("`--profile-timeout` must be a positive number of seconds")?;
        if args.profile_calls == 0 {
            bail!("`--profile-calls` must be at least 1");
        }
        let sandbox = if o.sandbox {
            Some(
                std::env::current_exe()
                    .context("finding the cudal1 binary, which confines profiled programs")?,
            )
        } else {
            None
        };
        let profiler = Profiler {
            ncu,
            warmup: args.profile_warmup,
            calls: args.profile_calls,
            timeout,
            sandbox,
            cancel: o.cancel,
        };
        let (builds, force) = (CompileCache { root: cache.join("extensions") }, o.force);
        let class = crate::cmd_baselines::class_of(&device, interp)?;
        let parent = cudal1_eval::scratch::default_parent();
        let scratch = std::fs::create_dir_all(&parent).and_then(|()| tempfile::Builder::new().prefix("cudal1-profile-").tempdir_in(&parent)).context("making a scratch directory for profiles\nhint: set CUDAL1_WORK_DIR to a writable directory with room")?;
        Ok(Profiling { profiler, env, device, class, store, scratch, builds, force })
    }

    fn key(&self, task: &Task, program: &Program<'_>) -> ProfileKey {
        let program = match program {
            Program::Reference => REFERENCE_PROGRAM.to_owned(),
            Program::File(c, _) | Program::Source(c) => c.hash.clone(),
            Program::Stored(p) => content_hash(&p.code),
        };
        ProfileKey { task_hash: task.hash.clone(), program, gpu_class: self.class.clone() }
    }

    /// A directory of its own for one run of the program of `key`.
    fn run_dir(&self, key: &ProfileKey, what: &str) -> PathBuf {
        self.scratch.path().join(format!("{what}-{}", &key.program[..key.program.len().min(16)]))
    }

    /// The candidate file to run (none for the reference), and its build directory.
    fn target_file(
        &self,
        key: &ProfileKey,
        program: &Program<'_>,
    ) -> Result<(Option<PathBuf>, PathBuf), ProfileError> {
        let builds = self.builds.root.join(&key.program[..key.program.len().min(32)]);
        Ok(match program {
            Program::Reference => (None, self.scratch.path().join("reference-builds")),
            Program::File(_, path) => (Some(path.to_path_buf()), builds),
            Program::Stored(p) => {
                let path = self.scratch.path().join(format!("program-{}.py", key.program));
                std::fs::write(&path, &p.code)?;
                (Some(path), builds)
            }
            Program::Source(c) => {
                let path = self.scratch.path().join(format!("program-{}.py", key.program));
                std::fs::write(&path, &c.source)?;
                (Some(path), builds)
            }
        })
    }

    /// The program's profile, from the store (unless forced) or measured now and recorded; and
    /// whether it was reused.
    pub fn get(&self, task: &Task, program: &Program<'_>) -> Result<(NewProfile, bool)> {
        let key = self.key(task, program);
        if !self.force {
            // One of as many profiled calls as asked for now, with exact (mangled) kernel names.
            let same_calls = |p: &NewProfile| {
                p.profile["calls"].as_u64() == Some(u64::from(self.profiler.calls))
                    && p.profile["mangled"] == true
            };
            if let Some(found) = self.store.find_profile(&key)?.filter(|f| same_calls(&f.profile)) {
                return Ok((found.profile, true));
            }
        }
        let (candidate, builds) = self.target_file(&key, program)?;
        let dir = self.run_dir(&key, "run");
        let target = Target {
            task: &task.path,
            candidate: candidate.as_deref(),
            device: &self.device,
            seed: 1,
            extensions: Some(&builds),
        };
        // The build directory is the evaluation's: no build of this program runs meanwhile.
        let _builds_lock = cudal1_eval::compile::lock(&builds);
        let profile = self.profiler.profile(self.env, target, &dir)?;
        let label = match program {
            Program::Reference => REFERENCE_PROGRAM.to_owned(),
            Program::File(c, _) | Program::Source(c) => c.label.clone(),
            Program::Stored(p) => format!("program #{}", p.id),
        };
        let row = NewProfile {
            key,
            task_name: task.key(),
            label,
            brief: profile.brief(BRIEF_TOP),
            profile: serde_json::to_value(&profile)?,
        };
        self.store.record_profile(&row)?;
        Ok((row, false))
    }

    /// Runs the program under the profiling driver without ncu.
    pub fn dry_run(&self, task: &Task, program: &Program<'_>) -> Result<()> {
        let key = self.key(task, program);
        let (candidate, builds) = self.target_file(&key, program)?;
        let dir = self.run_dir(&key, "dry");
        let target = Target {
            task: &task.path,
            candidate: candidate.as_deref(),
            device: &self.device,
            seed: 1,
            extensions: Some(&builds),
        };
        Ok(self.profiler.dry_run(self.env, target, &dir)?)
    }
}

/// `optimize --profile`: prompts' briefs come from here.
impl cudal1_optimize::Profiles for Profiling<'_> {
    fn reference(&self, task: &Task) -> Result<String, String> {
        self.get(task, &Program::Reference).map(|(p, _)| p.brief).map_err(|e| format!("{e:#}"))
    }

    fn program(&self, task: &Task, program: &StoredProgram) -> Result<String, String> {
        self.get(task, &Program::Stored(program))
            .map(|(p, _)| p.brief)
            .map_err(|e| format!("{e:#}"))
    }
}

pub fn run(a: &ProfileArgs) -> Result<Status> {
    let task = Task::load(&a.task)?;
    let candidates: Vec<(Candidate, PathBuf)> = a
        .candidates
        .iter()
        .map(|p| Candidate::load(p).map(|c| (c, p.clone())))
        .collect::<Result<_, _>>()?;
    if a.no_reference && candidates.is_empty() {
        bail!("nothing to profile: `--no-reference` and no candidate\nhint: name candidate files after the task");
    }
    let (interp, env, cache) =
        crate::workspace::interpreter(a.python.as_deref(), a.cache_dir.as_deref())?;
    let device = match &a.device {
        Some(DeviceFlag::One(d)) => d.clone(),
        Some(DeviceFlag::All) | None if interp.probe.gpus.is_empty() && !a.dry_run => {
            bail!("profiling needs a CUDA device and PyTorch sees none\nhint: `--dry-run --device cpu` checks that the programs run under the profiling driver")
        }
        Some(DeviceFlag::All) | None if interp.probe.gpus.is_empty() => Device::Cpu,
        Some(DeviceFlag::All) | None => Device::Cuda(0),
    };
    if device == Device::Cpu && !a.dry_run {
        bail!("{}", ProfileError::NeedsGpu);
    }
    let store = Store::open(&a.db)?;
    let interrupt = crate::interrupt::install("the profile under way");
    let options = Options {
        force: a.force,
        dry_run: a.dry_run,
        sandbox: !a.no_sandbox,
        cancel: Some(crate::interrupt::profile_cancel(&interrupt)),
    };
    let profiling = Profiling::new(&a.ncu, &env, &interp, device, &cache, &store, options)?;
    let mut programs: Vec<(String, Program<'_>)> = Vec::new();
    if !a.no_reference {
        programs.push((REFERENCE_PROGRAM.to_owned(), Program::Reference));
    }
    programs.extend(candidates.iter().map(|(c, p)| (c.label.clone(), Program::File(c, p))));

    let mut failures = 0;
    for (label, program) in &programs {
        if interrupt.interrupted() {
            return Ok(Status::Interrupted);
        }
        if a.dry_run {
            let result = profiling.dry_run(&task, program);
            if result.is_err() {
                failures += 1;
            }
            if a.json {
                let mut v = serde_json::json!({"task": task.key(), "program": label, "dry_run": true, "ok": result.is_ok()});
                if let Err(e) = &result {
                    v["error"] = format!("{e:#}").into();
                }
                out::line(v)?;
            } else {
                match result {
                    Ok(()) => out::line(format!(
                        "{} {label}: runs under the profiling driver",
                        task.key()
                    ))?,
                    Err(e) => out::line(format!("{} {label}: {e:#}", task.key()))?,
                }
            }
            continue;
        }
        if !a.json {
            eprintln!("profiling {} {label} with Nsight Compute ...", task.key());
        }
        match profiling.get(&task, program) {
            Ok((row, reused)) => {
                let profile: Profile = serde_json::from_value(row.profile.clone()).context("a stored profile is not one this version reads\nhint: `--force` profiles again")?;
                if a.json {
                    out::line(serde_json::json!({
                        "task": row.task_name, "program": label, "program_hash": row.key.program, "gpu_class": row.key.gpu_class,
                        "reused": reused, "brief": row.brief, "profile": row.profile,
                    }))?;
                } else {
                    let from =
                        if reused { " (from the store; --force profiles again)" } else { "" };
                    out::line(format!("{} {label} on {}{from}:", task.key(), row.key.gpu_class))?;
                    for line in profile.brief(a.top).lines() {
                        out::line(format!("  {line}"))?;
                    }
                }
            }
            Err(e) => {
                failures += 1;
                if a.json {
                    out::line(
                        serde_json::json!({"task": task.key(), "program": label, "error": format!("{e:#}")}),
                    )?;
                } else {
                    out::line(format!("{} {label}: not profiled: {e:#}", task.key()))?;
                }
            }
        }
    }
    if interrupt.interrupted() {
        return Ok(Status::Interrupted);
    }
    Ok(Status::problems_if(failures > 0))
}
