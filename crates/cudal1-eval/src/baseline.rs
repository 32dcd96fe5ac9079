//! Baselines: what PyTorch's own tools achieve on a task, measured by the same protocol as
//! candidates.
//!
//! Each [`Baseline`] is a trusted program generated from the task ([`Baseline::program`]): the
//! task's source followed by a `ModelNew` that wraps the task's `Model`. It goes through the engine
//! exactly like a candidate (correctness on the seeds, timing interleaved with the eager reference,
//! the same intervals and checks), so its speedup is a speedup over eager PyTorch, and a baseline
//! that fails on a task gets a verdict with a reason like any candidate. The generated code holds
//! no candidate code, and it runs in the candidate's sandbox: nothing is loosened for it.
//!
//! ```
//! use cudal1_eval::baseline::Baseline;
//! use cudal1_eval::Device;
//!
//! assert_eq!(Baseline::parse("compile-max-autotune"), Some(Baseline::CompileMaxAutotune));
//! assert!(Baseline::CudaGraphs.unavailable_on(&Device::Cpu).is_some());
//! assert!(Baseline::Eager.unavailable_on(&Device::Cpu).is_none());
//! ```

use cudal1_task::{Candidate, Task};
use serde::{Deserialize, Serialize};

use crate::settings::Device;

/// One way of running a task's `Model` without new code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Baseline {
    /// The reference as it is: speedup 1 by definition; measured for its time (and as an A/A
    /// check of the timing).
    Eager,
    /// `torch.compile(model)`.
    CompileDefault,
    /// `torch.compile(model, mode="reduce-overhead")` (CUDA graphs inside Inductor on a GPU).
    CompileReduceOverhead,
    /// `torch.compile(model, mode="max-autotune")`.
    CompileMaxAutotune,
    /// The eager model captured once in a CUDA graph on static input buffers; each call copies
    /// its fresh inputs in, replays, and returns a copy of the static output. GPU only.
    CudaGraphs,
}

impl Baseline {
    /// Every baseline, in the order tables show them.
    pub const ALL: [Baseline; 5] = [
        Baseline::Eager,
        Baseline::CompileDefault,
        Baseline::CompileReduceOverhead,
        Baseline::CompileMaxAutotune,
        Baseline::CudaGraphs,
    ];

    /// The name on the command line and in the store.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Eager => "eager",
            Baseline::CompileDefault => "compile-default",
            Baseline::CompileReduceOverhead => "compile-reduce-overhead",
            Baseline::CompileMaxAutotune => "compile-max-autotune",
            Baseline::CudaGraphs => "cuda-graphs",
        }
    }

    #[must_use]
    pub fn parse(text: &str) -> Option<Baseline> {
        Baseline::ALL.into_iter().find(|b| b.name() == text)
    }

    /// The names, comma-separated, for messages.
    #[must_use]
    pub fn names() -> String {
        Baseline::ALL.map(Baseline::name).join(", ")
    }

    /// Why this baseline cannot run on `device`, if it cannot.
    #[must_use]
    pub fn unavailable_on(self, device: &Device) -> Option<String> {
        match (self, device) {
            (Baseline::CudaGraphs, Device::Cpu) => {
                Some("CUDA graphs need a CUDA device; this run is on the CPU".into())
            }
            _ => None,
        }
    }

    /// The label its program is evaluated under (`baseline:compile-default`).
    #[must_use]
    pub fn label(self) -> String {
        format!("baseline:{}", self.name())
    }

    /// The program that runs `task` this way: the task's source, then a `ModelNew` wrapping its
    /// `Model`. The same task gives the same program (and hash), so stored results are reused.
    #[must_use]
    pub fn program(self, task: &Task) -> Candidate {
        let wrapper = match self {
            Baseline::Eager => EAGER.to_owned(),
            Baseline::CompileDefault => COMPILE.replace("{MODE}", "default"),
            Baseline::CompileReduceOverhead => COMPILE.replace("{MODE}", "reduce-overhead"),
            Baseline::CompileMaxAutotune => COMPILE.replace("{MODE}", "max-autotune"),
            Baseline::CudaGraphs => CUDA_GRAPHS.to_owned(),
        };
        let source = format!(
            "{}\n\n# --- cudal1 baseline `{}` (generated) ---\n{wrapper}",
            task.source.trim_end(),
            self.name()
        );
        Candidate::from_source(self.label(), source)
    }
}

impl std::fmt::Display for Baseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

const EAGER: &str = r#"
import torch as _cudal1_torch


class ModelNew(_cudal1_torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.inner = Model(*args, **kwargs)

    def forward(self, *inputs):
        return self.inner(*inputs)
"#;

const COMPILE: &str = r#"
import torch as _cudal1_torch


class ModelNew(_cudal1_torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.inner = Model(*args, **kwargs)
        # Not registered as a submodule: the model's parameters are the inner model's, once.
        object.__setattr__(self, "_cudal1_compiled", _cudal1_torch.compile(self.inner, mode="{MODE}"))

    def forward(self, *inputs):
        return self._cudal1_compiled(*inputs)
"#;

const CUDA_GRAPHS: &str = r#"
import torch as _cudal1_torch


def _cudal1_copy_out(value):
    if isinstance(value, _cudal1_torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_cudal1_copy_out(v) for v in value)
    return value


class ModelNew(_cudal1_torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.inner = Model(*args, **kwargs)
        object.__setattr__(self, "_cudal1_graphs", {})

    def forward(self, *inputs):
        torch = _cudal1_torch
        key = tuple((tuple(x.shape), x.dtype, str(x.device)) if isinstance(x, torch.Tensor) else repr(x) for x in inputs)
        entry = self._cudal1_graphs.get(key)
        if entry is None:
            static = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.inner(*static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.inner(*static)
            entry = (graph, static, out)
            self._cudal1_graphs[key] = entry
        graph, static, out = entry
        for buffer, fresh in zip(static, inputs):
            if isinstance(buffer, torch.Tensor):
                buffer.copy_(fresh)
        graph.replay()
        return _cudal1_copy_out(out)
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn names_round_trip_and_programs_wrap_the_task_model() {
        for b in Baseline::ALL {
            assert_eq!(Baseline::parse(b.name()), Some(b));
        }
        assert_eq!(Baseline::parse("compile"), None);
        let task = Task::from_source(Path::new("level1/1_X.py"), "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n".into()).unwrap();
        let p = Baseline::CompileReduceOverhead.program(&task);
        assert!(p.source.starts_with(&task.source.trim_end()[..20]));
        assert!(
            p.source.contains("mode=\"reduce-overhead\"") && p.source.contains("class ModelNew")
        );
        assert!(p.check().is_ok(), "{:?}", p.check());
        assert_eq!(
            p.hash,
            Baseline::CompileReduceOverhead.program(&task).hash,
            "the same program each time"
        );
        assert_ne!(p.hash, Baseline::CompileDefault.program(&task).hash);
        assert!(Baseline::CudaGraphs.program(&task).source.contains("graph.replay()"));
        assert!(Baseline::CudaGraphs.unavailable_on(&Device::Cuda(0)).is_none());
    }
}
