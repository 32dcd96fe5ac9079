//! The timing protocol: warm-up, then blocks of calls on each side in random order until the
//! time budget is spent, each block's wall time also taken by cudal1's own clock.

use crate::cores;
use crate::runner::{CallError, RunnerClient};
use crate::settings::EvalSettings;
use crate::window::{self, WindowUsed};
use cudal1_protocol::{CheckedCall, Finding, Request, Time, TimeReply};
use rand::seq::SliceRandom;
use rand::Rng;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Reference,
    Candidate,
}

/// The raw result of a timing run.
#[derive(Debug, Clone, Default)]
pub struct TimingRun {
    /// Per call as the runner reported them: to the call's return (`ms`), until the device was
    /// idle (`full_ms`; on the CPU both are the host clock), and the host's time to issue the call.
    /// [`TimingRun::reference_ms`] and [`TimingRun::candidate_ms`] give the window in use.
    pub reference_call_ms: Vec<f64>,
    pub candidate_call_ms: Vec<f64>,
    pub reference_full_ms: Vec<f64>,
    pub candidate_full_ms: Vec<f64>,
    pub reference_issue_ms: Vec<f64>,
    pub candidate_issue_ms: Vec<f64>,
    /// The GPU spin queued before each timed call, if any.
    pub spin_us: Option<f64>,
    /// Which window the speedup uses ([`window::choose`] sets it).
    pub window: WindowUsed,
    /// Per block: cudal1's wall clock for the whole request, and the runner's timed sum of it.
    pub reference_blocks: Vec<BlockClock>,
    pub candidate_blocks: Vec<BlockClock>,
    pub calls_per_block: u32,
    /// Candidate calls whose outputs were saved for checking.
    pub checked: Vec<CheckedCall>,
    /// What the candidate runner's guard saw during the blocks (warm-up included).
    pub findings: Vec<Finding>,
}

/// `time` whose reply is read with the guard's `findings`, a field the runner adds to every
/// `time` reply of the candidate role (docs/exploits.md).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(transparent)]
struct GuardedTime(Time);

#[derive(Debug, Clone, serde::Deserialize)]
struct GuardedTimeReply {
    #[serde(flatten)]
    reply: TimeReply,
    #[serde(default)]
    findings: Vec<Finding>,
}

impl Request for GuardedTime {
    const OP: &'static str = "time";
    type Reply = GuardedTimeReply;
}

impl TimingRun {
    /// Per call, in the window the speedup uses.
    pub fn reference_ms(&self) -> &[f64] {
        if self.window.until_idle() { &self.reference_full_ms } else { &self.reference_call_ms }
    }

    pub fn candidate_ms(&self) -> &[f64] {
        if self.window.until_idle() { &self.candidate_full_ms } else { &self.candidate_call_ms }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct BlockClock {
    pub outer_ms: f64,
    pub timed_ms: f64,
    pub calls: u32,
    /// A block that also saved outputs: its outer time includes that work.
    pub saved_outputs: bool,
}

/// A failure on one side while timing.
#[derive(Debug)]
pub struct TimingError {
    pub side: Side,
    pub error: CallError,
}

struct Sides<'a> {
    reference: &'a mut RunnerClient,
    candidate: &'a mut RunnerClient,
    reference_dir: &'a Path,
    candidate_dir: &'a Path,
}

impl Sides<'_> {
    fn time(&mut self, side: Side, req: &Time, timeout: Duration, findings: &mut Vec<Finding>) -> Result<(TimeReply, f64), TimingError> {
        let (client, dir) = match side {
            Side::Reference => (&mut *self.reference, self.reference_dir),
            Side::Candidate => (&mut *self.candidate, self.candidate_dir),
        };
        let req = GuardedTime(Time { dir: dir.to_owned(), ..req.clone() });
        let start = Instant::now();
        let reply = client.call(&req, timeout).map_err(|error| TimingError { side, error })?;
        let outer_ms = start.elapsed().as_secs_f64() * 1e3;
        if side == Side::Candidate {
            findings.extend(reply.findings);
        }
        Ok((reply.reply, outer_ms))
    }
}

