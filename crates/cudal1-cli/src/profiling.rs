//! Profiling programs with Nsight Compute and filing them in the store: [`Profiling`] is the one
//! place that profiles and records; `cudal1 profile`, `optimize --profile` and `eval
//! --own-share` use it.

use crate::args::NcuArgs;
use anyhow::{bail, Context, Result};
use cudal1_eval::profile::{locate_ncu, Cancel, ProfileError, Profiler, Target};
use cudal1_eval::{compile, CompileCache, Device, EvalSettings, RunnerEnv};
use cudal1_python::Interpreter;
use cudal1_store::{NewProfile, ProfileKey, Store, StoredProgram, REFERENCE_PROGRAM};
use cudal1_task::{content_hash, Candidate, Task};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    build_settings: EvalSettings,
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
    /// How the compile pool builds a program's extensions when no evaluation has published them
    /// (its timeout, memory and sandbox): the evaluation's settings.
    pub builds: EvalSettings,
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
        let (builds, force, build_settings) =
            (CompileCache { root: cache.join("extensions") }, o.force, o.builds);
        let class = crate::against::class_of(&device, interp)?;
        let parent = cudal1_eval::scratch::default_parent();
        let scratch = std::fs::create_dir_all(&parent).and_then(|()| tempfile::Builder::new().prefix("cudal1-profile-").tempdir_in(&parent)).context("making a scratch directory for profiles\nhint: set CUDAL1_WORK_DIR to a writable directory with room")?;
        Ok(Profiling {
            profiler,
            env,
            device,
            class,
            store,
            scratch,
            builds,
            build_settings,
            force,
        })
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
        self.publish_builds(task, program)?;
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

    /// Runs the program under the profiling driver without ncu; the extensions it built itself
    /// (none when an evaluation published them).
    pub fn dry_run(&self, task: &Task, program: &Program<'_>) -> Result<Vec<String>> {
        self.publish_builds(task, program)?;
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

    /// Has the compile pool build the program's extensions, off the device, when the cache holds
    /// no published build of them (a program never evaluated here, or a verdict reused from a
    /// store made on another machine): the profiled run then loads them instead of building them
    /// in its warm-up, and `eval --own-share` finds the symbols it needs.
    pub fn publish_builds(&self, task: &Task, program: &Program<'_>) -> Result<()> {
        let stored;
        let candidate = match program {
            Program::Reference => return Ok(()),
            Program::File(c, _) | Program::Source(c) => *c,
            Program::Stored(p) => {
                stored = Candidate::from_source(format!("program #{}", p.id), p.code.clone());
                &stored
            }
        };
        if !compile::needs_compile(&candidate.source)
            || compile::published(&self.builds.dir_for(candidate)).is_some()
        {
            return Ok(());
        }
        let cancel = self.profiler.cancel.as_ref().map(|c| std::sync::Arc::clone(&c.0));
        let stop = move || cancel.as_ref().is_some_and(|c| c());
        let parent = cudal1_eval::scratch::default_parent();
        match compile::compile_until(
            self.env,
            task,
            candidate,
            &self.builds,
            &self.build_settings,
            &parent,
            &stop,
        ) {
            compile::CompileOutcome::Failed { judgement, .. } => {
                bail!("its extensions do not build: {}", judgement.reason)
            }
            _ => Ok(()),
        }
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
