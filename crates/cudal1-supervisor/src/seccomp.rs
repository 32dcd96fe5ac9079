//! A seccomp filter that keeps a sandboxed worker, and everything it starts, in the namespaces
//! the supervisor gave it.
//!
//! The supervisor finds a worker's processes by the network namespace the worker was started in
//! (`procfs::in_net_namespace`): a double-forked daemon in a session of its own is still there.
//! Without capabilities a process cannot join another namespace, but it could make new ones (an
//! unprivileged user namespace, then a network namespace inside it) and so leave the tag behind.
//! The filter refuses `unshare`, `setns` and `clone` with any `CLONE_NEW*` flag (EPERM), and
//! answers `clone3`, whose flags a filter cannot read, with ENOSYS, so that the C library falls
//! back to `clone`. System calls of another architecture's table (the i386 ABI on x86-64, x32)
//! are refused outright. Built by the parent; installed by the child after `no_new_privs`.

/// `struct seccomp_data`: `nr` at 0, `arch` at 4, `args[0]` at 16 (its low half on little-endian).
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
const OFFSET_ARG0_LOW: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 system calls share x86-64's architecture value and set this bit in `nr`.
const X32_BIT: u32 = 0x4000_0000;

/// The `clone` flags that make new namespaces (`CLONE_NEWTIME` is only understood by `clone3`
/// and `unshare`; for `clone` that bit is part of the exit signal).
const CLONE_NEW_ANY: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// The filter program, or `None` on an architecture it does not know.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn namespace_filter() -> Option<Vec<libc::sock_filter>> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let load = BPF_LD | BPF_W | BPF_ABS;
    let ret = BPF_RET | BPF_K;
    let eq = BPF_JMP | BPF_JEQ | BPF_K;
    let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let no_such_call = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let nr = |n: libc::c_long| u32::try_from(n).expect("system call numbers are small");
    // Jump offsets count instructions after the jump itself.
    Some(vec![
        /* 0 */ stmt(load, OFFSET_ARCH),
        /* 1 */ jump(eq, AUDIT_ARCH, 1, 0),
        /* 2 */ stmt(ret, deny),
        /* 3 */ stmt(load, OFFSET_NR),
        /* 4 */ jump(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 7, 0),
        /* 5 */ jump(eq, nr(libc::SYS_unshare), 6, 0),
        /* 6 */ jump(eq, nr(libc::SYS_setns), 5, 0),
        /* 7 */ jump(eq, nr(libc::SYS_clone3), 6, 0),
        /* 8 */ jump(eq, nr(libc::SYS_clone), 1, 0),
        /* 9 */ stmt(ret, SECCOMP_RET_ALLOW),
        /* 10 */ stmt(load, OFFSET_ARG0_LOW),
        /* 11 */ jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEW_ANY, 0, 1),
        /* 12 */ stmt(ret, deny),
        /* 13 */ stmt(ret, SECCOMP_RET_ALLOW),
        /* 14 */ stmt(ret, no_such_call),
    ])
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn namespace_filter() -> Option<Vec<libc::sock_filter>> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program the way the kernel would on one system call.
    fn run(program: &[libc::sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let insn = program[pc];
            let code = u32::from(insn.code);
            pc += 1;
            match code & 0x07 {
                c if c == libc::BPF_LD => {
                    acc = match insn.k {
                        OFFSET_NR => nr,
                        OFFSET_ARCH => arch,
                        OFFSET_ARG0_LOW => arg0 as u32,
                        other => panic!("load from offset {other}"),
                    }
                }
                c if c == libc::BPF_JMP => {
                    let taken = match code & 0xf0 {
                        op if op == libc::BPF_JEQ => acc == insn.k,
                        op if op == libc::BPF_JGE => acc >= insn.k,
                        op if op == libc::BPF_JSET => acc & insn.k != 0,
                        op => panic!("jump {op:#x}"),
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                c if c == libc::BPF_RET => return insn.k,
                c => panic!("instruction class {c:#x}"),
            }
        }
    }

    #[test]
    fn namespaces_are_refused_and_everything_else_passes() {
        let p = namespace_filter().unwrap();
        let nr = |n: libc::c_long| n as u32;
        let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        assert_eq!(run(&p, AUDIT_ARCH, nr(libc::SYS_unshare), libc::CLONE_NEWNET as u64), deny);
        assert_eq!(run(&p, AUDIT_ARCH, nr(libc::SYS_setns), 0), deny);
        assert_eq!(
            run(&p, AUDIT_ARCH, nr(libc::SYS_clone3), 0),
            SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
        for flag in [libc::CLONE_NEWUSER, libc::CLONE_NEWNET, libc::CLONE_NEWPID, libc::CLONE_NEWNS]
        {
            assert_eq!(
                run(&p, AUDIT_ARCH, nr(libc::SYS_clone), (flag | libc::SIGCHLD) as u64),
                deny,
                "{flag:#x}"
            );
        }
        // fork, threads, vfork-style spawns.
        for flags in [
            libc::SIGCHLD,
            libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        ] {
            assert_eq!(
                run(&p, AUDIT_ARCH, nr(libc::SYS_clone), flags as u64),
                SECCOMP_RET_ALLOW,
                "{flags:#x}"
            );
        }
        for call in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_openat,
            libc::SYS_mmap,
            libc::SYS_ioctl,
            libc::SYS_execve,
        ] {
            assert_eq!(run(&p, AUDIT_ARCH, nr(call), 0), SECCOMP_RET_ALLOW, "{call}");
        }
        // Another table: the i386 ABI, x32.
        assert_eq!(run(&p, 0x4000_0003, nr(libc::SYS_read), 0), deny);
        assert_eq!(run(&p, AUDIT_ARCH, X32_BIT | 272, 0), deny);
    }
}
