//! Embeds the Python runner package (python/cudal1_runner/*.py) in the binary, so that an installed
//! `cudal1` never depends on where the source tree is.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let package = Path::new(&manifest).join("../../python/cudal1_runner").canonicalize().unwrap();
    println!("cargo:rerun-if-changed={}", package.display());
    let mut files: Vec<_> = std::fs::read_dir(&package)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for f in files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_name().unwrap().to_str().unwrap();
        writeln!(out, "    ({name:?}, include_str!({:?})),", f.display().to_string()).unwrap();
    }
    out.push(']');
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("runner_files.rs");
    std::fs::write(dest, out).unwrap();
}
