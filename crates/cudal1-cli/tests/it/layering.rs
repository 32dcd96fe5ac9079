//! What the sources may hold, read from the files: a library returns what failed and what can be
//! done as data, and only the CLI (and `serve`, in its own words) writes a hint.

use std::path::Path;

fn rust_files(dir: &Path, into: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn no_library_crate_glues_a_hint_onto_its_errors() {
    let crates = super::repo().join("crates");
    let mut libraries = 0;
    let mut glued = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        if dir.file_name().is_some_and(|n| n == "cudal1-cli") || !dir.join("src").is_dir() {
            continue;
        }
        libraries += 1;
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // The escape as written in a string literal, and a hint after a real line break.
            if text.contains("\\nhint:") || text.contains("\nhint:") {
                glued.push(file.strip_prefix(&crates).unwrap().display().to_string());
            }
        }
    }
    assert!(libraries >= 10, "found only {libraries} library crates under {}", crates.display());
    assert!(glued.is_empty(), "library sources that glue `\\nhint:` onto text: {glued:?}");
}
