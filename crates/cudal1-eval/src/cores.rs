//! CPU cores for timing. On a GPU the clock stops after a device-wide synchronisation and an
//! event record, and how long those take depends on the core the calling thread runs on: on an
//! H100 virtual machine, two processes timing the same ~30 us call on different cores disagreed
//! by up to 15%, on one core by about 2% (docs/bench/2026-11-22-gpu-session4). So each GPU gets a
//! core of its own, both sides of a pair run their timed blocks on it (the `cpu` field of `time`),
//! and the rest of cudal1's work (compiling, starting the next candidates) is kept off it.

use crate::settings::Device;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::sync::OnceLock;

/// The cores this process may run on now.
pub fn current_cores() -> Vec<usize> {
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else { return Vec::new() };
    (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect()
}

/// The cores as they were before [`reserve`] narrowed them: the plan is made from these.
fn allowed() -> &'static [usize] {
    static ALLOWED: OnceLock<Vec<usize>> = OnceLock::new();
    ALLOWED.get_or_init(current_cores)
}

/// The environment variable that names the timing cores by hand: `8,9` gives cuda:0 core 8 and
/// cuda:1 core 9.
pub const CORES_VAR: &str = "CUDAL1_TIMING_CORES";

/// The cores named in [`CORES_VAR`], read once; None when it is unset or empty.
fn by_hand() -> &'static Result<Option<Vec<usize>>, String> {
    static BY_HAND: OnceLock<Result<Option<Vec<usize>>, String>> = OnceLock::new();
    BY_HAND.get_or_init(|| match std::env::var(CORES_VAR) {
        Ok(text) if !text.trim().is_empty() => parse_cores(&text, allowed()).map(Some),
        _ => Ok(None),
    })
}

fn parse_cores(text: &str, allowed: &[usize]) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in text.split(',').map(str::trim) {
        let core: usize = part.parse().map_err(|_| {
            format!("{CORES_VAR}=`{text}`: `{part}` is not a core number; give cores like `8,9`")
        })?;
        if !allowed.contains(&core) {
            return Err(format!("{CORES_VAR}=`{text}`: core {core} is not one this process may run on ({allowed:?})"));
        }
        if cores.contains(&core) {
            return Err(format!(
                "{CORES_VAR}=`{text}`: core {core} is named twice; each GPU needs its own"
            ));
        }
        cores.push(core);
    }
    Ok(cores)
}

/// The core timed blocks on `device` run on, or None: none on the CPU (a CPU model uses many
/// threads), none where no core would be left for the rest, and none for a GPU that
/// [`CORES_VAR`] leaves out.
pub fn timing_core(device: &Device) -> Option<usize> {
    match (by_hand(), device) {
        (Ok(Some(cores)), Device::Cuda(n)) => cores.get(*n as usize).copied(),
        _ => core_for(allowed(), visible(), device),
    }
}

/// The machine's number of this process's GPU `n`: the `n`-th number `CUDA_VISIBLE_DEVICES`
/// lists, so that processes shown different GPUs (`CUDA_VISIBLE_DEVICES=1` and `=2`, each
/// timing on its cuda:0) take different cores; `n` where the variable is unset or names the GPU
/// otherwise (a UUID).
fn machine_gpu(visible: &[String], n: u32) -> usize {
    visible.get(n as usize).and_then(|id| id.parse().ok()).unwrap_or(n as usize)
}

fn visible() -> &'static [String] {
    static VISIBLE: OnceLock<Vec<String>> = OnceLock::new();
    VISIBLE.get_or_init(|| {
        crate::runner::visible_gpu_ids(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())
    })
}

/// The machine's GPU `N` takes the N-th core after the middle one, so each GPU has its own. Not
/// the first or the last: on the H100 machine core 0 took the kernel's cross-core interrupts, and
/// pairs pinned to core 0 or core 15 spread 25-27% where cores 3 and 8 spread 6-8%.
fn core_for(allowed: &[usize], visible: &[String], device: &Device) -> Option<usize> {
    let Device::Cuda(n) = device else { return None };
    let n = machine_gpu(visible, *n);
    (allowed.len() > n + 1).then(|| allowed[(allowed.len() / 2 + n) % allowed.len()])
}

