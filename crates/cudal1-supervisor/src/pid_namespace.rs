//! A sandboxed worker's own PID namespace, so that nothing it runs can name a process outside its
//! sandbox, and nothing it starts outlives it.
//!
//! The kernel resolves every pid a process passes (`kill`, `prlimit`, `setpriority`,
//! `sched_setaffinity`, `ptrace`, `pidfd_open`, `ioprio_set`) in that process's own PID namespace,
//! and `PRIO_USER` / `IOPRIO_WHO_USER` reach only the processes it can see: in a namespace of its
//! own a worker sees its own processes and nothing else. When the namespace's init ends, the kernel
//! kills whatever is left in it, and an orphan there is adopted by that init instead of the host's,
//! so a double-forked daemon stays among the worker's descendants (its CPU time is counted).
//!
//! The shape, made between fork and exec by [`enter`] (and by a forked runner in
//! `cudal1_runner.confine`, the same way), after one `unshare(CLONE_NEWPID | CLONE_NEWNS | ...)`:
//!
//! - the process that unshared, the *keeper*, stays outside the namespace. It is the worker's
//!   leader as the supervisor sees it (its child, its session and process group); it forks the
//!   two processes below, waits for the runner, then kills the init (the kernel then kills the
//!   rest of the namespace and waits until it is gone) and ends as the runner ended: with its
//!   exit code, or by the same signal. So the supervisor's outcome, crash reasons and `ru_maxrss`
//!   (the keeper's children's peak is in its own) are the runner's.
//! - the namespace's *init* (pid 1 there) only reaps orphans. The runner is not the init because
//!   an init ignores every signal it has no handler for that comes from inside its namespace, and
//!   every such signal but SIGKILL and SIGSTOP from outside: `RLIMIT_CPU`'s SIGXCPU, `abort()`'s
//!   SIGABRT, a SIGTERM meant to end it would all be lost.
//! - the *runner* (pid 2 there, the keeper's child) goes on to exec the worker's program.
//!
//! A `/proc` of the namespace's own is mounted over `/proc`, in a mount namespace of its own (made
//! private first, so that nothing propagates to the host's): the host's `/proc` names threads by
//! the host's ids, and CUDA fails to initialise (error 304) where `/proc/self/task/<tid>`, with the
//! tid the process sees, is not its own thread. It also hides every other process's `/proc`.
//!
//! The keeper and the init are copies of the process that forked them and never exec: they close
//! every descriptor, ignore (keeper) or cannot receive (init) signals, are not dumpable (no
//! `/proc/<pid>/mem`, `environ` or core dump of a trusted process's memory), and have no
//! capabilities; the init is also under the worker's Landlock ruleset and seccomp filter. The
//! runner can reach the init (pid 1) and its own process group (the keeper is in it, so that the
//! supervisor's group signals reach every process): at most it ends its own evaluation.
//!
//! Everything here runs in a child of a multi-threaded process, so it only makes system calls on
//! prepared data: no allocation. Processes are made with a raw `clone`, which runs none of the C
//! library's fork handlers.

use std::ffi::CStr;
use std::io;

use crate::child_setup::{check, drop_capabilities, SandboxSteps};

const PROC: &CStr = c"/proc";
const PROC_FS: &CStr = c"proc";
const ROOT: &CStr = c"/";
/// The kernel's signal set is 64 bits wide (`_NSIG / 8`).
const KERNEL_SIGSET_BYTES: usize = 8;
const LAST_SIGNAL: libc::c_int = 64;

/// Makes the keeper, the init and the runner (see the module's notes) right after the `unshare`
/// that made the namespaces. Returns in the runner only, and without capabilities when `steps`
/// drop them; the keeper and the init never return. `Err` (in the keeper): nothing of the namespace
/// is left, and the caller fails as it would for any other step.
///
/// # Safety
/// Between fork and exec, in a process that has just unshared a PID and a mount namespace.
pub(crate) unsafe fn enter(steps: &SandboxSteps) -> io::Result<()> {
    // Mounts made from here on stay in this mount namespace.
    check(
        libc::mount(
            std::ptr::null(),
            ROOT.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
        .into(),
    )?;
    // Before the init and the runner exist: both see it, and the init mounts its /proc after.
    if let Some(tmp) = &steps.private_tmp {
        crate::private_tmp::mount(tmp)?;
    }
    // No signal may end the keeper before it ignores them; the init and the runner set their own.
    let mut all: libc::sigset_t = std::mem::zeroed();
    let mut before: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    check(libc::sigprocmask(libc::SIG_SETMASK, &all, &mut before).into())?;
    let result = start(steps, &before);
    libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
    result
}

unsafe fn start(steps: &SandboxSteps, before: &libc::sigset_t) -> io::Result<()> {
    let mut ready = [0; 2];
    check(libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC).into())?;
    let init = fork();
    if init == 0 {
        libc::close(ready[0]);
        run_init(steps, ready[1]);
    }
    let forked = if init == -1 { Err(io::Error::last_os_error()) } else { Ok(()) };
    libc::close(ready[1]);
    let said = forked.and_then(|()| read_report(ready[0]));
    libc::close(ready[0]);
    let runner = said.and_then(|()| {
        if steps.drop_capabilities {
            drop_capabilities()?;
        }
        match fork() {
            -1 => Err(io::Error::last_os_error()),
            pid => Ok(pid),
        }
    });
    match runner {
        Ok(0) => {
            // The runner: dies with the keeper, whose death would make the init its parent.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into())?;
            if libc::getppid() != 0 {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            check(libc::sigprocmask(libc::SIG_SETMASK, before, std::ptr::null_mut()).into())
        }
        Ok(runner) => keep(init, runner),
        Err(e) => {
            if init > 0 {
                libc::kill(init, libc::SIGKILL);
                wait_for(init);
            }
            Err(e)
        }
    }
}

/// A raw `clone` that works like `fork` (`SIGCHLD` at exit, a copy of the memory).
unsafe fn fork() -> libc::pid_t {
    libc::syscall(libc::SYS_clone, libc::c_long::from(libc::SIGCHLD), 0, 0, 0, 0) as libc::pid_t
}

/// What the init wrote: 0 once it is ready, else the errno of the step that failed. Nothing: it
/// ended before it could say.
unsafe fn read_report(fd: libc::c_int) -> io::Result<()> {
    let mut code = [0u8; 4];
    loop {
        let n = libc::read(fd, code.as_mut_ptr().cast(), code.len());
        if n == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return match (n, i32::from_ne_bytes(code)) {
            (4, 0) => Ok(()),
            (4, errno) => Err(io::Error::from_raw_os_error(errno)),
            _ => Err(io::Error::from_raw_os_error(libc::ECHILD)),
        };
    }
}

/// Waits for child `pid`; its raw wait status (an exit code of 255 if it cannot be had).
unsafe fn wait_for(pid: libc::pid_t) -> libc::c_int {
    loop {
        let mut status = 0;
        if libc::wait4(pid, &mut status, libc::__WALL, std::ptr::null_mut()) == pid {
            return status;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return 255 << 8;
        }
    }
}

unsafe fn close_everything() {
    if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) == -1 {
        // Before Linux 5.9.
        let mut limit: libc::rlimit = std::mem::zeroed();
        let last = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 16)
        } else {
            1024
        };
        for fd in 0..last as libc::c_int {
            libc::close(fd);
        }
    }
}

