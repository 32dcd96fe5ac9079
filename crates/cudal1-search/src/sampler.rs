//! [`ExemplarSampler`]: which earlier variants a contrastive prompt shows, as in
//! CUDA-L1: score buckets, softmax over bucket means, one variant per bucket.

use std::collections::BTreeMap;

use rand::Rng;

/// A variant as the sampler sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredVariant {
    /// Reference time divided by the variant's time.
    pub speedup: f64,
    /// Whether the evaluator accepted it; only correct variants are shown.
    pub correct: bool,
}

/// Correct variants whose speedups fall in one interval of the bucket width.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Indices into the variants slice.
    pub members: Vec<usize>,
    pub mean: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    #[error("bucket width must be finite and > 0, got {0}")]
    BucketWidth(f64),
    #[error("temperature must be finite and > 0, got {0}")]
    Temperature(f64),
}

/// Picks exemplars so that prompts show variants of clearly different
/// quality (distinct buckets) while favouring the better ones (softmax with
/// temperature `τ`: low τ concentrates on the best bucket, high τ is uniform).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExemplarSampler {
    bucket_width: f64,
    temperature: f64,
}

impl ExemplarSampler {
    pub fn new(bucket_width: f64, temperature: f64) -> Result<Self, SamplerError> {
        if !(bucket_width.is_finite() && bucket_width > 0.0) {
            return Err(SamplerError::BucketWidth(bucket_width));
        }
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(SamplerError::Temperature(temperature));
        }
        Ok(Self { bucket_width, temperature })
    }

    pub fn bucket_width(&self) -> f64 {
        self.bucket_width
    }

    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// Correct variants with a finite speedup, bucketed, lowest bucket first.
    pub fn buckets(&self, variants: &[ScoredVariant]) -> Vec<Bucket> {
        let mut by_key: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (i, v) in variants.iter().enumerate() {
            if v.correct && v.speedup.is_finite() {
                // Speedups are small positive numbers; the cast cannot overflow in practice
                // and saturates if it somehow would.
                #[expect(clippy::cast_possible_truncation)]
                let key = (v.speedup / self.bucket_width).floor() as i64;
                by_key.entry(key).or_default().push(i);
            }
        }
        by_key
            .into_values()
            .map(|members| {
                #[expect(clippy::cast_precision_loss)]
                let mean = members.iter().map(|&i| variants[i].speedup).sum::<f64>()
                    / members.len() as f64;
                Bucket { members, mean }
            })
            .collect()
    }

    /// The probability of each bucket (as [`Self::buckets`] orders them) being
    /// drawn first: softmax over `(bucket mean − global mean) / τ`, where the
    /// global mean is over all correct variants.
    pub fn first_draw_probabilities(&self, variants: &[ScoredVariant]) -> Vec<f64> {
        let buckets = self.buckets(variants);
        let logits = self.logits(variants, &buckets);
        let weights = softmax_weights(&logits);
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    }

    fn logits(&self, variants: &[ScoredVariant], buckets: &[Bucket]) -> Vec<f64> {
        let count: usize = buckets.iter().map(|b| b.members.len()).sum();
        #[expect(clippy::cast_precision_loss)]
        let global =
            buckets.iter().flat_map(|b| &b.members).map(|&i| variants[i].speedup).sum::<f64>()
                / count.max(1) as f64;
        buckets.iter().map(|b| (b.mean - global) / self.temperature).collect()
    }

    /// Up to `n` indices into `variants`, one from each of `min(n, buckets)`
    /// distinct buckets, in the order the buckets were drawn. Buckets are
    /// drawn without replacement by softmax; the variant within a bucket
    /// uniformly.
    pub fn sample(&self, variants: &[ScoredVariant], n: usize, rng: &mut impl Rng) -> Vec<usize> {
        let buckets = self.buckets(variants);
        let mut logits = self.logits(variants, &buckets);
        let mut remaining: Vec<usize> = (0..buckets.len()).collect();
        let mut chosen = Vec::with_capacity(n.min(buckets.len()));
        while chosen.len() < n && !remaining.is_empty() {
            let weights = softmax_weights(&logits);
            let pick = draw(&weights, rng);
            let bucket = &buckets[remaining.remove(pick)];
            logits.remove(pick);
            chosen.push(bucket.members[rng.random_range(0..bucket.members.len())]);
        }
        chosen
    }
}

/// exp(logit − max logit): the largest weight is 1, so the sum never underflows.
fn softmax_weights(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    logits.iter().map(|l| (l - max).exp()).collect()
}