/// Keeps this process's threads, and every process it starts from now on, off the timing cores
/// of `devices`. A runner pins only its main thread for a timed block, so its other threads, and
/// everything else cudal1 runs meanwhile, stay on the remaining cores. Fails only on a malformed
/// [`CORES_VAR`].
pub fn reserve(devices: &[Device]) -> Result<(), String> {
    by_hand().as_ref().map_err(Clone::clone)?;
    let taken: Vec<usize> = devices.iter().filter_map(timing_core).collect();
    let rest: Vec<usize> = allowed().iter().copied().filter(|c| !taken.contains(c)).collect();
    if taken.is_empty() || rest.is_empty() {
        return Ok(());
    }
    let mut set = CpuSet::new();
    for &c in &rest {
        if set.set(c).is_err() {
            return Ok(());
        }
    }
    // The mask belongs to each thread: set it on every thread there is; new ones inherit it.
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Ok(()) };
    for tid in
        tasks.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
    {
        if let Err(e) = sched_setaffinity(Pid::from_raw(tid), &set) {
            tracing::warn!(tid, error = %e, "could not keep a thread off the timing cores");
        }
    }
    tracing::info!(?taken, "timing on CPU cores of their own; other work on the rest");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gpu_gets_its_own_core_from_the_middle_on_and_the_cpu_none() {
        let allowed = [0, 1, 2, 5];
        assert_eq!(core_for(&allowed, &[], &Device::Cuda(0)), Some(2));
        assert_eq!(core_for(&allowed, &[], &Device::Cuda(1)), Some(5));
        assert_eq!(core_for(&allowed, &[], &Device::Cuda(2)), Some(0));
        // At least one core stays for everything else.
        assert_eq!(core_for(&allowed, &[], &Device::Cuda(3)), None);
        assert_eq!(core_for(&[4], &[], &Device::Cuda(0)), None);
        assert_eq!(core_for(&allowed, &[], &Device::Cpu), None);
    }

    #[test]
    fn processes_shown_different_gpus_time_on_different_cores() {
        let allowed: Vec<usize> = (0..16).collect();
        let one = |visible: &str| {
            let ids = crate::runner::visible_gpu_ids(Some(visible));
            core_for(&allowed, &ids, &Device::Cuda(0))
        };
        // Three processes, each timing on its cuda:0 (the machine's GPUs 0, 1 and 2).
        assert_eq!((one("0"), one("1"), one("2")), (Some(8), Some(9), Some(10)));
        // The second GPU a process sees is the machine's GPU 3; a UUID keeps the process's number.
        let ids = crate::runner::visible_gpu_ids(Some("2,3"));
        assert_eq!(core_for(&allowed, &ids, &Device::Cuda(1)), Some(11));
        assert_eq!(one("GPU-8f0c"), Some(8));
    }

    #[test]
    fn cores_named_by_hand_must_be_usable_and_distinct() {
        let allowed = [0, 1, 2, 3];
        assert_eq!(parse_cores("2, 3", &allowed), Ok(vec![2, 3]));
        assert!(parse_cores("2,x", &allowed).unwrap_err().contains("`x` is not a core number"));
        assert!(parse_cores("9", &allowed)
            .unwrap_err()
            .contains("core 9 is not one this process may run on"));
        assert!(parse_cores("1,1", &allowed).unwrap_err().contains("named twice"));
    }

    #[test]
    fn this_process_may_run_somewhere() {
        let cores = current_cores();
        assert!(!cores.is_empty());
        assert_eq!(
            cores.len(),
            std::thread::available_parallelism().map_or(0, |n| n.get()).min(cores.len())
        );
    }
}
