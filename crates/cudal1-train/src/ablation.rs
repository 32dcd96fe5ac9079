//! The ablation over stages and seeds (CUDA-L1's central table): each arm (base, SFT,
//! self-supervised, RL, the correctness-reward control) judged on the same held-out tasks in
//! several seeds, with 95% bootstrap intervals over tasks and seeds
//! ([`cudal1_stats::nested_interval`]: seeds drawn with replacement, then tasks within each), and
//! RL against self-supervised and against the control, paired by seed and task. Also what RL
//! learned: a run's top-reward samples with their verdicts and findings, and a task's program
//! from one stage beside another's.

use crate::heldout::SampleResult;
use cudal1_search::extract_program;
use cudal1_stats::{nested_interval, Interval};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const RESAMPLES: usize = 2000;

/// One seed's held-out results, by arm (`base`, `sft`, `self-sup`, `rl`, `control`, ...).
#[derive(Debug, Clone)]
pub struct SeedResults {
    pub label: String,
    pub arms: BTreeMap<String, Vec<SampleResult>>,
}

/// One arm's row over the seeds that have it, within one scope of tasks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArmRow {
    pub arm: String,
    /// `all`, or a group of tasks (the families trained on, those never seen).
    pub scope: String,
    pub seeds: usize,
    /// Tasks per seed, summed over seeds.
    pub tasks: usize,
    pub samples: usize,
    pub correct_rate: Option<Interval>,
    pub fast1_rate: Option<Interval>,
    pub geomean_speedup_of_correct: Option<Interval>,
}

/// Arm `a` against arm `b` on the seeds and tasks both have.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub scope: String,
    pub seeds: usize,
    /// fast_1 of `a` minus fast_1 of `b` (a share: 0.125 is 12.5 points).
    pub fast1_difference: Option<Interval>,
    /// Geomean speedup of `a`'s correct samples over `b`'s (a ratio: 1.4 is 40% faster).
    pub geomean_ratio: Option<Interval>,
}

/// One seed's arm over all its held-out tasks: its own values, without an interval, so that a
/// reader sees whether every seed moved or one carried the pooled row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedRow {
    pub seed: String,
    pub arm: String,
    pub samples: usize,
    pub correct_rate: Option<f64>,
    pub fast1_rate: Option<f64>,
    pub geomean_speedup_of_correct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ablation {
    pub seeds: Vec<String>,
    pub rows: Vec<ArmRow>,
    pub comparisons: Vec<Comparison>,
    /// Every seed's every arm, in the rows' order of arms.
    pub per_seed: Vec<SeedRow>,
}

/// The arms in the table's order: the stages in turn, then any other, by name.
fn arm_order(arm: &str) -> (usize, String) {
    let known = ["base", "sft", "self-sup", "rl", "control"];
    (known.iter().position(|k| *k == arm).unwrap_or(known.len()), arm.to_owned())
}

/// A seed's samples by task, in task order, keeping only the tasks `keep` holds for.
fn by_task<'a>(
    samples: &'a [SampleResult],
    keep: &dyn Fn(&str) -> bool,
) -> BTreeMap<&'a str, Vec<&'a SampleResult>> {
    let mut out: BTreeMap<&str, Vec<&SampleResult>> = BTreeMap::new();
    for s in samples.iter().filter(|s| keep(&s.task) && !s.unjudged) {
        out.entry(s.task.as_str()).or_default().push(s);
    }
    out
}

/// The three statistics of pooled samples.
fn correct(s: &SampleResult) -> bool {
    s.correct && s.speedup.is_some()
}

fn fast1(s: &SampleResult) -> bool {
    correct(s) && s.speedup.is_some_and(|x| x > 1.0)
}

#[expect(clippy::cast_precision_loss)]
fn share<'a>(
    samples: impl Iterator<Item = &'a SampleResult>,
    pick: fn(&SampleResult) -> bool,
) -> Option<f64> {
    let (mut n, mut hit) = (0usize, 0usize);
    for s in samples {
        n += 1;
        hit += usize::from(pick(s));
    }
    (n > 0).then(|| hit as f64 / n as f64)
}

