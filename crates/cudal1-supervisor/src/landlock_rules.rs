//! The Landlock ruleset of a sandboxed worker, built in the parent (it opens paths and
//! allocates) and applied by the child just before exec through its file descriptor.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

use crate::spec::Sandbox;

/// The newest ABI whose rights we have vetted (ABI 7 only adds audit flags to ABI 6).
const TARGET_ABI: ABI = ABI::V7;

/// Directories every process needs to read (and execute from) when reads are restricted. Not
/// `/dev`: a right on a directory covers everything below it, and `/dev/shm` is where cudal1's
/// scratch directories (the reference's expected outputs among them) live on large hosts.
const SYSTEM_READ: &[&str] = &["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys"];

/// Device files a worker may read and write (CUDA needs the nvidia ones and their ioctls).
/// Nothing below `/dev/shm`: a worker writes only to its own directories.
const DEVICE_FILES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// Where a rule failed.
#[derive(Debug)]
pub(crate) struct RulesError {
    pub detail: String,
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

fn err(detail: String) -> impl FnOnce(landlock::RulesetError) -> RulesError {
    move |e| RulesError { detail, source: Box::new(e) }
}

/// The paths a worker is allowed to read when `read_paths` is non-empty, beyond the
/// sandbox's own lists: the interpreter's prefix, for a venv both the venv and the base.
pub(crate) fn interpreter_prefixes(program: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut add = |p: &Path| {
        // `<prefix>/bin/python` → `<prefix>`; otherwise the program's own directory.
        let dir = p.parent();
        let prefix = match dir {
            Some(d) if d.file_name().is_some_and(|n| n == "bin") => d.parent(),
            _ => dir,
        };
        if let Some(prefix) = prefix {
            if prefix != Path::new("/") && !out.iter().any(|o: &PathBuf| o == prefix) {
                out.push(prefix.to_path_buf());
            }
        }
    };
    add(program);
    if let Ok(real) = std::fs::canonicalize(program) {
        add(&real);
    }
    out
}

fn nvidia_device_paths() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/dev") else { return Vec::new() };
    let mut paths: Vec<PathBuf> = dir
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
        .map(|e| e.path())
        .collect();
    paths.sort();
    paths
}

/// Adds a rule for `path` if it exists, narrowing directory rights for plain files.
fn allow(
    ruleset: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
    required: bool,
) -> Result<RulesetCreated, RulesError> {
    let Ok(meta) = std::fs::metadata(path) else {
        if required {
            return Err(RulesError {
                detail: format!("`{}` does not exist", path.display()),
                source: Box::new(std::io::Error::from(std::io::ErrorKind::NotFound)),
            });
        }
        return Ok(ruleset);
    };
    let access = if meta.is_dir() { access } else { access & AccessFs::from_file(TARGET_ABI) };
    let fd = PathFd::new(path).map_err(|e| RulesError {
        detail: format!("cannot open `{}`", path.display()),
        source: Box::new(e),
    })?;
    ruleset.add_rule(PathBeneath::new(fd, access)).map_err(err(format!("rule for `{}`", path.display())))
}

/// The rights the child grants itself on its own `/proc/self/task` (see
/// `SandboxSteps::own_task_access`), limited to what a kernel of this `abi` handles.
pub(crate) fn own_task_access(abi: i32) -> u64 {
    let mut access = AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::WriteFile;
    if abi >= 3 {
        access |= AccessFs::Truncate;
    }
    access.bits()
}

/// The rights a child in a PID namespace of its own grants itself on the `/proc` mounted for it
/// (see `SandboxSteps::own_proc_access`): where reads are limited, what the rule for the parent's
/// `/proc` grants; else none (the rule for `/` covers it). Every kernel with Landlock handles them.
pub(crate) fn own_proc_access(sandbox: &Sandbox) -> u64 {
    if sandbox.read_paths.is_empty() {
        0
    } else {
        AccessFs::from_read(ABI::V1).bits()
    }
}

/// Builds the ruleset; `None` when the kernel has no Landlock at all.
pub(crate) fn build(sandbox: &Sandbox, program: &Path) -> Result<Option<OwnedFd>, RulesError> {
    let all = AccessFs::from_all(TARGET_ABI);
    let read = AccessFs::from_read(TARGET_ABI);
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err("handled filesystem rights".into()))?;
    if !sandbox.network {
        // Belt and braces with the network namespace: no TCP bind or connect at all.
        ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI)).map_err(err("handled network rights".into()))?;
    }
    // No signals to processes outside the sandbox (as root, kill(-1) would reach everything),
    // no abstract unix sockets outside it.
    let scopes = if sandbox.outside_ipc { Scope::Signal.into() } else { Scope::from_all(TARGET_ABI) };
    ruleset = ruleset.scope(scopes).map_err(err("scopes".into()))?;
    let mut created = ruleset.create().map_err(err("creating the ruleset".into()))?;

    if sandbox.read_paths.is_empty() {
        created = allow(created, Path::new("/"), read, true)?;
    } else {
        for dir in SYSTEM_READ {
            created = allow(created, Path::new(dir), read, false)?;
        }
        for prefix in interpreter_prefixes(program) {
            created = allow(created, &prefix, read, false)?;
        }
        for path in &sandbox.read_paths {
            created = allow(created, path, read, true)?;
        }
    }
    for dev in DEVICE_FILES.iter().map(PathBuf::from).chain(nvidia_device_paths()) {
        created = allow(created, &dev, device, false)?;
    }
    for path in &sandbox.write_paths {
        created = allow(created, path, all, true)?;
    }
    Ok(created.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_cover_the_venv_and_the_base_interpreter() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base/bin");
        let venv = tmp.path().join("venv/bin");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&venv).unwrap();
        std::fs::write(base.join("python3"), b"").unwrap();
        std::os::unix::fs::symlink(base.join("python3"), venv.join("python")).unwrap();
        let prefixes = interpreter_prefixes(&venv.join("python"));
        let real = std::fs::canonicalize(tmp.path()).unwrap();
        assert_eq!(prefixes, vec![tmp.path().join("venv"), real.join("base")]);
    }

    #[test]
    fn own_task_rights_follow_the_abi() {
        // Bits from the kernel's uapi: WRITE_FILE 1<<1, READ_FILE 1<<2, READ_DIR 1<<3, TRUNCATE 1<<14.
        assert_eq!(own_task_access(2), 0b1110);
        assert_eq!(own_task_access(7), 0b1110 | 1 << 14);
        // EXECUTE 1<<0, READ_FILE 1<<2, READ_DIR 1<<3: what SYSTEM_READ grants on the parent's /proc.
        assert_eq!(own_proc_access(&Sandbox { read_paths: vec!["/x".into()], ..Sandbox::strict() }), 0b1101);
        assert_eq!(own_proc_access(&Sandbox::strict()), 0);
    }

    #[test]
    fn a_missing_write_path_is_an_error() {
        let sandbox = Sandbox {
            enabled: true,
            write_paths: vec![PathBuf::from("/nonexistent/cudal1/scratch")],
            ..Sandbox::default()
        };
        match build(&sandbox, Path::new("/usr/bin/python3")) {
            Err(e) => assert!(e.detail.contains("/nonexistent/cudal1/scratch"), "{}", e.detail),
            Ok(None) => eprintln!("SKIP: no Landlock here, nothing is opened"),
            Ok(Some(_)) => panic!("a missing write path was accepted"),
        }
    }
}
