//! The runner package, embedded at build time and written out on first use.

use std::io;
use std::path::{Path, PathBuf};

const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/runner_files.rs"));

/// The runner package on disk: `<root>/cudal1_runner/*.py`; put `root` on `PYTHONPATH`.
#[derive(Debug, Clone)]
pub struct RunnerPackage {
    pub root: PathBuf,
}

impl RunnerPackage {
    /// A short hash of the embedded sources, so that two versions of cudal1 never share files.
    pub fn version_hash() -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (name, text) in FILES {
            for b in name.bytes().chain(text.bytes()) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }

    /// Writes the package under `cache/runner-<hash>/` unless it is already there.
    pub fn install(cache: &Path) -> io::Result<RunnerPackage> {
        let root = cache.join(format!("runner-{}", Self::version_hash()));
        let pkg = root.join("cudal1_runner");
        let marker = pkg.join(".complete");
        if !marker.exists() {
            // Write into a private directory and rename, so concurrent cudal1 processes never see half a package.
            std::fs::create_dir_all(cache)?;
            let tmp = tempfile_dir(cache)?;
            let tmp_pkg = tmp.join("cudal1_runner");
            std::fs::create_dir_all(&tmp_pkg)?;
            for (name, text) in FILES {
                std::fs::write(tmp_pkg.join(name), text)?;
            }
            std::fs::write(tmp_pkg.join(".complete"), "")?;
            match std::fs::rename(&tmp, &root) {
                Ok(()) => {}
                Err(_) if marker.exists() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(RunnerPackage { root })
    }

    pub fn file_names() -> impl Iterator<Item = &'static str> {
        FILES.iter().map(|(n, _)| *n)
    }
}

fn tempfile_dir(parent: &Path) -> io::Result<PathBuf> {
    let dir = parent.join(format!(".runner-tmp-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_every_embedded_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let a = RunnerPackage::install(dir.path()).unwrap();
        let b = RunnerPackage::install(dir.path()).unwrap();
        assert_eq!(a.root, b.root);
        for name in RunnerPackage::file_names() {
            assert!(a.root.join("cudal1_runner").join(name).is_file(), "{name} missing");
        }
        assert!(RunnerPackage::file_names().any(|n| n == "__main__.py"));
    }
}
