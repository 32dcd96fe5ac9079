//! Embeds the Python packages cudal1 ships (python/cudal1_runner and python/cudal1_model,
//! their *.py files) in the binary, so that an installed `cudal1` never depends on where the
//! source tree is. `cudal1_model/wire.py` is a link to `cudal1_runner/wire.py`, the wire both
//! speak: each package gets its own copy of the one file.

use std::fmt::Write;
use std::path::Path;

fn main() {
    for (package, listing) in
        [("cudal1_runner", "runner_files.rs"), ("cudal1_model", "model_files.rs")]
    {
        embed(package, listing);
    }
}

/// Writes `OUT_DIR/<listing>`: a `&[(file name, contents)]` expression over the package's files.
fn embed(package: &str, listing: &str) {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let dir = Path::new(&manifest).join("../../python").join(package).canonicalize().unwrap();
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
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
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join(listing);
    std::fs::write(dest, out).unwrap();
}
