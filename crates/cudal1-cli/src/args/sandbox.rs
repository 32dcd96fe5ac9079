//! `cudal1 sandbox-exec`'s arguments.

use clap::Args;
use std::path::PathBuf;

use std::ffi::OsString;

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
