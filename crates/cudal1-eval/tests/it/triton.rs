//! Programs with Triton kernels (issue 31): their JIT compiles and autotuning happen in a warm-up
//! call before their outputs are checked, while the job shares the device, and never on the
//! timing slot. On the CPU no Triton kernel runs, so the program here takes its PyTorch path
//! there; the phases, the measurements and the way the job holds the device are the same.

use super::{collect, engine, held, outcome, task, Verdict};
use cudal1_eval::{Job, JobOutcome, Mode};
use cudal1_task::Candidate;
use std::time::Duration;

/// Swish with a Triton kernel on a GPU and PyTorch on the CPU.
const TRITON_SWISH: &str = r#"import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swish_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, x * tl.sigmoid(x), mask=inside)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda:
            return x * torch.sigmoid(x)
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _swish_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
"#;

fn triton_importable() -> bool {
    let python = ["CUDAL1_TEST_PYTHON", "CUDAL1_PYTHON"]
        .iter()
        .find_map(std::env::var_os)
        .map_or_else(|| super::repo().join(".venv/bin/python"), std::path::PathBuf::from);
    std::process::Command::new(python)
        .args(["-c", "import triton"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// In an engine that is not pipelined, a timed job holds the device alone from its start; one
/// with Triton kernels warms them up (its own phase, `measurements.triton`) and is checked while
/// other lanes' checks share the device, and takes it alone only to time. A program without
/// Triton kernels has neither the phase nor the record.
#[test]
fn a_triton_program_warms_up_off_the_timing_slot() {
    if !triton_importable() {
        eprintln!(
            "skipped: the test interpreter cannot import triton (PyTorch's CUDA wheels bring it)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (engine, events) = engine(dir.path(), 2, Duration::from_secs(20));
    let swish = task("level1/2_Swish.py");
    let triton_program = Candidate::from_source("triton_swish.py".into(), TRITON_SWISH.into());
    let plain = super::candidate("level1/2_Swish/correct.py");
    let triton_job = engine.submit(Job::evaluate(swish.clone(), triton_program)).id;
    // A check on the other lane while the Triton job loads, warms up and is checked.
    let check = engine
        .submit(
            Job::evaluate(swish.clone(), super::candidate("level1/2_Swish/nan_output.py"))
                .mode(Mode::Correctness),
        )
        .id;
    let (all, by_job) = collect(&events, 2);
    let plain_job = engine.submit(Job::evaluate(swish, plain)).id;
    let (_, plain_events) = collect(&events, 1);

    let JobOutcome::Evaluated(e) = outcome(&by_job[&triton_job]) else {
        panic!("{:?}", by_job[&triton_job])
    };
    assert!(e.verdict == Verdict::Correct && e.speedup.is_some(), "{}: {}", e.verdict, e.reason);
    let phases = &e.measurements.phases_ms;
    let t = e.measurements.triton.as_ref().expect("a Triton program's warm-up is recorded");
    assert_eq!(t.kernels, ["_swish_kernel"]);
    assert!(t.off_slot, "its warm-up ran before it held the device alone: {t:?}");
    assert!(
        t.warmup_ms > 0.0 && phases.get("triton_warmup").is_some_and(|ms| *ms > 0.0),
        "{phases:?}"
    );
    // On the CPU nothing compiles; on a GPU the warm-up's count is its kernels' (test_gpu.py).
    assert_eq!((t.compiled_in_warmup, t.compiled_in_checks, t.compiled_while_timed), (0, 0, 0));
    assert!(
        phases.contains_key("device_wait_timing"),
        "it took the device alone to time: {phases:?}"
    );
    assert!(
        !e.warnings.iter().any(|w| w.class == "triton_compiled_while_timed"),
        "{:?}",
        e.warnings
    );
    // The check ran beside it: both held the device at once.
    let spans = held(&all);
    let (a, b) = (spans[&triton_job], spans[&check]);
    assert!(a.0 < b.1 && b.0 < a.1, "the check waited for the Triton job: {spans:?}");

    let JobOutcome::Evaluated(p) = outcome(&plain_events[&plain_job]) else {
        panic!("{:?}", plain_events[&plain_job])
    };
    assert_eq!(p.verdict, Verdict::Correct, "{}", p.reason);
    assert!(p.measurements.triton.is_none(), "{:?}", p.measurements.triton);
    let phases = &p.measurements.phases_ms;
    assert!(
        !phases.contains_key("triton_warmup") && !phases.contains_key("device_wait_timing"),
        "{phases:?}"
    );
    engine.finish();
}
