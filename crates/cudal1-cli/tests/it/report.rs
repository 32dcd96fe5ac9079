//! `cudal1 report` from a real CPU suite run (the real binary, runner and SQLite file): the
//! numbers on the page are the store's, several batches sit side by side with another system's
//! claims, training curves come from a run directory, and a real headless Chromium shows it all
//! without errors or network requests ([`crate::browser`]).

use super::{cudal1, repo, run, FAST_TIMING};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A small suite run shared by the tests of this module: a correct and fast candidate, an
/// exploit and an incorrect one on one task, a correct one on a second task and one on level 2.
pub struct Suite {
    pub dir: PathBuf,
    pub db: PathBuf,
    /// `eval --json`'s rows and its summary line.
    pub rows: Vec<Value>,
    pub summary: Value,
}

pub const CANDIDATES: [&str; 5] = [
    "level1/1_Diagonal_Matmul/fast.py",
    "level1/1_Diagonal_Matmul/inplace_returns_input.py",
    "level1/1_Diagonal_Matmul/wrong_axis.py",
    "level1/3_Softmax_Rows/correct.py",
    "level2/1_Linear_ReLU/fast.py",
];

pub fn suite() -> &'static Suite {
    static SUITE: OnceLock<Suite> = OnceLock::new();
    SUITE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("report-suite-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cands = dir.join("candidates");
        for c in CANDIDATES {
            let to = cands.join(c);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(repo().join("tests/suite-cpu/candidates").join(c), &to).unwrap();
        }
        let db = dir.join("store.db");
        let mut cmd = cudal1(&db);
        cmd.args(["eval", "--suite", "tests/suite-cpu/tasks", "--candidates"])
            .arg(&cands)
            .args(FAST_TIMING)
            .arg("--json");
        let out = run(cmd);
        assert!(out.status.success(), "the suite run failed");
        let mut rows = super::json_lines(&out);
        let summary = rows.pop().unwrap()["summary"].clone();
        assert_eq!(rows.len(), CANDIDATES.len());
        Suite { dir, db, rows, summary }
    })
}