/// Sets every signal's disposition (but SIGKILL's and SIGSTOP's, and SIGCHLD's, left as it is)
/// to `handler`, so that no handler of the process it was copied from runs here.
unsafe fn set_all_signals(handler: libc::sighandler_t) {
    for signal in 1..=LAST_SIGNAL {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP && signal != libc::SIGCHLD {
            // The C library's own signals, and those past the kernel's last, are refused: fine.
            libc::signal(signal, handler);
        }
    }
}

/// The keeper: see the module's notes. Never returns.
unsafe fn keep(init: libc::pid_t, runner: libc::pid_t) -> ! {
    // The supervisor's descriptors (other workers' pipes among them) are not the keeper's to hold.
    close_everything();
    libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    // The supervisor's signals to the group are the runner's to take: SIGKILL still ends the
    // keeper (and with it the namespace), SIGSTOP still stops it.
    set_all_signals(libc::SIG_IGN);
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    let mut none: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut none);
    libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    let status = wait_for(runner);
    // The init's end makes the kernel kill the rest of the namespace; it is reaped once all of it is.
    libc::kill(init, libc::SIGKILL);
    wait_for(init);
    end_as(status)
}

/// Ends this process the way the raw wait `status` says a child ended: with its exit code, or by
/// its signal (the keeper is not dumpable, so a core-dumping signal dumps nothing).
pub(crate) unsafe fn end_as(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::syscall(
            libc::SYS_kill,
            libc::c_long::from(libc::getpid()),
            libc::c_long::from(signal),
        );
        libc::_exit(128 + signal);
    }
    libc::_exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 255 })
}

/// The init: see the module's notes. Never returns.
unsafe fn run_init(steps: &SandboxSteps, ready: libc::c_int) -> ! {
    let report = |code: i32| libc::write(ready, code.to_ne_bytes().as_ptr().cast(), 4) == 4;
    if let Err(e) = prepare_init(steps) {
        report(e.raw_os_error().unwrap_or(libc::EIO));
        libc::_exit(1);
    }
    // A keeper that died before the init could die with it has closed the other end.
    if !report(0) {
        libc::_exit(1);
    }
    close_everything();
    // Only SIGCHLD, and only to wait for it: every other signal an init gets from its namespace
    // is dropped, since it has no handler; a blocked one would be queued.
    let mut child: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut child);
    libc::sigaddset(&mut child, libc::SIGCHLD);
    libc::sigprocmask(libc::SIG_SETMASK, &child, std::ptr::null_mut());
    loop {
        while libc::wait4(
            -1,
            std::ptr::null_mut(),
            libc::WNOHANG | libc::__WALL,
            std::ptr::null_mut(),
        ) > 0
        {}
        libc::syscall(
            libc::SYS_rt_sigtimedwait,
            &raw const child,
            std::ptr::null_mut::<libc::siginfo_t>(),
            std::ptr::null::<libc::timespec>(),
            KERNEL_SIGSET_BYTES,
        );
    }
}

unsafe fn prepare_init(steps: &SandboxSteps) -> io::Result<()> {
    check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into())?;
    check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0).into())?;
    set_all_signals(libc::SIG_DFL);
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    // Mounted by a process inside the namespace: a `/proc` shows the namespace of its mounter.
    check(
        libc::mount(
            PROC_FS.as_ptr(),
            PROC.as_ptr(),
            PROC_FS.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
        .into(),
    )?;
    if steps.drop_capabilities {
        drop_capabilities()?;
    }
    steps.restrict(false)
}