#[expect(clippy::cast_precision_loss)]
fn geomean<'a>(samples: impl Iterator<Item = &'a SampleResult>) -> Option<f64> {
    let logs: Vec<f64> = samples
        .filter(|s| correct(s))
        .filter_map(|s| s.speedup)
        .filter(|x| *x > 0.0)
        .map(f64::ln)
        .collect();
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// Cells (seed, task) of one arm: each cell's samples.
type Cells<'a> = Vec<Vec<Vec<&'a SampleResult>>>;

/// The table: a row per arm and scope, and RL against self-supervised and against the control.
/// `group_of` names a task's group (e.g. `trained families`, `unseen families`); each group is a
/// scope besides `all`. Deterministic for a given `seed`.
#[must_use]
pub fn table(
    results: &[SeedResults],
    group_of: &dyn Fn(&str) -> Option<String>,
    seed: u64,
) -> Ablation {
    let mut arms: Vec<String> =
        results.iter().flat_map(|r| r.arms.keys().cloned()).collect::<Vec<_>>();
    arms.sort_by_key(|a| arm_order(a));
    arms.dedup();
    let mut scopes: Vec<String> = vec!["all".to_owned()];
    let mut groups: Vec<String> = results
        .iter()
        .flat_map(|r| r.arms.values().flatten().filter_map(|s| group_of(&s.task)))
        .collect();
    groups.sort();
    groups.dedup();
    if groups.len() > 1 {
        scopes.extend(groups);
    }
    let mut rows = Vec::new();
    let mut comparisons = Vec::new();
    for scope in &scopes {
        let keep = |task: &str| scope == "all" || group_of(task).as_deref() == Some(scope);
        for arm in &arms {
            let cells: Cells<'_> = results
                .iter()
                .filter_map(|r| r.arms.get(arm))
                .map(|samples| by_task(samples, &keep).into_values().collect())
                .filter(|c: &Vec<Vec<&SampleResult>>| !c.is_empty())
                .collect();
            let sizes: Vec<usize> = cells.iter().map(Vec::len).collect();
            let pooled = |picked: &[(usize, usize)]| {
                picked.iter().flat_map(|&(g, u)| cells[g][u].iter().copied()).collect::<Vec<_>>()
            };
            let stat = |f: &dyn Fn(&[&SampleResult]) -> Option<f64>| {
                nested_interval(&sizes, |p| f(&pooled(p)), RESAMPLES, 0.95, seed)
            };
            rows.push(ArmRow {
                arm: arm.clone(),
                scope: scope.clone(),
                seeds: cells.len(),
                tasks: sizes.iter().sum(),
                samples: cells.iter().flatten().map(Vec::len).sum(),
                correct_rate: stat(&|s| share(s.iter().copied(), correct)),
                fast1_rate: stat(&|s| share(s.iter().copied(), fast1)),
                geomean_speedup_of_correct: stat(&|s| geomean(s.iter().copied())),
            });
        }
        for (a, b) in [("rl", "self-sup"), ("rl", "control")] {
            if let Some(c) = compare(results, a, b, scope, &keep, seed) {
                comparisons.push(c);
            }
        }
    }
    let per_seed = arms
        .iter()
        .flat_map(|arm| {
            results.iter().filter_map(move |r| {
                let samples: Vec<&SampleResult> =
                    r.arms.get(arm)?.iter().filter(|s| !s.unjudged).collect();
                Some(SeedRow {
                    seed: r.label.clone(),
                    arm: arm.clone(),
                    samples: samples.len(),
                    correct_rate: share(samples.iter().copied(), correct),
                    fast1_rate: share(samples.iter().copied(), fast1),
                    geomean_speedup_of_correct: geomean(samples.iter().copied()),
                })
            })
        })
        .collect();
    Ablation {
        seeds: results.iter().map(|r| r.label.clone()).collect(),
        rows,
        comparisons,
        per_seed,
    }
}

/// `a` against `b`, paired: the seeds with both arms, the tasks both judged in each.
fn compare(
    results: &[SeedResults],
    a: &str,
    b: &str,
    scope: &str,
    keep: &dyn Fn(&str) -> bool,
    seed: u64,
) -> Option<Comparison> {
    // Per seed, per task: (a's samples, b's samples).
    let mut cells: Vec<Vec<(Vec<&SampleResult>, Vec<&SampleResult>)>> = Vec::new();
    for r in results {
        let (Some(sa), Some(sb)) = (r.arms.get(a), r.arms.get(b)) else { continue };
        let (ta, mut tb) = (by_task(sa, keep), by_task(sb, keep));
        let paired: Vec<_> =
            ta.into_iter().filter_map(|(t, xs)| Some((xs, tb.remove(t)?))).collect();
        if !paired.is_empty() {
            cells.push(paired);
        }
    }
    if cells.is_empty() {
        return None;
    }
    let sizes: Vec<usize> = cells.iter().map(Vec::len).collect();
    let sides = |p: &[(usize, usize)]| {
        let xs: Vec<&SampleResult> =
            p.iter().flat_map(|&(g, u)| cells[g][u].0.iter().copied()).collect();
        let ys: Vec<&SampleResult> =
            p.iter().flat_map(|&(g, u)| cells[g][u].1.iter().copied()).collect();
        (xs, ys)
    };
    let fast1_difference = nested_interval(
        &sizes,
        |p| {
            let (xs, ys) = sides(p);
            Some(share(xs.into_iter(), fast1)? - share(ys.into_iter(), fast1)?)
        },
        RESAMPLES,
        0.95,
        seed,
    );
    let geomean_ratio = nested_interval(
        &sizes,
        |p| {
            let (xs, ys) = sides(p);
            Some(geomean(xs.into_iter())? / geomean(ys.into_iter())?)
        },
        RESAMPLES,
        0.95,
        seed,
    );
    Some(Comparison {
        a: a.to_owned(),
        b: b.to_owned(),
        scope: scope.to_owned(),
        seeds: cells.len(),
        fast1_difference,
        geomean_ratio,
    })
}

/// A run's `k` highest-reward judged samples (one per program), with what the judge said of
/// them: the verdict, its reason, the findings, the speedup's interval, and the program.
#[must_use]
pub fn top_samples(lines: &[Value], k: usize) -> Vec<Value> {
    let mut scored: Vec<&Value> = lines
        .iter()
        .filter(|l| l["reward"].as_f64().is_some_and(f64::is_finite) && l["verdict"].is_string())
        .collect();
    scored.sort_by(|x, y| {
        let r = |v: &Value| v["reward"].as_f64().unwrap_or(f64::NEG_INFINITY);
        r(y).total_cmp(&r(x))
            .then_with(|| x["step"].as_u64().unwrap_or(0).cmp(&y["step"].as_u64().unwrap_or(0)))
    });
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for l in scored {
        let text = l["text"].as_str().unwrap_or_default();
        let program = extract_program(text).ok();
        let id = l["program_id"]
            .as_i64()
            .map_or_else(|| program.clone().unwrap_or_else(|| text.to_owned()), |i| i.to_string());
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        out.push(json!({
            "step": l["step"], "task": l["key"], "reward": l["reward"], "verdict": l["verdict"],
            "reason": l["reason"], "reason_class": l["reason_class"], "findings": l["findings"],
            "speedup_ci": l["speedup_ci"], "program_id": l["program_id"], "program": program,
        }));
        if out.len() == k {
            break;
        }
    }
    out
}

/// A task's best sample in a held-out report: the fastest correct one, else the first with a
/// program.
fn best_of<'a>(samples: &[&'a SampleResult]) -> Option<&'a SampleResult> {
    samples
        .iter()
        .copied()
        .filter(|s| correct(s))
        .max_by(|x, y| x.speedup.unwrap_or(0.0).total_cmp(&y.speedup.unwrap_or(0.0)))
        .or_else(|| samples.iter().copied().find(|s| s.program.is_some()))
}

