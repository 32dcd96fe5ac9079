//! The Python packages shipped inside the binary (embedded by build.rs) and written out on first
//! use into a cache directory keyed by their content hash.

use std::io;
use std::path::{Path, PathBuf};

/// One embedded package: `python/<name>/*.py` at build time.
#[derive(Debug)]
pub struct EmbeddedPackage {
    /// The importable name, e.g. `cudal1_runner`.
    pub name: &'static str,
    /// The cache directory is `<cache>/<dir_prefix>-<hash>/`.
    dir_prefix: &'static str,
    files: &'static [(&'static str, &'static str)],
}

/// The runner that executes reference and candidate programs.
pub const RUNNER: EmbeddedPackage = EmbeddedPackage {
    name: "cudal1_runner",
    dir_prefix: "runner",
    files: include!(concat!(env!("OUT_DIR"), "/runner_files.rs")),
};

/// The model worker: the embedded LLM of `optimize`, and the policy of `train`.
pub const MODEL_WORKER: EmbeddedPackage = EmbeddedPackage {
    name: "cudal1_model",
    dir_prefix: "model-worker",
    files: include!(concat!(env!("OUT_DIR"), "/model_files.rs")),
};

impl EmbeddedPackage {
    /// A short hash of the embedded sources, so that two versions of cudal1 never share files.
    pub fn version_hash(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (name, text) in self.files {
            for b in name.bytes().chain(text.bytes()) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }

    /// Writes the package as `<root>/<name>/*.py`, `root` being `cache/<prefix>-<hash>/`, unless
    /// it is already there; returns `root`, the directory to put on `PYTHONPATH`.
    pub fn install(&self, cache: &Path) -> io::Result<PathBuf> {
        let root = cache.join(format!("{}-{}", self.dir_prefix, self.version_hash()));
        let marker = root.join(self.name).join(".complete");
        if !marker.exists() {
            // Written into a private directory and renamed, so that concurrent cudal1
            // processes never import half a package.
            std::fs::create_dir_all(cache)?;
            let tmp = tempfile::Builder::new()
                .prefix(&format!(".{}-tmp-", self.dir_prefix))
                .tempdir_in(cache)?;
            let pkg = tmp.path().join(self.name);
            std::fs::create_dir_all(&pkg)?;
            for (name, text) in self.files {
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
        Ok(root)
    }

    pub fn file_names(&self) -> impl Iterator<Item = &'static str> {
        self.files.iter().map(|(n, _)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_packages_carry_the_one_wire() {
        let wire = |p: &EmbeddedPackage| p.files.iter().find(|(n, _)| *n == "wire.py").map(|f| f.1);
        assert!(wire(&RUNNER).is_some_and(|t| t.contains("def serve(")));
        assert_eq!(wire(&RUNNER), wire(&MODEL_WORKER));
    }

    #[test]
    fn each_package_installs_once_matches_the_source_tree_and_leaves_nothing_else() {
        for package in [&RUNNER, &MODEL_WORKER] {
            let dir = tempfile::tempdir().unwrap();
            let a = package.install(dir.path()).unwrap();
            let b = package.install(dir.path()).unwrap();
            assert_eq!(a, b);
            let source =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python").join(package.name);
            for name in package.file_names() {
                let written = std::fs::read_to_string(a.join(package.name).join(name)).unwrap();
                assert_eq!(written, std::fs::read_to_string(source.join(name)).unwrap(), "{name}");
            }
            assert!(package.file_names().any(|n| n == "__main__.py"));
            let entries: Vec<_> =
                std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(entries.len(), 1, "{entries:?}");
        }
    }
}
