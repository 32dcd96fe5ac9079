//! Pairing candidates with the tasks of a suite, from a directory or a JSONL file.
//!
//! Directory layout, mirroring the suite: `DIR/level1/12_Name.py` (one candidate) or
//! `DIR/level1/12_Name/*.py` (several); without level folders `DIR/12_Name.py` or
//! `DIR/12_Name/*.py`. KernelBench's own generation directories work too: files named
//! `level_1_problem_12_sample_0_kernel.py` anywhere below `DIR` belong to level 1, problem 12. JSONL: one object per line, `{"task": "level1/12_Name", "code": "..."}`;
//! `task` may also be the file stem (`12_Name`) or the bare name (`Name`) when that is unique, and
//! an optional `id` names the candidate.

use crate::{Candidate, Task, TaskError};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub enum CandidateSource {
    Dir(PathBuf),
    Jsonl(PathBuf),
}

impl CandidateSource {
    pub fn from_path(path: &Path) -> CandidateSource {
        if path.extension().is_some_and(|e| e == "jsonl") {
            CandidateSource::Jsonl(path.to_owned())
        } else {
            CandidateSource::Dir(path.to_owned())
        }
    }
}

/// A candidate and the index of its task in the suite.
#[derive(Debug, Clone)]
pub struct MatchedCandidate {
    pub task: usize,
    pub candidate: Candidate,
    /// From a first line `# cudal1: expect=<verdict> [faster|no_gain] [class=<reason_class>]`, used by
    /// tests and benchmarks.
    pub expect: Option<Expectation>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Expectation {
    pub verdict: String,
    pub faster: bool,
    /// `no_gain`: a program whose real speed is about the reference's (its work hidden from
    /// the timer in a look-alike of an exploit): a `correct` verdict must come with a median
    /// speedup of at most [`NO_GAIN_SPEEDUP`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_gain: bool,
    /// The verdict's expected `reason_class` (e.g. `stale_result`), when the line names one.
    pub class: Option<String>,
    /// What a `# cudal1[gpu]:` line expects on a GPU instead.
    #[serde(skip)]
    pub on_gpu: Option<Box<Expectation>>,
}

/// Reads `# cudal1: expect=exploit class=stale_result` (or `expect=correct faster`) from the
/// first lines of a program. The words after `expect=` may come in any order. A second line
/// `# cudal1[gpu]: expect=...` says what is expected on a GPU instead, for a trick that only
/// works on the CPU (its trigger, files of CPU outputs, never happens on a GPU): see
/// [`Expectation::on_device`].
pub fn expectation(source: &str) -> Option<Expectation> {
    let mut base = None;
    let mut on_gpu = None;
    for line in source.lines().take(4) {
        let Some(rest) = line.trim().strip_prefix('#').map(str::trim) else { continue };
        if let Some(rest) = rest.strip_prefix("cudal1:") {
            base = base.or_else(|| expectation_words(rest));
        } else if let Some(rest) = rest.strip_prefix("cudal1[gpu]:") {
            on_gpu = on_gpu.or_else(|| expectation_words(rest));
        }
    }
    let mut base = base?;
    base.on_gpu = on_gpu.map(Box::new);
    Some(base)
}

fn expectation_words(rest: &str) -> Option<Expectation> {
    let mut words = rest.split_whitespace();
    let verdict = words.next()?.strip_prefix("expect=")?.to_owned();
    let (mut faster, mut no_gain, mut class) = (false, false, None);
    for w in words {
        if w == "faster" {
            faster = true;
        } else if w == "no_gain" {
            no_gain = true;
        } else if let Some(c) = w.strip_prefix("class=") {
            class = Some(c.to_owned());
        }
    }
    Some(Expectation { verdict, faster, no_gain, class, on_gpu: None })
}

/// The most speedup an `expect=correct no_gain` program may be measured at.
pub const NO_GAIN_SPEEDUP: f64 = 1.3;

impl Expectation {
    /// The expectation that holds on this kind of device.
    pub fn on_device(self, gpu: bool) -> Expectation {
        match self.on_gpu {
            Some(on_gpu) if gpu => *on_gpu,
            _ => Expectation { on_gpu: None, ..self },
        }
    }

