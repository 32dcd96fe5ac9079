//! How an evaluation is run: device, tolerances, seeds, budgets and time limits.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Where PyTorch code runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Device {
    Cpu,
    Cuda(u32),
}

impl Device {
    /// `cpu`, `cuda` (= `cuda:0`) or `cuda:N`.
    pub fn parse(text: &str) -> Result<Device, String> {
        match text {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => text
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("unknown device `{text}`: use `cpu`, `cuda` or `cuda:N`")),
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Tolerances: per output dtype by default, or fixed by the user.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Tolerance {
    /// fp32 (and wider) 1e-4, fp16/bf16 1e-2: each output's dtype picks its row.
    PerDtype,
    /// KernelBench v0: 1e-2 for every dtype.
    KernelBenchV0,
    /// `--atol/--rtol`.
    Fixed { atol: f64, rtol: f64 },
}

impl Tolerance {
    /// (atol, rtol) for an output of this dtype (as torch names it, e.g. `float16`). Integer and
    /// boolean outputs must match exactly, whatever the tolerance: a rounding tolerance would
    /// let an off-by-one count pass.
    pub fn for_dtype(&self, dtype: &str) -> (f64, f64) {
        if exact_dtype(dtype) {
            return (0.0, 0.0);
        }
        match self {
            Tolerance::Fixed { atol, rtol } => (*atol, *rtol),
            Tolerance::KernelBenchV0 => (1e-2, 1e-2),
            Tolerance::PerDtype => match dtype {
                "float16" | "bfloat16" | "half" => (1e-2, 1e-2),
                "float8_e4m3fn" | "float8_e5m2" => (1e-1, 1e-1),
                _ => (1e-4, 1e-4),
            },
        }
    }
}

/// Integer and boolean dtypes, as torch names them.
pub fn exact_dtype(dtype: &str) -> bool {
    dtype == "bool" || dtype.starts_with("int") || dtype.starts_with("uint")
}

/// What a GPU call's time covers (docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingWindow {
    /// The GPU's work: the host's launch is hidden behind a queued spin (up to a bound set by the
    /// reference), and the window runs until the device is idle whenever work outlives the call.
    Gpu,
    /// From an idle GPU to the end of the device-wide synchronisation: the host's launch path
    /// counts, and so does its noise.
    Wall,
}

impl TimingWindow {
    pub fn parse(text: &str) -> Result<TimingWindow, String> {
        match text {
            "gpu" => Ok(TimingWindow::Gpu),
            "wall" => Ok(TimingWindow::Wall),
            _ => Err(format!("unknown timing window `{text}`: use `gpu` or `wall`")),
        }
    }
}

/// What an evaluation does: the whole protocol, or only the correctness checks (training's first
/// two stages keep samples that are executable and correct, and need no timing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Correctness on the seeds, then timing against the reference: a verdict and a speedup.
    #[default]
    Full,
    /// Compile, run and compare on the seeds; no timing and no speedup. Evaluations in this mode
    /// share a device, where full ones hold it alone.
    Correctness,
}

impl Mode {
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text {
            "full" => Ok(Mode::Full),
            "correctness" => Ok(Mode::Correctness),
            _ => Err(format!("unknown mode `{text}`: use `full` or `correctness`")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Correctness => "correctness",
        }
    }

    pub fn is_full(&self) -> bool {
        *self == Mode::Full
    }

