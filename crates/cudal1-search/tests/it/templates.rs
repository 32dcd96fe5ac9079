//! `Prompts::from_dir` with real files.

use std::fs;

use cudal1_search::{Exemplar, PromptError, Prompts};

fn exemplar() -> Exemplar {
    Exemplar {
        code: "class ModelNew(nn.Module): pass".into(),
        speedup: 1.25,
        verdict: "correct".into(),
        profile: None,
    }
}

#[test]
fn a_user_template_overrides_and_the_rest_stay_built_in() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("first.j2"), "Make this faster:\n{{ reference }}\n").unwrap();
    let prompts = Prompts::from_dir(dir.path()).unwrap();
    assert_eq!(
        prompts.first("class Model: pass\n").unwrap(),
        "Make this faster:\nclass Model: pass"
    );
    let builtin = Prompts::builtin();
    assert_eq!(
        prompts.contrastive("class Model: pass", &[exemplar()]).unwrap(),
        builtin.contrastive("class Model: pass", &[exemplar()]).unwrap()
    );
}

#[test]
fn overriding_the_rules_changes_both_prompts() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("rules.j2"), "HOUSE RULES: keep float64.").unwrap();
    let prompts = Prompts::from_dir(dir.path()).unwrap();
    let first = prompts.first("r").unwrap();
    let contrastive = prompts.contrastive("r", &[exemplar()]).unwrap();
    for p in [&first, &contrastive] {
        assert!(p.contains("HOUSE RULES: keep float64."), "{p}");
        assert!(!p.contains("load_inline` are welcome"));
    }
}

#[test]
fn a_contrastive_override_sees_speedups_and_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("contrastive.j2"),
        "{% for e in exemplars %}[{{ loop.index }}] {{ e.speedup_text }} {{ e.speedup }} {{ e.verdict }}\n{% endfor %}",
    )
    .unwrap();
    let prompts = Prompts::from_dir(dir.path()).unwrap();
    let two = [
        exemplar(),
        Exemplar { code: "x".into(), speedup: 0.5, verdict: "slower".into(), profile: None },
    ];
    assert_eq!(
        prompts.contrastive("r", &two).unwrap(),
        "[1] 1.25x 1.25 correct\n[2] 0.50x 0.5 slower\n"
    );
}

#[test]
fn a_syntax_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("first.j2"), "{% for x in %}").unwrap();
    let err = Prompts::from_dir(dir.path()).unwrap_err();
    assert!(matches!(&err, PromptError::Template { name, .. } if name == "first.j2"), "{err:?}");
    assert!(err.to_string().contains(&dir.path().join("first.j2").display().to_string()), "{err}");
}

#[test]
fn a_misspelt_variable_fails_at_load_time() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("first.j2"), "{{ referense }}").unwrap();
    let err = Prompts::from_dir(dir.path()).unwrap_err();
    assert!(matches!(&err, PromptError::Template { name, .. } if name == "first.j2"), "{err:?}");
}

#[test]
fn missing_or_empty_directories_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(Prompts::from_dir(dir.path()), Err(PromptError::NoTemplates { .. })));
    let missing = dir.path().join("nope");
    let err = Prompts::from_dir(&missing).unwrap_err();
    assert!(matches!(&err, PromptError::Io { path, .. } if *path == missing), "{err:?}");
}
