//! Turning arguments into the evaluator's inputs: the interpreter, the runner, devices, settings.

use crate::args::CommonEval;
use anyhow::{bail, Context, Result};
use cudal1_eval::{Device, EvalSettings, RunnerEnv, TimingWindow, Tolerance};
use cudal1_python::{find_interpreter, Interpreter, PythonRequest, RUNNER};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
}

pub fn cache_dir(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_owned();
    }
    if let Some(p) = std::env::var_os("CUDAL1_CACHE_DIR") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cudal1")
}

/// The interpreter, probed, and the runner package installed in the cache.
pub fn runner_env(python: Option<&Path>, cache: &Path) -> Result<(RunnerEnv, Interpreter)> {
    let interp = find_interpreter(&PythonRequest { flag: python.map(Path::to_owned), start_dir: None })?;
    tracing::info!(python = %interp.path.display(), source = %interp.source, torch = ?interp.probe.torch, "using Python");
    let package_root = RUNNER.install(cache).with_context(|| format!("installing the runner package under `{}`", cache.display()))?;
    let mut python_dirs = vec![interp.probe.prefix.clone(), interp.probe.base_prefix.clone()];
    if let Ok(real) = std::fs::canonicalize(&interp.path) {
        if let Some(dir) = real.parent().and_then(Path::parent) {
            python_dirs.push(dir.to_owned());
        }
    }
    let env = RunnerEnv {
        python: interp.path.clone(),
        python_dirs,
        package_root,
        cuda_arch: interp.probe.gpus.first().cloned(),
    };
    Ok((env, interp))
}

/// `--device`: one device, or every visible GPU. The CPU cores that will time on them are kept
/// free of cudal1's other work from here on (`cudal1_eval::cores`; `CUDAL1_TIMING_CORES` names
/// them by hand).
pub fn devices(flag: Option<&str>, interp: &Interpreter) -> Result<Vec<Device>> {
    let devices = chosen_devices(flag, interp)?;
    cudal1_eval::cores::reserve(&devices).map_err(anyhow::Error::msg)?;
    Ok(devices)
}

fn chosen_devices(flag: Option<&str>, interp: &Interpreter) -> Result<Vec<Device>> {
    let gpus = interp.probe.gpus.len() as u32;
    match flag {
        None | Some("all") if gpus > 0 => Ok((0..gpus).map(Device::Cuda).collect()),
        None => Ok(vec![Device::Cpu]),
        Some("all") => bail!("`--device all` asks for every GPU, but PyTorch at `{}` sees none", interp.path.display()),
        Some(text) => {
            let d = Device::parse(text).map_err(anyhow::Error::msg)?;
            if let Device::Cuda(n) = d {
                if n >= gpus {
                    bail!("`--device {text}`: PyTorch at `{}` sees {gpus} GPU(s)\nhint: use `--device cpu`, or check `nvidia-smi` and CUDA_VISIBLE_DEVICES", interp.path.display());
                }
            }
            Ok(vec![d])
        }
    }
}

pub fn settings(common: &CommonEval, device: Device) -> Result<EvalSettings> {
    if common.seeds == 0 {
        bail!("`--seeds` must be at least 1");
    }
    if !(common.budget > 0.0 && common.call_timeout > 0.0) {
        bail!("`--budget` and `--call-timeout` must be positive numbers of seconds");
    }
    let tolerance = match (common.atol, common.rtol, common.kernelbench_v0) {
        (Some(atol), Some(rtol), _) => Tolerance::Fixed { atol, rtol },
        (_, _, true) => Tolerance::KernelBenchV0,
        _ => Tolerance::PerDtype,
    };
    Ok(EvalSettings {
        tolerance,
        correctness_seeds: common.seeds,
        timing_budget: Duration::from_secs_f64(common.budget),
        call_timeout: Duration::from_secs_f64(common.call_timeout),
        sandbox: !common.no_sandbox,
        window: TimingWindow::parse(&common.window).map_err(anyhow::Error::msg)?,
        ..EvalSettings::for_device(device)
    })
}

/// A private directory for this invocation's scratch files, removed at the end. Runners hand
/// outputs to each other through files here, several GB per candidate on tasks with ~1 GB
/// outputs, so a memory-backed `/dev/shm` with room is preferred: on a disk-backed temp directory
/// those files took most of an evaluation's time. `CUDAL1_WORK_DIR` chooses the place.
pub fn work_root() -> Result<tempfile::TempDir> {
    let base = std::env::var_os("CUDAL1_WORK_DIR").map(PathBuf::from).or_else(|| shm_with_room(Path::new("/dev/shm")));
    let builder = tempfile::Builder::new().prefix("cudal1-").to_owned();
    match base {
        Some(dir) => builder.tempdir_in(&dir).with_context(|| format!("creating a scratch directory in {}", dir.display())),
        None => builder.tempdir().context("creating a scratch directory"),
    }
}

/// Free space a memory-backed scratch directory must have to be chosen.
const SCRATCH_ROOM: u64 = 16 << 30;

fn shm_with_room(dir: &Path) -> Option<PathBuf> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a valid C string and a zeroed out-parameter of the right type.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    let writable = unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0;
    (writable && free >= SCRATCH_ROOM).then(|| dir.to_owned())
}

/// Ctrl-C once sets the returned flag, so that the caller drains (`under_way`, e.g. "the
/// evaluations under way", finish and are saved); twice stops at once.
pub fn install_interrupt(under_way: &'static str) -> Arc<AtomicBool> {
    let cancel = Arc::new(AtomicBool::new(false));
    let presses = Arc::new(AtomicUsize::new(0));
    let flag = cancel.clone();
    let _ = ctrlc::set_handler(move || {
        if presses.fetch_add(1, Ordering::SeqCst) == 0 {
            flag.store(true, Ordering::SeqCst);
            eprintln!("\ninterrupted: finishing {under_way} (they are saved); press Ctrl-C again to stop now");
        } else {
            std::process::exit(130);
        }
    });
    cancel
}