    /// Whether an evaluation in this mode needs its device to itself.
    pub fn times(self) -> bool {
        self == Mode::Full
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that decides an evaluation's result; hashed into the store key so that results made
/// under other settings are never reused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalSettings {
    pub device: Device,
    /// Left out of the key in full mode, so that results stored before modes existed still match.
    #[serde(default, skip_serializing_if = "Mode::is_full")]
    pub mode: Mode,
    pub tolerance: Tolerance,
    /// Seeds of `get_inputs()` checked before timing.
    pub correctness_seeds: usize,
    /// Wall time spent in timed blocks, both sides together.
    #[serde(with = "millis")]
    pub timing_budget: Duration,
    #[serde(with = "millis")]
    pub warmup: Duration,
    /// Aim for blocks of about this long, so the order of blocks can be randomised often
    /// ([`EvalSettings::for_device`] picks it).
    #[serde(with = "millis")]
    pub block_target: Duration,
    pub min_blocks: usize,
    /// Timed calls whose outputs are checked, per measurement, on average: each candidate block
    /// reveals one of its calls with the chance that gives this many (at least one), drawn after
    /// the block has returned.
    pub timed_checks: usize,
    pub flush_l2: bool,
    /// Only used on a GPU.
    pub window: TimingWindow,
    pub bootstrap_resamples: usize,
    pub confidence: f64,
    /// Loading a program (imports, construction, moving weights), and apart its first call, where
    /// `torch.compile` compiles; compiling extensions is limited separately.
    #[serde(with = "millis")]
    pub load_timeout: Duration,
    #[serde(with = "millis")]
    pub compile_timeout: Duration,
    /// One call of the model, before timing starts; timed blocks get a limit scaled from it.
    #[serde(with = "millis")]
    pub call_timeout: Duration,
    pub sandbox: bool,
    /// Speedups above this are measured a second time, and the lower result stands.
    pub remeasure_above: f64,
    /// Host memory limit of a candidate process (by default 32 GiB, or half the host's memory
    /// where that is less: [`crate::memory::default_process_limit`]).
    pub memory_bytes: Option<u64>,
    /// A trial on smaller inputs (`--scale`): the reference's module-level integers that give an
    /// input's leading dimension are multiplied by this. Left out of the key when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// Peak memory bandwidth in GB/s for the bandwidth floor; by default the GPU's, from its
    /// name (see `bandwidth`), and none on the CPU. Left out of the key when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gbps: Option<f64>,
    /// On a GPU, outputs of up to this many bytes per side and check are handed to the reference
    /// on the device (CUDA IPC) instead of through files; 0: always files. How outputs travel
    /// changes no result, so it is not part of the key.
    #[serde(skip, default = "default_device_output_bytes")]
    pub device_output_bytes: u64,
}

/// 8 GiB: ten seeds of KernelBench's largest level-1 outputs (~800 MB) on an 80 GB GPU.
pub const DEFAULT_DEVICE_OUTPUT_BYTES: u64 = 8 << 30;

fn default_device_output_bytes() -> u64 {
    DEFAULT_DEVICE_OUTPUT_BYTES
}

impl Default for EvalSettings {
    fn default() -> Self {
        EvalSettings {
            device: Device::Cpu,
            mode: Mode::Full,
            tolerance: Tolerance::PerDtype,
            correctness_seeds: 5,
            timing_budget: Duration::from_secs(4),
            warmup: Duration::from_millis(300),
            block_target: CPU_BLOCK,
            min_blocks: 5,
            timed_checks: 6,
            flush_l2: true,
            window: TimingWindow::Gpu,
            bootstrap_resamples: 2000,
            confidence: 0.95,
            load_timeout: Duration::from_secs(300),
            compile_timeout: Duration::from_secs(900),
            call_timeout: Duration::from_secs(20),
            sandbox: true,
            remeasure_above: 3.0,
            memory_bytes: Some(
                crate::memory::default_process_limit(crate::scratch::total_memory()),
            ),
            scale: None,
            bandwidth_gbps: None,
            device_output_bytes: DEFAULT_DEVICE_OUTPUT_BYTES,
        }
    }
}

/// Blocks on a GPU. Short blocks keep the two sides close in time: the host's slow spells last
/// about a block of 100 ms, and with 10 ms blocks the spread between pairs fell from 9.8% to 4.3%
/// (a ~30 us task, docs/bench/2026-11-22-gpu-session4).
const GPU_BLOCK: Duration = Duration::from_millis(10);
/// Blocks on the CPU, where cudal1's outside clock divides each block's untimed time by its calls:
/// on a busy 2-core machine a 10 ms block's scheduling delays, spread over its ~10 calls, looked
/// like work hidden from the timer.
const CPU_BLOCK: Duration = Duration::from_millis(100);

impl EvalSettings {
    /// The bytes of outputs a runner may keep on the device for one check instead of saving them
    /// ([`cudal1_protocol::Outputs::share_bytes`]): none off a GPU.
    pub fn share_bytes(&self) -> u64 {
        if self.device.is_cuda() {
            self.device_output_bytes
        } else {
            0
        }
    }