/// Runs the whole protocol. `estimate_ms` is each side's first-call time, used to size blocks and
/// time limits.
pub fn measure(
    reference: &mut RunnerClient,
    candidate: &mut RunnerClient,
    dirs: (&Path, &Path),
    estimate_ms: (f64, f64),
    settings: &EvalSettings,
    rng: &mut impl Rng,
) -> Result<TimingRun, TimingError> {
    let mut sides = Sides { reference, candidate, reference_dir: dirs.0, candidate_dir: dirs.1 };
    let slowest = estimate_ms.0.max(estimate_ms.1).max(1e-3);
    let limit = |calls: u32| settings.call_timeout + Duration::from_secs_f64(calls as f64 * slowest * 20.0 / 1e3);
    // Both sides, every block: the one core this device times on.
    let cpu = cores::timing_core(&settings.device).and_then(|c| u32::try_from(c).ok());
    let block = |calls: u32, seed_base: u64, check: Vec<u32>, warmup: bool, spin_us: Option<f64>| Time {
        calls,
        seed_base,
        flush_l2: settings.flush_l2,
        check,
        dir: Default::default(),
        warmup,
        cpu,
        spin_us,
    };

    // Warm-up: blocks on both sides until the warm-up time has passed (at least one each). The
    // last warm block's wall time per call, untimed work included, sizes the timed blocks: a
    // first-call estimate can be dominated by one-off start-up (cuBLAS handles, autotuning).
    // The first round runs without a spin, and its issue times size the spin of all later blocks.
    let mut warm_calls = ((settings.warmup.as_secs_f64() * 1e3 / slowest) as u32).clamp(2, 2000);
    let warm_started = Instant::now();
    let mut findings = Vec::new();
    let mut spin_us = None;
    let mut first_round = true;
    let per_call_wall = loop {
        let mut wall = 0.0f64;
        let mut issue = [0.0f64; 2];
        for (i, side) in [Side::Reference, Side::Candidate].into_iter().enumerate() {
            let (reply, outer_ms) = sides.time(side, &block(warm_calls, fresh_seed(rng), vec![], true, spin_us), limit(warm_calls), &mut findings)?;
            wall = wall.max(outer_ms / f64::from(warm_calls));
            issue[i] = cudal1_stats::median(&reply.issue_ms).unwrap_or(0.0);
        }
        if first_round {
            first_round = false;
            spin_us = window::spin_us(settings, issue[0], issue[1]);
            if spin_us.is_some() {
                continue; // the timed blocks are sized with the spin in them
            }
        }
        if warm_started.elapsed() >= settings.warmup {
            break wall.max(1e-3);
        }
        warm_calls = ((settings.warmup.as_secs_f64() * 1e3 / 2.0 / wall.max(1e-3)) as u32).clamp(1, 2000);
    };
    let calls = ((settings.block_target.as_secs_f64() * 1e3 / per_call_wall) as u32).clamp(1, 1000);

    let mut run = TimingRun { calls_per_block: calls, findings, spin_us, ..TimingRun::default() };
    // Blocks that save a candidate output for checking are spread at random over the run.
    let planned_blocks = settings.min_blocks.max(1);
    let mut check_blocks: Vec<usize> = (0..settings.timed_checks).map(|_| rng.random_range(0..planned_blocks)).collect();
    check_blocks.sort_unstable();

    let started = Instant::now();
    let mut blocks = 0usize;
    while blocks < settings.min_blocks || (started.elapsed() < settings.timing_budget && blocks < 10_000) {
        let mut order = [Side::Reference, Side::Candidate];
        order.shuffle(rng);
        for side in order {
            let checks: Vec<u32> = if side == Side::Candidate {
                check_blocks.iter().filter(|b| **b == blocks).map(|_| rng.random_range(0..calls)).collect()
            } else {
                vec![]
            };
            let saved_outputs = !checks.is_empty();
            let (reply, outer_ms) = sides.time(side, &block(calls, fresh_seed(rng), checks, false, spin_us), limit(calls), &mut run.findings)?;
            let clock = BlockClock { outer_ms, timed_ms: reply.host_ms.iter().sum(), calls, saved_outputs };
            match side {
                Side::Reference => {
                    run.reference_call_ms.extend(&reply.ms);
                    run.reference_full_ms.extend(&reply.full_ms);
                    run.reference_issue_ms.extend(&reply.issue_ms);
                    run.reference_blocks.push(clock);
                }
                Side::Candidate => {
                    run.candidate_call_ms.extend(&reply.ms);
                    run.candidate_full_ms.extend(&reply.full_ms);
                    run.candidate_issue_ms.extend(&reply.issue_ms);
                    run.candidate_blocks.push(clock);
                    run.checked.extend(reply.checked);
                }
            }
        }
        blocks += 1;
    }
    window::choose(&mut run, settings);
    Ok(run)
}

/// Seeds for timed calls are drawn at random so that no program can know them in advance (the
/// runner derives each call's seed from it with a hash, see docs/exploits.md).
fn fresh_seed(rng: &mut impl Rng) -> u64 {
    rng.random_range(1u64 << 32..1u64 << 48)
}

/// Per-call time that cudal1's clock saw but the runner did not time, median over blocks.
pub fn untimed_per_call_ms(blocks: &[BlockClock]) -> Option<f64> {
    let per_call: Vec<f64> = blocks
        .iter()
        .filter(|b| !b.saved_outputs && b.calls > 0)
        .map(|b| (b.outer_ms - b.timed_ms) / f64::from(b.calls))
        .collect();
    cudal1_stats::median(&per_call)
}

/// Per-call time by cudal1's clock, one value per block.
pub fn outer_per_call_ms(blocks: &[BlockClock]) -> Vec<f64> {
    blocks.iter().filter(|b| !b.saved_outputs && b.calls > 0).map(|b| b.outer_ms / f64::from(b.calls)).collect()
}

