//! Taking a candidate's output file into the trusted side's custody before anything reads it.
//!
//! The candidate's runner writes its outputs into its own scratch directory, where the candidate
//! can also write: it could leave a symbolic link to an expected output there (a model returning
//! zeros would then compare equal to the reference), a FIFO that blocks the reader, a hard link,
//! or a file it keeps rewriting. So before the reference runner compares a file, cudal1 moves it
//! out of the candidate's reach: each path component below the scratch directory is opened
//! without following links, the file is renamed into a private directory of the reference, and
//! only a regular file with a single link is accepted there. What the candidate still holds (an
//! open descriptor) can change the file's bytes, never what file is read; a reference that fails
//! on such a file fails because of the candidate (see `candidate.rs`).

use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// Why a candidate's output file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("output file `{path}`: {why}")]
pub struct Refused {
    pub path: PathBuf,
    pub why: String,
}

fn open_dir(dir: Option<&OwnedFd>, name: &Path) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
    let fd = openat(dir.map(AsRawFd::as_raw_fd), name, flags, Mode::empty())?;
    // SAFETY: openat just returned this descriptor, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Moves `path`, which must lie below the candidate's `scratch` directory, to `into/name` and
/// returns the new path. `scratch` and `into` are cudal1's own directories (their parents are
/// out of the candidate's reach); no link below `scratch` is followed.
pub fn take(scratch: &Path, path: &Path, into: &Path, name: &str) -> Result<PathBuf, Refused> {
    let refuse = |why: String| Refused { path: path.to_owned(), why };
    let relative = path.strip_prefix(scratch).map_err(|_| {
        refuse(format!("not inside the candidate's directory `{}`", scratch.display()))
    })?;
    let parts: Vec<&Path> = relative
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(Path::new(p)),
            other => Err(refuse(format!(
                "its path has a `{}` component",
                other.as_os_str().to_string_lossy()
            ))),
        })
        .collect::<Result<_, _>>()?;
    let Some((file, dirs)) = parts.split_last() else {
        return Err(refuse("it names the candidate's directory itself".into()));
    };
    let mut dir = open_dir(None, scratch)
        .map_err(|e| refuse(format!("cannot open the candidate's directory: {e}")))?;
    for d in dirs {
        dir = open_dir(Some(&dir), d)
            .map_err(|e| refuse(format!("`{}` is not a plain directory ({e})", d.display())))?;
    }
    let target = open_dir(None, into)
        .map_err(|e| refuse(format!("cannot open `{}`: {e}", into.display())))?;
    // Renaming moves a link itself, never what it points to.
    renameat(Some(dir.as_raw_fd()), *file, Some(target.as_raw_fd()), name)
        .map_err(|e| refuse(format!("cannot be moved out of the candidate's reach: {e}")))?;
    let taken = into.join(name);
    let stat = fstatat(Some(target.as_raw_fd()), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| refuse(format!("cannot be read after it was moved: {e}")))?;
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    let why = if kind != SFlag::S_IFREG {
        Some(format!("it is not a regular file ({})", kind_name(kind)))
    } else if stat.st_nlink != 1 {
        Some(format!("it has {} links (another name for the same file)", stat.st_nlink))
    } else {
        None
    };
    if let Some(why) = why {
        let _ = std::fs::remove_file(&taken);
        return Err(refuse(why));
    }
    Ok(taken)
}

fn kind_name(kind: SFlag) -> &'static str {
    match kind {
        k if k == SFlag::S_IFLNK => "a symbolic link",
        k if k == SFlag::S_IFDIR => "a directory",
        k if k == SFlag::S_IFIFO => "a FIFO",
        k if k == SFlag::S_IFSOCK => "a socket",
        k if k == SFlag::S_IFCHR || k == SFlag::S_IFBLK => "a device",
        _ => "something else",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let scratch = root.path().join("candidate");
        let private = root.path().join("reference");
        std::fs::create_dir_all(scratch.join("outputs")).unwrap();
        std::fs::create_dir_all(&private).unwrap();
        (root, scratch, private)
    }

    #[test]
    fn a_plain_file_is_moved_out_of_the_candidates_directory() {
        let (_root, scratch, private) = dirs();
        let path = scratch.join("outputs/seed-1.pt");
        std::fs::write(&path, b"data").unwrap();
        let taken = take(&scratch, &path, &private, "c-1.pt").unwrap();
        assert_eq!(taken, private.join("c-1.pt"));
        assert_eq!(std::fs::read(&taken).unwrap(), b"data");
        assert!(!path.exists());
    }

    #[test]
    fn links_fifos_and_paths_elsewhere_are_refused_and_the_target_is_untouched() {
        let (root, scratch, private) = dirs();
        let expected = root.path().join("expected.pt");
        std::fs::write(&expected, b"the reference's output").unwrap();
        // A link to an expected output, in place of the candidate's own.
        let link = scratch.join("outputs/seed-2.pt");
        symlink(&expected, &link).unwrap();
        let err = take(&scratch, &link, &private, "c-2.pt").unwrap_err();
        assert!(err.why.contains("symbolic link"), "{err}");
        // A directory on the way that is a link.
        std::fs::create_dir_all(root.path().join("elsewhere")).unwrap();
        std::fs::write(root.path().join("elsewhere/seed-3.pt"), b"x").unwrap();
        symlink(root.path().join("elsewhere"), scratch.join("sneaky")).unwrap();
        let err =
            take(&scratch, &scratch.join("sneaky/seed-3.pt"), &private, "c-3.pt").unwrap_err();
        assert!(err.why.contains("not a plain directory"), "{err}");
        assert!(root.path().join("elsewhere/seed-3.pt").exists());
        // A hard link to a file outside.
        let hard = scratch.join("outputs/seed-4.pt");
        std::fs::hard_link(&expected, &hard).unwrap();
        assert!(take(&scratch, &hard, &private, "c-4.pt").unwrap_err().why.contains("2 links"));
        // A FIFO would block the reader.
        let fifo = scratch.join("outputs/seed-5.pt");
        nix::unistd::mkfifo(&fifo, Mode::S_IRWXU).unwrap();
        assert!(take(&scratch, &fifo, &private, "c-5.pt").unwrap_err().why.contains("FIFO"));
        // Paths that leave the directory.
        assert!(take(&scratch, &expected, &private, "c-6.pt").is_err());
        assert!(take(&scratch, &scratch.join("outputs/../../expected.pt"), &private, "c-7.pt")
            .unwrap_err()
            .why
            .contains("`..`"));
        assert_eq!(std::fs::read(&expected).unwrap(), b"the reference's output");
        assert_eq!(std::fs::read_dir(&private).unwrap().count(), 0);
    }
}
