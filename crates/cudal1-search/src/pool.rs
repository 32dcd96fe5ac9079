//! Which earlier programs a prompt in one [`Language`] may show: [`Written`] reads what a program
//! is written in from its code, and [`exemplar_pool`] keeps the programs a prompt may draw its
//! exemplars from. `optimize` and training filter through [`crate::draw_prompt`], `serve` calls
//! [`exemplar_pool`] itself; all three apply the same rule.
//!
//! The rule: a prompt shows no program written in the other language. CUDA programs and plain
//! PyTorch programs (no custom kernel) may be shown to a CUDA prompt, Triton programs and plain
//! PyTorch to a Triton prompt; a program that builds both CUDA and Triton kernels to neither.
//! When fewer programs remain than the prompt would show, it shows fewer (the first-round prompt
//! when none remains) rather than filling up from the other language: a contrastive prompt says
//! "these are the variants to beat, write yours in this language", and a variant in the other
//! language would be an example the model must not follow, with a speedup it was never asked
//! to reach in that language.

use crate::Language;

/// What a program's custom kernels are written in, read from its source without running it
/// ([`cudal1_task::kernel_kinds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Written {
    /// No custom kernel: PyTorch calls only.
    PyTorch,
    /// A CUDA extension (`load_inline`/`load`) and no Triton kernel.
    Cuda,
    /// Triton kernels (`@triton.jit`) and no CUDA extension.
    Triton,
    /// Both a CUDA extension and Triton kernels.
    Mixed,
}

impl Written {
    /// What `code` is written in.
    #[must_use]
    pub fn of(code: &str) -> Written {
        let kinds = cudal1_task::kernel_kinds(code);
        match (kinds.cuda, kinds.triton) {
            (false, false) => Written::PyTorch,
            (true, false) => Written::Cuda,
            (false, true) => Written::Triton,
            (true, true) => Written::Mixed,
        }
    }

    /// Its name in messages and JSON (`pytorch`, `cuda`, `triton`, `mixed`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Written::PyTorch => "pytorch",
            Written::Cuda => "cuda",
            Written::Triton => "triton",
            Written::Mixed => "mixed",
        }
    }

    /// Its name in prose (`plain PyTorch`, `CUDA`, `Triton`, `CUDA and Triton`).
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Written::PyTorch => "plain PyTorch",
            Written::Cuda => "CUDA",
            Written::Triton => "Triton",
            Written::Mixed => "CUDA and Triton",
        }
    }
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Language {
    /// Whether a prompt asking for this language may show a program written as `written`: it
    /// builds no kernel of the other language (the module's rule).
    #[must_use]
    pub fn may_show(self, written: Written) -> bool {
        matches!(
            (self, written),
            (_, Written::PyTorch)
                | (Language::Cuda, Written::Cuda)
                | (Language::Triton, Written::Triton)
        )
    }

    /// Whether `written` is a program in this language proper: its kernels are this language's
    /// and it has at least one (plain PyTorch is neither language's).
    #[must_use]
    pub fn is(self, written: Written) -> bool {
        matches!(
            (self, written),
            (Language::Cuda, Written::Cuda) | (Language::Triton, Written::Triton)
        )
    }
}

/// The `programs` a prompt in `language` may draw its exemplars from, in their order: those
/// whose `written` (what each is written in) [`Language::may_show`]. Where every program is
/// CUDA or plain PyTorch, a CUDA prompt keeps them all, so its draw is what it was before
/// languages existed.
pub fn exemplar_pool<T>(
    language: Language,
    programs: impl IntoIterator<Item = T>,
    mut written: impl FnMut(&T) -> Written,
) -> Vec<T> {
    programs.into_iter().filter(|p| language.may_show(written(p))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUDA: &str = "import torch\nfrom torch.utils.cpp_extension import load_inline\next = load_inline(name='e', cpp_sources='', cuda_sources='')\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return ext.f(x)\n";
    const TRITON: &str = "import torch, triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr):\n    pass\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        k[(1,)](x)\n        return x\n";
    const PYTORCH: &str = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n";

    #[test]
    fn programs_are_read_as_what_their_kernels_are_written_in() {
        assert_eq!(Written::of(CUDA), Written::Cuda);
        assert_eq!(Written::of(TRITON), Written::Triton);
        assert_eq!(Written::of(PYTORCH), Written::PyTorch);
        assert_eq!(Written::of(&format!("{CUDA}{TRITON}")), Written::Mixed);
    }

    #[test]
    fn each_language_draws_from_its_own_programs_and_plain_pytorch() {
        let mixed = format!("{CUDA}{TRITON}");
        let programs = [(1, CUDA), (2, TRITON), (3, PYTORCH), (4, mixed.as_str()), (5, CUDA)];
        let ids = |language| -> Vec<i32> {
            exemplar_pool(language, programs, |(_, code)| Written::of(code))
                .into_iter()
                .map(|(id, _)| id)
                .collect()
        };
        assert_eq!(ids(Language::Cuda), [1, 3, 5]);
        assert_eq!(ids(Language::Triton), [2, 3]);
    }

    #[test]
    fn a_cuda_only_database_keeps_every_program_for_cuda_prompts() {
        let programs = [CUDA, PYTORCH, CUDA];
        assert_eq!(exemplar_pool(Language::Cuda, programs, |c| Written::of(c)), programs);
        assert_eq!(exemplar_pool(Language::Triton, programs, |c| Written::of(c)), [PYTORCH]);
    }

    #[test]
    fn a_language_proper_needs_a_kernel_of_its_own() {
        assert!(Language::Triton.is(Written::Triton));
        assert!(!Language::Triton.is(Written::PyTorch));
        assert!(!Language::Triton.is(Written::Mixed));
        assert!(Language::Cuda.is(Written::Cuda) && !Language::Cuda.is(Written::Triton));
    }
}
