//! `cudal1 sandbox-exec [--write DIR]... [--read PATH]... -- PROGRAM ARGS...` (hidden): confines
//! this process (Landlock, seccomp, rlimits, no capabilities; the network kept or not) and
//! becomes PROGRAM. For a program another tool must start, such as Nsight Compute's target:
//! the tool starts `cudal1 sandbox-exec`, which confines itself before any of the program's code
//! runs. The environment is passed on as it is (the tool's injection settings included).

use anyhow::{bail, Context, Result};
use clap::Args;
use cudal1_supervisor::{confine_self, Sandbox};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct SandboxExecArgs {
    /// A directory the program may write (repeatable); nothing else is writable.
    #[arg(long = "write", value_name = "DIR")]
    pub writes: Vec<PathBuf>,
    /// A file or directory the program may read besides the system's and its interpreter's
    /// (repeatable).
    #[arg(long = "read", value_name = "PATH")]
    pub reads: Vec<PathBuf>,
    /// Keep the network (by default the program gets an empty network namespace).
    #[arg(long)]
    pub network: bool,
    /// Let the program reach abstract unix sockets made outside (a profiler's host).
    #[arg(long)]
    pub outside_ipc: bool,
    /// Processes it may have (RLIMIT_NPROC; root is not held by it).
    #[arg(long)]
    pub max_processes: Option<u64>,
    /// The program (an absolute path, or a name looked up on PATH) and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

pub fn run(a: &SandboxExecArgs) -> Result<crate::exit::Status> {
    let program = which(&a.command[0])?;
    let sandbox = Sandbox {
        enabled: true,
        network: a.network,
        write_paths: a.writes.clone(),
        read_paths: a.reads.clone(),
        cpu_seconds: None,
        memory_bytes: None,
        max_processes: a.max_processes,
        outside_ipc: a.outside_ipc,
    };
    confine_self(&sandbox, &program).context("confining the process")?;
    let err = std::process::Command::new(&program).args(&a.command[1..]).exec();
    Err(err).with_context(|| format!("running `{}`", program.display()))
}

/// `name` as a path: itself when it has a slash, else the first executable of that name on PATH.
fn which(name: &OsString) -> Result<PathBuf> {
    let path = PathBuf::from(name);
    if path.components().count() > 1 {
        return Ok(std::path::absolute(&path)?);
    }
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    match dirs.into_iter().map(|d| d.join(&path)).find(|p| p.is_file()) {
        Some(p) => Ok(p),
        None => bail!("`{}` is not on PATH", path.display()),
    }
}
