//! Stage 1's data: supervised examples (a conversation and the reply to learn), collected from LLM
//! endpoints or a corpus, and kept only when the evaluator finds the program executable and
//! correct. Candidates are de-duplicated by their task and normalised source; every example
//! records where it came from.

use crate::kernels::judge;
use crate::{TrainError, TrainEvent};
use cudal1_eval::{Evaluator, JobOutcome, Mode, Verdict};
use cudal1_llm::{ChatRequest, Llm};
use cudal1_model::messages::Message;
use cudal1_search::{extract_program, normalized_hash, Language, Prompts, Written};
use cudal1_task::Task;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// One supervised example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftExample {
    /// The task's key (`level1/12_Name`).
    pub task: String,
    pub messages: Vec<Message>,
    /// What the model should answer.
    pub reply: String,
    /// Where it came from: `{"source": "llm", "model": ...}` or `{"source": "corpus", "path": ...}`,
    /// the task's and program's hashes, the verdict.
    pub provenance: Value,
}

/// Reads examples from a JSONL file.
pub fn read(path: &Path) -> Result<Vec<SftExample>, TrainError> {
    let text = std::fs::read_to_string(path).map_err(TrainError::io("read", path))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            serde_json::from_str(l).map_err(|e| TrainError::Data {
                path: path.to_owned(),
                line: n + 1,
                reason: format!("not an example ({{task, messages, reply, provenance}}): {e}"),
            })
        })
        .collect()
}

/// Writes examples as JSONL (replacing the file).
pub fn write(path: &Path, examples: &[SftExample]) -> Result<(), TrainError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(TrainError::io("create", parent))?;
    }
    let mut f = std::fs::File::create(path).map_err(TrainError::io("write", path))?;
    for e in examples {
        writeln!(f, "{}", serde_json::to_string(e).expect("plain data"))
            .map_err(TrainError::io("write", path))?;
    }
    Ok(())
}

/// What a collection did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Collected {
    pub replies: usize,
    pub llm_errors: usize,
    pub without_program: usize,
    pub duplicates: usize,
    pub judged: usize,
    pub kept: usize,
    /// Verdicts of the judged programs.
    pub verdicts: std::collections::BTreeMap<String, usize>,
    /// Answers left out before judging because their program is not written in the language
    /// the prompts ask for ([`answers_in`]), by what it is written in (`cuda`, `pytorch`,
    /// `mixed`); empty for CUDA prompts.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub other_language: std::collections::BTreeMap<String, usize>,
}

/// The `candidates` that answer prompts asking for `language` in that language. For Triton
/// prompts, only programs with Triton kernels and no CUDA extension ([`Language::is`]): a CUDA or
/// plain-PyTorch answer would teach the model to ignore what the prompt asks for. For CUDA
/// prompts, every candidate, as before languages existed (CUDA-L1's corpus mixes CUDA and
/// faster-PyTorch answers, and its prompt welcomes both). A reply without a program is kept (it
/// is counted as such when judged). What is left out is counted in `stats.other_language`.
pub fn answers_in(
    language: Language,
    candidates: Vec<Candidate>,
    stats: &mut Collected,
) -> Vec<Candidate> {
    if language == Language::Cuda {
        return candidates;
    }
    candidates
        .into_iter()
        .filter(|c| {
            let Ok(code) = extract_program(&c.reply) else { return true };
            let written = Written::of(&code);
            let keep = language.is(written);
            if !keep {
                *stats.other_language.entry(written.as_str().to_owned()).or_default() += 1;
            }
            keep
        })
        .collect()
}

/// A candidate reply for a task before judging.
pub struct Candidate {
    pub task: Arc<Task>,
    pub messages: Vec<Message>,
    pub reply: String,
    pub provenance: Value,
}

