//! A private `/tmp` for a sandboxed worker: an empty tmpfs of its own, mounted over `/tmp` in the
//! mount namespace it gets with its PID namespace ([`crate::pid_namespace`]), gone when it ends.
//!
//! Programs write to fixed paths under `/tmp` (`load_inline(build_directory="/tmp/...")`,
//! `open("/tmp/x.cu", "w")`). Landlock lets a worker write only its own directories, so such a
//! program failed in the sandbox although it is fine elsewhere; letting it write the host's `/tmp`
//! would let it leave files that a later worker reads. With a `/tmp` of its own it can do both:
//! write there, and reach nobody.
//!
//! What the worker needs below the host's `/tmp` (its scratch directory, read and write paths,
//! working directory, interpreter: tests and CI put them there) stays at the same path: the
//! child opens the host's `/tmp` before the tmpfs hides it, makes each such path in the tmpfs,
//! and bind-mounts the host's directory (or file) onto it through `/proc/self/fd/N`. A bind mount
//! shows the same inodes, so the parent's Landlock rules for them still hold; the runner adds a
//! rule of its own for the new `/tmp` (the parent's rules name inodes of the host's).
//!
//! Landlock walks up through mount points: a rule on the new `/tmp` covers everything mounted
//! below it, the kept paths too. So a kept path the worker may only read is bound read-only (the
//! mount refuses writes whatever Landlock allows), and a path it may write below one it may only
//! read is bound again, writable, on top.
//!
//! The tmpfs is `nosuid,nodev` and at most [`MAX_SIZE`] (or the worker's memory limit if lower);
//! its pages are charged to the worker's memory cgroup. It is not `noexec`: a PyTorch extension
//! built there is loaded with `dlopen`, which maps it executable.
//!
//! The plan is made in the parent ([`plan`]); the child ([`mount`]) runs between fork and exec and
//! only makes system calls on the prepared strings.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::child_setup::check;

/// The largest private `/tmp`.
pub(crate) const MAX_SIZE: u64 = 1 << 30;
/// The smallest (a memory limit below it would end the worker anyway).
const MIN_SIZE: u64 = 1 << 20;
const TMP: &str = "/tmp";
const TMP_C: &CStr = c"/tmp";
const TMPFS: &CStr = c"tmpfs";
const PROC_SELF_FD: &[u8] = b"/proc/self/fd/";

/// What the child mounts (see the module's notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrivateTmp {
    /// `/tmp`.
    pub root: CString,
    /// The tmpfs's options: `size=...,mode=1777`.
    pub options: CString,
    /// Directories to make in the new `/tmp`, parents first.
    pub dirs: Vec<CString>,
    /// What to bind back, each onto its own path.
    pub kept: Vec<Kept>,
    /// Landlock rights the runner grants itself on the new `/tmp` (0: no Landlock).
    pub access: u64,
}

/// A path of the host's below `/tmp` that the worker keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Relative to the host's `/tmp`.
    pub source: CString,
    /// Where it is bound, below the new `/tmp`.
    pub target: CString,
    /// A directory (else a file, bound onto an empty file made for it).
    pub dir: bool,
    /// The worker may write it (a write path, or below one); else the bind is read-only.
    pub writable: bool,
}

/// Whether a sandboxed [`crate::Worker`] started now gets a private `/tmp`: the kernel gives it a
/// PID namespace (and with it a mount namespace), and the host's `/tmp` is a directory.
#[must_use]
pub fn available() -> bool {
    crate::sandbox_support().pid_namespace.is_ok() && tmp_is_a_directory()
}

/// The host's `/tmp` is a directory of its own (not a link, not missing): it can be covered.
fn tmp_is_a_directory() -> bool {
    std::fs::symlink_metadata(TMP).is_ok_and(|m| m.is_dir())
}

