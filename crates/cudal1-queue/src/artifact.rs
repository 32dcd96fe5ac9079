//! Builds that travel between machines: a compile-stage worker packs a program's extension
//! directory (`CompileCache::dir_for`) into a tar archive; a run-stage worker whose Python, torch
//! and CUDA match unpacks it into its own cache, where the engine's compile pool finds it built.
//! Only regular files and directories are unpacked, and only below the program's directory; the
//! build is published there whole (`cudal1_eval::compile::publish`), and only when it is one.

use std::io;
use std::path::Path;

use cudal1_eval::compile::{self, published};
use cudal1_eval::CompileCache;
use cudal1_store::Artifact;
use cudal1_task::Candidate;

/// What builds depend on: extensions built under another interpreter, torch or CUDA are not used.
pub fn environment(probe: &cudal1_python::Probe) -> String {
    format!(
        "python {} | torch {} at {} | cuda {} | arch {}",
        probe.version,
        probe.torch.as_deref().unwrap_or("-"),
        probe.torch_dir.as_ref().map_or("-".into(), |d| d.display().to_string()),
        probe.cuda.as_deref().unwrap_or("-"),
        probe.gpus.first().map_or("-", String::as_str)
    )
}

/// A tar archive of a built program's extension directory (lock files left out).
pub fn pack(dir: &Path) -> io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    add_dir(&mut builder, dir, Path::new(""))?;
    builder.into_inner()
}

fn add_dir(builder: &mut tar::Builder<Vec<u8>>, root: &Path, rel: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let name = rel.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            builder.append_dir(&name, entry.path())?;
            add_dir(builder, root, &name)?;
        } else if kind.is_file() && entry.file_name() != "lock" {
            builder.append_path_with_name(entry.path(), &name)?;
        }
    }
    Ok(())
}

/// Puts the artifact's build where the engine looks for `candidate`'s, unless it was made under
/// another `environment` or a published build is there already (an entry that is not one is
/// replaced). Failures are logged: the engine then builds.
pub fn install(
    cache: &CompileCache,
    candidate: &Candidate,
    artifact: &Artifact,
    environment: &str,
) {
    if artifact.environment != environment {
        tracing::info!(ours = environment, theirs = %artifact.environment, "a shipped build was made elsewhere; building here");
        return;
    }
    let dir = cache.dir_for(candidate);
    // As the compile pool does: no build of this program is published meanwhile.
    let _lock = compile::lock(&dir);
    if published(&dir).is_some() {
        return;
    }
    if let Err(e) = unpack_into(&dir, &artifact.archive) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not unpack a shipped build; building here");
    }
}

fn unpack_into(dir: &Path, archive: &[u8]) -> io::Result<()> {
    let parent = dir.parent().ok_or_else(|| io::Error::other("a build directory has a parent"))?;
    std::fs::create_dir_all(parent)?;
    let incoming = tempfile::Builder::new().prefix(".incoming-").tempdir_in(parent)?;
    let mut tar = tar::Archive::new(archive);
    for entry in tar.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            return Err(io::Error::other(format!(
                "the archive holds a {kind:?}, not a file or directory"
            )));
        }
        // `unpack_in` refuses paths that leave the directory.
        if !entry.unpack_in(incoming.path())? {
            return Err(io::Error::other("the archive holds a path outside its directory"));
        }
    }
    if published(incoming.path()).is_none() {
        return Err(io::Error::other("the archive holds no finished build"));
    }
    compile::publish(incoming, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_build_unpacks_where_the_engine_looks() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let candidate = Candidate::from_source("c".into(), "class ModelNew: pass\n".into());
        let source_cache = CompileCache { root: from.path().to_owned() };
        let built = source_cache.dir_for(&candidate);
        std::fs::create_dir_all(built.join("ext_1")).unwrap();
        std::fs::write(built.join("ext_1/ext.so"), b"\x7fELF...").unwrap();
        std::fs::write(built.join("ext_1/lock"), b"").unwrap();
        std::fs::write(
            built.join(compile::BUILT),
            format!(r#"{{"missed": [], "format": {}}}"#, compile::FORMAT),
        )
        .unwrap();
        std::fs::write(
            built.join(compile::BUILDS),
            r#"{"f": {"library": "ext_1/ext.so", "kind": "python"}}"#,
        )
        .unwrap();
        let artifact = Artifact { environment: "env".into(), archive: pack(&built).unwrap() };

        let cache = CompileCache { root: to.path().join("extensions") };
        install(
            &cache,
            &candidate,
            &Artifact { environment: "other".into(), ..artifact.clone() },
            "env",
        );
        assert!(!cache.dir_for(&candidate).exists(), "another environment's build is not used");
        install(&cache, &candidate, &artifact, "env");
        let dir = cache.dir_for(&candidate);
        assert_eq!(std::fs::read(dir.join("ext_1/ext.so")).unwrap(), b"\x7fELF...");
        assert!(published(&dir).is_some() && !dir.join("ext_1/lock").exists());
        // An entry that is not a published build (one a killed build left) is replaced.
        std::fs::remove_file(dir.join(compile::BUILDS)).unwrap();
        install(&cache, &candidate, &artifact, "env");
        assert!(published(&dir).is_some());
    }

    #[test]
    fn archives_with_links_or_without_a_build_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        b.append_link(&mut header, "escape", "/etc").unwrap();
        let archive = b.into_inner().unwrap();
        assert!(unpack_into(&dir.path().join("x"), &archive).is_err());
        let empty = tar::Builder::new(Vec::new()).into_inner().unwrap();
        assert!(unpack_into(&dir.path().join("y"), &empty).is_err());
        assert!(!dir.path().join("x").exists() && !dir.path().join("y").exists());
    }
}
