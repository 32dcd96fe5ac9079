//! `cudal1`: make PyTorch programs faster with LLM-written CUDA, and prove it.

mod against;
mod args;
mod batch;
mod cmd_baselines;
mod cmd_eval;
mod cmd_export;
mod cmd_optimize;
mod cmd_profile;
mod cmd_report;
mod cmd_sandbox;
mod cmd_serve;
mod cmd_show;
mod cmd_tasks;
mod cmd_train;
mod cmd_worker;
mod exit;
mod hint;
mod interrupt;
mod out;
mod own_share;
mod profiling;
mod queue_backend;
mod record;
mod report;
mod reporters;
mod style;
mod workspace;

use clap::{CommandFactory, Parser};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    style::init(cli.verbose);
    init_logging(cli.verbose);
    // Trusted: a candidate running as the same user must not read this process's memory or
    // environment through /proc.
    if let Err(e) = cudal1_supervisor::deny_inspection() {
        tracing::warn!(error = %e, "cannot make cudal1 non-dumpable");
    }
    // What cudal1's workers and fork servers leave behind comes to cudal1, which reaps it (init
    // may not: a container's PID 1 often does not). Not for `sandbox-exec`, which becomes the
    // program it runs.
    if !matches!(cli.command, args::Command::SandboxExec(_)) {
        if let Err(e) = cudal1_supervisor::orphans::adopt() {
            tracing::warn!(error = %e, "cannot adopt orphans: those of killed workers go to init");
        }
    }
    let result = match cli.command {
        args::Command::Eval(a) => cmd_eval::run(a),
        args::Command::Baselines(a) => cmd_baselines::run(*a),
        args::Command::Tasks(a) => cmd_tasks::run(a),
        args::Command::Optimize(a) => cmd_optimize::run(*a),
        args::Command::Train(a) => cmd_train::run(*a),
        args::Command::Show(a) => cmd_show::run(&a),
        args::Command::Export(a) => cmd_export::run(&a),
        args::Command::Report(a) => cmd_report::run(&a),
        args::Command::Profile(a) => cmd_profile::run(&a),
        args::Command::SandboxExec(a) => cmd_sandbox::run(&a),
        args::Command::Completions(a) => completions(a.shell),
        args::Command::Serve(a) => cmd_serve::run(*a),
        args::Command::Worker(a) => cmd_worker::run(*a),
    };
    // Nothing cudal1 started is left for init to adopt.
    cudal1_eval::runner::end_fork_servers();
    cudal1_supervisor::orphans::end(std::time::Duration::from_secs(5));
    match result {
        Ok(status) => status.into(),
        // The reader went away (`cudal1 eval ... --json | head`): nothing more to say.
        Err(err) if out::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            report::print_error(&err);
            ExitCode::from(exit::ERROR)
        }
    }
}

/// `cudal1 completions SHELL`: the script on stdout.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<exit::Status> {
    clap_complete::generate(shell, &mut args::Cli::command(), "cudal1", &mut std::io::stdout());
    Ok(exit::Status::Done)
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours as for the rest of stderr: none in a file or a pipe (`2> run.log`), or with `NO_COLOR`.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(style::stderr_in_color())
        .with_target(false)
        .init();
}
