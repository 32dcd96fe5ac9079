//! The own-kernel share from a real extension built by the compile pool on the CPU: the symbols
//! come from the published library (read on the trusted side), the kernel times from a scripted
//! profile, and what the candidate's code defines cannot make a library kernel its own.

use super::{collect, engine_config, outcome, task};
use cudal1_eval::own::{attribute, Origin, OwnKernels};
use cudal1_eval::profile::{KernelLaunch, Profile, DURATION};
use cudal1_eval::{Evaluator, Job, JobOutcome, Verdict};
use cudal1_task::Candidate;
use std::time::Duration;

/// A row sum in C++ that also defines (and never calls) a function named like a cuBLAS kernel,
/// hoping that cuBLAS's time would count as its own.
const CANDIDATE: &str = r#"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <torch/extension.h>

extern "C" void ampere_sgemm_128x64_nn(float* out) { if (out) out[0] = 0.0f; }

torch::Tensor row_sum(torch::Tensor x) {
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    auto out = torch::empty({rows}, xc.options());
    const float* p = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i) {
        double acc = 0.0;
        for (int64_t j = 0; j < cols; ++j) acc += p[i * cols + j];
        o[i] = static_cast<float>(acc);
    }
    return out;
}
"""

_ext = load_inline(name="cudal1_own_share_cpp", cpp_sources=_CPP, functions=["row_sum"], extra_cflags=["-O1"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.row_sum(x)
"#;

fn launch(id: u64, name: &str, ns: f64) -> KernelLaunch {
    KernelLaunch {
        id,
        name: name.into(),
        block: String::new(),
        grid: String::new(),
        metrics: [(DURATION.to_owned(), ns)].into_iter().collect(),
    }
}

#[test]
fn the_share_counts_the_symbols_of_the_published_extension_and_no_library_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = engine_config(dir.path(), 1, Duration::from_secs(30));
    let cand = Candidate::from_source("own_share.py".into(), CANDIDATE.into());
    let entry = config.compile_cache.dir_for(&cand);
    let (engine, events) = Evaluator::start_with_events(config).unwrap();
    let job = engine.submit(Job::evaluate(task("level1/4_Row_Sum.py"), cand.clone()));
    let (_, by_job) = collect(&events, 1);
    engine.finish();
    let JobOutcome::Evaluated(e) = outcome(&by_job[&job.id]) else {
        panic!("{:?}", outcome(&by_job[&job.id]))
    };
    assert_eq!(e.verdict, Verdict::Correct, "{}", e.reason);

    // The symbols are read from the library the pool published, not from anything the program said.
    let own = OwnKernels::of_program(Some(&entry), &cand.source).unwrap();
    let row_sum = "_Z7row_sumN2at6TensorE";
    assert!(own.symbols.contains(row_sum), "{} symbols, no {row_sum}", own.symbols.len());
    assert!(own.symbols.contains("ampere_sgemm_128x64_nn"));

    // A profile (scripted: there is no GPU here) where its function ran beside cuBLAS's kernel
    // of the name it defined and a PyTorch kernel.
    let torch_fill = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";
    let mut profile = Profile::from_launches(
        &[
            launch(0, row_sum, 300.0),
            launch(1, "ampere_sgemm_128x64_nn", 600.0),
            launch(2, torch_fill, 100.0),
        ],
        1,
    );
    profile.mangled = true;
    let share = attribute(&profile, &own).unwrap();
    assert_eq!(share.share, 0.3, "{share:?}");
    let origin = |n: &str| share.kernels.iter().find(|k| k.name == n).unwrap().origin;
    assert_eq!(
        (origin(row_sum), origin("ampere_sgemm_128x64_nn"), origin(torch_fill)),
        (Origin::Own, Origin::LibraryName, Origin::Library)
    );

    // Without the pool's published build there is nothing to read the symbols from.
    std::fs::remove_file(entry.join(cudal1_eval::compile::BUILT)).unwrap();
    assert!(OwnKernels::of_program(Some(&entry), &cand.source).is_err());
}
