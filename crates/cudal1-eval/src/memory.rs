//! Will a task fit? Before a reference is loaded, its inputs, outputs and parameters are sized on
//! meta tensors (the runner's `describe`, which allocates nothing), and an evaluation that cannot
//! fit the GPU, the host or a candidate's memory limit is refused with the numbers and what to
//! do ([`TooLarge`], [`Remedy`]: data, which front ends put in their own words), instead of being found out by the kernel's OOM killer half an hour in.

use crate::runner::{CallError, RunnerClient};
use crate::settings::{Device, EvalSettings};
use cudal1_protocol::{Describe, DescribeReply, HelloReply};
use cudal1_supervisor::human_bytes;
use std::path::Path;
use std::time::Duration;

/// What one evaluation's processes hold, from a task's description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// One call's inputs.
    pub inputs: u64,
    /// One call's outputs, when a call on meta tensors could tell.
    pub outputs: Option<u64>,
    /// The model's parameters and buffers.
    pub parameters: u64,
}

/// The interpreter, torch and its allocator's own share of each process.
const PROCESS_OVERHEAD: u64 = 512 << 20;

/// What a CUDA context and the allocator's rounding hold on the device per process, beyond the
/// tensors (what `nvidia-smi` counts for a process and `max_memory_allocated` does not).
pub(crate) const DEVICE_OVERHEAD: u64 = 768 << 20;

/// A job's memory need, in bytes: on its device (a GPU; 0 on the CPU) and on the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryNeed {
    pub device: u64,
    pub host: u64,
}

impl MemoryNeed {
    /// What one job running a reference and a candidate process needs on `device`: per process,
    /// the task's footprint (`None`: it could not be sized, and each process counts its overhead
    /// only) with the outputs it may keep on the device for the checks (`kept_outputs`: at most
    /// `share_bytes`, see [`Footprint::kept_on_device`]), or what the task's reference process
    /// was seen to hold before (`seen`: its allocator's peak on the device, its resident peak on
    /// the host), whichever is more. A candidate counts as large as its reference; on the host
    /// no more than its memory limit (`process_limit`), beyond which it is killed.
    pub fn evaluation(
        footprint: Option<&Footprint>,
        kept_outputs: u64,
        device: &Device,
        seen: Option<MemoryNeed>,
        process_limit: Option<u64>,
    ) -> MemoryNeed {
        let each = footprint.map_or(0, |f| {
            let kept = if device.is_cuda() { kept_outputs } else { 0 };
            f.per_process().saturating_add(kept)
        });
        let seen = seen.unwrap_or_default();
        let on_host =
            if device.is_cuda() { PROCESS_OVERHEAD } else { each.saturating_add(PROCESS_OVERHEAD) };
        let on_host = on_host.max(seen.host);
        let candidate = process_limit.map_or(on_host, |l| on_host.min(l));
        let on_device = each.max(seen.device).saturating_add(DEVICE_OVERHEAD);
        MemoryNeed {
            device: if device.is_cuda() { on_device.saturating_mul(2) } else { 0 },
            host: on_host.saturating_add(candidate),
        }
    }

    /// `7.5 GiB on the device, 1.0 GiB on the host`.
    pub fn describe(&self) -> String {
        if self.device == 0 {
            format!("{} on the host", human_bytes(self.host))
        } else {
            format!(
                "{} on the device, {} on the host",
                human_bytes(self.device),
                human_bytes(self.host)
            )
        }
    }
}

/// Where an evaluation must fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    /// Host memory available now (`MemAvailable`).
    pub host_available: Option<u64>,
    /// The GPU's memory, on a GPU.
    pub device_memory: Option<u64>,
    /// The memory limit of a candidate's processes (`--memory`), when it is enforced.
    pub process_limit: Option<u64>,
}

impl Footprint {
    /// Sizes from a description made on meta tensors; `None` when it has none.
    pub fn from_reply(d: &DescribeReply) -> Option<Footprint> {
        Some(Footprint {
            inputs: d.input_bytes?,
            outputs: d.output_bytes,
            parameters: d.parameter_bytes.unwrap_or(0),
        })
    }

