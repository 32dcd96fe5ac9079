//! What a queued evaluation holds, made the same way by every producer: the task and the code
//! travel with the job (a worker on another machine has neither), and its key says what must be
//! measured once: the task, the exact code, the settings (mode included) and the GPU class.

use cudal1_eval::{EvalSettings, Mode};
use cudal1_search::normalized_hash;
use cudal1_store::{JobKey, NewJob, ProgramKey, Stage};
use cudal1_task::{content_hash, Task};

/// Where programs measured under these settings are filed in the program database: the
/// settings' hash (mode included, so that an untimed result never takes a timed one's place)
/// with the GPU class (an H100's speedup says little about another GPU's).
pub fn program_settings_hash(settings: &EvalSettings, gpu_class: &str) -> String {
    content_hash(&format!("{}|{gpu_class}", settings.key_hash()))[..32].to_owned()
}

/// The settings' hash without the mode: one engine runs every mode of a family.
pub fn settings_family(settings: &EvalSettings) -> String {
    EvalSettings { mode: Mode::Full, ..settings.clone() }.key_hash()
}

/// A GPU's class from its name, as workers and `serve` name it: `NVIDIA H100 80GB HBM3` is
/// `nvidia-h100-80gb-hbm3`. Programs are measured, and jobs matched to workers, per class.
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

/// One evaluation to queue.
pub struct JobSpec<'a> {
    pub task: &'a Task,
    /// The program, as extracted from a completion.
    pub code: &'a str,
    /// The settings, with the job's mode set.
    pub settings: &'a EvalSettings,
    pub gpu_class: &'a str,
    /// The exemplars shown in the prompt the code answered.
    pub parent_ids: Vec<i64>,
    pub priority: i32,
    pub max_attempts: u32,
    /// Queue programs that build extensions for a compile-stage worker first.
    pub compile_stage: bool,
}

impl JobSpec<'_> {
    pub fn key(&self) -> JobKey {
        JobKey {
            task_hash: self.task.hash.clone(),
            candidate_hash: content_hash(self.code),
            settings_hash: self.settings.key_hash(),
            gpu_class: self.gpu_class.to_owned(),
        }
    }

    pub fn to_job(&self) -> NewJob {
        let compiles = cudal1_eval::compile::needs_compile(self.code);
        NewJob {
            key: self.key(),
            settings_family: settings_family(self.settings),
            task_name: self.task.key(),
            task_source: self.task.source.clone(),
            candidate_source: self.code.to_owned(),
            program_key: ProgramKey {
                task_hash: self.task.hash.clone(),
                code_hash: normalized_hash(self.code),
                settings_hash: program_settings_hash(self.settings, self.gpu_class),
            },
            parent_ids: self.parent_ids.clone(),
            mode: self.settings.mode.as_str().to_owned(),
            settings: serde_json::to_value(self.settings).expect("settings are plain data"),
            priority: self.priority,
            stage: if self.compile_stage && compiles { Stage::Compile } else { Stage::Run },
            max_attempts: self.max_attempts.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudal1_eval::Device;

    #[test]
    fn gpu_classes_are_plain_lowercase_words() {
        assert_eq!(gpu_class_of("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3");
        assert_eq!(gpu_class_of("  NVIDIA  A100-SXM4-40GB "), "nvidia-a100-sxm4-40gb");
        assert_eq!(gpu_class_of("cpu"), "cpu");
    }

    #[test]
    fn modes_share_a_family_but_not_a_key_or_a_program_shelf() {
        let full = EvalSettings::for_device(Device::Cpu);
        let check = EvalSettings { mode: Mode::Correctness, ..full.clone() };
        assert_eq!(settings_family(&full), settings_family(&check));
        assert_ne!(full.key_hash(), check.key_hash());
        assert_ne!(program_settings_hash(&full, "cpu"), program_settings_hash(&check, "cpu"));
        assert_ne!(program_settings_hash(&full, "cpu"), program_settings_hash(&full, "nvidia-h100"));
    }
}
