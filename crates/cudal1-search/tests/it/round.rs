//! One contrastive round as `cudal1 optimize` will run it, minus the LLM and
//! the evaluator: sample exemplars, render the prompt, extract and de-duplicate
//! the replies, reward the group.

use rand::{rngs::StdRng, SeedableRng};

use cudal1_search::{
    extract_program, group_normalized_rewards, normalized_hash, Exemplar, ExemplarSampler,
    ExtractError, Prompts, ScoredVariant,
};

const REFERENCE: &str = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a @ b\n";

fn variant(speedup: f64, correct: bool) -> (String, ScoredVariant) {
    let code = format!("import torch\nclass ModelNew(torch.nn.Module):\n    SPEED = {speedup}\n");
    (code, ScoredVariant { speedup, correct })
}

#[test]
fn a_round_from_database_to_rewards() {
    let db: Vec<(String, ScoredVariant)> = vec![
        variant(0.7, true),
        variant(1.1, true),
        variant(3.0, false),
        variant(1.9, true),
        variant(2.6, true),
    ];
    let scored: Vec<ScoredVariant> = db.iter().map(|(_, s)| *s).collect();
    let sampler = ExemplarSampler::new(0.5, 1.0).unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    let picked = sampler.sample(&scored, 2, &mut rng);
    assert_eq!(picked.len(), 2);
    assert!(!picked.contains(&2), "the incorrect variant is never shown");

    let exemplars: Vec<Exemplar> = picked
        .iter()
        .map(|&i| Exemplar {
            code: db[i].0.clone(),
            speedup: db[i].1.speedup,
            verdict: "correct".into(),
            profile: None,
        })
        .collect();
    let prompt = Prompts::builtin().contrastive(REFERENCE, &exemplars).unwrap();
    for e in &exemplars {
        assert!(prompt.contains(e.code.trim_end()));
        assert!(prompt.contains(&format!("speedup {:.2}x", e.speedup)));
    }

    // Four replies: two that differ only in comments and blank lines, one
    // without code, one real alternative.
    let program = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return torch.mm(a, b)\n";
    let commented = "# fused\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):  # mm is direct\n        return torch.mm(a, b)\n";
    let other = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return torch.matmul(a, b)\n";
    let replies = [
        format!("Analysis: ...\n```python\n{program}```"),
        format!("Design: ...\n```py\n{commented}```"),
        "I am not able to improve this.".to_owned(),
        format!("```python\n{other}```"),
    ];
    let extracted: Vec<Result<String, ExtractError>> =
        replies.iter().map(|r| extract_program(r)).collect();
    assert_eq!(extracted[2], Err(ExtractError::NoCodeBlock));
    let hashes: Vec<String> =
        extracted.iter().filter_map(|r| r.as_ref().ok()).map(|c| normalized_hash(c)).collect();
    assert_eq!(hashes.len(), 3);
    assert_eq!(hashes[0], hashes[1], "comment-only differences are duplicates");
    assert_ne!(hashes[0], hashes[2]);

    // Say the evaluator measured 1.5x and 2.5x for the two unique programs;
    // the reply without code is incorrect.
    let rewards = group_normalized_rewards(&[Some(1.5), Some(1.5), None, Some(2.5)], 1.5);
    assert!(rewards[2] < rewards[0] && rewards[0] < rewards[3], "{rewards:?}");
    assert!(rewards.iter().all(|r| r.abs() <= 1.5));
}
