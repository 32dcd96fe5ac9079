//! The command line itself: every flag is described in `--help`, completions, values that look
//! like flags, and the README's links.

use super::repo;
use std::process::Command;

fn cudal1(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cudal1"))
        .current_dir(repo())
        .args(args)
        .output()
        .expect("cudal1 runs")
}

/// The subcommands a `--help` page lists (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Options and arguments of a `--help` page that have no description.
fn undescribed(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let mut missing = Vec::new();
    let mut in_section = false;
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("Options:") || line.starts_with("Arguments:") {
            in_section = true;
            continue;
        }
        if !line.starts_with(' ') {
            in_section = false;
            continue;
        }
        let item = line.trim_start();
        let indent = line.len() - item.len();
        if !in_section
            || !(item.starts_with('-') || item.starts_with('<') || item.starts_with('['))
            || indent > 6
        {
            continue;
        }
        // The description follows the name after two spaces, or on the next, deeper line.
        let same_line = item.split_once("  ").is_some_and(|(_, d)| !d.trim().is_empty());
        let next_line = lines.get(i + 1).is_some_and(|n| {
            let t = n.trim_start();
            !t.is_empty() && n.len() - t.len() > indent && !t.starts_with('-')
        });
        if !(same_line || next_line) {
            missing.push(item.to_owned());
        }
    }
    missing
}

#[test]
fn every_flag_of_every_subcommand_has_a_description() {
    let mut pages = vec![Vec::<String>::new()];
    let mut checked = 0;
    let mut missing = Vec::new();
    while let Some(path) = pages.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = cudal1(&args);
        assert!(out.status.success(), "{args:?}");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        for m in undescribed(&help) {
            missing.push(format!("cudal1 {}: {m}", path.join(" ")));
        }
        checked += 1;
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            pages.push(next);
        }
    }
    assert!(checked >= 9, "only {checked} help pages were found");
    assert!(missing.is_empty(), "flags without a description:\n{}", missing.join("\n"));
    // The checker itself finds an undescribed flag.
    assert_eq!(undescribed("Options:\n      --quiet\n  -h, --help  Print help\n"), ["--quiet"]);
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = cudal1(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("cudal1") && script.contains("candidates") && script.contains("export"),
            "{shell}: {script:.300}"
        );
    }
    let out = cudal1(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn negative_numbers_are_values_and_get_a_clear_error() {
    let out = cudal1(&["eval", "--task", "a.py", "--candidate", "b.py", "--budget", "-1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "error: `--budget`, `--call-timeout` and `--load-timeout` must be positive"
        ),
        "{err}"
    );
    let out =
        cudal1(&["eval", "--task", "a.py", "--candidate", "b.py", "--atol", "-0.5", "--rtol", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr)
        .starts_with("error: `--atol` must be a tolerance of 0 or more"));
    let out = cudal1(&["eval", "--task", "a.py", "--candidate", "b.py", "--scale", "-0.5"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`--scale -0.5` must be a number in (0, 1]")
    );
}

#[test]
fn common_mistakes_say_what_to_do() {
    // A directory given as a task.
    let out = cudal1(&["eval", "--task", "tests/suite-cpu/tasks", "--candidate", "x.py"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`--task tests/suite-cpu/tasks` is a directory")
            && err.contains("hint: use `--suite tests/suite-cpu/tasks --candidates DIR`"),
        "{err}"
    );
    // An unknown device names every form, `all` included.
    let out = cudal1(&["eval", "--task", "a.py", "--candidate", "b.py", "--device", "gpu"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown device `gpu`: use `cpu`, `cuda`, `cuda:N` or `all`"), "{err}");
}

/// Markdown links and backquoted paths of the README that leave the repository, or lead nowhere.
#[test]
fn the_readme_links_only_to_files_inside_the_repository() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut bad = Vec::new();
    for (i, _) in readme.match_indices("](") {
        let target = readme[i + 2..].split(')').next().unwrap_or("");
        let path = target.split('#').next().unwrap_or("");
        if path.is_empty() || path.starts_with("http://") || path.starts_with("https://") {
            continue;
        }
        let full = root.join(path);
        if !full.exists() || !full.canonicalize().unwrap().starts_with(&root) {
            bad.push(target.to_owned());
        }
    }
    for word in readme.split('`').skip(1).step_by(2) {
        if word.starts_with("../") || word.contains("/shared/") {
            bad.push(word.to_owned());
        }
    }
    assert!(bad.is_empty(), "README links that leave the repository or lead nowhere: {bad:?}");
    for doc in ["docs/design.md", "docs/json.md", "docs/protocol.md", "docs/exploits.md"] {
        assert!(readme.contains(&format!("]({doc})")), "the README links {doc}");
    }
}