/// An index drawn with probability proportional to its weight.
fn draw(weights: &[f64], rng: &mut impl Rng) -> usize {
    let total: f64 = weights.iter().sum();
    let mut x = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    // Rounding can leave x a hair above the last weight.
    weights.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    fn v(speedup: f64, correct: bool) -> ScoredVariant {
        ScoredVariant { speedup, correct }
    }

    /// Four buckets of width 0.5 with means 0.6, 1.2, 2.1 and 4.0; plus wrong ones.
    fn pool() -> Vec<ScoredVariant> {
        vec![
            v(0.55, true),
            v(0.65, true),
            v(9.0, false),
            v(1.2, true),
            v(2.05, true),
            v(2.15, true),
            v(50.0, false),
            v(4.0, true),
            v(f64::NAN, true),
        ]
    }

    fn bucket_of(i: usize) -> usize {
        match i {
            0 | 1 => 0,
            3 => 1,
            4 | 5 => 2,
            7 => 3,
            other => panic!("index {other} must never be chosen"),
        }
    }

    #[test]
    fn invalid_parameters_are_refused() {
        assert!(ExemplarSampler::new(0.0, 1.0).is_err());
        assert!(ExemplarSampler::new(0.5, 0.0).is_err());
        assert!(ExemplarSampler::new(f64::INFINITY, 1.0).is_err());
        assert!(ExemplarSampler::new(0.5, f64::NAN).is_err());
    }

    #[test]
    fn buckets_hold_correct_finite_variants_with_their_means() {
        let s = ExemplarSampler::new(0.5, 1.0).unwrap();
        let b = s.buckets(&pool());
        let members: Vec<_> = b.iter().map(|b| b.members.clone()).collect();
        assert_eq!(members, vec![vec![0, 1], vec![3], vec![4, 5], vec![7]]);
        let means: Vec<_> = b.iter().map(|b| b.mean).collect();
        for (got, want) in means.iter().zip([0.6, 1.2, 2.1, 4.0]) {
            assert!((got - want).abs() < 1e-12, "{means:?}");
        }
    }

    #[test]
    fn only_correct_variants_from_distinct_buckets() {
        let s = ExemplarSampler::new(0.5, 1.0).unwrap();
        let variants = pool();
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..2000 {
            let picked = s.sample(&variants, 3, &mut rng);
            assert_eq!(picked.len(), 3);
            let mut buckets: Vec<usize> = picked.iter().map(|&i| bucket_of(i)).collect();
            assert!(picked.iter().all(|&i| variants[i].correct && variants[i].speedup.is_finite()));
            buckets.sort_unstable();
            buckets.dedup();
            assert_eq!(buckets.len(), 3, "{picked:?}");
        }
    }

    #[test]
    fn asking_for_more_than_there_are_buckets_returns_one_per_bucket() {
        let s = ExemplarSampler::new(0.5, 1.0).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let picked = s.sample(&pool(), 10, &mut rng);
        let mut buckets: Vec<usize> = picked.iter().map(|&i| bucket_of(i)).collect();
        buckets.sort_unstable();
        assert_eq!(buckets, vec![0, 1, 2, 3]);
    }

    #[test]
    fn empty_or_all_wrong_input_gives_nothing() {
        let s = ExemplarSampler::new(0.5, 1.0).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        assert!(s.sample(&[], 2, &mut rng).is_empty());
        assert!(s.sample(&[v(2.0, false), v(3.0, false)], 2, &mut rng).is_empty());
        assert!(s.sample(&pool(), 0, &mut rng).is_empty());
    }

    #[test]
    fn both_members_of_a_bucket_get_picked() {
        let s = ExemplarSampler::new(10.0, 1.0).unwrap();
        let variants = [v(1.0, true), v(2.0, true)];
        let mut rng = StdRng::seed_from_u64(5);
        let firsts = (0..1000).filter(|_| s.sample(&variants, 1, &mut rng) == vec![0]).count();
        // One bucket, uniform within it: expect 500, sd 16.
        assert!((420..=580).contains(&firsts), "{firsts}");
    }

    /// How often each bucket is drawn first, over many seeded draws.
    fn first_bucket_frequencies(temperature: f64) -> [f64; 4] {
        let s = ExemplarSampler::new(0.5, temperature).unwrap();
        let variants = pool();
        let mut rng = StdRng::seed_from_u64(2024);
        let mut counts = [0usize; 4];
        const DRAWS: usize = 4000;
        for _ in 0..DRAWS {
            counts[bucket_of(s.sample(&variants, 1, &mut rng)[0])] += 1;
        }
        #[expect(clippy::cast_precision_loss)]
        counts.map(|c| c as f64 / DRAWS as f64)
    }

    #[test]
    fn low_temperature_concentrates_on_the_best_bucket() {
        let f = first_bucket_frequencies(0.1);
        // Softmax puts e^-19 on the runner-up: the best bucket essentially always.
        assert!(f[3] > 0.99, "{f:?}");
    }

    #[test]
    fn high_temperature_flattens_towards_uniform() {
        let f = first_bucket_frequencies(100.0);
        for p in f {
            // Expected ≈ 0.25 each (within 1%); sd of one frequency ≈ 0.007.
            assert!((0.21..=0.29).contains(&p), "{f:?}");
        }
    }

    #[test]
    fn raising_temperature_moves_mass_away_from_the_best_bucket() {
        let cold = first_bucket_frequencies(0.5)[3];
        let warm = first_bucket_frequencies(2.0)[3];
        let hot = first_bucket_frequencies(20.0)[3];
        // Analytic values: 0.974, 0.550, 0.276.
        assert!(cold > warm + 0.2 && warm > hot + 0.15, "{cold} {warm} {hot}");
    }

    #[test]
    fn frequencies_match_the_softmax() {
        let s = ExemplarSampler::new(0.5, 1.0).unwrap();
        let p = s.first_draw_probabilities(&pool());
        // softmax of means 0.6, 1.2, 2.1, 4.0 at τ = 1.
        let e: Vec<f64> = [0.6f64, 1.2, 2.1, 4.0].iter().map(|m| m.exp()).collect();
        let z: f64 = e.iter().sum();
        for (got, want) in p.iter().zip(e.iter().map(|x| x / z)) {
            assert!((got - want).abs() < 1e-12);
        }
        let f = first_bucket_frequencies(1.0);
        for (got, want) in f.iter().zip(&p) {
            assert!((got - want).abs() < 0.03, "{f:?} vs {p:?}");
        }
    }
}
