//! Embeds the embedded model's worker package (python/cudal1_llm_worker/*.py) in the binary, so
//! that an installed `cudal1` can run the local model without the source tree.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let package = Path::new(&manifest).join("../../python/cudal1_llm_worker").canonicalize().unwrap();
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
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("llm_worker_files.rs");
    std::fs::write(dest, out).unwrap();
}