/// For up to `k` tasks, arm `a`'s program beside arm `b`'s (each its best sample), the tasks
/// where `b` gained most over `a` first (best correct speedup, 0 where none was correct).
#[must_use]
pub fn beside(a: &[SampleResult], b: &[SampleResult], k: usize) -> Vec<Value> {
    let (ta, tb) = (by_task(a, &|_| true), by_task(b, &|_| true));
    let speed = |s: Option<&SampleResult>| s.filter(|s| correct(s)).and_then(|s| s.speedup);
    let mut rows: Vec<(f64, Value)> = ta
        .iter()
        .filter_map(|(task, xs)| {
            let (x, y) = (best_of(xs), best_of(tb.get(task)?));
            if x.and_then(|s| s.program.as_ref()).is_none()
                && y.and_then(|s| s.program.as_ref()).is_none()
            {
                return None;
            }
            let gain = (speed(y).unwrap_or(0.0) + 1e-9).ln() - (speed(x).unwrap_or(0.0) + 1e-9).ln();
            let side = |s: Option<&SampleResult>| {
                json!({"verdict": s.and_then(|s| s.verdict.clone()), "speedup": speed(s), "program": s.and_then(|s| s.program.clone())})
            };
            Some((gain, json!({"task": task, "a": side(x), "b": side(y)})))
        })
        .collect();
    rows.sort_by(|x, y| y.0.total_cmp(&x.0));
    rows.into_iter().take(k).map(|(_, v)| v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(task: &str, speedup: Option<f64>) -> SampleResult {
        SampleResult {
            task: task.into(),
            has_program: true,
            truncated: false,
            verdict: Some(if speedup.is_some() { "correct" } else { "incorrect" }.into()),
            correct: speedup.is_some(),
            speedup,
            program: Some(format!("# {task} {speedup:?}")),
            unjudged: false,
        }
    }

    fn seed(label: &str, arms: &[(&str, Vec<SampleResult>)]) -> SeedResults {
        SeedResults {
            label: label.into(),
            arms: arms.iter().map(|(a, v)| ((*a).to_owned(), v.clone())).collect(),
        }
    }

    #[test]
    fn the_table_pools_seeds_and_tasks_and_pairs_the_comparisons() {
        // Two seeds, tasks a (trained) and u (unseen), two samples each.
        let rl = |x: f64| vec![s("a", Some(x)), s("a", Some(x)), s("u", Some(1.0)), s("u", None)];
        let ss = vec![s("a", Some(1.0)), s("a", None), s("u", Some(1.0)), s("u", None)];
        let results = vec![
            seed("0", &[("self-sup", ss.clone()), ("rl", rl(4.0)), ("base", vec![s("a", None)])]),
            seed("1", &[("self-sup", ss.clone()), ("rl", rl(2.0))]),
        ];
        let group = |t: &str| Some(if t == "u" { "unseen" } else { "trained" }.to_owned());
        let t = table(&results, &group, 7);
        let row = |arm: &str, scope: &str| {
            t.rows.iter().find(|r| r.arm == arm && r.scope == scope).unwrap().clone()
        };
        assert_eq!(
            t.rows.iter().map(|r| r.arm.as_str()).take(3).collect::<Vec<_>>(),
            ["base", "self-sup", "rl"]
        );
        let r = row("rl", "all");
        assert_eq!((r.seeds, r.tasks, r.samples), (2, 4, 8));
        assert_eq!(r.correct_rate.unwrap().median, 0.75);
        assert_eq!(r.fast1_rate.unwrap().median, 0.5);
        // Correct speedups 4, 4, 1, 2, 2, 1: geomean 8^(1/3) = 2.
        assert!((r.geomean_speedup_of_correct.unwrap().median - 2.0).abs() < 1e-12);
        assert_eq!(row("base", "all").seeds, 1);
        let u = row("rl", "unseen");
        assert_eq!((u.tasks, u.fast1_rate.unwrap().median), (2, 0.0));
        // RL against self-supervised: +50 points fast_1, geomean 2 over 1; on unseen tasks, none.
        assert!(t.comparisons.iter().all(|c| c.b == "self-sup"), "no control arm, no comparison");
        let c = t.comparisons.iter().find(|c| c.scope == "all").unwrap();
        assert_eq!(c.seeds, 2);
        let d = c.fast1_difference.unwrap();
        assert_eq!(d.median, 0.5);
        // RL is never behind: a replicate of unseen tasks alone ties.
        assert!(d.ci_low == 0.0 && d.ci_high == 1.0, "{d:?}");
        assert!((c.geomean_ratio.unwrap().median - 2.0).abs() < 1e-12);
        let c = t.comparisons.iter().find(|c| c.scope == "unseen").unwrap();
        assert_eq!(c.fast1_difference.unwrap().median, 0.0);
        assert_eq!(table(&results, &group, 7), t, "deterministic");
        // Each seed apart: seed 0's RL at 4x on task a, seed 1's at 2x (1x on u in both).
        let mine = |label: &str, arm: &str| {
            t.per_seed.iter().find(|r| r.seed == label && r.arm == arm).unwrap().clone()
        };
        let (zero, one) = (mine("0", "rl"), mine("1", "rl"));
        assert!((zero.geomean_speedup_of_correct.unwrap() - 16f64.cbrt()).abs() < 1e-12);
        assert!((one.geomean_speedup_of_correct.unwrap() - 4f64.cbrt()).abs() < 1e-12);
        assert_eq!((zero.samples, zero.correct_rate, zero.fast1_rate), (4, Some(0.75), Some(0.5)));
        assert_eq!(mine("0", "base").geomean_speedup_of_correct, None);
        assert!(!t.per_seed.iter().any(|r| r.seed == "1" && r.arm == "base"), "no arm, no row");
        let order: Vec<&str> = t.per_seed.iter().map(|r| r.arm.as_str()).collect();
        assert_eq!(order, ["base", "self-sup", "self-sup", "rl", "rl"]);
        // A program that got no verdict is in no statistic; counted as incorrect it would be.
        let with = |extra: SampleResult| {
            let mut r = results.clone();
            r[1].arms.get_mut("rl").unwrap().push(extra);
            table(&r, &group, 7)
        };
        assert_eq!(with(SampleResult { unjudged: true, ..s("a", None) }), t);
        assert_ne!(with(s("a", None)), t);
    }

    #[test]
    fn what_rl_learned_its_best_samples_once_each_and_programs_side_by_side() {
        let lines = vec![
            json!({"step": 1, "key": "a", "reward": 1.0, "text": "```python\nx = 1\n```", "program_id": 3, "verdict": "incorrect", "findings": []}),
            json!({"step": 2, "key": "a", "reward": 5.0, "text": "```python\nclass ModelNew: pass\n```", "program_id": 4, "verdict": "correct", "findings": [{"kind": "k"}]}),
            json!({"step": 3, "key": "a", "reward": 5.0, "text": "```python\nclass ModelNew: pass\n```", "program_id": 4, "verdict": "correct"}),
            json!({"step": 3, "key": "b", "reward": null, "text": "no"}),
            json!({"step": 3, "key": "b", "reward": 0.0, "text": "no program", "verdict": null}),
        ];
        let top = top_samples(&lines, 5);
        assert_eq!(top.len(), 2, "one per program; unscored and unjudged left out");
        assert_eq!(
            (top[0]["step"].as_u64(), top[0]["program"].as_str().map(str::trim)),
            (Some(2), Some("class ModelNew: pass"))
        );
        assert_eq!(top[0]["findings"][0]["kind"], "k");
        let sft = vec![s("a", Some(1.0)), s("b", None), s("c", Some(1.0))];
        let rl = vec![s("a", Some(1.0)), s("b", Some(3.0)), s("c", Some(1.5))];
        let rows = beside(&sft, &rl, 2);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["task"], "b", "the largest gain first");
        assert_eq!(rows[0]["a"]["verdict"], "incorrect");
        assert_eq!(rows[0]["b"]["speedup"], 3.0);
        assert_eq!(rows[1]["task"], "c");
    }
}
