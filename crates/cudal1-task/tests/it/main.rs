//! Loading suites and candidates from real directory trees.

use cudal1_task::{load_suite, match_candidates, CandidateSource, TaskError};
use std::fs;
use std::path::Path;

fn task_source(factor: u32) -> String {
    format!(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * {factor}\n\ndef get_inputs():\n    return [torch.randn(8)]\n\ndef get_init_inputs():\n    return []\n"
    )
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

#[test]
fn loads_a_kernelbench_layout_sorted_and_reports_broken_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("KernelBench");
    write(&root, "level2/1_Triple.py", &task_source(3));
    write(&root, "level1/10_Ten.py", &task_source(10));
    write(&root, "level1/2_Double.py", &task_source(2));
    write(&root, "level1/3_Broken.py", "class Model(:\n");
    write(&root, "level1/notes.py", "not a task name");
    write(&root, "README.md", "ignored");
    let suite = load_suite(dir.path()).unwrap();
    let keys: Vec<String> = suite.tasks.iter().map(|t| t.key()).collect();
    assert_eq!(keys, ["level1/2_Double", "level1/10_Ten", "level2/1_Triple"]);
    assert_eq!(suite.problems.len(), 1);
    assert!(
        matches!(&suite.problems[0], TaskError::Syntax { path, .. } if path.ends_with("3_Broken.py"))
    );
}

#[test]
fn an_empty_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = load_suite(dir.path()).unwrap_err();
    assert!(err.to_string().contains("levelN/ID_Name.py"), "{err}");
}

#[test]
fn candidates_from_directories_and_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tasks/level1/1_A.py", &task_source(1));
    write(dir.path(), "tasks/level1/2_B.py", &task_source(2));
    let suite = load_suite(&dir.path().join("tasks")).unwrap();
    let cand = "# cudal1: expect=correct faster\nclass ModelNew: pass\n";
    write(dir.path(), "cands/level1/1_A.py", cand);
    write(dir.path(), "cands/level1/2_B/x.py", cand);
    write(dir.path(), "cands/level1/2_B/y.py", "class ModelNew: pass\n");
    write(dir.path(), "cands/level1/9_Nothing.py", cand);
    let (found, problems) =
        match_candidates(&suite.tasks, &CandidateSource::from_path(&dir.path().join("cands")))
            .unwrap();
    let pairs: Vec<(usize, bool)> = found.iter().map(|m| (m.task, m.expect.is_some())).collect();
    assert_eq!(pairs, [(0, true), (1, true), (1, false)]);
    assert!(problems.is_empty());

    let jsonl = dir.path().join("c.jsonl");
    fs::write(
        &jsonl,
        [
            r#"{"task": "level1/2_B", "code": "class ModelNew: pass", "id": "s1"}"#,
            r#"{"task": "A", "code": "class ModelNew: pass"}"#,
            r#"{"task": "Zzz", "code": "x"}"#,
            r#"not json"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let (found, problems) =
        match_candidates(&suite.tasks, &CandidateSource::from_path(&jsonl)).unwrap();
    assert_eq!(found.iter().map(|m| m.task).collect::<Vec<_>>(), [1, 0]);
    assert!(found[0].candidate.label.ends_with(":1 (s1)"), "{}", found[0].candidate.label);
    let reasons: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(reasons.len(), 2);
    assert!(reasons[0].contains("no task `Zzz`"), "{reasons:?}");
    assert!(reasons[1].contains(":4") && reasons[1].contains("not a JSON object"), "{reasons:?}");
}