    /// Whether a verdict, with its median speedup where it has one, is what this expects.
    pub fn met(&self, verdict: &str, speedup: Option<f64>) -> bool {
        self.verdict == verdict && !(self.no_gain && speedup.is_some_and(|s| s > NO_GAIN_SPEEDUP))
    }
}

/// Finds the candidates for `tasks`. Candidates that match no task, and rows that cannot be
/// read, come back as problems; they never stop the batch.
pub fn match_candidates(
    tasks: &[Task],
    source: &CandidateSource,
) -> Result<(Vec<MatchedCandidate>, Vec<TaskError>), TaskError> {
    match source {
        CandidateSource::Dir(dir) => from_dir(tasks, dir),
        CandidateSource::Jsonl(file) => from_jsonl(tasks, file),
    }
}

fn matched(task: usize, candidate: Candidate) -> MatchedCandidate {
    let expect = expectation(&candidate.source);
    MatchedCandidate { task, candidate, expect }
}

fn from_dir(
    tasks: &[Task],
    dir: &Path,
) -> Result<(Vec<MatchedCandidate>, Vec<TaskError>), TaskError> {
    if !dir.is_dir() {
        return Err(TaskError::Candidates {
            path: dir.to_owned(),
            reason: "not a directory (give a directory laid out like the suite, or a .jsonl file)"
                .into(),
        });
    }
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let mut generated = Vec::new();
    collect_generated(dir, &mut generated)
        .map_err(|source| TaskError::Read { path: dir.to_owned(), source })?;
    generated.sort();
    for (level, problem, _, file) in generated {
        match tasks.iter().position(|t| t.name.level == Some(level) && t.name.id == Some(problem)) {
            Some(index) => push_file(&mut found, &mut problems, index, &file),
            None => problems.push(TaskError::Candidates {
                path: file,
                reason: format!("no task for level {level}, problem {problem} in the suite"),
            }),
        }
    }
    for (index, task) in tasks.iter().enumerate() {
        let mut bases = vec![dir.join(&task.name.stem)];
        if let Some(level) = task.name.level {
            bases.insert(0, dir.join(format!("level{level}")).join(&task.name.stem));
        }
        for base in bases {
            let single = base.with_extension("py");
            if single.is_file() {
                push_file(&mut found, &mut problems, index, &single);
            }
            if base.is_dir() {
                let mut files: Vec<PathBuf> = std::fs::read_dir(&base)
                    .map_err(|source| TaskError::Read { path: base.clone(), source })?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "py"))
                    .collect();
                files.sort();
                for f in files {
                    push_file(&mut found, &mut problems, index, &f);
                }
            }
        }
    }
    Ok((found, problems))
}

/// `level_1_problem_12_sample_0_kernel.py` (KernelBench's generation naming) → (1, 12, 0).
pub fn parse_generation_name(file_name: &str) -> Option<(u32, u32, u32)> {
    let rest = file_name.strip_prefix("level_")?.strip_suffix("_kernel.py")?;
    let (level, rest) = rest.split_once("_problem_")?;
    let (problem, sample) = rest.split_once("_sample_")?;
    Some((level.parse().ok()?, problem.parse().ok()?, sample.parse().ok()?))
}

/// Generation files below `dir`, as (level, problem, sample, path).
fn collect_generated(dir: &Path, out: &mut Vec<(u32, u32, u32, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_generated(&path, out)?;
        } else if let Some((l, p, s)) =
            path.file_name().and_then(|n| n.to_str()).and_then(parse_generation_name)
        {
            out.push((l, p, s, path));
        }
    }
    Ok(())
}

fn push_file(
    found: &mut Vec<MatchedCandidate>,
    problems: &mut Vec<TaskError>,
    task: usize,
    file: &Path,
) {
    match Candidate::load(file) {
        Ok(c) => found.push(matched(task, c)),
        Err(e) => problems.push(e),
    }
}

#[derive(serde::Deserialize)]
struct Row {
    task: String,
    code: String,
    #[serde(default)]
    id: Option<String>,
}

fn from_jsonl(
    tasks: &[Task],
    file: &Path,
) -> Result<(Vec<MatchedCandidate>, Vec<TaskError>), TaskError> {
    let text = std::fs::read_to_string(file)
        .map_err(|source| TaskError::Read { path: file.to_owned(), source })?;
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{}", file.display(), n + 1);
        let problem = |reason: String| TaskError::Candidates { path: PathBuf::from(&at), reason };
        let row: Row = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) => {
                problems.push(problem(format!("not a JSON object with `task` and `code`: {e}")));
                continue;
            }
        };
        match find_task(tasks, &row.task) {
            Ok(index) => {
                let label = row.id.map_or(at.clone(), |id| format!("{at} ({id})"));
                found.push(matched(index, Candidate::from_source(label, row.code)));
            }
            Err(reason) => problems.push(problem(reason)),
        }
    }
    Ok((found, problems))
}

