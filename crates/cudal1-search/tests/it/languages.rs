//! [`draw_prompt`] in each language: a prompt draws its exemplars from its own language's
//! variants and plain PyTorch ones, never from the other language's.

use rand::{rngs::StdRng, SeedableRng};

use cudal1_search::{draw_prompt, ExemplarSampler, Language, Prompts, Variant};

const REFERENCE: &str = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n";

fn cuda(i: i64) -> String {
    format!("import torch\nfrom torch.utils.cpp_extension import load_inline\next = load_inline(name='e{i}', cpp_sources='', cuda_sources='')\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return ext.f(x)\n")
}

fn triton(i: i64) -> String {
    format!("import torch, triton\nimport triton.language as tl\n@triton.jit\ndef k{i}(x_ptr):\n    pass\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        k{i}[(1,)](x)\n        return x\n")
}

fn pytorch(i: i64) -> String {
    format!("import torch\nclass ModelNew(torch.nn.Module):\n    N = {i}\n    def forward(self, x):\n        return x.add(1)\n")
}

fn variant(id: i64, code: String, speedup: f64) -> Variant {
    Variant { id, code, speedup: Some(speedup), profile: None }
}

/// Every id any of 200 draws of `n` exemplars shows.
fn shown_ever(prompts: &Prompts, variants: &[Variant], n: usize) -> Vec<i64> {
    let sampler = ExemplarSampler::new(0.25, 1.0).unwrap();
    let mut seen = Vec::new();
    for seed in 0..200 {
        let mut rng = StdRng::seed_from_u64(seed);
        let drawn = draw_prompt(prompts, REFERENCE, variants, true, &sampler, n, &mut rng).unwrap();
        seen.extend(drawn.shown);
    }
    seen.sort_unstable();
    seen.dedup();
    seen
}

#[test]
fn each_language_shows_its_own_variants_and_plain_pytorch_only() {
    let variants = vec![
        variant(1, cuda(1), 3.0),
        variant(2, cuda(2), 1.2),
        variant(3, triton(3), 2.0),
        variant(4, triton(4), 0.8),
        variant(5, pytorch(5), 1.5),
        variant(6, format!("{}{}", cuda(6), triton(6)), 4.0),
        Variant { id: 7, code: triton(7), speedup: None, profile: None },
    ];
    let cuda_prompts = Prompts::builtin();
    let triton_prompts = Prompts::builtin().language(Language::Triton);
    assert_eq!(shown_ever(&cuda_prompts, &variants, 3), [1, 2, 5]);
    assert_eq!(shown_ever(&triton_prompts, &variants, 3), [3, 4, 5]);
}

#[test]
fn a_cuda_only_database_draws_as_before_and_gives_triton_the_first_prompt() {
    let variants = vec![variant(1, cuda(1), 3.0), variant(2, cuda(2), 1.2)];
    let sampler = ExemplarSampler::new(0.25, 1.0).unwrap();
    let triton_prompts = Prompts::builtin().language(Language::Triton);
    let mut rng = StdRng::seed_from_u64(1);
    let drawn =
        draw_prompt(&triton_prompts, REFERENCE, &variants, true, &sampler, 2, &mut rng).unwrap();
    assert!(!drawn.contrastive, "no Triton or PyTorch variant: the first-round prompt");
    assert!(drawn.shown.is_empty());
    assert_eq!(drawn.prompt, triton_prompts.first(REFERENCE).unwrap());

    // The CUDA draw sees every variant: both are shown, in the sampler's order for this seed.
    let cuda_prompts = Prompts::builtin();
    let mut rng = StdRng::seed_from_u64(1);
    let drawn =
        draw_prompt(&cuda_prompts, REFERENCE, &variants, true, &sampler, 2, &mut rng).unwrap();
    assert!(drawn.contrastive);
    let mut shown = drawn.shown.clone();
    shown.sort_unstable();
    assert_eq!(shown, [1, 2]);
}
