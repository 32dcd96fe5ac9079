//! `cudal1 sandbox-exec [--write DIR]... [--read PATH]... -- PROGRAM ARGS...` (hidden): confines
//! this process (Landlock, seccomp, rlimits, no capabilities; the network kept or not) and
//! becomes PROGRAM. For a program another tool must start, such as Nsight Compute's target:
//! the tool starts `cudal1 sandbox-exec`, which confines itself before any of the program's code
//! runs. The environment is passed on as it is (the tool's injection settings included).

use crate::args::SandboxExecArgs;
use anyhow::{bail, Context, Result};
use cudal1_supervisor::{confine_self, Sandbox};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

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
