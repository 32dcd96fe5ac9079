//! What a queued evaluation holds, made the same way by every producer: the task and the code
//! travel with the job (a worker on another machine has neither), and its key says what must be
//! measured once: the task, the exact code, the settings (mode included), the GPU class and the
//! judging version (a result of an older build is never handed out as a new one).

use cudal1_eval::{EvalSettings, Judge, Mode};
use cudal1_search::normalized_hash;
use cudal1_store::{JobKey, NewJob, ProgramKey, Stage};
use cudal1_task::{content_hash, Task};

/// The settings' hash without the mode: one engine runs every mode of a family.
pub fn settings_family(settings: &EvalSettings) -> String {
    EvalSettings { mode: Mode::Full, ..settings.clone() }.key_hash()
}

/// One evaluation to queue.
pub struct JobSpec<'a> {
    pub task: &'a Task,
    /// The program, as extracted from a completion.
    pub code: &'a str,
    /// The settings, with the job's mode set.
    pub settings: &'a EvalSettings,
    /// Who must judge it: this build's judging version, on GPUs of this class.
    pub judge: &'a Judge,
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
            gpu_class: self.judge.gpu_class.clone(),
            judge: self.judge.version.clone(),
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
                settings_hash: self.judge.settings_hash(self.settings),
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
    fn modes_share_a_family_but_not_a_key_or_a_program_shelf() {
        let full = EvalSettings::for_device(Device::Cpu);
        let check = EvalSettings { mode: Mode::Correctness, ..full.clone() };
        assert_eq!(settings_family(&full), settings_family(&check));
        assert_ne!(full.key_hash(), check.key_hash());
        let judge = Judge::new("cpu");
        assert_ne!(judge.settings_hash(&full), judge.settings_hash(&check));
    }
}
