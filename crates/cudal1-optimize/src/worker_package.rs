//! The embedded model's worker package, embedded at build time and written out on first use, so
//! that `EmbeddedModel` finds `cudal1_llm_worker` wherever `cudal1` is installed.

use std::io;
use std::path::{Path, PathBuf};

const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/llm_worker_files.rs"));

/// `<root>/cudal1_llm_worker/*.py`; `root` is what `EmbeddedConfig::pythonpath` wants.
#[derive(Debug, Clone)]
pub struct LlmWorkerPackage {
    pub root: PathBuf,
}

impl LlmWorkerPackage {
    /// A short hash of the embedded sources, so that two versions never share files.
    pub fn version_hash() -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (name, text) in FILES {
            for b in name.bytes().chain(text.bytes()) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }

    /// Writes the package under `cache/llm-worker-<hash>/` unless it is already there.
    pub fn install(cache: &Path) -> io::Result<LlmWorkerPackage> {
        let root = cache.join(format!("llm-worker-{}", Self::version_hash()));
        let marker = root.join("cudal1_llm_worker").join(".complete");
        if !marker.exists() {
            // Written into a private directory and renamed, so that concurrent cudal1
            // processes never import half a package.
            std::fs::create_dir_all(cache)?;
            let tmp = tempfile_in(cache)?;
            let pkg = tmp.path().join("cudal1_llm_worker");
            std::fs::create_dir_all(&pkg)?;
            for (name, text) in FILES {
                std::fs::write(pkg.join(name), text)?;
            }
            std::fs::write(pkg.join(".complete"), "")?;
            let tmp = tmp.keep();
            match std::fs::rename(&tmp, &root) {
                Ok(()) => {}
                Err(_) if marker.exists() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    return Err(e);
                }
            }
        }
        Ok(LlmWorkerPackage { root })
    }

    pub fn file_names() -> impl Iterator<Item = &'static str> {
        FILES.iter().map(|(n, _)| *n)
    }
}

fn tempfile_in(parent: &Path) -> io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix(".llm-worker-tmp-").tempdir_in(parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_every_embedded_file_once_and_matches_the_source_tree() {
        let dir = tempfile::tempdir().unwrap();
        let a = LlmWorkerPackage::install(dir.path()).unwrap();
        let b = LlmWorkerPackage::install(dir.path()).unwrap();
        assert_eq!(a.root, b.root);
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/cudal1_llm_worker");
        for name in LlmWorkerPackage::file_names() {
            let written = std::fs::read_to_string(a.root.join("cudal1_llm_worker").join(name)).unwrap();
            assert_eq!(written, std::fs::read_to_string(source.join(name)).unwrap(), "{name}");
        }
        assert!(LlmWorkerPackage::file_names().any(|n| n == "__main__.py"));
        // Nothing but the package is left in the cache.
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(entries.len(), 1, "{entries:?}");
    }
}