    /// What one process holds at most: the parameters, one call's inputs, and its outputs twice
    /// (made, then captured or compared). Outputs of unknown size count as large as the inputs.
    pub fn per_process(&self) -> u64 {
        let outputs = self.outputs.unwrap_or(self.inputs);
        self.parameters.saturating_add(self.inputs).saturating_add(outputs.saturating_mul(2))
    }

    /// What one process may keep on a GPU beyond one call's working set: the outputs of the
    /// checks' seeds held for the comparison instead of files, up to `share_bytes` (the
    /// reference's expected outputs; the candidate's exported ones). Outputs of unknown size
    /// count as large as the inputs.
    pub fn kept_on_device(&self, seeds: usize, share_bytes: u64) -> u64 {
        let outputs = self.outputs.unwrap_or(self.inputs);
        outputs.saturating_mul(seeds as u64).min(share_bytes)
    }

    /// The bytes of output files one job writes for its checks (the reference's expected
    /// outputs and the candidate's, per seed) beyond what each process keeps on the device
    /// (`kept`): host memory when the scratch directory is memory-backed (`/dev/shm`).
    pub fn output_files(&self, seeds: usize, kept: u64) -> u64 {
        let outputs = self.outputs.unwrap_or(self.inputs);
        outputs.saturating_mul(seeds as u64).saturating_sub(kept).saturating_mul(2)
    }

    /// Host memory one evaluation on the CPU takes: a reference and a candidate process.
    pub fn cpu_evaluation(&self) -> u64 {
        self.per_process().saturating_add(PROCESS_OVERHEAD).saturating_mul(2)
    }

    fn parts(&self) -> String {
        format!(
            "inputs {}, outputs {}{} (kept twice), parameters {}",
            human_bytes(self.inputs),
            human_bytes(self.outputs.unwrap_or(self.inputs)),
            if self.outputs.is_none() { " (guessed from the inputs)" } else { "" },
            human_bytes(self.parameters)
        )
    }
}

/// The most host memory a candidate's processes get by default.
pub const DEFAULT_PROCESS_LIMIT: u64 = 32 << 30;

/// The default limit of a candidate's host memory on a host with `host_total` bytes (MemTotal):
/// [`DEFAULT_PROCESS_LIMIT`], or half the host where that is less, so that one candidate cannot
/// take a shared host's memory from the reference, cudal1 and other lanes. Half of MemTotal, not
/// of MemAvailable: a limit that moved with what else runs would make a verdict depend on it.
pub fn default_process_limit(host_total: Option<u64>) -> u64 {
    host_total.map_or(DEFAULT_PROCESS_LIMIT, |total| (total / 2).min(DEFAULT_PROCESS_LIMIT))
}

/// A limit given by hand that the host cannot give: over its available or its total memory. The
/// limit is kept as given; the caller warns (a candidate may then take memory the reference and
/// cudal1 need, and the machine's OOM killer decides instead of the limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitBeyondHost {
    /// The limit given, in bytes.
    pub limit: u64,
    /// What the host has, in bytes: its total memory (`of_total`) or its available memory.
    pub room: u64,
    pub of_total: bool,
}

/// Whether a limit of `limit` bytes is more than the host can give ([`LimitBeyondHost`]).
pub fn limit_beyond_host(
    limit: u64,
    host_available: Option<u64>,
    host_total: Option<u64>,
) -> Option<LimitBeyondHost> {
    match (host_total, host_available) {
        (Some(total), _) if limit > total => {
            Some(LimitBeyondHost { limit, room: total, of_total: true })
        }
        (_, Some(available)) if limit > available => {
            Some(LimitBeyondHost { limit, room: available, of_total: false })
        }
        _ => None,
    }
}

/// What can be done about an evaluation that would not fit, as data: the CLI and `serve` say it
/// in their own words (flags for people at a terminal, settings for API clients).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Remedy {
    /// Raise the memory limit of a candidate's processes to at least `to` bytes.
    RaiseMemoryLimit { to: u64 },
    /// Make a trial of the task on smaller inputs: its leading input dimensions scaled by
    /// `factor` (or less).
    ScaleTask { factor: f64 },
    /// Run on a machine with more memory.
    MoreMemory,
}

/// The scale to try first when a task does not fit.
pub const TRIAL_SCALE: f64 = 0.25;