/// The outside clock's cross-check. The untimed work per call (fresh inputs, L2 flush,
/// synchronisation, the protocol) is the same runner code on both sides, so a candidate whose
/// untimed share is far larger than the reference's did work where the runner's clock did not
/// see it (a patched timer, work handed to a thread), or its own clock lies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HiddenWork {
    /// Untimed time per call beyond the reference's, by cudal1's clock.
    pub hidden_ms: f64,
    /// The candidate's median per-call time by its own clock.
    pub claimed_ms: f64,
    /// The reference's untimed time per call: the scale of the noise in `hidden_ms`.
    pub overhead_ms: f64,
}

impl HiddenWork {
    /// Suspicious when more time went unseen than the candidate claims to need, and more than
    /// all of the reference's untimed work (whose noise between two processes, seen as large as
    /// 70% of it on a loaded CPU, must never be mistaken for hidden work), and at least 50 us.
    pub fn escaped_the_timer(&self) -> bool {
        self.hidden_ms > self.claimed_ms.max(0.05).max(self.overhead_ms)
    }
}

pub fn hidden_work(run: &TimingRun) -> Option<HiddenWork> {
    let overhead_ms = untimed_per_call_ms(&run.reference_blocks)?;
    let candidate = untimed_per_call_ms(&run.candidate_blocks)?;
    let claimed_ms = cudal1_stats::median(run.candidate_ms())?;
    Some(HiddenWork { hidden_ms: candidate - overhead_ms, claimed_ms, overhead_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(outer: f64, timed: f64, calls: u32) -> BlockClock {
        BlockClock { outer_ms: outer, timed_ms: timed, calls, saved_outputs: false }
    }

    #[test]
    fn hidden_work_is_the_difference_in_untimed_time() {
        let run = TimingRun {
            reference_call_ms: vec![1.0; 10],
            candidate_call_ms: vec![0.01; 10],
            reference_blocks: vec![block(15.0, 10.0, 10); 3],
            // The candidate claims 0.1 ms per block of 10 calls but the block took 14.6 ms.
            candidate_blocks: vec![block(14.6, 0.1, 10); 3],
            calls_per_block: 10,
            ..TimingRun::default()
        };
        let h = hidden_work(&run).unwrap();
        assert!((h.hidden_ms - 0.95).abs() < 1e-9, "{h:?}");
        assert_eq!(h.claimed_ms, 0.01);
        assert!(h.escaped_the_timer());
    }

    #[test]
    fn noisy_untimed_work_of_an_honest_candidate_is_not_flagged() {
        // Seen on an H100: 1 call per block, ~270 ms of untimed input generation per call that
        // varied by tens of ms between processes, against a 2.9 ms call.
        let h = HiddenWork { hidden_ms: 10.1, claimed_ms: 2.93, overhead_ms: 270.0 };
        assert!(!h.escaped_the_timer());
        // Seen on a loaded 2-core CPU: an honest broadcast candidate.
        let h = HiddenWork { hidden_ms: 2.292, claimed_ms: 0.282, overhead_ms: 3.217 };
        assert!(!h.escaped_the_timer());
        // The same noise level with a timer that claims nothing is still caught when the hidden
        // work is large against it.
        let h = HiddenWork { hidden_ms: 300.0, claimed_ms: 0.001, overhead_ms: 270.0 };
        assert!(h.escaped_the_timer());
    }

    #[test]
    fn guarded_replies_carry_the_findings_and_old_replies_parse_too() {
        let v = serde_json::json!({"id": 3, "ok": true, "ms": [0.5], "host_ms": [0.5], "checked": [], "wall_ms": 2.0,
            "findings": [{"kind": "gc_scan", "detail": "at line 3"}]});
        let r: GuardedTimeReply = cudal1_protocol::parse_reply(v).unwrap().unwrap();
        assert_eq!(r.reply.ms, [0.5]);
        assert_eq!(r.findings[0].kind, "gc_scan");
        let v = serde_json::json!({"id": 3, "ok": true, "ms": [], "host_ms": [], "checked": [], "wall_ms": 2.0});
        let r: GuardedTimeReply = cudal1_protocol::parse_reply(v).unwrap().unwrap();
        assert!(r.findings.is_empty());
        let req = GuardedTime(Time { calls: 2, seed_base: 5, flush_l2: true, check: vec![], dir: "/d".into(), warmup: false, cpu: Some(7), spin_us: Some(40.0) }).to_json();
        assert_eq!((req["op"].as_str(), req["calls"].as_u64()), (Some("time"), Some(2)));
        assert_eq!(req["spin_us"].as_f64(), Some(40.0));
    }

    #[test]
    fn blocks_that_saved_outputs_are_left_out() {
        let mut b = vec![block(10.0, 5.0, 5)];
        b.push(BlockClock { saved_outputs: true, ..block(1000.0, 5.0, 5) });
        assert_eq!(untimed_per_call_ms(&b), Some(1.0));
        assert_eq!(outer_per_call_ms(&b), vec![2.0]);
    }
}
