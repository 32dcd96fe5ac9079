//! The Landlock ruleset of a sandboxed worker, built in the parent (it opens paths and
//! allocates) and applied by the child just before exec through its file descriptor.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

use crate::spec::Sandbox;

/// The newest ABI whose rights we have vetted (ABI 7 only adds audit flags to ABI 6).
const TARGET_ABI: ABI = ABI::V7;

/// Directories every process needs to read (and execute from) when reads are restricted. Not
/// `/dev`: a right on a directory covers everything below it, and `/dev/shm` is where cudal1's
/// scratch directories (the reference's expected outputs among them) live on large hosts. Not
/// `/etc` as a whole either: see [`etc_rules`].
const SYSTEM_READ: &[&str] =
    &["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/proc", "/sys"];

/// What a worker may read under `/etc`: only what any user of the host could read
/// ([`world_readable`]). cudal1 may run as root, and a candidate that read `/etc/shadow` could
/// hand its text back in an error message. Computed once per process.
fn etc_rules() -> &'static [PathBuf] {
    static RULES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    RULES.get_or_init(|| world_readable(Path::new("/etc")))
}

/// The paths to grant so that exactly what any user could read below `root` is readable: `root`
/// itself when everything below it is, else, entry by entry, the world-readable files and the
/// subtrees that are readable whole. A directory any user could not list and enter
/// (`o+rx`) is left out with everything below it; a link needs no rule (Landlock judges the
/// file it leads to). Nothing is followed across links.
pub(crate) fn world_readable(root: &Path) -> Vec<PathBuf> {
    let mut parts = Vec::new();
    if readable_below(root, &mut parts) {
        vec![root.to_path_buf()]
    } else {
        parts
    }
}

/// Whether everything at and below `path` is world-readable; where not, the parts that are
/// go to `parts`.
fn readable_below(path: &Path, parts: &mut Vec<PathBuf>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
    let mode = meta.permissions().mode();
    if meta.file_type().is_symlink() {
        return true;
    }
    if !meta.is_dir() {
        return mode & 0o004 != 0;
    }
    if mode & 0o005 != 0o005 {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(path) else { return false };
    let mut children: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    children.sort();
    let mut whole = true;
    let mut below = Vec::new();
    for child in children {
        let mut inner = Vec::new();
        if readable_below(&child, &mut inner) {
            below.push(child);
        } else {
            whole = false;
            below.extend(inner);
        }
    }
    if !whole {
        // Links stand for themselves only where their directory is granted whole.
        below.retain(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.file_type().is_symlink()));
        parts.extend(below);
    }
    whole
}

/// Device files a worker may read and write (CUDA needs the nvidia ones and their ioctls).
/// Nothing below `/dev/shm`: a worker writes only to its own directories.
const DEVICE_FILES: &[&str] =
    &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

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
    ruleset
        .add_rule(PathBeneath::new(fd, access))
        .map_err(err(format!("rule for `{}`", path.display())))
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

/// The rights a child grants itself on its private `/tmp` (`crate::private_tmp`): every right the
/// ruleset handles on a kernel of this `abi`, as on its write paths.
pub(crate) fn own_tmp_access(abi: i32) -> u64 {
    AccessFs::from_all(ABI::from(abi.min(TARGET_ABI as i32))).bits()
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
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET_ABI))
            .map_err(err("handled network rights".into()))?;
    }
    // No signals to processes outside the sandbox (as root, kill(-1) would reach everything),
    // no abstract unix sockets outside it.
    let scopes =
        if sandbox.outside_ipc { Scope::Signal.into() } else { Scope::from_all(TARGET_ABI) };
    ruleset = ruleset.scope(scopes).map_err(err("scopes".into()))?;
    let mut created = ruleset.create().map_err(err("creating the ruleset".into()))?;

    if sandbox.read_paths.is_empty() {
        created = allow(created, Path::new("/"), read, true)?;
    } else {
        for dir in SYSTEM_READ {
            created = allow(created, Path::new(dir), read, false)?;
        }
        for path in etc_rules() {
            created = allow(created, path, read, false)?;
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
    fn only_what_any_user_could_read_is_granted_below_a_directory() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        let set = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let file = |p: &Path, mode: u32| {
            std::fs::write(p, "x").unwrap();
            set(p, mode);
        };
        for d in ["open", "mixed", "private", "mixed/inner"] {
            std::fs::create_dir_all(etc.join(d)).unwrap();
        }
        file(&etc.join("passwd"), 0o644);
        file(&etc.join("shadow"), 0o600);
        file(&etc.join("gshadow"), 0o640);
        file(&etc.join("open/a.conf"), 0o644);
        file(&etc.join("mixed/ok.conf"), 0o444);
        file(&etc.join("mixed/key.pem"), 0o600);
        file(&etc.join("mixed/inner/b.conf"), 0o644);
        file(&etc.join("private/c.conf"), 0o644);
        set(&etc.join("private"), 0o700);
        std::os::unix::fs::symlink(etc.join("shadow"), etc.join("open/link-to-shadow")).unwrap();
        std::os::unix::fs::symlink("shadow", etc.join("top-link")).unwrap();

        let granted = world_readable(&etc);
        let rel: Vec<String> =
            granted.iter().map(|p| p.strip_prefix(&etc).unwrap().display().to_string()).collect();
        assert_eq!(rel, ["mixed/inner", "mixed/ok.conf", "open", "passwd"]);
        // A tree readable whole is one rule.
        set(&etc.join("shadow"), 0o644);
        set(&etc.join("gshadow"), 0o644);
        set(&etc.join("mixed/key.pem"), 0o644);
        set(&etc.join("private"), 0o755);
        assert_eq!(world_readable(&etc), vec![etc.clone()]);
        assert_eq!(world_readable(&etc.join("missing")), Vec::<PathBuf>::new());
    }

    #[test]
    fn the_real_etc_is_granted_without_its_secrets() {
        let granted = etc_rules();
        let shadow = Path::new("/etc/shadow");
        if shadow.exists() {
            assert!(
                granted.iter().all(|p| !shadow.starts_with(p)),
                "a rule covers /etc/shadow: {granted:?}"
            );
        }
        let passwd = Path::new("/etc/passwd");
        if passwd.exists() {
            assert!(
                granted.iter().any(|p| passwd.starts_with(p)),
                "no rule covers /etc/passwd: {granted:?}"
            );
        }
    }

    #[test]
    fn own_task_rights_follow_the_abi() {
        // Bits from the kernel's uapi: WRITE_FILE 1<<1, READ_FILE 1<<2, READ_DIR 1<<3, TRUNCATE 1<<14.
        assert_eq!(own_task_access(2), 0b1110);
        assert_eq!(own_task_access(7), 0b1110 | 1 << 14);
        // EXECUTE 1<<0, READ_FILE 1<<2, READ_DIR 1<<3: what SYSTEM_READ grants on the parent's /proc.
        assert_eq!(
            own_proc_access(&Sandbox { read_paths: vec!["/x".into()], ..Sandbox::strict() }),
            0b1101
        );
        assert_eq!(own_proc_access(&Sandbox::strict()), 0);
        // ABI 1: EXECUTE..MAKE_SYM, bits 0 to 12; later ABIs add REFER (13) and TRUNCATE (14);
        // past the vetted ABI, what it handles.
        assert_eq!(own_tmp_access(1), (1 << 13) - 1);
        assert_eq!(own_tmp_access(3), (1 << 15) - 1);
        assert_eq!(own_tmp_access(99), AccessFs::from_all(TARGET_ABI).bits());
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
