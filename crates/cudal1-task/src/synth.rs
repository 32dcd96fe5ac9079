//! Synthetic task families with known faster rewrites (`cudal1 tasks synth`), so that the effect
//! of each training stage can be measured with a small model.
//!
//! Each family is a pattern a rewrite beats in a known way: a diagonal matrix product that
//! broadcasting beats, a Python loop over rows that one batched op replaces, a subexpression
//! computed twice, a hand-written softmax with a fused library equivalent; and two families kept
//! for evaluation only (a hand-written layer norm, a running sum in a loop). Every task comes with
//! two correct rewrites: `fast.py` (the known better program) and `slow.py` (correct, no faster:
//! the reference's own computation restated), so that supervised data can mix both and state the
//! share of fast ones. The split: instances of the training families go to `train/` or, with other
//! sizes, to `heldout/`; the evaluation-only families go to `heldout/` alone.

use serde::Serialize;

/// Sizes for the CPU (tests, CI) or a GPU (calls of about a millisecond on an H100).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    Cpu,
    Gpu,
}

impl Scale {
    pub fn parse(text: &str) -> Result<Scale, String> {
        match text {
            "cpu" => Ok(Scale::Cpu),
            "gpu" => Ok(Scale::Gpu),
            _ => Err(format!("unknown scale `{text}`: use `cpu` or `gpu`")),
        }
    }

    fn size(self, cpu: usize, gpu: usize) -> usize {
        match self {
            Scale::Cpu => cpu,
            Scale::Gpu => gpu,
        }
    }
}

/// One family of tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Family {
    pub name: &'static str,
    /// What the fast rewrite does differently.
    pub rewrite: &'static str,
    /// Only ever in the held-out split.
    pub heldout_only: bool,
}

pub const FAMILIES: [Family; 6] = [
    Family {
        name: "diag_matmul",
        rewrite: "broadcast a vector instead of building a diagonal matrix and multiplying",
        heldout_only: false,
    },
    Family {
        name: "row_loop",
        rewrite: "one batched elementwise op instead of a Python loop over rows",
        heldout_only: false,
    },
    Family {
        name: "repeated_subexpr",
        rewrite: "compute a repeated matrix product once",
        heldout_only: false,
    },
    Family {
        name: "manual_softmax",
        rewrite: "torch.softmax instead of a hand-written exp/max/sum",
        heldout_only: false,
    },
    Family {
        name: "manual_layernorm",
        rewrite: "F.layer_norm instead of hand-written mean/variance normalisation",
        heldout_only: true,
    },
    Family {
        name: "loop_cumsum",
        rewrite: "torch.cumsum instead of a running sum in a Python loop",
        heldout_only: true,
    },
];

/// A generated task with its two rewrites.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthTask {
    pub family: &'static str,
    /// `train` or `heldout`.
    pub split: &'static str,
    /// File stem in the suite's layout, e.g. `3_row_loop_1`.
    pub stem: String,
    #[serde(skip)]
    pub reference: String,
    #[serde(skip)]
    pub fast: String,
    #[serde(skip)]
    pub slow: String,
}

const HEADER: &str = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n";

fn program(
    class: &str,
    doc: &str,
    init: &str,
    forward_args: &str,
    body: &str,
    extra: &str,
) -> String {
    format!(
        "{HEADER}{extra}\n\nclass {class}(nn.Module):\n    \"\"\"{doc}\"\"\"\n\n    def __init__({init}):\n        super().__init__()\n{init_body}\n    def forward(self, {forward_args}):\n{body}",
        init_body = init_assignments(init),
    )
}

/// `self.k = k` for every constructor argument after `self`.
fn init_assignments(init: &str) -> String {
    let names: Vec<&str> = init
        .split(',')
        .skip(1)
        .map(|a| a.split(':').next().unwrap_or("").trim())
        .filter(|a| !a.is_empty())
        .collect();
    let mut out = String::new();
    for n in &names {
        out.push_str(&format!("        self.{n} = {n}\n"));
    }
    out
}

fn inputs(get_inputs: &str, init: &str) -> String {
    format!("\n\ndef get_inputs():\n    return [{get_inputs}]\n\n\ndef get_init_inputs():\n    return [{init}]\n")
}