/// Writes the report of `args` to `out` and returns its HTML.
pub fn report(db: &Path, args: &[&str], out: &Path) -> String {
    let mut cmd = cudal1(db);
    cmd.arg("report").args(args).arg("-o").arg(out);
    let o = run(cmd);
    assert!(o.status.success(), "report failed: {}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(out).unwrap()
}

/// The `data-value` of the first element carrying `marker` (an attribute or class) after the
/// first occurrence of `anchor`.
fn value_after(html: &str, anchor: &str, marker: &str) -> String {
    let start = html.find(anchor).unwrap_or_else(|| panic!("no `{anchor}` in the report"));
    let rest = &html[start..];
    let at = rest.find(marker).unwrap_or_else(|| panic!("no `{marker}` after `{anchor}`"));
    let rest = &rest[at..];
    let v = rest.find("data-value=\"").unwrap() + "data-value=\"".len();
    rest[v..v + rest[v..].find('"').unwrap()].to_owned()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(1.0)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[test]
fn the_reports_numbers_are_the_stores() {
    let s = suite();
    // Other tests add batches to the store: name this one.
    let html = report(
        &s.db,
        &["--batch", s.summary["batch"].as_str().unwrap()],
        &s.dir.join("numbers.html"),
    );
    // The summary over tasks and over candidates: as `eval --json` summarised the batch.
    for (over, key) in [("tasks", "tasks"), ("candidates", "candidates")] {
        let expected = &s.summary[key];
        let anchor = format!("data-over=\"{over}\"");
        for field in ["correct_rate", "mean_speedup", "median_speedup", "geomean_speedup"] {
            let shown: f64 =
                value_after(&html, &anchor, &format!("data-key=\"{field}\"")).parse().unwrap();
            assert!(
                close(shown, expected[field].as_f64().unwrap()),
                "{over} {field}: report {shown}, eval {}",
                expected[field]
            );
        }
        for pair in expected["fast_p"].as_array().unwrap() {
            let (p, share) = (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap());
            let shown: f64 =
                value_after(&html, &anchor, &format!("data-key=\"fast_{p}\"")).parse().unwrap();
            assert!(close(shown, share), "{over} fast_{p}: report {shown}, eval {share}");
        }
    }
    // Every candidate: its row with the stored verdict and speedup, its code (escaped) and a diff.
    for row in &s.rows {
        let id = row["id"].as_i64().unwrap();
        let anchor = format!("<tr class=\"candidate-row\" data-id=\"{id}\">");
        assert!(html.contains(&anchor), "no row for evaluation {id}");
        let verdict = row["verdict"].as_str().unwrap();
        let start = html.find(&anchor).unwrap();
        let line = &html[start..start + html[start..].find("</tr>").unwrap()];
        assert!(
            line.contains(&format!("v-{verdict}")),
            "row {id} lacks its verdict {verdict}: {line}"
        );
        if let Some(m) = row["speedup"]["median"].as_f64() {
            assert!(
                line.contains(&format!("data-value=\"{m}\"")),
                "row {id} lacks its speedup {m}: {line}"
            );
        }
        let details = format!("<details class=\"candidate\" id=\"b1-e{id}\"");
        let d = html.find(&details).unwrap_or_else(|| panic!("no details for {id}"));
        let block = &html[d..d + html[d..].find("</details>\n").unwrap()];
        let label = row["candidate"].as_str().unwrap();
        let code = std::fs::read_to_string(label)
            .or_else(|_| std::fs::read_to_string(repo().join(label)))
            .unwrap();
        assert!(block.contains(&escape(&code)), "evaluation {id}'s code is not shown (escaped)");
        assert!(
            block.contains("<pre class=\"diff\">") && block.contains("<span class=\"add\">"),
            "evaluation {id} has no diff"
        );
    }
    // The exploit's finding, listed once per kind.
    let exploit = s.rows.iter().find(|r| r["verdict"] == "exploit").unwrap();
    let findings = &html[html.find("id=\"findings-table\"").expect("a findings table")..];
    let findings = &findings[..findings.find("</table>").unwrap()];
    assert!(findings.contains(&format!("href=\"#b1-e{}\"", exploit["id"])), "{findings}");
    assert_eq!(findings.matches("output_aliases_input").count(), 1, "{findings}");
    // A chart per level and the fast_p curves; nothing from the network.
    assert!(
        html.contains("id=\"dist-level1\"")
            && html.contains("id=\"dist-level2\"")
            && html.contains("<svg class=\"chart\" id=\"fast-p\"")
    );
    for external in ["http://", "https://", "src=\"//"] {
        let hits: Vec<&str> = html
            .match_indices(external)
            .map(|(i, _)| &html[i..(i + 60).min(html.len())])
            .filter(|h| !h.starts_with("http://www.w3.org/2000/svg"))
            .collect();
        assert!(hits.is_empty(), "external references: {hits:?}");
    }
}

#[test]
fn batches_side_by_side_with_claimed_numbers_and_training_curves() {
    let s = suite();
    // Another system's release of two of the candidates, with its claims.
    let tasks = repo().join("tests/suite-cpu/tasks/level1");
    let cands = repo().join("tests/suite-cpu/candidates/level1");
    let release = s.dir.join("release.jsonl");
    let rows = [
        serde_json::json!({"level_id": 1, "task_id": 1, "ref_code": std::fs::read_to_string(tasks.join("1_Diagonal_Matmul.py")).unwrap(), "custom_code": std::fs::read_to_string(cands.join("1_Diagonal_Matmul/fast.py")).unwrap(), "score_default": 40.0}),
        serde_json::json!({"level_id": 1, "task_id": 3, "ref_code": std::fs::read_to_string(tasks.join("3_Softmax_Rows.py")).unwrap(), "custom_code": std::fs::read_to_string(cands.join("3_Softmax_Rows/correct.py")).unwrap(), "score_default": 2.5}),
    ];
    std::fs::write(&release, rows.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"))
        .unwrap();
    let mut cmd = cudal1(&s.db);
    cmd.args(["eval", "--from", "cuda-l1"])
        .arg(&release)
        .args(["--suite", "tests/suite-cpu/tasks"])
        .args(FAST_TIMING)
        .arg("--json");
    let out = run(cmd);
    assert!(out.status.success());
    let lines = super::json_lines(&out);
    let summary = &lines.last().unwrap()["summary"];
    let claims_batch = summary["batch"].as_str().unwrap();
    let suite_batch = s.summary["batch"].as_str().unwrap();

    // A training run directory as `cudal1 train` writes one.
    let train = s.dir.join("train-run");
    std::fs::create_dir_all(&train).unwrap();
    std::fs::write(train.join("run.json"), r#"{"stage": "grpo", "settings": {}}"#).unwrap();
    let metrics: Vec<String> = (1..=6).map(|i| serde_json::json!({"step": i, "loss": 1.0 / f64::from(i), "reward": {"mean": 0.1 * f64::from(i)}}).to_string()).collect();
    std::fs::write(train.join("metrics.jsonl"), metrics.join("\n")).unwrap();

    // A second run of another stage, to be overlaid with the first.
    let train2 = s.dir.join("train-run-2");
    std::fs::create_dir_all(&train2).unwrap();
    std::fs::write(train2.join("run.json"), r#"{"stage": "selfsup", "settings": {}}"#).unwrap();
    std::fs::write(train2.join("metrics.jsonl"), metrics[..3].join("\n")).unwrap();

    let html = report(
        &s.db,
        &[
            "--batch",
            suite_batch,
            "--batch",
            claims_batch,
            "--train",
            train.to_str().unwrap(),
            "--train",
            train2.to_str().unwrap(),
            "--title",
            "side by side",
        ],
        &s.dir.join("side.html"),
    );
    assert!(html.contains("<title>side by side</title>"));
    assert!(
        html.contains(&format!("data-batch=\"{suite_batch}\""))
            && html.contains(&format!("data-batch=\"{claims_batch}\""))
    );
    // A column per batch in the task table: the claimed batch's cell of a task it lacks is empty.
    let level2 = &html[html.find("data-task=\"level2/1_Linear_ReLU\"").unwrap()..];
    let level2 = &level2[..level2.find("</tr>").unwrap()];
    assert_eq!(level2.matches("class=\"verdict").count(), 1, "{level2}");
    // Claimed against measured: eval's geomeans, and a scatter with a point per correct pair.
    let claimed = &summary["claimed"];
    let shown: f64 =
        value_after(&html, "id=\"claims\"", "data-key=\"claimed_geomean\"").parse().unwrap();
    assert!(
        close(shown, claimed["claimed_geomean"].as_f64().unwrap()),
        "claimed geomean {shown} vs {claimed}"
    );
    let shown: f64 =
        value_after(&html, "id=\"claims\"", "data-key=\"measured_geomean\"").parse().unwrap();
    assert!(
        close(shown, claimed["measured_geomean"].as_f64().unwrap()),
        "measured geomean {shown} vs {claimed}"
    );
    let scatter = &html
        [html.find("<svg class=\"chart\" id=\"claims-").expect("a claimed-vs-measured scatter")..];
    let scatter = &scatter[..scatter.find("</svg>").unwrap()];
    assert_eq!(
        scatter.matches("class=\"point\"").count(),
        claimed["rows"].as_u64().unwrap() as usize
    );
    assert!(html.contains("claimed 40.00x"));
    // The release's rows reuse the suite's evaluations, under the release's labels and their own anchors.
    let fast = s
        .rows
        .iter()
        .find(|r| r["candidate"].as_str().unwrap().ends_with("1_Diagonal_Matmul/fast.py"))
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    for (anchor, label) in [
        (format!("b1-e{fast}"), "1_Diagonal_Matmul/fast.py"),
        (format!("b2-e{fast}"), "release.jsonl:1"),
    ] {
        let d = &html[html
            .find(&format!("<details class=\"candidate\" id=\"{anchor}\""))
            .unwrap_or_else(|| panic!("no {anchor}"))..];
        assert!(d[..d.find("</summary>").unwrap()].contains(label), "{anchor} should be {label}");
    }
    // Training curves, reward first.
    let training = &html[html.find("id=\"training\"").expect("a training section")..];
    assert!(training.contains("grpo, 6 step(s)"));
    let reward = training.find("train-train-run-reward-mean").expect("a reward curve");
    assert!(reward < training.find("train-train-run-loss").expect("a loss curve"));
    let compared = &training
        [training.find("id=\"train-compare-reward-mean\"").expect("the runs' rewards overlaid")..];
    assert_eq!(compared[..compared.find("</svg>").unwrap()].matches("<polyline").count(), 2);
}

#[test]
fn an_unknown_batch_or_missing_store_says_what_to_do() {
    let s = suite();
    let mut cmd = cudal1(&s.db);
    cmd.args(["report", "--batch", "nope", "-o"]).arg(s.dir.join("never.html"));
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds no batch `nope`") && err.contains(s.summary["batch"].as_str().unwrap()),
        "{err}"
    );
    assert!(!s.dir.join("never.html").exists());

    let missing = s.dir.join("absent.db");
    let mut cmd = cudal1(&missing);
    cmd.args(["report", "-o"]).arg(s.dir.join("never.html"));
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("there is no store"));
}

#[test]
fn candidates_are_measured_against_a_baseline_the_real_command_stored() {
    let s = suite();
    let task = "level1/1_Diagonal_Matmul";
    let mut cmd = cudal1(&s.db);
    cmd.args([
        "baselines",
        "tests/suite-cpu/tasks",
        "--only",
        task,
        "--names",
        "compile-default",
        "--json",
    ])
    .args(FAST_TIMING);
    let out = run(cmd);
    assert!(out.status.success());
    let measured =
        super::json_lines(&out).into_iter().find(|l| l["baseline"] == "compile-default").unwrap();
    assert_eq!(measured["status"], "measured", "{measured}");
    let (baseline_speedup, baseline_ms) = (
        measured["speedup"]["median"].as_f64().unwrap(),
        measured["baseline_ms"].as_f64().unwrap(),
    );

    let html = report(
        &s.db,
        &["--batch", s.summary["batch"].as_str().unwrap(), "--baseline", "compile-default"],
        &s.dir.join("baseline.html"),
    );
    assert!(html.contains("<th class=\"sortable num\">compile-default</th>"), "no baseline column");
    // The task's row shows the baseline's time; the fast candidate its speedup over the baseline.
    let row = &html[html.find(&format!("data-task=\"{task}\"")).unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains(&format!("data-value=\"{baseline_ms}\"")),
        "the baseline's time {baseline_ms} is not in {row}"
    );
    let fast = s
        .rows
        .iter()
        .find(|r| r["candidate"].as_str().unwrap().ends_with("1_Diagonal_Matmul/fast.py"))
        .unwrap();
    let over = fast["speedup"]["median"].as_f64().unwrap() / baseline_speedup;
    let line = &html
        [html.find(&format!("<tr class=\"candidate-row\" data-id=\"{}\">", fast["id"])).unwrap()..];
    let line = &line[..line.find("</tr>").unwrap()];
    assert!(
        line.contains(&format!("data-value=\"{over}\"")),
        "the speedup over the baseline {over} is not in {line}"
    );
    // fast_1 against it: only the task that has the baseline can count, of the three.
    let table = &html[html.find("id=\"fast-p-table\"").unwrap()..];
    let against =
        &table[table.find("<td>compile-default</td>").expect("a fast_p row for the baseline")..];
    let fast_1: f64 =
        against.split("data-value=\"").nth(3).unwrap().split('"').next().unwrap().parse().unwrap();
    assert!(
        close(fast_1, if over > 1.0 { 1.0 / 3.0 } else { 0.0 }),
        "fast_1 against compile-default: {fast_1}"
    );
}