/// The plan for a worker that may write `writable` and read `readable` (paths not under `/tmp`
/// are left out), with at most `memory_bytes` of memory, granting `access` on the new `/tmp`.
/// `None` where `/tmp` is not a directory of its own (a link, or missing): then the worker shares
/// the host's.
pub(crate) fn plan<'a>(
    writable: impl IntoIterator<Item = &'a Path>,
    readable: impl IntoIterator<Item = &'a Path>,
    memory_bytes: Option<u64>,
    access: u64,
) -> Option<PrivateTmp> {
    let tmp = Path::new(TMP);
    if !tmp_is_a_directory() {
        return None;
    }
    // Target (as the worker names it) → (source below the host's /tmp, directory?, writable?).
    let mut wanted: Vec<(PathBuf, PathBuf, bool, bool)> = Vec::new();
    let paths =
        writable.into_iter().map(|p| (p, true)).chain(readable.into_iter().map(|p| (p, false)));
    for (path, may_write) in paths {
        let Ok(real) = std::fs::canonicalize(path) else { continue };
        let Ok(source) = real.strip_prefix(tmp) else { continue };
        if source.as_os_str().is_empty() {
            // The whole of /tmp: the private one takes its place.
            continue;
        }
        let target = match lexical(path) {
            Some(p) if p.starts_with(tmp) && p != tmp => p,
            _ => real.clone(),
        };
        wanted.push((target, source.to_path_buf(), real.is_dir(), may_write));
    }
    // Parents before children; of one path named both ways, the writable one first.
    wanted.sort_by(|a, b| a.0.cmp(&b.0).then(b.3.cmp(&a.3)));
    wanted.dedup_by(|later, first| later.0 == first.0);
    let mut kept_targets: Vec<(PathBuf, bool)> = Vec::new();
    let mut kept = Vec::new();
    let mut dirs = BTreeSet::new();
    for (target, source, dir, writable) in wanted {
        // Below one already bound (recursively) is reachable through it, as writable as it: bound
        // again only to be writable below a read-only one.
        let covering = kept_targets.iter().rev().find(|(k, _)| target.starts_with(k));
        match covering {
            Some((_, parent_writable)) if *parent_writable || !writable => continue,
            Some(_) => {}
            None => {
                let mut parent = target.parent();
                while let Some(p) = parent.filter(|p| *p != tmp) {
                    dirs.insert(p.to_path_buf());
                    parent = p.parent();
                }
                if dir {
                    dirs.insert(target.clone());
                }
            }
        }
        kept.push(Kept { source: c_path(&source)?, target: c_path(&target)?, dir, writable });
        kept_targets.push((target, writable));
    }
    let size = memory_bytes.map_or(MAX_SIZE, |m| m.min(MAX_SIZE)).max(MIN_SIZE);
    Some(PrivateTmp {
        root: TMP_C.to_owned(),
        options: CString::new(format!("size={size},mode=1777")).ok()?,
        dirs: dirs.iter().map(|d| c_path(d)).collect::<Option<_>>()?,
        kept,
        access,
    })
}

/// `path` without `.` and `..` (by name: `None` if a `..` would need the file system).
fn lexical(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    path.is_absolute().then_some(out)
}