/// The three programs of one instance: (reference, fast, slow).
fn instance(family: &str, k: usize, scale: Scale) -> (String, String, String) {
    let pick = |cpu: [usize; 6], gpu: [usize; 6]| scale.size(cpu[k % 6], gpu[k % 6]);
    match family {
        "diag_matmul" => {
            let n = pick([64, 96, 128, 80, 112, 72], [2048, 3072, 4096, 2560, 3584, 2304]);
            let m = pick([48, 64, 32, 56, 40, 72], [1024, 2048, 768, 1536, 1280, 896]);
            let io = inputs(&format!("torch.randn({n}), torch.randn({n}, {m})"), "");
            let make = |class: &str, body: &str| {
                program(
                    class,
                    "Multiplies B by the diagonal matrix built from a.",
                    "self",
                    "a, B",
                    body,
                    "",
                ) + &io
            };
            (
                make("Model", "        return torch.diag(a) @ B\n"),
                make("ModelNew", "        return a.unsqueeze(1) * B\n"),
                make("ModelNew", "        d = torch.diag(a)\n        return torch.matmul(d, B)\n"),
            )
        }
        "row_loop" => {
            let op = ["torch.relu", "torch.tanh", "torch.sigmoid"][k % 3];
            let scale_c = [0.5, 2.0, 1.5, 3.0, 0.25, 1.25][k % 6];
            let rows = pick([32, 48, 64, 40, 56, 24], [512, 1024, 768, 640, 896, 384]);
            let cols = pick([64, 32, 48, 96, 80, 40], [4096, 2048, 3072, 1536, 2560, 3584]);
            let io = inputs(&format!("torch.randn({rows}, {cols})"), &format!("{scale_c}"));
            let make = |class: &str, body: &str| {
                program(
                    class,
                    &format!("Applies {op} to each row and scales it."),
                    "self, scale",
                    "x",
                    body,
                    "",
                ) + &io
            };
            (
                make("Model", &format!("        rows = [{op}(x[i]) * self.scale for i in range(x.shape[0])]\n        return torch.stack(rows)\n")),
                make("ModelNew", &format!("        return {op}(x) * self.scale\n")),
                make("ModelNew", &format!("        out = []\n        for i in range(x.shape[0]):\n            out.append({op}(x[i]) * self.scale)\n        return torch.stack(out, dim=0)\n")),
            )
        }
        "repeated_subexpr" => {
            let n = pick([32, 48, 40, 56, 24, 64], [1024, 2048, 1536, 1280, 1792, 896]);
            let act = ["torch.tanh", "torch.sigmoid", "torch.relu"][k % 3];
            let io = inputs(&format!("torch.randn({n}, {n}), torch.randn({n}, {n})"), "");
            let make = |class: &str, body: &str| {
                program(
                    class,
                    "Combines an activation of x @ y with its row sums.",
                    "self",
                    "x, y",
                    body,
                    "",
                ) + &io
            };
            (
                make("Model", &format!("        return {act}(x @ y) + {act}(x @ y).sum(dim=-1, keepdim=True)\n")),
                make("ModelNew", &format!("        h = {act}(x @ y)\n        return h + h.sum(dim=-1, keepdim=True)\n")),
                make("ModelNew", &format!("        a = {act}(torch.matmul(x, y))\n        b = {act}(torch.matmul(x, y)).sum(dim=-1, keepdim=True)\n        return a + b\n")),
            )
        }
        "manual_softmax" => {
            let rows = pick([64, 32, 48, 96, 40, 80], [4096, 2048, 8192, 3072, 6144, 5120]);
            let cols = pick([64, 128, 96, 32, 112, 48], [1024, 2048, 512, 1536, 768, 4096]);
            let temp = [1.0, 0.5, 2.0, 1.5, 0.75, 3.0][k % 6];
            let io = inputs(&format!("torch.randn({rows}, {cols})"), &format!("{temp}"));
            let make = |class: &str, body: &str| {
                program(
                    class,
                    "A softmax over the last dimension at a temperature.",
                    "self, temperature",
                    "x",
                    body,
                    "",
                ) + &io
            };
            (
                make("Model", "        z = x / self.temperature\n        e = torch.exp(z - z.max(dim=-1, keepdim=True).values)\n        return e / e.sum(dim=-1, keepdim=True)\n"),
                make("ModelNew", "        return torch.softmax(x / self.temperature, dim=-1)\n"),
                make("ModelNew", "        z = x / self.temperature\n        m = z.max(dim=-1, keepdim=True).values\n        e = torch.exp(z - m)\n        s = e.sum(dim=-1, keepdim=True)\n        return e / s\n"),
            )
        }
        "manual_layernorm" => {
            let rows = pick([64, 48, 32, 80, 56, 40], [4096, 8192, 2048, 6144, 3072, 5120]);
            let cols = pick([64, 96, 128, 48, 80, 112], [1024, 512, 2048, 768, 1536, 4096]);
            let io = inputs(&format!("torch.randn({rows}, {cols})"), "");
            let make = |class: &str, body: &str| {
                program(
                    class,
                    "Normalises each row to zero mean and unit variance.",
                    "self",
                    "x",
                    body,
                    "",
                ) + &io
            };
            (
                make("Model", "        mean = x.mean(dim=-1, keepdim=True)\n        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n        return (x - mean) / torch.sqrt(var + 1e-5)\n"),
                make("ModelNew", "        return F.layer_norm(x, x.shape[-1:], eps=1e-5)\n"),
                make("ModelNew", "        mu = x.mean(dim=-1, keepdim=True)\n        centred = x - mu\n        var = (centred * centred).mean(dim=-1, keepdim=True)\n        return centred / torch.sqrt(var + 1e-5)\n"),
            )
        }
        "loop_cumsum" => {
            let rows = pick([16, 24, 32, 20, 28, 12], [256, 512, 384, 640, 448, 320]);
            let cols = pick([32, 24, 40, 16, 48, 20], [512, 256, 384, 128, 448, 320]);
            let io = inputs(&format!("torch.randn({rows}, {cols}).abs()"), "");
            let make = |class: &str, body: &str| {
                program(class, "The running sum along the last dimension.", "self", "x", body, "")
                    + &io
            };
            (
                make("Model", "        cols = [x[:, 0]]\n        for j in range(1, x.shape[1]):\n            cols.append(cols[-1] + x[:, j])\n        return torch.stack(cols, dim=1)\n"),
                make("ModelNew", "        return torch.cumsum(x, dim=1)\n"),
                make("ModelNew", "        out = [x[:, 0]]\n        for j in range(1, x.shape[1]):\n            out.append(out[j - 1] + x[:, j])\n        return torch.stack(out, dim=1)\n"),
            )
        }
        other => unreachable!("no family {other}"),
    }
}