/// Keeps the candidates whose program the evaluator finds correct (correctness mode), once per
/// task and normalised source; `seen` holds keys already kept (earlier data), which count as
/// duplicates.
pub fn keep_correct(
    engine: &Evaluator,
    candidates: Vec<Candidate>,
    seen: &mut HashSet<(String, String)>,
    stats: &mut Collected,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Vec<SftExample> {
    let mut unique = Vec::new();
    for c in candidates {
        let Ok(code) = extract_program(&c.reply) else {
            stats.without_program += 1;
            continue;
        };
        let key = (c.task.hash.clone(), normalized_hash(&code));
        if !seen.insert(key.clone()) {
            stats.duplicates += 1;
            continue;
        }
        unique.push((c, code, key));
    }
    let items: Vec<(Arc<Task>, String, String)> = unique
        .iter()
        .map(|(c, code, _)| (Arc::clone(&c.task), code.clone(), c.task.key()))
        .collect();
    let outcomes = judge(engine, Mode::Correctness, &items, &mut |done, of| {
        on_event(TrainEvent::Progress { done, of, what: "programs judged" })
    });
    stats.judged += items.len();
    let mut kept = Vec::new();
    for ((c, _, key), outcome) in unique.into_iter().zip(outcomes) {
        let verdict = match &outcome {
            JobOutcome::Evaluated(e) => e.verdict.as_str().to_owned(),
            JobOutcome::TaskFailed { .. } => "task_failed".to_owned(),
            _ => "not_judged".to_owned(),
        };
        *stats.verdicts.entry(verdict.clone()).or_default() += 1;
        if matches!(&outcome, JobOutcome::Evaluated(e) if e.verdict == Verdict::Correct) {
            let mut provenance = c.provenance;
            provenance["task_hash"] = key.0.into();
            provenance["code_hash"] = key.1.into();
            provenance["verdict"] = verdict.into();
            kept.push(SftExample {
                task: c.task.key(),
                messages: c.messages,
                reply: c.reply,
                provenance,
            });
        } else {
            // Not kept: a later sample of the same program may not be tried again either.
        }
    }
    stats.kept += kept.len();
    kept
}

/// The conversation a task's candidates answer: the first-round prompt.
pub fn task_messages(prompts: &Prompts, task: &Task) -> Result<Vec<Message>, TrainError> {
    Ok(vec![Message::user(prompts.first(&task.source)?)])
}

/// Samples `per_task` replies for each task from `llm` (with `concurrency` requests in flight).
pub fn sample_llm(
    llm: &dyn Llm,
    prompts: &Prompts,
    tasks: &[Arc<Task>],
    per_task: u32,
    request: &ChatRequest,
    concurrency: usize,
    seed: u64,
    stats: &mut Collected,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<Vec<Candidate>, TrainError> {
    let mut jobs = Vec::new();
    for (t, task) in tasks.iter().enumerate() {
        let messages = task_messages(prompts, task)?;
        for k in 0..per_task {
            jobs.push((
                Arc::clone(task),
                messages.clone(),
                crate::grpo::step_seed(seed, t as u64, u64::from(k)),
            ));
        }
    }
    let total = jobs.len();
    let (job_tx, job_rx) = crossbeam_channel::unbounded();
    for j in jobs {
        job_tx.send(j).expect("receiver alive");
    }
    drop(job_tx);
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    let mut candidates = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..concurrency.max(1) {
            let (jobs, out) = (job_rx.clone(), out_tx.clone());
            scope.spawn(move || {
                for (task, messages, seed) in jobs {
                    let mut req = request.clone();
                    req.messages = messages
                        .iter()
                        .map(|m| cudal1_llm::Message::user(m.content.clone()))
                        .collect();
                    req.seed = Some(seed);
                    let _ = out.send((task, messages, llm.complete(&req)));
                }
            });
        }
        drop(out_tx);
        for (done, (task, messages, result)) in out_rx.iter().enumerate() {
            on_event(TrainEvent::Progress { done: done + 1, of: total, what: "replies" });
            match result {
                Ok(c) => {
                    stats.replies += 1;
                    candidates.push(Candidate { task, messages, reply: c.text, provenance: json!({"source": "llm", "model": c.model, "llm": llm.describe(), "finish_reason": c.finish_reason}) });
                }
                Err(e) => {
                    stats.llm_errors += 1;
                    tracing::warn!(error = %e, "an LLM request failed");
                }
            }
        }
    });
    Ok(candidates)
}

/// A corpus program as a reply in the format the prompts ask for (a fenced Python block).
pub fn corpus_reply(code: &str) -> String {
    format!("```python\n{}\n```\n", code.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates() -> Vec<Candidate> {
        let task = Arc::new(
            Task::from_source(
                Path::new("level1/1_X.py"),
                "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\ndef get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n".into(),
            )
            .unwrap(),
        );
        let answer = |code: &str, label: &str| Candidate {
            task: Arc::clone(&task),
            messages: vec![],
            reply: corpus_reply(code),
            provenance: json!({"label": label}),
        };
        let cuda = "from torch.utils.cpp_extension import load_inline\next = load_inline(name='e', cpp_sources='')\nclass ModelNew: pass\n";
        let triton = "import triton\n@triton.jit\ndef k(x):\n    pass\nclass ModelNew: pass\n";
        vec![
            answer(cuda, "cuda"),
            answer(triton, "triton"),
            answer("import torch\nclass ModelNew: pass\n", "pytorch"),
            answer(&format!("{cuda}{triton}"), "mixed"),
            Candidate { reply: "No program.".into(), ..answer("", "prose") },
        ]
    }

    fn labels(kept: &[Candidate]) -> Vec<&str> {
        kept.iter().map(|c| c.provenance["label"].as_str().unwrap()).collect()
    }

    #[test]
    fn triton_prompts_keep_triton_answers_and_count_the_rest_by_language() {
        let mut stats = Collected::default();
        let kept = answers_in(Language::Triton, candidates(), &mut stats);
        assert_eq!(labels(&kept), ["triton", "prose"]);
        let counts: Vec<(&str, usize)> =
            stats.other_language.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(counts, [("cuda", 1), ("mixed", 1), ("pytorch", 1)]);
    }

    #[test]
    fn cuda_prompts_keep_every_answer_as_before() {
        let mut stats = Collected::default();
        let kept = answers_in(Language::Cuda, candidates(), &mut stats);
        assert_eq!(labels(&kept), ["cuda", "triton", "pytorch", "mixed", "prose"]);
        assert!(stats.other_language.is_empty());
        assert!(serde_json::to_value(&stats).unwrap().get("other_language").is_none());
    }
}
