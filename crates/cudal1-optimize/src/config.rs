//! [`OptimizeConfig`]: how many rounds and samples, how prompts pick exemplars, and when to stop.

use std::time::Duration;

use cudal1_llm::Prices;
use serde::{Deserialize, Serialize};

use crate::OptimizeError;

/// The loop's options. [`OptimizeConfig::new`] gives the defaults the CLI documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimizeConfig {
    /// Rounds in all, counting rounds finished by earlier invocations of the same run.
    pub rounds: u32,
    /// LLM samples per round. With `turns` above 1 each sample slot is a trajectory.
    pub samples: u32,
    /// Programs per trajectory (`--turns`): each later turn's prompt shows the previous turn's
    /// program with its verdict and reason. 1 is CUDA-L1's single-shot loop.
    #[serde(default = "one_turn")]
    pub turns: u32,
    /// A trajectory ends early at a correct program with at least this median speedup.
    #[serde(default = "default_turn_target")]
    pub turn_target: f64,
    /// Exemplars shown by the contrastive prompt (CUDA-L1: 2).
    pub exemplars: usize,
    /// Width of the sampler's speedup buckets.
    pub bucket_width: f64,
    /// Softmax temperature over bucket means: low favours the best bucket, high is uniform.
    pub exemplar_temperature: f64,
    /// Stop after this many finished rounds in a row without a better program.
    pub patience: Option<u32>,
    /// Wall time of this invocation.
    #[serde(with = "opt_secs")]
    pub max_wall: Option<Duration>,
    /// Prompt plus completion tokens of the whole run (all invocations).
    pub max_total_tokens: Option<u64>,
    /// Estimated cost of the whole run (all invocations), from `prices`.
    pub max_cost_usd: Option<f64>,
    #[serde(skip)]
    pub prices: Prices,
    /// Sampling settings of every request.
    pub temperature: f32,
    pub top_p: f32,
    pub max_tokens: u32,
    /// LLM requests in flight at once.
    pub concurrency: usize,
    /// Seeds the exemplar draws and the requests' sampling seeds.
    pub seed: u64,
}

impl OptimizeConfig {
    pub fn new(rounds: u32, samples: u32) -> Self {
        Self {
            rounds,
            samples,
            turns: 1,
            turn_target: default_turn_target(),
            exemplars: 2,
            bucket_width: 0.25,
            exemplar_temperature: 1.0,
            patience: None,
            max_wall: None,
            max_total_tokens: None,
            max_cost_usd: None,
            prices: Prices::default(),
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 8192,
            concurrency: 8,
            seed: 0,
        }
    }

    /// Why these options cannot work, if they cannot.
    pub fn check(&self) -> Result<(), OptimizeError> {
        let bad = |reason: String| Err(OptimizeError::Config { reason });
        if self.rounds == 0 || self.samples == 0 {
            return bad(format!(
                "rounds and samples must be at least 1 (got {} and {})",
                self.rounds, self.samples
            ));
        }
        if self.turns == 0 {
            return bad("turns must be at least 1 (1 is one program per sample)".to_owned());
        }
        if !(self.turn_target.is_finite() && self.turn_target > 0.0) {
            return bad(format!(
                "the turn target must be a positive speedup (got {})",
                self.turn_target
            ));
        }
        if self.exemplars == 0 {
            return bad("exemplars must be at least 1".to_owned());
        }
        if self.concurrency == 0 {
            return bad("concurrency must be at least 1".to_owned());
        }
        if self.max_tokens == 0 {
            return bad("max_tokens must be at least 1".to_owned());
        }
        let sampling_ok = self.temperature.is_finite()
            && self.temperature >= 0.0
            && self.top_p > 0.0
            && self.top_p <= 1.0;
        if !sampling_ok {
            return bad(format!(
                "temperature must be >= 0 and top_p in (0, 1] (got {} and {})",
                self.temperature, self.top_p
            ));
        }
        if self.patience == Some(0) {
            return bad("patience must be at least 1 round".to_owned());
        }
        if self.max_cost_usd.is_some_and(|c| !(c.is_finite() && c >= 0.0)) {
            return bad("the cost budget must be a finite number of dollars".to_owned());
        }
        if let Err(e) =
            cudal1_search::ExemplarSampler::new(self.bucket_width, self.exemplar_temperature)
        {
            return bad(e.to_string());
        }
        Ok(())
    }
}

fn one_turn() -> u32 {
    1
}

fn default_turn_target() -> f64 {
    1.0
}

mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        OptimizeConfig::new(3, 4).check().unwrap();
        let reason = |c: OptimizeConfig| c.check().unwrap_err().to_string();
        assert!(reason(OptimizeConfig::new(0, 4)).contains("rounds and samples"));
        assert!(reason(OptimizeConfig { patience: Some(0), ..OptimizeConfig::new(1, 1) })
            .contains("patience"));
        assert!(reason(OptimizeConfig { bucket_width: 0.0, ..OptimizeConfig::new(1, 1) })
            .contains("bucket width"));
        assert!(reason(OptimizeConfig {
            max_cost_usd: Some(f64::NAN),
            ..OptimizeConfig::new(1, 1)
        })
        .contains("cost"));
        assert!(reason(OptimizeConfig { max_tokens: 0, ..OptimizeConfig::new(1, 1) })
            .contains("max_tokens"));
        assert!(
            reason(OptimizeConfig { top_p: 0.0, ..OptimizeConfig::new(1, 1) }).contains("top_p")
        );
        assert!(reason(OptimizeConfig { turns: 0, ..OptimizeConfig::new(1, 1) }).contains("turns"));
        assert!(reason(OptimizeConfig { turn_target: f64::NAN, ..OptimizeConfig::new(1, 1) })
            .contains("turn target"));
    }

    #[test]
    fn round_trips_through_json_with_wall_time_in_seconds() {
        let c = OptimizeConfig {
            max_wall: Some(Duration::from_millis(1500)),
            ..OptimizeConfig::new(2, 3)
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["max_wall"], 1.5);
        let back: OptimizeConfig = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, c);
        // A run recorded before turns existed reads as one turn.
        let mut old = v;
        old.as_object_mut().unwrap().retain(|k, _| k != "turns" && k != "turn_target");
        let back: OptimizeConfig = serde_json::from_value(old).unwrap();
        assert_eq!((back.turns, back.turn_target), (1, 1.0));
    }
}
