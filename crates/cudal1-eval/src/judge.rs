//! Who judged a result: [`Judge`] names the evaluator's version and the class of GPU a verdict
//! was reached on. Every key that a verdict, a speedup or a reward is reused from carries both
//! (the store's evaluations, the job queue's idempotent keys, baselines, the program database of
//! `optimize`, `serve` and `train`), so that after an upgrade that closes a hole the old verdict
//! is judged again rather than served, and a store carried to another GPU does not hand out the
//! first GPU's speedups.
//!
//! ```
//! use cudal1_eval::judge::{gpu_class_of, Judge};
//!
//! let judge = Judge::new(gpu_class_of("NVIDIA H100 80GB HBM3"));
//! assert_eq!(judge.gpu_class, "nvidia-h100-80gb-hbm3");
//! assert!(judge.is_current());
//! ```

use crate::settings::{Device, EvalSettings};
use serde::{Deserialize, Serialize};

/// The version of the evaluator's own logic (Rust side: correctness, timing, statistics,
/// verdicts). Bump it in the same change as anything that can change a verdict, a speedup or a
/// reason; the runner's Python sources are hashed into [`judge_version`] by themselves.
pub const JUDGE_LOGIC: u32 = 2;

/// This build's judging version: [`JUDGE_LOGIC`] and a hash of the runner package embedded in
/// the binary (the one every runner process imports), e.g. `1.3fa9c2d01b7e`.
#[must_use]
pub fn judge_version() -> String {
    let runner = cudal1_python::RUNNER.version_hash();
    format!("{JUDGE_LOGIC}.{}", &runner[..12])
}

/// A GPU's class from its name as torch reports it: `NVIDIA H100 80GB HBM3` is
/// `nvidia-h100-80gb-hbm3` (lower case, runs of other characters made one `-`). Results are
/// filed, and jobs matched to workers, per class.
#[must_use]
pub fn gpu_class_of(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// The class of a set of devices: `cpu`, one GPU's class, or several classes joined by `+` (an
/// engine spread over unlike GPUs files its results under the mixture). `gpu_names` are the
/// visible GPUs' names by index; a GPU without a name is an error, since its results could not
/// be told from another GPU's.
pub fn devices_class(devices: &[Device], gpu_names: &[String]) -> Result<String, String> {
    let mut classes: Vec<String> = Vec::new();
    for device in devices {
        let class = match device {
            Device::Cpu => "cpu".to_owned(),
            Device::Cuda(i) => match gpu_names.get(*i as usize) {
                Some(name) if !gpu_class_of(name).is_empty() => gpu_class_of(name),
                _ => return Err(format!("PyTorch did not name GPU {i}, so its results cannot be filed under a class of GPU")),
            },
        };
        if !classes.contains(&class) {
            classes.push(class);
        }
    }
    classes.sort();
    Ok(if classes.is_empty() { "cpu".to_owned() } else { classes.join("+") })
}

/// Who judged: the judging version and the class of GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Judge {
    /// [`judge_version`] of the build that judged.
    pub version: String,
    /// [`gpu_class_of`] the device (`cpu` on the CPU).
    pub gpu_class: String,
}

impl Judge {
    /// This build judging on `gpu_class`.
    #[must_use]
    pub fn new(gpu_class: impl Into<String>) -> Judge {
        Judge { version: judge_version(), gpu_class: gpu_class.into() }
    }

    /// Whether this build made the judgement.
    #[must_use]
    pub fn is_current(&self) -> bool {
        self.version == judge_version()
    }

    /// Where results of `settings` judged by this judge are filed in a program database (and
    /// anything else keyed by one hash): the settings' key with the judge's version and class.
    #[must_use]
    pub fn settings_hash(&self, settings: &EvalSettings) -> String {
        let text = format!("{}|{}|{}", settings.key_hash(), self.gpu_class, self.version);
        cudal1_task::content_hash(&text)[..32].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_classes_are_plain_lowercase_words() {
        assert_eq!(gpu_class_of("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(gpu_class_of("  NVIDIA  A100-SXM4-40GB "), "nvidia-a100-sxm4-40gb");
        assert_eq!(gpu_class_of("cpu"), "cpu");
    }

    #[test]
    fn the_version_carries_the_logic_and_the_runner_sources() {
        let v = judge_version();
        assert!(v.starts_with(&format!("{JUDGE_LOGIC}.")), "{v}");
        assert!(
            cudal1_python::RUNNER.version_hash().starts_with(&v[v.find('.').unwrap() + 1..]),
            "{v}"
        );
    }

    #[test]
    fn devices_are_classed_by_their_gpus_names() {
        let names = [
            "NVIDIA H100 80GB HBM3".to_owned(),
            "NVIDIA H100 80GB HBM3".to_owned(),
            "NVIDIA A100-SXM4-40GB".to_owned(),
        ];
        assert_eq!(devices_class(&[Device::Cpu], &[]).unwrap(), "cpu");
        assert_eq!(
            devices_class(&[Device::Cuda(0), Device::Cuda(1)], &names).unwrap(),
            "nvidia-h100-80gb-hbm3"
        );
        assert_eq!(
            devices_class(&[Device::Cuda(2), Device::Cuda(0)], &names).unwrap(),
            "nvidia-a100-sxm4-40gb+nvidia-h100-80gb-hbm3"
        );
        assert!(devices_class(&[Device::Cuda(3)], &names).unwrap_err().contains("GPU 3"));
    }

    #[test]
    fn another_version_or_class_files_results_apart() {
        let settings = EvalSettings::default();
        let here = Judge::new("cpu");
        assert_eq!(here.settings_hash(&settings), Judge::new("cpu").settings_hash(&settings));
        assert_ne!(
            here.settings_hash(&settings),
            Judge::new("nvidia-h100-80gb-hbm3").settings_hash(&settings)
        );
        let older = Judge { version: "0.000000000000".into(), ..here.clone() };
        assert!(!older.is_current());
        assert_ne!(here.settings_hash(&settings), older.settings_hash(&settings));
    }
}