/// Why an evaluation cannot run where it was asked to: the numbers, and through
/// [`TooLarge::remedies`] what to do. Its text names no flag or setting of any front end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooLarge {
    /// The reference and the candidate together need more than the GPU's memory.
    Gpu { need: u64, gpu: u64, each: u64, footprint: Footprint },
    /// The reference and the candidate together need more than the host has available.
    Host { need: u64, available: u64, each: u64, footprint: Footprint },
    /// A candidate's process needs more than its memory limit.
    OverLimit { need: u64, limit: u64, footprint: Footprint },
}

impl TooLarge {
    /// What to do, best first.
    pub fn remedies(&self) -> Vec<Remedy> {
        let mut remedies = Vec::new();
        if let TooLarge::OverLimit { need, .. } = self {
            remedies.push(Remedy::RaiseMemoryLimit { to: need.saturating_mul(5) / 4 });
        }
        remedies.extend([Remedy::ScaleTask { factor: TRIAL_SCALE }, Remedy::MoreMemory]);
        remedies
    }
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = |n: &u64| human_bytes(*n);
        match self {
            TooLarge::Gpu { need, gpu, each, footprint } => write!(
                f,
                "it needs about {} of GPU memory, the GPU has {}: the reference and the candidate each hold {} ({})",
                b(need),
                b(gpu),
                b(each),
                footprint.parts()
            ),
            TooLarge::Host { need, available, each, footprint } => write!(
                f,
                "it needs about {} of memory, the host has {} available: the reference and the candidate each hold {} ({}, and the interpreter)",
                b(need),
                b(available),
                b(each),
                footprint.parts()
            ),
            TooLarge::OverLimit { need, limit, footprint } => write!(
                f,
                "a candidate's process needs about {} ({}, and the interpreter), over its memory limit of {}",
                b(need),
                footprint.parts(),
                b(limit)
            ),
        }
    }
}

impl std::error::Error for TooLarge {}

/// Why an evaluation of this size cannot run on `device` within `room`; `None` when it fits. A
/// reference and a candidate process run at once, each holding the footprint.
pub fn refusal(f: &Footprint, device: &Device, room: &Room) -> Option<TooLarge> {
    let each = f.per_process();
    if let (true, Some(gpu)) = (device.is_cuda(), room.device_memory) {
        let need = each.saturating_mul(2);
        return (need > gpu).then_some(TooLarge::Gpu { need, gpu, each, footprint: *f });
    }
    let process = each.saturating_add(PROCESS_OVERHEAD);
    let need = process.saturating_mul(2);
    if let Some(available) = room.host_available.filter(|a| need > *a) {
        return Some(TooLarge::Host { need, available, each: process, footprint: *f });
    }
    if let Some(limit) = room.process_limit.filter(|l| process > *l) {
        return Some(TooLarge::OverLimit { need: process, limit, footprint: *f });
    }
    None
}

