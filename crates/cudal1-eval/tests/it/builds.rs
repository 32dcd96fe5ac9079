//! Builds are published whole or not at all. An extension entry that a build killed half-way left
//! behind (the library there, its object file gone, torch's lock file left over), as candidates
//! that rebuilt in their own call left them before, is built again by the compile pool, and the
//! candidate then loads the build without building anything on its device's time. A build the
//! pool itself could not finish publishes nothing.

use super::{candidate, collect, engine_config, outcome, task};
use cudal1_eval::compile::published;
use cudal1_eval::{Evaluator, EventKind, Job, JobOutcome, Verdict};
use std::time::Duration;

const EXT: &str = "cudal1_cpu_row_sum_cpp";

#[test]
fn a_half_built_entry_is_rebuilt_by_the_pool_and_loaded_by_the_candidate_without_building() {
    let dir = tempfile::tempdir().unwrap();
    let config = engine_config(dir.path(), 1, Duration::from_secs(20));
    let cand = candidate("level1/4_Row_Sum/cpp_correct.py");
    let entry = config.compile_cache.dir_for(&cand);
    // What a build killed in a candidate's call left in the cache: the marker of a finished
    // build, a library, no `main.o`, and torch's lock.
    let ext = entry.join(EXT);
    std::fs::create_dir_all(&ext).unwrap();
    std::fs::write(entry.join(".cudal1-built"), r#"{"missed":[]}"#).unwrap();
    std::fs::write(ext.join(format!("{EXT}.so")), b"\x7fELF, cut short").unwrap();
    std::fs::write(ext.join("lock"), b"").unwrap();
    assert!(published(&entry).is_none());

    let (engine, events) = Evaluator::start_with_events(config).unwrap();
    let job = engine.submit(Job::evaluate(task("level1/4_Row_Sum.py"), cand));
    let (_, by_job) = collect(&events, 1);
    engine.finish();
    let kinds = &by_job[&job.id];
    assert!(
        kinds.iter().any(|k| matches!(k, EventKind::Compiled { cached: false, ok: true, .. })),
        "not built again by the pool: {kinds:?}"
    );
    let JobOutcome::Evaluated(e) = outcome(kinds) else { panic!("{:?}", outcome(kinds)) };
    assert_eq!(e.verdict, Verdict::Correct, "{}", e.reason);
    // Loading a published build takes milliseconds; building it in the call took 25 s.
    let in_call = e.measurements.extension_ms.unwrap_or(0.0);
    assert!(in_call < 2000.0, "the candidate spent {in_call} ms in builds on its device's time");
    assert!(e.measurements.missed_builds.is_empty());
    // The entry is whole now: published, the object file there, no lock, no leftovers.
    assert!(published(&entry).is_some());
    assert!(!ext.join("lock").exists());
    assert!(std::fs::read_dir(&ext)
        .unwrap()
        .flatten()
        .any(|f| f.file_name().to_string_lossy().ends_with(".o")));
    let left: Vec<String> = std::fs::read_dir(entry.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".build-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_build_stopped_half_way_in_the_pool_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = engine_config(dir.path(), 1, Duration::from_secs(20));
    // Far too short for a C++ build: the compile worker is killed half-way.
    config.settings.compile_timeout = Duration::from_secs(1);
    let cand = candidate("level1/4_Row_Sum/cpp_correct.py");
    let entry = config.compile_cache.dir_for(&cand);
    let root = config.compile_cache.root.clone();
    let (engine, events) = Evaluator::start_with_events(config).unwrap();
    let job = engine.submit(Job::evaluate(task("level1/4_Row_Sum.py"), cand));
    let (_, by_job) = collect(&events, 1);
    engine.finish();
    let JobOutcome::Evaluated(e) = outcome(&by_job[&job.id]) else { panic!() };
    assert_eq!(
        (e.verdict, e.reason_class.as_str()),
        (Verdict::CompileError, "compile_timeout"),
        "{}",
        e.reason
    );
    // Neither an entry a later evaluation would trust nor a half-made one beside it.
    assert!(!entry.exists(), "a stopped build left {}", entry.display());
    let left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A candidate that keeps state in its extension entry (it could read it at its next evaluation,
/// or replace its published library): the entry is the candidate's to read, not to write.
const WRITES_INTO_ITS_BUILDS: &str = r#"
# Builds nothing, but names load_inline, so that it gets an extension entry.
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

def _try_to_write():
    try:
        with open(os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "left_for_next_time"), "w") as f:
            f.write("state")
        return True
    except OSError:
        return False

WROTE = _try_to_write()

class ModelNew(nn.Module):
    def forward(self, x):
        if WROTE:
            raise RuntimeError("wrote into its published builds")
        return torch.sum(x, dim=1)
"#;

#[test]
fn a_candidate_cannot_write_into_its_published_builds() {
    let dir = tempfile::tempdir().unwrap();
    let config = engine_config(dir.path(), 1, Duration::from_secs(20));
    let cand = cudal1_task::Candidate::from_source(
        "writes_into_its_builds.py".into(),
        WRITES_INTO_ITS_BUILDS.into(),
    );
    let entry = config.compile_cache.dir_for(&cand);
    let (engine, events) = Evaluator::start_with_events(config).unwrap();
    let job = engine.submit(
        Job::evaluate(task("level1/4_Row_Sum.py"), cand).mode(cudal1_eval::Mode::Correctness),
    );
    let (_, by_job) = collect(&events, 1);
    engine.finish();
    let JobOutcome::Evaluated(e) = outcome(&by_job[&job.id]) else {
        panic!("{:?}", by_job[&job.id])
    };
    // Its write in the compile role went into the directory being built; in its own process the
    // published entry refused it.
    assert_eq!(e.verdict, Verdict::Correct, "{}: {}", e.reason_class, e.reason);
    assert!(published(&entry).is_some());
}
