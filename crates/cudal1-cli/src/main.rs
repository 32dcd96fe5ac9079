//! `cudal1`: make PyTorch programs faster with LLM-written CUDA, and prove it.

mod args;
mod cmd_eval;
mod cmd_optimize;
mod cmd_tasks;
mod record;
mod report;
mod setup;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    setup::init_logging(cli.verbose);
    let result = match cli.command {
        args::Command::Eval(a) => cmd_eval::run(a),
        args::Command::Tasks(a) => cmd_tasks::run(a),
        args::Command::Optimize(a) => cmd_optimize::run(*a),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            report::print_error(&err);
            ExitCode::from(2)
        }
    }
}