/// Asks a started (trusted) reference runner to size the task on meta tensors and refuses, as
/// [`CallError::Refused`], an evaluation that cannot fit. A task that cannot be sized without
/// running it, or a runner that cannot say, is let through: loading it will tell.
pub(crate) fn refuse_if_too_large(
    client: &mut RunnerClient,
    task_path: &Path,
    settings: &EvalSettings,
    hello: &HelloReply,
) -> Result<(), CallError> {
    let describe =
        Describe { reference: task_path.to_owned(), scale: settings.scale, meta_only: true };
    let reply = match client.call(&describe, settings.load_timeout.min(Duration::from_secs(120))) {
        Ok(r) => r,
        // A runner that died here would not load either: that error is the one to report.
        Err(e @ CallError::Worker(_)) => return Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "the task could not be sized; loading it without a memory check");
            return Ok(());
        }
    };
    let Some(footprint) = Footprint::from_reply(&reply) else { return Ok(()) };
    let room = Room {
        host_available: crate::scratch::available_memory(),
        device_memory: if settings.device.is_cuda() {
            hello.devices.first().map(|d| d.memory_bytes)
        } else {
            None
        },
        process_limit: settings.memory_bytes.filter(|_| settings.sandbox),
    };
    match refusal(&footprint, &settings.device, &room) {
        Some(too_large) => Err(CallError::Refused(too_large)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// KernelBench's level1/19_ReLU: a [4096, 393216] float32 input, an output as large.
    fn relu() -> Footprint {
        Footprint { inputs: 4096 * 393_216 * 4, outputs: Some(4096 * 393_216 * 4), parameters: 0 }
    }

    #[test]
    fn a_task_that_cannot_fit_the_host_is_refused_with_the_numbers_and_what_to_do() {
        let room = Room {
            host_available: Some(21 * GIB),
            device_memory: None,
            process_limit: Some(32 * GIB),
        };
        let refused = refusal(&relu(), &Device::Cpu, &room).unwrap();
        let why = refused.to_string();
        assert!(
            why.starts_with("it needs about 37 GiB of memory, the host has 21 GiB available"),
            "{why}"
        );
        assert!(why.contains("inputs 6.0 GiB, outputs 6.0 GiB (kept twice)"), "{why}");
        assert_eq!(refused.remedies(), [Remedy::ScaleTask { factor: 0.25 }, Remedy::MoreMemory]);
        // A quarter of it fits.
        let quarter = Footprint {
            inputs: relu().inputs / 4,
            outputs: relu().outputs.map(|o| o / 4),
            parameters: 0,
        };
        assert_eq!(refusal(&quarter, &Device::Cpu, &room), None);
        // Without a known amount of memory nothing is refused.
        assert_eq!(refusal(&relu(), &Device::Cpu, &Room::default()), None);
    }

    #[test]
    fn a_refusals_verdict_reason_says_the_numbers_and_names_no_flag() {
        let limited = Room {
            host_available: Some(500 * GIB),
            device_memory: None,
            process_limit: Some(8 * GIB),
        };
        let tight = Room { host_available: Some(21 * GIB), ..limited };
        let gpu = Room { device_memory: Some(24 * GIB), ..limited };
        for (device, room) in [(Device::Cpu, limited), (Device::Cpu, tight), (Device::Cuda(0), gpu)]
        {
            let refused = refusal(&relu(), &device, &room).unwrap();
            let judged = crate::failure::judge_call_error(
                &CallError::Refused(refused),
                "checking that it fits in memory",
                "",
            );
            assert!(judged.reason.contains("needs about"), "{}", judged.reason);
            assert!(
                !judged.reason.contains("--") && !judged.reason.contains("hint"),
                "{}",
                judged.reason
            );
        }
    }

    #[test]
    fn the_gpu_and_the_candidates_limit_are_checked_too() {
        let gpu = Room {
            host_available: Some(GIB),
            device_memory: Some(80 * GIB),
            process_limit: Some(32 * GIB),
        };
        assert_eq!(
            refusal(&relu(), &Device::Cuda(0), &gpu),
            None,
            "the host is not where the tensors live"
        );
        let small = Room { device_memory: Some(24 * GIB), ..gpu };
        assert!(refusal(&relu(), &Device::Cuda(0), &small)
            .unwrap()
            .to_string()
            .starts_with("it needs about 36 GiB of GPU memory, the GPU has 24 GiB"));
        let limited = Room {
            host_available: Some(500 * GIB),
            device_memory: None,
            process_limit: Some(8 * GIB),
        };
        let refused = refusal(&relu(), &Device::Cpu, &limited).unwrap();
        assert!(refused.to_string().contains("over its memory limit of 8.0 GiB"), "{refused}");
        let process = relu().per_process() + PROCESS_OVERHEAD;
        assert_eq!(refused.remedies()[0], Remedy::RaiseMemoryLimit { to: process * 5 / 4 });
        assert_eq!(human_bytes(process * 5 / 4), "23 GiB");
    }

    #[test]
    fn the_default_limit_is_capped_to_half_the_host_and_a_limit_beyond_the_host_is_warned_of() {
        assert_eq!(default_process_limit(Some(24 * GIB)), 12 * GIB);
        assert_eq!(default_process_limit(Some(512 * GIB)), 32 * GIB);
        assert_eq!(default_process_limit(None), 32 * GIB);
        assert_eq!(limit_beyond_host(8 * GIB, Some(20 * GIB), Some(24 * GIB)), None);
        let over_total = limit_beyond_host(32 * GIB, Some(20 * GIB), Some(24 * GIB));
        assert_eq!(
            over_total,
            Some(LimitBeyondHost { limit: 32 * GIB, room: 24 * GIB, of_total: true })
        );
        let over_available = limit_beyond_host(22 * GIB, Some(20 * GIB), Some(24 * GIB));
        assert_eq!(
            over_available,
            Some(LimitBeyondHost { limit: 22 * GIB, room: 20 * GIB, of_total: false })
        );
        assert_eq!(limit_beyond_host(64 * GIB, None, None), None);
    }

    #[test]
    fn outputs_kept_on_a_gpu_for_the_checks_count_in_each_process_up_to_the_share_budget() {
        // The 4 GiB task of bench/gpu_admission.sh: five seeds' outputs would be 20 GiB, of which
        // a process keeps at most the 8 GiB budget on the device; two such jobs do not fit an
        // 80 GB GPU together (without the kept outputs they seemed to: three were let in and the
        // copies of their outputs ran out of memory).
        let big = Footprint { inputs: 4 * GIB, outputs: Some(4 * GIB), parameters: 0 };
        let kept = big.kept_on_device(5, 8 * GIB);
        assert_eq!(kept, 8 * GIB);
        assert_eq!(big.kept_on_device(1, 8 * GIB), 4 * GIB);
        assert_eq!(big.kept_on_device(5, 0), 0);
        let job = MemoryNeed::evaluation(Some(&big), kept, &Device::Cuda(0), None, None);
        assert_eq!(job.device, (12 * GIB + 8 * GIB + DEVICE_OVERHEAD) * 2);
        assert!(job.device * 2 > 80_000_000_000, "two jobs must not fit an H100 together");
        // The three seeds of five that are not kept go to files, for both processes.
        assert_eq!(big.output_files(5, kept), 24 * GIB);
        // Nothing is kept on a device off a GPU.
        let cpu = MemoryNeed::evaluation(Some(&big), kept, &Device::Cpu, None, None);
        assert_eq!(cpu, MemoryNeed::evaluation(Some(&big), 0, &Device::Cpu, None, None));
    }

    #[test]
    fn a_jobs_need_counts_both_processes_and_is_capped_by_the_candidates_limit() {
        let on_gpu = MemoryNeed::evaluation(Some(&relu()), 0, &Device::Cuda(0), None, None);
        assert_eq!(on_gpu.device, (relu().per_process() + DEVICE_OVERHEAD) * 2);
        assert_eq!(on_gpu.host, 2 * PROCESS_OVERHEAD);
        let on_cpu = MemoryNeed::evaluation(Some(&relu()), 0, &Device::Cpu, None, None);
        assert_eq!((on_cpu.device, on_cpu.host), (0, relu().cpu_evaluation()));
        // A candidate is killed beyond its limit: it never holds more.
        let limited = MemoryNeed::evaluation(Some(&relu()), 0, &Device::Cpu, None, Some(GIB));
        assert_eq!(limited.host, relu().per_process() + PROCESS_OVERHEAD + GIB);
        // What the reference was seen to hold counts when it is more than the estimate.
        let seen = MemoryNeed::evaluation(
            None,
            0,
            &Device::Cpu,
            Some(MemoryNeed { device: 0, host: 3 * GIB }),
            None,
        );
        assert_eq!(seen.host, 6 * GIB);
        let on_gpu = MemoryNeed::evaluation(
            Some(&relu()),
            0,
            &Device::Cuda(0),
            Some(MemoryNeed { device: 20 * GIB, host: 0 }),
            None,
        );
        assert_eq!(
            on_gpu.device,
            (20 * GIB + DEVICE_OVERHEAD) * 2,
            "the allocator's peak, beyond the footprint"
        );
        assert_eq!(
            MemoryNeed::evaluation(None, 0, &Device::Cpu, None, None).host,
            2 * PROCESS_OVERHEAD
        );
    }

    #[test]
    fn unknown_outputs_count_as_large_as_the_inputs() {
        let f = Footprint { inputs: GIB, outputs: None, parameters: GIB };
        assert_eq!(f.per_process(), 4 * GIB);
        assert!(f.parts().contains("guessed from the inputs"));
    }
}