/// Finds a task by key (`level1/12_Name`), stem (`12_Name`) or name (`Name`), in that order.
fn find_task(tasks: &[Task], wanted: &str) -> Result<usize, String> {
    let wanted = wanted.trim_end_matches(".py");
    let tries: [&dyn Fn(&Task) -> bool; 3] = [
        &|t| t.key() == wanted || t.path.ends_with(format!("{wanted}.py")),
        &|t| t.name.stem == wanted,
        &|t| t.name.name == wanted,
    ];
    for matches in tries {
        let hits: Vec<usize> =
            tasks.iter().enumerate().filter(|(_, t)| matches(t)).map(|(i, _)| i).collect();
        match hits.len() {
            0 => continue,
            1 => return Ok(hits[0]),
            _ => return Err(format!("task `{wanted}` is ambiguous; name it as `levelN/ID_Name`")),
        }
    }
    Err(format!("no task `{wanted}` in the suite"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kernelbench_generation_names() {
        assert_eq!(
            parse_generation_name("level_1_problem_12_sample_0_kernel.py"),
            Some((1, 12, 0))
        );
        assert_eq!(
            parse_generation_name("level_3_problem_5_sample_14_kernel.py"),
            Some((3, 5, 14))
        );
        assert_eq!(parse_generation_name("level_1_problem_x_sample_0_kernel.py"), None);
        assert_eq!(parse_generation_name("12_Name.py"), None);
    }

    #[test]
    fn reads_expectations() {
        assert_eq!(
            expectation("# cudal1: expect=correct faster\nimport torch"),
            Some(Expectation {
                verdict: "correct".into(),
                faster: true,
                no_gain: false,
                class: None,
                on_gpu: None
            })
        );
        assert_eq!(
            expectation("# cudal1: expect=exploit class=stale_result\n"),
            Some(Expectation {
                verdict: "exploit".into(),
                faster: false,
                no_gain: false,
                class: Some("stale_result".into()),
                on_gpu: None
            })
        );
        let both = expectation("# cudal1: expect=correct class=correct faster").unwrap();
        assert!(both.faster);
        assert_eq!(both.class.as_deref(), Some("correct"));
        assert_eq!(expectation("#cudal1: expect=exploit").unwrap().verdict, "exploit");
        assert_eq!(expectation("import torch\n"), None);
    }

    #[test]
    fn a_no_gain_expectation_is_met_only_without_a_gain() {
        let e = expectation("# cudal1: expect=correct no_gain class=correct").unwrap();
        assert!(e.no_gain && !e.faster);
        assert!(e.met("correct", Some(1.02)));
        assert!(e.met("correct", None));
        assert!(!e.met("correct", Some(14.4)), "a hidden side stream measured at 14.4x");
        assert!(!e.met("exploit", Some(1.0)));
        assert!(expectation("# cudal1: expect=correct").unwrap().met("correct", Some(14.4)));
    }

    #[test]
    fn a_gpu_line_replaces_the_expectation_on_a_gpu_only() {
        let text = "# cudal1: expect=exploit class=timed_output_mismatch\n# cudal1[gpu]: expect=correct no_gain\n";
        let e = expectation(text).unwrap();
        let cpu = e.clone().on_device(false);
        assert_eq!(
            (cpu.verdict.as_str(), cpu.class.as_deref(), cpu.on_gpu.is_none()),
            ("exploit", Some("timed_output_mismatch"), true)
        );
        let gpu = e.on_device(true);
        assert_eq!(
            (gpu.verdict.as_str(), gpu.no_gain, gpu.class.as_deref()),
            ("correct", true, None)
        );
        assert!(!gpu.met("correct", Some(2.0)), "no gain on the GPU either");
        let plain = expectation("# cudal1: expect=correct\n").unwrap().on_device(true);
        assert_eq!(plain.verdict, "correct");
        assert_eq!(
            expectation("# cudal1[gpu]: expect=correct\n"),
            None,
            "a GPU line alone is no expectation"
        );
    }
}