/// The tasks of every family: `train_per_family` training instances and `heldout_per_family`
/// held-out ones of each training family, and `heldout_per_family` of each evaluation-only family.
pub fn generate(
    scale: Scale,
    train_per_family: usize,
    heldout_per_family: usize,
) -> Vec<SynthTask> {
    let mut out = Vec::new();
    let mut id = 1;
    for family in FAMILIES {
        let train = if family.heldout_only { 0 } else { train_per_family };
        for k in 0..train + heldout_per_family {
            let split = if k < train { "train" } else { "heldout" };
            let (reference, fast, slow) = instance(family.name, k, scale);
            out.push(SynthTask {
                family: family.name,
                split,
                stem: format!("{id}_{}_{k}", family.name),
                reference,
                fast,
                slow,
            });
            id += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{find_definitions, Candidate, Task};
    use std::path::Path;

    #[test]
    fn every_task_and_rewrite_is_a_valid_program_and_the_split_keeps_families_apart() {
        let tasks = generate(Scale::Cpu, 3, 2);
        assert_eq!(tasks.len(), 4 * 5 + 2 * 2);
        for t in &tasks {
            Task::from_source(Path::new(&format!("level1/{}.py", t.stem)), t.reference.clone())
                .unwrap();
            for code in [&t.fast, &t.slow] {
                Candidate::from_source(t.stem.clone(), code.clone()).check().unwrap();
                assert!(find_definitions(code)
                    .unwrap()
                    .functions
                    .contains(&"get_inputs".to_owned()));
            }
            assert_ne!(t.fast, t.slow);
        }
        let heldout_only: Vec<&SynthTask> = tasks
            .iter()
            .filter(|t| ["manual_layernorm", "loop_cumsum"].contains(&t.family))
            .collect();
        assert!(heldout_only.iter().all(|t| t.split == "heldout"));
        assert_eq!(tasks.iter().filter(|t| t.split == "train").count(), 12);
        // Instances differ: no two tasks share a reference.
        let mut refs: Vec<&str> = tasks.iter().map(|t| t.reference.as_str()).collect();
        refs.sort_unstable();
        refs.dedup();
        assert_eq!(refs.len(), tasks.len());
        assert!(generate(Scale::Gpu, 1, 1)[0].reference.contains("2048"));
    }
}
