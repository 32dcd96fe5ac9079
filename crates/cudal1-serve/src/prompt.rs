//! Contrastive prompts, as CUDA-L1 builds them: the reference and N earlier correct programs of the
//! task with their measured speedups, drawn from score buckets by a softmax over bucket means
//! ([`cudal1_search::ExemplarSampler`]), asking for programs in the request's language (CUDA or
//! Triton). A prompt is reproducible: the draw is seeded from the task, the key, the sampler's
//! settings and the language, and only programs up to a watermark (`as_of`) of the
//! program database are considered, and of those only the ones a prompt in the request's language
//! may show ([`cudal1_search::exemplar_pool`]: its own language's and plain PyTorch). Every prompt is recorded under its id, so that programs
//! written in answer to it get its exemplars as parents.

use std::sync::Arc;

use cudal1_eval::Mode;
use cudal1_search::{exemplar_pool, Exemplar, ExemplarSampler, Language, ScoredVariant, Written};
use cudal1_store::PromptRecord;
use cudal1_task::content_hash;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::api::{Message, PromptRequest, PromptResponse, ShownExemplar};
use crate::error::ApiError;
use crate::Service;

/// A prompt request with every default filled in.
#[derive(Debug, Clone)]
pub(crate) struct PromptSpec {
    pub task: String,
    pub key: String,
    pub exemplars: usize,
    pub temperature: f64,
    pub bucket_width: f64,
    pub as_of: Option<i64>,
    pub language: Language,
}

impl Service {
    pub(crate) fn prompt_spec(&self, req: PromptRequest) -> Result<PromptSpec, ApiError> {
        let d = &self.config.prompt_defaults;
        let spec = PromptSpec {
            task: req.task,
            key: req.key.unwrap_or_else(|| format!("{:016x}", rand::random::<u64>())),
            exemplars: req.exemplars.unwrap_or(d.exemplars),
            temperature: req.temperature.unwrap_or(d.temperature),
            bucket_width: req.bucket_width.unwrap_or(d.bucket_width),
            as_of: req.as_of,
            language: req.language.unwrap_or(d.language),
        };
        self.check_prompt_spec(&spec)?;
        Ok(spec)
    }

    fn check_prompt_spec(&self, spec: &PromptSpec) -> Result<(), ApiError> {
        if !self.config.tasks.contains_key(&spec.task) {
            return Err(ApiError::unprocessable(format!("unknown task `{}`", spec.task))
                .hint("`GET /v1/tasks` lists the suite's tasks"));
        }
        if spec.exemplars > 16 {
            return Err(ApiError::unprocessable("`exemplars` may be at most 16"));
        }
        ExemplarSampler::new(spec.bucket_width, spec.temperature)
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
        Ok(())
    }

    /// Makes (and records) the prompt; runs on a blocking thread (it reads the store).
    pub(crate) fn make_prompt(&self, spec: &PromptSpec) -> Result<PromptResponse, ApiError> {
        self.check_prompt_spec(spec)?;
        let task = Arc::clone(&self.config.tasks[&spec.task]);
        // Exemplars are timed programs: the full mode's shelf of the program database.
        // Only programs judged by this build on this class of GPU: another judge's speedups are
        // not this one's.
        let settings_hash = cudal1_eval::Judge::new(self.config.gpu_class.clone())
            .settings_hash(&self.settings_for(Mode::Full));
        let as_of = match spec.as_of {
            Some(x) => x,
            None => self.store.last_program_id()?,
        };
        let ranked = self.store.ranked_programs(&task.hash, &settings_hash, Some(as_of))?;
        let written = self.written_as(ranked.iter().map(|p| p.id))?;
        let ranked = exemplar_pool(spec.language, ranked, |p| written[&p.id]);
        let sampler = ExemplarSampler::new(spec.bucket_width, spec.temperature)
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
        let mut inputs = format!(
            "{}|{}|{as_of}|{}|{}|{}|{settings_hash}",
            task.hash, spec.key, spec.exemplars, spec.temperature, spec.bucket_width
        );
        // A prompt in another language is another prompt (its own id and draw); a CUDA prompt
        // keeps the id it had before languages existed.
        if spec.language != Language::Cuda {
            inputs.push('|');
            inputs.push_str(spec.language.as_str());
        }
        let digest = content_hash(&inputs);
        let seed = u64::from_str_radix(&digest[..16], 16).expect("hex");
        let scored: Vec<ScoredVariant> =
            ranked.iter().map(|p| ScoredVariant { speedup: p.speedup, correct: true }).collect();
        let picked = sampler.sample(&scored, spec.exemplars, &mut StdRng::seed_from_u64(seed));
        let mut shown = Vec::new();
        let mut exemplars = Vec::new();
        for i in picked {
            let p = ranked[i];
            let program = self.store.program(p.id)?.ok_or_else(|| {
                ApiError::internal(format!("program {} vanished from the database", p.id))
            })?;
            exemplars.push(Exemplar::measured(program.code, p.speedup));
            shown.push(ShownExemplar { program_id: p.id, speedup: p.speedup });
        }
        let prompts = self.prompts(spec.language);
        let (kind, prompt) = if exemplars.is_empty() {
            ("first", prompts.first(&task.source))
        } else {
            ("contrastive", prompts.contrastive(&task.source, &exemplars))
        };
        let prompt =
            prompt.map_err(|e| ApiError::internal(format!("rendering the prompt: {e}")))?;
        let prompt_id = digest[16..32].to_owned();
        self.store.record_prompt(&PromptRecord {
            id: prompt_id.clone(),
            task_hash: task.hash.clone(),
            settings_hash,
            exemplar_ids: shown.iter().map(|e| e.program_id).collect(),
            as_of,
        })?;
        self.metrics.prompts.get_or_create(&crate::metrics::KindLabels { kind: kind.into() }).inc();
        Ok(PromptResponse {
            task: spec.task.clone(),
            prompt_id,
            kind,
            messages: vec![Message { role: "user", content: prompt.clone() }],
            prompt,
            exemplars: shown,
            key: spec.key.clone(),
            as_of,
            language: spec.language,
        })
    }

    /// What each of the programs `ids` is written in, read from its code once and kept.
    fn written_as(
        &self,
        ids: impl Iterator<Item = i64>,
    ) -> Result<std::collections::HashMap<i64, Written>, ApiError> {
        let mut out = std::collections::HashMap::new();
        for id in ids {
            let known = self.written.lock().expect("the language cache's lock").get(&id).copied();
            let w = match known {
                Some(w) => w,
                None => {
                    let program = self.store.program(id)?.ok_or_else(|| {
                        ApiError::internal(format!("program {id} vanished from the database"))
                    })?;
                    let w = Written::of(&program.code);
                    self.written.lock().expect("the language cache's lock").insert(id, w);
                    w
                }
            };
            out.insert(id, w);
        }
        Ok(out)
    }

    /// A JSON line of an exported prompt set: the fields verl, TRL and OpenRLHF read.
    pub(crate) fn export_row(p: &PromptResponse, index: usize) -> serde_json::Value {
        serde_json::json!({
            "prompt": p.messages,
            "prompt_text": p.prompt,
            "task": p.task,
            "prompt_id": p.prompt_id,
            "kind": p.kind,
            "exemplar_ids": p.exemplars.iter().map(|e| e.program_id).collect::<Vec<_>>(),
            "as_of": p.as_of,
            "language": p.language,
            "data_source": "cudal1",
            "reward_model": {"style": "rule", "ground_truth": p.task},
            "extra_info": {"task": p.task, "prompt_id": p.prompt_id, "index": index},
        })
    }
}