fn c_path(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

/// `/proc/self/fd/<fd>` in `buf`, without allocating.
fn fd_path(fd: libc::c_int, buf: &mut [u8; 32]) -> &CStr {
    let mut digits = [0u8; 12];
    let mut n = fd.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf[..PROC_SELF_FD.len()].copy_from_slice(PROC_SELF_FD);
    for i in 0..len {
        buf[PROC_SELF_FD.len() + i] = digits[len - 1 - i];
    }
    buf[PROC_SELF_FD.len() + len] = 0;
    // SAFETY: one NUL, written just above, ends it; none before it.
    unsafe { CStr::from_bytes_with_nul_unchecked(&buf[..=PROC_SELF_FD.len() + len]) }
}

/// Mounts the private `/tmp` and binds the kept paths into it.
///
/// # Safety
/// Between fork and exec, in a process that has just unshared a mount namespace and made its
/// mounts private; only system calls on prepared data.
pub(crate) unsafe fn mount(tmp: &PrivateTmp) -> io::Result<()> {
    // The host's /tmp, as this mount namespace's copy shows it: a bind source must be a mount of
    // the caller's namespace, so it cannot be opened before the unshare (by the parent).
    let host = libc::open(TMP_C.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
    if host < 0 {
        return Err(io::Error::last_os_error());
    }
    let result = mount_over(tmp, host);
    libc::close(host);
    result
}

unsafe fn mount_over(tmp: &PrivateTmp, host: libc::c_int) -> io::Result<()> {
    check(
        libc::mount(
            TMPFS.as_ptr(),
            tmp.root.as_ptr(),
            TMPFS.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            tmp.options.as_ptr().cast(),
        )
        .into(),
    )?;
    for dir in &tmp.dirs {
        if libc::mkdir(dir.as_ptr(), 0o755) == -1
            && io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
        {
            return Err(io::Error::last_os_error());
        }
    }
    for kept in &tmp.kept {
        if !kept.dir {
            let fd = libc::open(
                kept.target.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(fd);
        }
        let source = libc::openat(host, kept.source.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if source < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 32];
        // Recursive: a mount below it that this namespace may not separate from it (one made
        // in a more privileged user namespace) must come along.
        let bound = libc::mount(
            fd_path(source, &mut buf).as_ptr(),
            kept.target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        );
        let mut result = check(bound.into());
        if result.is_ok() && !kept.writable {
            result = read_only(kept, source);
        }
        libc::close(source);
        result?;
    }
    Ok(())
}

/// Makes the bind of `kept` (whose source is `source`) read-only, keeping the flags its mount
/// has: a mount namespace made by a user without privileges may not clear them.
unsafe fn read_only(kept: &Kept, source: libc::c_int) -> io::Result<()> {
    // glibc takes the flags from the kernel's statfs (ST_VALID), reading nothing else.
    let mut fs: libc::statvfs = std::mem::zeroed();
    check(libc::fstatvfs(source, &mut fs).into())?;
    let f = fs.f_flag;
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st != 0 {
            flags |= ms;
        }
    }
    check(
        libc::mount(
            std::ptr::null(),
            kept.target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
        .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[CString]) -> Vec<&str> {
        v.iter().map(|c| c.to_str().unwrap()).collect()
    }

    #[test]
    fn fd_paths_are_written_without_allocating() {
        let mut buf = [0u8; 32];
        assert_eq!(fd_path(0, &mut buf), c"/proc/self/fd/0");
        assert_eq!(fd_path(1234, &mut buf), c"/proc/self/fd/1234");
        assert_eq!(fd_path(i32::MAX, &mut buf), c"/proc/self/fd/2147483647");
    }

    #[test]
    fn paths_below_tmp_are_kept_once_with_their_parents_read_only_unless_written() {
        let base = tempfile::Builder::new().prefix("cudal1-ptmp-").tempdir_in("/tmp").unwrap();
        let b = base.path();
        std::fs::create_dir_all(b.join("scratch/inner")).unwrap();
        std::fs::create_dir_all(b.join("pkg/out")).unwrap();
        std::fs::write(b.join("file.txt"), "x").unwrap();
        let name = b.file_name().unwrap().to_str().unwrap();
        let writable = [b.join("scratch"), b.join("pkg/out")];
        let readable = [
            b.join("scratch/inner"),
            b.join("./pkg"),
            b.join("file.txt"),
            PathBuf::from("/tmp"),
            PathBuf::from("/usr"),
            b.join("scratch"),
        ];
        let plan = plan(
            writable.iter().map(PathBuf::as_path),
            readable.iter().map(PathBuf::as_path),
            Some(256 << 20),
            7,
        )
        .unwrap();
        assert_eq!(plan.root.to_str().unwrap(), "/tmp");
        assert_eq!(plan.options.to_str().unwrap(), format!("size={},mode=1777", 256 << 20));
        assert_eq!(
            strs(&plan.dirs),
            [format!("/tmp/{name}"), format!("/tmp/{name}/pkg"), format!("/tmp/{name}/scratch")]
        );
        let kept: Vec<(String, String, bool, bool)> = plan
            .kept
            .iter()
            .map(|k| {
                let s = |c: &CString| c.to_str().unwrap().to_owned();
                (s(&k.source), s(&k.target), k.dir, k.writable)
            })
            .collect();
        let k = |rel: &str, dir, writable| {
            (format!("{name}/{rel}"), format!("/tmp/{name}/{rel}"), dir, writable)
        };
        // The scratch, named writable and readable, is writable and its inner directory comes
        // with it; the package is read-only and its output directory bound again, writable.
        assert_eq!(
            kept,
            [
                k("file.txt", false, false),
                k("pkg", true, false),
                k("pkg/out", true, true),
                k("scratch", true, true)
            ]
        );
        assert_eq!(plan.access, 7);
        // Without a memory limit, or with a large one, the cap; never nothing.
        let size = |m| plan_size(super::plan([], [Path::new("/usr")], m, 0).unwrap());
        assert_eq!(size(None), MAX_SIZE);
        assert_eq!(size(Some(8 << 30)), MAX_SIZE);
        assert_eq!(size(Some(0)), MIN_SIZE);
    }

    fn plan_size(p: PrivateTmp) -> u64 {
        let o = p.options.to_str().unwrap().to_owned();
        o.strip_prefix("size=").unwrap().split(',').next().unwrap().parse().unwrap()
    }
}
