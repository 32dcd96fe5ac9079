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

#[test]
fn no_command_imports_another_command() {
    // Commands share what lives below them (`workspace`, `batch`, `against`, `profiling`, ...);
    // `main.rs` alone dispatches to them, and `args/` holds their argument types.
    let src = super::repo().join("crates/cudal1-cli/src");
    let mut commands = 0;
    let mut imports = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("cmd_") {
            continue;
        }
        commands += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            // Any other command named in code (not in a comment) is a use of it.
            let code = line.split("//").next().unwrap_or("");
            let named = code.match_indices("cmd_").any(|(at, _)| {
                let before = code[..at].chars().last();
                let other: String = code[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                before.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_') && other != name
            });
            if named {
                imports.push(format!("{name}.rs:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(commands >= 10, "found only {commands} command files in {}", src.display());
    assert!(imports.is_empty(), "commands that import other commands: {imports:#?}");
}

#[test]
fn the_clap_types_name_no_command() {
    // `args/` holds every clap type and the flag groups commands share; commands import from it,
    // so it never imports a command back.
    let dir = super::repo().join("crates/cudal1-cli/src/args");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() >= 5, "found only {} files in {}", files.len(), dir.display());
    let mut named = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("cmd_") || code.contains("crate::workspace") {
                named.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(named.is_empty(), "clap types that import commands: {named:#?}");
    // And no command declares its own clap types.
    let src = dir.parent().unwrap();
    let mut declared = Vec::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if name.starts_with("cmd_")
            && (text.contains("derive(Args") || text.contains("Subcommand)"))
        {
            declared.push(name);
        }
    }
    assert!(declared.is_empty(), "commands that declare clap types: {declared:?}");
}

#[test]
fn only_the_reporters_module_draws_progress() {
    // One progress rule (a bar on a terminal, throttled lines elsewhere) lives in
    // `reporters/mod.rs`, and every reporter built on it in `reporters/`; a command that drew its
    // own bar, or kept a reporter of its own, would bring back a second rule.
    let src = super::repo().join("crates/cudal1-cli/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() >= 10, "found only {} sources under {}", files.len(), src.display());
    let (mut drawing, mut reporting) = (Vec::new(), Vec::new());
    let mut rule = false;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(&src).unwrap().display().to_string();
        if name == "reporters/mod.rs" {
            rule = text.contains("indicatif::");
        } else if text.contains("indicatif") {
            drawing.push(name.clone());
        }
        let declares_reporter = text.lines().any(|l| {
            let l = l.trim_start().trim_start_matches("pub ").trim_start_matches("pub(crate) ");
            l.starts_with("struct ")
                && l.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .nth(1)
                    .is_some_and(|n| n.ends_with("Progress") || n.ends_with("Reporter"))
        });
        if !name.starts_with("reporters/") && declares_reporter {
            reporting.push(name);
        }
    }
    assert!(rule, "reporters/mod.rs draws the bar with indicatif");
    assert!(drawing.is_empty(), "sources besides reporters/mod.rs that use indicatif: {drawing:?}");
    assert!(reporting.is_empty(), "reporters declared outside reporters/: {reporting:?}");
}