    /// The defaults for `device`.
    pub fn for_device(device: Device) -> EvalSettings {
        let block_target = if device.is_cuda() { GPU_BLOCK } else { CPU_BLOCK };
        EvalSettings { device, block_target, ..EvalSettings::default() }
    }

    /// The settings that change a result (not the device index or time limits), as a hash.
    pub fn key_hash(&self) -> String {
        let mut v = serde_json::to_value(self).expect("settings are plain data");
        if let serde_json::Value::Object(m) = &mut v {
            for k in ["load_timeout", "compile_timeout", "call_timeout", "memory_bytes"] {
                m.remove(k);
            }
            m.insert("device".into(), if self.device.is_cuda() { "cuda" } else { "cpu" }.into());
        }
        cudal1_task::content_hash(&v.to_string())
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices() {
        assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
        assert_eq!(Device::parse("cuda").unwrap(), Device::Cuda(0));
        assert_eq!(Device::parse("cuda:3").unwrap(), Device::Cuda(3));
        assert!(Device::parse("gpu").unwrap_err().contains("cuda:N"));
    }

    #[test]
    fn tolerance_follows_dtype() {
        let t = Tolerance::PerDtype;
        assert_eq!(t.for_dtype("float32"), (1e-4, 1e-4));
        assert_eq!(t.for_dtype("bfloat16"), (1e-2, 1e-2));
        assert_eq!(Tolerance::KernelBenchV0.for_dtype("float32"), (1e-2, 1e-2));
        assert_eq!(Tolerance::Fixed { atol: 1.0, rtol: 0.0 }.for_dtype("float16"), (1.0, 0.0));
    }

    #[test]
    fn gpus_get_short_blocks_and_the_cpu_long_ones() {
        assert_eq!(EvalSettings::for_device(Device::Cuda(1)).block_target, GPU_BLOCK);
        assert_eq!(EvalSettings::for_device(Device::Cpu).block_target, CPU_BLOCK);
        assert_eq!(EvalSettings::default().block_target, CPU_BLOCK);
        assert_ne!(
            EvalSettings::for_device(Device::Cuda(0)).key_hash(),
            EvalSettings::default().key_hash()
        );
    }

    #[test]
    fn correctness_mode_has_its_own_key_and_full_mode_keeps_the_old_one() {
        let full = EvalSettings::default();
        let json = serde_json::to_value(&full).unwrap();
        assert!(json.get("mode").is_none(), "full mode is left out of the key: {json}");
        let correctness = EvalSettings { mode: Mode::Correctness, ..full.clone() };
        assert_ne!(full.key_hash(), correctness.key_hash());
        assert_eq!(Mode::parse("correctness"), Ok(Mode::Correctness));
        assert!(Mode::parse("fast").unwrap_err().contains("`full` or `correctness`"));
    }

    #[test]
    fn key_ignores_time_limits_but_not_tolerance() {
        let a = EvalSettings::default();
        let mut b = a.clone();
        b.call_timeout = Duration::from_secs(99);
        assert_eq!(a.key_hash(), b.key_hash());
        b.tolerance = Tolerance::KernelBenchV0;
        assert_ne!(a.key_hash(), b.key_hash());
    }
}
