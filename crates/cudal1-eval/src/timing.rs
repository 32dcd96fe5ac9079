//! The timing protocol: warm-up, then blocks of calls on each side in random order until the
//! time budget is spent, each block's wall time also taken by cudal1's own clock.
//!
//! Every call gets an input seed of its own, drawn here from fresh randomness, so nothing in the
//! candidate's process can foresee another call's inputs. Every call's output is captured by the
//! runner right after it returns; which calls are checked is decided here after each candidate
//! block has returned (`reveal`), and a revealed output must carry the fingerprint the block's
//! reply committed to. A reply is a claim: one that does not have the shape of an honest reply is
//! a protocol violation, and its times are bounded by cudal1's own clock (`outer_bound`).

use crate::cores;
use crate::runner::{CallError, RunnerClient};
use crate::settings::EvalSettings;
use crate::window::{self, WindowUsed};
use cudal1_protocol::{CheckedCall, Finding, Reveal, Time, TimeReply};
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
    /// Where the spin was dropped because it could hide work of the candidate's calls
    /// ([`window::spin_could_hide`]): the spin in us, and the candidate's median time per call
    /// with it, in ms, that showed it.
    pub spin_dropped: Option<(f64, f64)>,
    /// Which window the speedup uses ([`window::choose`] sets it).
    pub window: WindowUsed,
    /// Per block: cudal1's wall clock for the whole request, and the runner's timed sum of it.
    pub reference_blocks: Vec<BlockClock>,
    pub candidate_blocks: Vec<BlockClock>,
    pub calls_per_block: u32,
    /// Candidate calls whose outputs were revealed for checking, chosen after their block.
    pub checked: Vec<RevealedCall>,
    /// The first candidate block (its index, outputs kept, calls) whose outputs did not all fit
    /// in `keep_bytes`, which they do at the size of the checked calls' outputs: outputs grown so
    /// that none can be kept would escape the checks.
    pub unkept: Option<(usize, usize, u32)>,
    /// What the candidate runner's guard saw during the blocks (warm-up included).
    pub findings: Vec<Finding>,
    /// CPU time the candidate's processes used while the reference's timed blocks ran, by
    /// cudal1's count (`/proc`), and the wall time of those blocks.
    pub candidate_cpu_while_reference_ms: f64,
    pub reference_blocks_wall_ms: f64,
}

/// A timed call whose output was revealed, with the fingerprint its block's reply committed to.
#[derive(Debug, Clone, PartialEq)]
pub struct RevealedCall {
    pub call: CheckedCall,
    pub fingerprint: String,
}

impl TimingRun {
    /// Per call, in the window the speedup uses.
    pub fn reference_ms(&self) -> &[f64] {
        if self.window.until_idle() {
            &self.reference_full_ms
        } else {
            &self.reference_call_ms
        }
    }

    pub fn candidate_ms(&self) -> &[f64] {
        if self.window.until_idle() {
            &self.candidate_full_ms
        } else {
            &self.candidate_call_ms
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct BlockClock {
    pub outer_ms: f64,
    /// The runner's host clock, summed over the block's calls.
    pub timed_ms: f64,
    /// The runner's two windows (`ms`, `full_ms`), summed over the block's calls.
    pub call_ms: f64,
    pub full_ms: f64,
    pub calls: u32,
    /// CPU time of the side's processes during the block, by cudal1's count (`/proc`).
    pub cpu_ms: f64,
}

impl BlockClock {
    /// The runner's sum of the window in use.
    fn window_ms(&self, window: WindowUsed) -> f64 {
        if window.until_idle() {
            self.full_ms
        } else {
            self.call_ms
        }
    }
}

/// A failure on one side while timing.
#[derive(Debug)]
pub struct TimingError {
    pub side: Side,
    pub error: CallError,
}

/// What the timing protocol needs of a side: a runner ([`RunnerClient`]), or a scripted one in
/// tests.
pub trait TimedSide {
    fn call<R: cudal1_protocol::Request>(
        &mut self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Reply, CallError>;
    /// CPU time of the side's processes so far, by cudal1's count.
    fn cpu_time(&self) -> Duration;
}

impl TimedSide for RunnerClient {
    fn call<R: cudal1_protocol::Request>(
        &mut self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Reply, CallError> {
        RunnerClient::call(self, request, timeout)
    }

    fn cpu_time(&self) -> Duration {
        RunnerClient::cpu_time(self)
    }
}

struct Sides<'a, S: TimedSide> {
    reference: &'a mut S,
    candidate: &'a mut S,
    candidate_dir: &'a Path,
    /// [`Reveal::share_bytes`].
    share_bytes: u64,
}

/// One block as cudal1 saw it from outside: the reply, the wall time around the request, the
/// CPU time of the side's processes during it, and that of the candidate's processes (which
/// should be idle) while a reference block ran.
struct Seen {
    reply: TimeReply,
    outer_ms: f64,
    cpu_ms: f64,
    candidate_cpu_ms: f64,
}

impl<S: TimedSide> Sides<'_, S> {
    fn time(
        &mut self,
        side: Side,
        req: &Time,
        timeout: Duration,
        findings: &mut Vec<Finding>,
    ) -> Result<Seen, TimingError> {
        let idle_before = (side == Side::Reference).then(|| self.candidate.cpu_time());
        let client = match side {
            Side::Reference => &mut *self.reference,
            Side::Candidate => &mut *self.candidate,
        };
        let cpu_before = client.cpu_time();
        let start = Instant::now();
        let reply = client.call(req, timeout).map_err(|error| TimingError { side, error })?;
        let outer_ms = start.elapsed().as_secs_f64() * 1e3;
        let cpu_ms = client.cpu_time().saturating_sub(cpu_before).as_secs_f64() * 1e3;
        let candidate_cpu_ms = idle_before.map_or(0.0, |before| {
            self.candidate.cpu_time().saturating_sub(before).as_secs_f64() * 1e3
        });
        validate(&reply, req)
            .map_err(|detail| TimingError { side, error: CallError::Protocol(detail) })?;
        if side == Side::Candidate {
            findings.extend(reply.findings.iter().cloned());
        }
        Ok(Seen { reply, outer_ms, cpu_ms, candidate_cpu_ms })
    }

    /// Saves the kept output of candidate call `call` of the last block, whose input seed was
    /// `seed`: a reply that names another seed would have the output of some other call (one it
    /// computed) checked in place of the chosen one, and is a forged reply.
    fn reveal(
        &mut self,
        call: u32,
        seed: u64,
        fingerprint: &str,
        timeout: Duration,
        run: &mut TimingRun,
    ) -> Result<(), TimingError> {
        let side = Side::Candidate;
        let reply = self
            .candidate
            .call(
                &Reveal {
                    calls: vec![call],
                    dir: self.candidate_dir.to_owned(),
                    share_bytes: self.share_bytes,
                },
                timeout,
            )
            .map_err(|error| TimingError { side, error })?;
        run.findings.extend(reply.findings);
        let checked = revealed(reply.checked, call, seed)
            .map_err(|detail| TimingError { side, error: CallError::Protocol(detail) })?;
        run.checked.push(RevealedCall { call: checked, fingerprint: fingerprint.to_owned() });
        Ok(())
    }
}

/// The one output a `reveal` of call `call` (input seed `seed`) answers with; anything else is a
/// forged reply.
fn revealed(checked: Vec<CheckedCall>, call: u32, seed: u64) -> Result<CheckedCall, String> {
    let [checked] = <[CheckedCall; 1]>::try_from(checked)
        .map_err(|got| format!("`reveal` of one call answered with {} outputs", got.len()))?;
    if checked.seed != seed {
        return Err(format!(
            "`reveal` of call {call} (input seed {seed}) answered with the output of input seed {}",
            checked.seed
        ));
    }
    Ok(checked)
}

/// What an honest runner's `time` reply looks like: one entry per call in every list, finite
/// non-negative times, no more kept outputs than calls. Anything else is a forged reply.
fn validate(reply: &TimeReply, req: &Time) -> Result<(), String> {
    let calls = req.seeds.len();
    let lists: [(&str, &[f64], usize); 4] = if req.warmup {
        // A warm-up's GPU window (`ms`, with the spin) shows whether the spin could hide work.
        let ms = if reply.ms.is_empty() { 0 } else { calls };
        [
            ("issue_ms", &reply.issue_ms, calls),
            ("ms", &reply.ms, ms),
            ("host_ms", &reply.host_ms, 0),
            ("full_ms", &reply.full_ms, reply.full_ms.len()),
        ]
    } else {
        [
            ("issue_ms", &reply.issue_ms, calls),
            ("ms", &reply.ms, calls),
            ("host_ms", &reply.host_ms, calls),
            ("full_ms", &reply.full_ms, calls),
        ]
    };
    for (name, values, want) in lists {
        if values.len() != want {
            return Err(format!("a `time` reply for {calls} calls has {} `{name}`", values.len()));
        }
        if let Some(bad) = values.iter().find(|v| !v.is_finite() || **v < 0.0) {
            return Err(format!("a `time` reply has `{name}` {bad}"));
        }
    }
    let fingerprints = if req.warmup { 0 } else { calls };
    if reply.fingerprints.len() != fingerprints || reply.kept > fingerprints {
        return Err(format!(
            "a `time` reply for {calls} calls has {} fingerprints and {} kept outputs",
            reply.fingerprints.len(),
            reply.kept
        ));
    }
    if !reply.wall_ms.is_finite() || reply.wall_ms < 0.0 {
        return Err(format!("a `time` reply has `wall_ms` {}", reply.wall_ms));
    }
    Ok(())
}

/// How many bytes of captured outputs a runner keeps per block until the checks are chosen: on a
/// GPU they stay in device memory; a block never holds more calls than fit.
pub fn keep_bytes(settings: &EvalSettings) -> u64 {
    if settings.device.is_cuda() {
        2 << 30
    } else {
        256 << 20
    }
}

/// Runs the whole protocol. `estimate_ms` is each side's first-call time, used to size blocks and
/// time limits; `output_bytes` the size of one call's outputs (blocks hold no more calls than
/// [`keep_bytes`] can keep).
pub fn measure<S: TimedSide>(
    reference: &mut S,
    candidate: &mut S,
    candidate_dir: &Path,
    estimate_ms: (f64, f64),
    output_bytes: u64,
    settings: &EvalSettings,
    rng: &mut impl Rng,
) -> Result<TimingRun, TimingError> {
    let mut sides =
        Sides { reference, candidate, candidate_dir, share_bytes: settings.share_bytes() };
    let slowest = estimate_ms.0.max(estimate_ms.1).max(1e-3);
    let limit = |calls: u32| {
        settings.call_timeout + Duration::from_secs_f64(calls as f64 * slowest * 20.0 / 1e3)
    };
    // Both sides, every block: the one core this device times on.
    let cpu = cores::timing_core(&settings.device).and_then(|c| u32::try_from(c).ok());
    // At least one call's outputs always fit.
    let keep = keep_bytes(settings).max(output_bytes);
    let max_calls = u32::try_from(keep / output_bytes.max(1)).unwrap_or(u32::MAX).clamp(1, 1000);
    let warm_block = |calls: u32, spin_us: Option<f64>, rng: &mut dyn rand::RngCore| Time {
        seeds: (0..calls).map(|_| fresh_seed(rng)).collect(),
        flush_l2: settings.flush_l2,
        warmup: true,
        keep_bytes: keep,
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
    let mut spin_dropped = None;
    let mut first_round = true;
    let per_call_wall = loop {
        let mut wall = 0.0f64;
        let mut issue = [0.0f64; 2];
        let mut candidate_ms = None;
        for (i, side) in [Side::Reference, Side::Candidate].into_iter().enumerate() {
            let Seen { reply, outer_ms, .. } = sides.time(
                side,
                &warm_block(warm_calls, spin_us, rng),
                limit(warm_calls),
                &mut findings,
            )?;
            wall = wall.max(outer_ms / f64::from(warm_calls));
            issue[i] = cudal1_stats::median(past_the_first(&reply.issue_ms)).unwrap_or(0.0);
            if side == Side::Candidate {
                candidate_ms = cudal1_stats::median(&reply.ms);
            }
        }
        if first_round {
            first_round = false;
            spin_us = window::spin_us(settings, issue[0], issue[1]);
            if spin_us.is_some() {
                continue; // the timed blocks are sized with the spin in them
            }
        }
        // The round with the spin shows whether it could hide the candidate's work; the timed
        // blocks are then run without one (the check is made again on the timed calls).
        if let (Some(spin), Some(ms)) = (spin_us, candidate_ms) {
            if window::spin_could_hide(spin, ms) {
                spin_us = None;
                spin_dropped = Some((spin, ms));
            }
        }
        if warm_started.elapsed() >= settings.warmup {
            break wall.max(1e-3);
        }
        warm_calls =
            ((settings.warmup.as_secs_f64() * 1e3 / 2.0 / wall.max(1e-3)) as u32).clamp(1, 2000);
    };
    let calls =
        ((settings.block_target.as_secs_f64() * 1e3 / per_call_wall) as u32).clamp(1, max_calls);
    let blocks = Blocks { calls, per_call_wall, cpu, keep };
    let mut run = timed_blocks(
        &mut sides,
        &blocks,
        TimingRun {
            calls_per_block: calls,
            findings,
            spin_us,
            spin_dropped,
            ..TimingRun::default()
        },
        settings,
        &limit,
        rng,
    )?;
    // A claim is held against what it claims: where the timed calls turned out shorter than the
    // warm-up's, so that the spin could hide a share of them, the blocks are timed again without.
    if let (Some(spin), Some(ms)) = (run.spin_us, median_window_ms(&run)) {
        if window::spin_could_hide(spin, ms) {
            let first = std::mem::take(&mut run);
            let again = TimingRun {
                calls_per_block: calls,
                findings: first.findings,
                checked: first.checked,
                unkept: first.unkept,
                spin_dropped: Some((spin, ms)),
                ..TimingRun::default()
            };
            run = timed_blocks(&mut sides, &blocks, again, settings, &limit, rng)?;
        }
    }
    Ok(run)
}

/// A warm-up round's calls but its first, where it has others: the first round's first call
/// carries one-off start-up (library handles, lazy loading), and in a round of two calls it
/// doubled the median issue time that sizes the spin (an H100, 2026-11-26: spins of 0.29-0.48 ms
/// for calls that took 0.06-0.23 ms to issue).
fn past_the_first(values: &[f64]) -> &[f64] {
    if values.len() > 1 {
        &values[1..]
    } else {
        values
    }
}

/// The candidate's median time per call in the window the run chose.
fn median_window_ms(run: &TimingRun) -> Option<f64> {
    cudal1_stats::median(run.candidate_ms())
}

/// How the timed blocks are made: calls per block, and what each request carries.
struct Blocks {
    calls: u32,
    per_call_wall: f64,
    cpu: Option<u32>,
    keep: u64,
}

/// The timed blocks of a run: pairs of blocks in random order until the budget is spent, with the
/// spin of `run.spin_us`; chooses the window at the end.
fn timed_blocks<S: TimedSide>(
    sides: &mut Sides<'_, S>,
    b: &Blocks,
    mut run: TimingRun,
    settings: &EvalSettings,
    limit: &dyn Fn(u32) -> Duration,
    rng: &mut impl Rng,
) -> Result<TimingRun, TimingError> {
    let calls = b.calls;
    let spin_us = run.spin_us;
    let block = |rng: &mut dyn rand::RngCore| Time {
        seeds: (0..calls).map(|_| fresh_seed(rng)).collect(),
        flush_l2: settings.flush_l2,
        warmup: false,
        keep_bytes: b.keep,
        cpu: b.cpu,
        spin_us,
    };
    // Which candidate blocks reveal a call is drawn after each block has returned, so that no
    // block can know it will be checked: about `timed_checks` per measurement, at least one.
    let pair_ms = 2.0 * f64::from(calls) * b.per_call_wall;
    let expected_blocks = (settings.timing_budget.as_secs_f64() * 1e3 / pair_ms)
        .max(settings.min_blocks as f64)
        .max(1.0);
    let reveal_chance = (settings.timed_checks as f64 / expected_blocks).clamp(0.0, 1.0);
    let checked_before = run.checked.len();

    let started = Instant::now();
    let mut blocks = 0usize;
    while blocks < settings.min_blocks
        || (started.elapsed() < settings.timing_budget && blocks < 10_000)
    {
        let mut order = [Side::Reference, Side::Candidate];
        order.shuffle(rng);
        for side in order {
            let request = block(rng);
            let Seen { reply, outer_ms, cpu_ms, candidate_cpu_ms } =
                sides.time(side, &request, limit(calls), &mut run.findings)?;
            let clock = BlockClock {
                outer_ms,
                timed_ms: reply.host_ms.iter().sum(),
                call_ms: reply.ms.iter().sum(),
                full_ms: reply.full_ms.iter().sum(),
                calls,
                cpu_ms,
            };
            match side {
                Side::Reference => {
                    run.candidate_cpu_while_reference_ms += candidate_cpu_ms;
                    run.reference_blocks_wall_ms += outer_ms;
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
                    let last = blocks + 1 >= settings.min_blocks
                        && started.elapsed() >= settings.timing_budget;
                    let kept = u32::try_from(reply.kept).unwrap_or(u32::MAX);
                    if kept < calls && run.unkept.is_none() {
                        run.unkept = Some((blocks, reply.kept, calls));
                    }
                    if kept > 0
                        && (rng.random_bool(reveal_chance)
                            || (last && run.checked.len() == checked_before))
                    {
                        let call = rng.random_range(0..kept);
                        sides.reveal(
                            call,
                            request.seeds[call as usize],
                            &reply.fingerprints[call as usize],
                            limit(1),
                            &mut run,
                        )?;
                    }
                }
            }
        }
        blocks += 1;
    }
    window::choose(&mut run, settings);
    Ok(run)
}

/// Each timed call's input seed is drawn at random on its own, so that no program can know it in
/// advance or work it out from another call's (docs/exploits.md).
fn fresh_seed(rng: &mut dyn rand::RngCore) -> u64 {
    rng.random_range(1u64 << 32..1u64 << 63)
}

/// Per-call time that cudal1's clock saw but the runner did not time, median over blocks.
pub fn untimed_per_call_ms(blocks: &[BlockClock]) -> Option<f64> {
    let per_call: Vec<f64> = blocks
        .iter()
        .filter(|b| b.calls > 0)
        .map(|b| (b.outer_ms - b.timed_ms) / f64::from(b.calls))
        .collect();
    cudal1_stats::median(&per_call)
}

/// Per-call time by cudal1's clock, one value per block.
pub fn outer_per_call_ms(blocks: &[BlockClock]) -> Vec<f64> {
    blocks.iter().filter(|b| b.calls > 0).map(|b| b.outer_ms / f64::from(b.calls)).collect()
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

/// CPU the candidate's processes may burn while the reference is timed: a little is normal
/// (a thread that finishes winding down), more competes with the reference for the cores.
const IDLE_CPU_FLOOR_MS: f64 = 50.0;
const IDLE_CPU_SHARE: f64 = 0.25;

/// The candidate's processes' CPU time while the reference's blocks ran, when it is more than
/// idle processes use: work done behind the timer, or a neighbour slowing the reference. Counted
/// by cudal1 from `/proc` over the whole process tree, forked children included.
pub fn busy_while_idle(run: &TimingRun) -> Option<(f64, f64)> {
    let (cpu, wall) = (run.candidate_cpu_while_reference_ms, run.reference_blocks_wall_ms);
    (cpu > IDLE_CPU_FLOOR_MS.max(IDLE_CPU_SHARE * wall)).then_some((cpu, wall))
}

/// How many more cores than the reference the candidate kept busy during its blocks, on the
/// CPU (where the reference runs with one thread): CPU time per wall time, median over blocks.
pub fn extra_cores(run: &TimingRun) -> Option<f64> {
    let ratio = |blocks: &[BlockClock]| {
        cudal1_stats::median(
            &blocks
                .iter()
                .filter(|b| b.outer_ms > 0.0)
                .map(|b| b.cpu_ms / b.outer_ms)
                .collect::<Vec<_>>(),
        )
    };
    Some(ratio(&run.candidate_blocks)? - ratio(&run.reference_blocks)?)
}

/// More than this many extra cores, on the CPU, is a speedup bought with cores.
pub const EXTRA_CORES: f64 = 0.5;

/// How much of the reference's untimed time per call an honest candidate's may exceed it by
/// (between two processes it was seen 70% apart on a loaded CPU), and by how much more at least.
const OUTER_NOISE_SHARE: f64 = 1.0;
const OUTER_NOISE_MS: f64 = 0.05;
/// A claim this many times below what cudal1's clock supports is no noise.
pub const OUTER_DISAGREEMENT: f64 = 2.0;

/// What cudal1's own clock supports about the candidate's time per call. Its wall clock around
/// each block is trusted; so is the reference's untimed time per call (`outer - window`), which is
/// the same runner code as the candidate's. A candidate block whose wall time is `O` per call has
/// taken at least `O - (1 + share) x untimed - margin` per call in the window, whatever its own
/// clock says (per-call times divided by ten, work moved where the runner's clock does not look).
/// The claim it is held against is the block's mean per call (its sum is what the outer clock
/// sees): honest calls can have long tails (threads started and joined inside a call had a
/// median 4x below their mean on a 2-core CPU).
///
/// The speedup that clock supports is the reference's mean time per call over the candidate's
/// (at least the floor): what a caller of each in a loop would see. A speedup of medians far
/// above it means the candidate's fast calls are not its typical ones (a few calls doing the
/// work of many); the reported speedup is cut to [`SUPPORT_SLACK`] times it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OuterBound {
    /// The least time per call, in the window in use, that cudal1's clock allows.
    pub floor_ms: f64,
    /// The candidate's time per call by its own clock: the median over blocks of each block's mean.
    pub claimed_ms: f64,
    /// The reference's, the same way (trusted).
    pub reference_ms: f64,
}

/// How far the speedup of medians may exceed the speedup of means before it is cut. Honest
/// calls of 10-20 us on a CPU had block means 15-30% above their medians where their references'
/// (0.2 ms) had 2-4% (bundled solutions at CPU sizes, 2026-11-24): the slack leaves such tails
/// alone.
pub const SUPPORT_SLACK: f64 = 1.5;

impl OuterBound {
    /// How many times more the outer clock says a call took than the candidate claims (1: no
    /// disagreement).
    pub fn factor(&self) -> f64 {
        if self.claimed_ms <= 0.0 {
            return if self.floor_ms > 0.0 { f64::INFINITY } else { 1.0 };
        }
        (self.floor_ms / self.claimed_ms).max(1.0)
    }

    /// Too large to be noise: the claim is false.
    pub fn disagrees(&self) -> bool {
        self.factor() > OUTER_DISAGREEMENT
    }

    /// The most speedup cudal1's clock supports (see [`OuterBound`]).
    pub fn supported_speedup(&self) -> f64 {
        let candidate = self.claimed_ms.max(self.floor_ms);
        if candidate > 0.0 {
            self.reference_ms / candidate
        } else {
            f64::INFINITY
        }
    }

    /// By how much a speedup of `median` must be divided to stay within what the clock supports
    /// (1: not at all).
    pub fn cut(&self, median: f64) -> f64 {
        (median / (SUPPORT_SLACK * self.supported_speedup())).max(1.0)
    }
}

pub fn outer_bound(run: &TimingRun) -> Option<OuterBound> {
    let per_call = |blocks: &[BlockClock], f: &dyn Fn(&BlockClock) -> f64| -> Option<f64> {
        cudal1_stats::median(
            &blocks
                .iter()
                .filter(|b| b.calls > 0)
                .map(|b| f(b) / f64::from(b.calls))
                .collect::<Vec<_>>(),
        )
    };
    let untimed =
        per_call(&run.reference_blocks, &|b| b.outer_ms - b.window_ms(run.window))?.max(0.0);
    let outer = per_call(&run.candidate_blocks, &|b| b.outer_ms)?;
    let claimed_ms = per_call(&run.candidate_blocks, &|b| b.window_ms(run.window))?;
    let reference_ms = per_call(&run.reference_blocks, &|b| b.window_ms(run.window))?;
    let floor_ms = (outer - (1.0 + OUTER_NOISE_SHARE) * untimed - OUTER_NOISE_MS).max(0.0);
    Some(OuterBound { floor_ms, claimed_ms, reference_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Device;
    use rand::SeedableRng;

    /// A side whose calls do `work_ms` of GPU work and take `issue_ms` to issue; with `side_stream`
    /// the work runs on a stream of its own that does not wait for the caller's, so whatever of it
    /// fits in the spin before `start` is invisible to the caller stream's events.
    struct Scripted {
        work_ms: f64,
        issue_ms: f64,
        side_stream: bool,
        /// From this many timed (not warm-up) blocks on, `work_ms` is this instead.
        later: Option<(usize, f64)>,
        timed_blocks: usize,
        /// Each `time` request's (warm-up, spin).
        seen: Vec<(bool, Option<f64>)>,
        last_seeds: Vec<u64>,
    }

    impl Scripted {
        fn new(work_ms: f64, issue_ms: f64, side_stream: bool) -> Scripted {
            Scripted {
                work_ms,
                issue_ms,
                side_stream,
                later: None,
                timed_blocks: 0,
                seen: Vec::new(),
                last_seeds: Vec::new(),
            }
        }

        fn timed_spins(&self) -> Vec<Option<f64>> {
            self.seen.iter().filter(|(warm, _)| !warm).map(|&(_, spin)| spin).collect()
        }

        fn reply(&mut self, t: &AskedTime) -> TimeReply {
            self.seen.push((t.warmup, t.spin_us));
            self.last_seeds.clone_from(&t.seeds);
            let work = match self.later {
                Some((after, work)) if !t.warmup && self.timed_blocks >= after => work,
                _ => self.work_ms,
            };
            if !t.warmup {
                self.timed_blocks += 1;
            }
            let ms = match t.spin_us {
                // The spin covers the host's issue; work beside it is not seen by the events.
                Some(spin) if self.side_stream => (work - spin / 1e3).max(0.0) + 0.0005,
                Some(_) => work,
                // From an idle GPU: the launch and all the work are inside the window.
                None => work + self.issue_ms,
            };
            let n = t.seeds.len();
            TimeReply {
                ms: vec![ms; n],
                full_ms: vec![ms + 0.01; n],
                host_ms: if t.warmup { vec![] } else { vec![ms + 0.02; n] },
                issue_ms: vec![self.issue_ms; n],
                fingerprints: if t.warmup { vec![] } else { vec!["f".into(); n] },
                kept: if t.warmup { 0 } else { n },
                wall_ms: 1.0,
                findings: vec![],
            }
        }
    }

    /// What a scripted side reads of a `time` request.
    #[derive(serde::Deserialize)]
    struct AskedTime {
        seeds: Vec<u64>,
        warmup: bool,
        spin_us: Option<f64>,
    }

    impl TimedSide for Scripted {
        fn call<R: cudal1_protocol::Request>(
            &mut self,
            request: &R,
            _timeout: Duration,
        ) -> Result<R::Reply, CallError> {
            let json = request.to_json();
            let reply = match R::OP {
                "time" => serde_json::to_value(self.reply(&serde_json::from_value(json).unwrap()))
                    .unwrap(),
                "reveal" => {
                    let call = json["calls"][0].as_u64().unwrap() as usize;
                    serde_json::json!({"checked": [{"seed": self.last_seeds[call]}]})
                }
                op => panic!("unexpected request {op}"),
            };
            Ok(serde_json::from_value(reply).unwrap())
        }

        fn cpu_time(&self) -> Duration {
            Duration::ZERO
        }
    }

    fn gpu_settings() -> EvalSettings {
        EvalSettings {
            timing_budget: Duration::ZERO,
            warmup: Duration::ZERO,
            min_blocks: 4,
            timed_checks: 0,
            ..EvalSettings::for_device(Device::Cuda(0))
        }
    }

    fn time(reference: &mut Scripted, candidate: &mut Scripted) -> TimingRun {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        measure(
            reference,
            candidate,
            Path::new("/nonexistent"),
            (0.1, 0.1),
            4,
            &gpu_settings(),
            &mut rng,
        )
        .unwrap()
    }

    #[test]
    fn a_call_whose_work_fits_beside_the_spin_is_timed_from_an_idle_gpu() {
        // A light task (30 us on the GPU, 20 us to issue): the candidate does the same work on a
        // side stream of its own, which the spin (60 us) hid entirely (14.4x on an H100).
        let (mut reference, mut candidate) =
            (Scripted::new(0.03, 0.02, false), Scripted::new(0.03, 0.02, true));
        let run = time(&mut reference, &mut candidate);
        let WindowUsed::SpinCouldHide { spin_us, candidate_ms } = run.window else {
            panic!("{:?}", run.window)
        };
        assert!((spin_us - 60.0).abs() < 1e-9 && candidate_ms < 0.001, "{spin_us} {candidate_ms}");
        assert_eq!(run.spin_us, None);
        // Every timed block of both sides ran without a spin, in the same window.
        assert!(reference
            .timed_spins()
            .iter()
            .chain(&candidate.timed_spins())
            .all(Option::is_none));
        let speedup = cudal1_stats::median(run.reference_ms()).unwrap()
            / cudal1_stats::median(run.candidate_ms()).unwrap();
        assert!((speedup - 1.0).abs() < 0.01, "{speedup}");
    }

    #[test]
    fn an_honest_light_candidate_is_timed_from_an_idle_gpu_too() {
        // Its own 10 us cannot be told from 10 us hidden beside a 60 us spin: no spin.
        let (mut reference, mut candidate) =
            (Scripted::new(0.03, 0.02, false), Scripted::new(0.01, 0.02, false));
        let run = time(&mut reference, &mut candidate);
        assert!(matches!(run.window, WindowUsed::SpinCouldHide { .. }), "{:?}", run.window);
        let speedup = cudal1_stats::median(run.reference_ms()).unwrap()
            / cudal1_stats::median(run.candidate_ms()).unwrap();
        assert!((speedup - 0.06 / 0.04).abs() < 0.01, "{speedup}");
    }

    #[test]
    fn the_spin_is_sized_past_the_first_calls_start_up() {
        assert_eq!(past_the_first(&[40.0, 0.02]), &[0.02]);
        assert_eq!(past_the_first(&[0.02]), &[0.02]);
        assert!(past_the_first(&[]).is_empty());
    }

    #[test]
    fn a_long_call_keeps_the_spin_and_the_gpu_window() {
        // 2 ms of GPU work against a 60 us spin: at most 3% could hide beside it.
        let (mut reference, mut candidate) =
            (Scripted::new(4.0, 0.02, false), Scripted::new(2.0, 0.02, false));
        let run = time(&mut reference, &mut candidate);
        assert_eq!(run.window, WindowUsed::Gpu);
        assert_eq!(run.spin_us, Some(60.0));
        assert!(candidate.timed_spins().iter().all(|s| *s == Some(60.0)));
        let speedup = cudal1_stats::median(run.reference_ms()).unwrap()
            / cudal1_stats::median(run.candidate_ms()).unwrap();
        assert!((speedup - 2.0).abs() < 1e-9, "{speedup}");
    }

    #[test]
    fn a_candidate_slow_in_its_warm_up_and_fast_when_timed_is_timed_again_without_the_spin() {
        // 2 ms in the warm-up keeps the spin; from the first timed block on, its 50 us of work go
        // beside the spin. The check is made again on the timed calls.
        let mut reference = Scripted::new(0.05, 0.02, false);
        let mut candidate = Scripted { later: Some((0, 0.05)), ..Scripted::new(2.0, 0.02, true) };
        let run = time(&mut reference, &mut candidate);
        assert!(matches!(run.window, WindowUsed::SpinCouldHide { .. }), "{:?}", run.window);
        let spins = candidate.timed_spins();
        assert_eq!(spins[..4], [Some(60.0); 4], "{spins:?}");
        assert!(spins[4..].iter().all(Option::is_none) && spins.len() > 4, "{spins:?}");
        let speedup = cudal1_stats::median(run.reference_ms()).unwrap()
            / cudal1_stats::median(run.candidate_ms()).unwrap();
        assert!((speedup - 1.0).abs() < 0.01, "{speedup}");
    }

    fn block(outer: f64, timed: f64, calls: u32) -> BlockClock {
        BlockClock {
            outer_ms: outer,
            timed_ms: timed,
            call_ms: timed,
            full_ms: timed,
            calls,
            cpu_ms: outer,
        }
    }

    #[test]
    fn cpu_beyond_one_core_or_while_the_reference_runs_is_seen() {
        let mut run = TimingRun {
            reference_blocks: vec![block(100.0, 90.0, 10); 5],
            candidate_blocks: vec![block(100.0, 45.0, 10); 5],
            ..TimingRun::default()
        };
        assert_eq!(extra_cores(&run), Some(0.0));
        for b in &mut run.candidate_blocks {
            b.cpu_ms = 190.0; // two threads busy
        }
        assert!(extra_cores(&run).unwrap() > EXTRA_CORES);
        run.reference_blocks_wall_ms = 500.0;
        run.candidate_cpu_while_reference_ms = 20.0;
        assert_eq!(busy_while_idle(&run), None);
        run.candidate_cpu_while_reference_ms = 300.0;
        assert_eq!(busy_while_idle(&run), Some((300.0, 500.0)));
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

    fn run_with(reference: BlockClock, candidate: BlockClock, candidate_ms: f64) -> TimingRun {
        TimingRun {
            reference_call_ms: vec![reference.call_ms / f64::from(reference.calls); 30],
            candidate_call_ms: vec![candidate_ms; 30],
            reference_blocks: vec![reference; 3],
            candidate_blocks: vec![candidate; 3],
            calls_per_block: 10,
            ..TimingRun::default()
        }
    }

    #[test]
    fn the_outer_clock_bounds_a_claim_divided_by_ten() {
        // Reference: 1 ms calls, 0.5 ms of untimed work each. The candidate really takes 1 ms but
        // reports 0.1 ms: its blocks take as long as the reference's.
        let b = outer_bound(&run_with(block(15.0, 10.0, 10), block(15.0, 1.0, 10), 0.1)).unwrap();
        assert!((b.floor_ms - (1.5 - 2.0 * 0.5 - 0.05)).abs() < 1e-9, "{b:?}");
        assert!((b.claimed_ms - 0.1).abs() < 1e-9 && b.disagrees() && b.factor() > 4.0, "{b:?}");
    }

    #[test]
    fn a_median_of_fast_lookups_is_cut_to_the_speedup_of_means() {
        // Nine calls of 0.01 ms and one doing the work of ten (1 ms each): the block sums are
        // honest, the median is not. The reference takes 1 ms per call.
        let b =
            outer_bound(&run_with(block(15.0, 10.0, 10), block(15.0, 10.09, 10), 0.01)).unwrap();
        assert!(!b.disagrees(), "{b:?}");
        assert!((b.supported_speedup() - 10.0 / 10.09).abs() < 1e-9, "{b:?}");
        let median = 1.0 / 0.01;
        assert!((median / b.cut(median) - SUPPORT_SLACK * b.supported_speedup()).abs() < 1e-9);
        // Honest tails within the slack are left alone.
        assert_eq!(b.cut(1.3 * b.supported_speedup()), 1.0);
    }

    #[test]
    fn a_long_tail_of_honest_calls_is_held_against_their_mean() {
        // Seen on a 2-core CPU: threads started and joined in each call, median 0.36 ms, mean
        // 1.31 ms, 2.2 ms per call by the outer clock against the reference's 0.78 (0.08 timed).
        let b = outer_bound(&run_with(
            block(0.78 * 46.0, 0.084 * 46.0, 46),
            block(2.2 * 46.0, 1.31 * 46.0, 46),
            0.36,
        ))
        .unwrap();
        assert_eq!(b.factor(), 1.0, "{b:?}");
    }

    #[test]
    fn an_honest_candidate_is_not_bounded() {
        // Twice as fast, with the same untimed work per call, or somewhat more (noise).
        for untimed in [0.5, 0.8, 1.0] {
            let outer = 10.0 * (0.5 + untimed);
            let b =
                outer_bound(&run_with(block(15.0, 10.0, 10), block(outer, 5.0, 10), 0.5)).unwrap();
            assert_eq!(b.factor(), 1.0, "{untimed}: {b:?}");
        }
        // Untimed work that dwarfs the call: the outer clock cannot resolve it, and says nothing.
        let b = outer_bound(&run_with(block(500.0, 1.0, 10), block(530.0, 0.1, 10), 0.01)).unwrap();
        assert_eq!((b.floor_ms, b.factor()), (0.0, 1.0));
    }

    #[test]
    fn a_reveal_must_answer_with_the_chosen_calls_seed() {
        let call = |seed: u64| CheckedCall {
            seed,
            path: Some("/o/time.pt".into()),
            shared: None,
            findings: vec![],
        };
        assert_eq!(revealed(vec![call(41)], 3, 41).map(|c| c.seed), Ok(41));
        // The output of another call (one the candidate did compute) in place of the chosen one.
        assert!(revealed(vec![call(40)], 3, 41).unwrap_err().contains("output of input seed 40"));
        assert!(revealed(vec![], 3, 41).unwrap_err().contains("0 outputs"));
        assert!(revealed(vec![call(41), call(41)], 3, 41).unwrap_err().contains("2 outputs"));
    }

    #[test]
    fn replies_of_the_wrong_shape_are_refused() {
        let req = Time {
            seeds: vec![1, 2],
            flush_l2: true,
            warmup: false,
            keep_bytes: 8,
            cpu: None,
            spin_us: None,
        };
        let good = TimeReply {
            ms: vec![0.5, 0.5],
            full_ms: vec![0.5, 0.5],
            host_ms: vec![0.5, 0.5],
            issue_ms: vec![0.1, 0.1],
            fingerprints: vec!["a".into(), "b".into()],
            kept: 2,
            wall_ms: 3.0,
            findings: vec![],
        };
        assert_eq!(validate(&good, &req), Ok(()));
        let short = TimeReply { ms: vec![0.05], ..good.clone() };
        assert!(validate(&short, &req).unwrap_err().contains("1 `ms`"));
        let negative = TimeReply { host_ms: vec![0.5, -1.0], ..good.clone() };
        assert!(validate(&negative, &req).is_err());
        let kept = TimeReply { kept: 3, ..good.clone() };
        assert!(validate(&kept, &req).is_err());
        let warm = Time { warmup: true, ..req.clone() };
        let warm_reply = TimeReply {
            ms: vec![],
            full_ms: vec![],
            host_ms: vec![],
            fingerprints: vec![],
            kept: 0,
            ..good
        };
        assert_eq!(validate(&warm_reply, &warm), Ok(()));
    }

    #[test]
    fn guarded_replies_carry_the_findings_and_old_replies_parse_too() {
        let v = serde_json::json!({"id": 3, "ok": true, "ms": [0.5], "host_ms": [0.5], "wall_ms": 2.0,
            "findings": [{"kind": "gc_scan", "detail": "at line 3"}]});
        let r: TimeReply = cudal1_protocol::parse_reply(v).unwrap().unwrap();
        assert_eq!(r.ms, [0.5]);
        assert_eq!(r.findings[0].kind, "gc_scan");
        let v = serde_json::json!({"id": 3, "ok": true, "ms": [], "host_ms": [], "wall_ms": 2.0});
        let r: TimeReply = cudal1_protocol::parse_reply(v).unwrap().unwrap();
        assert!(r.findings.is_empty());
    }

    #[test]
    fn untimed_time_is_per_call() {
        let b = vec![block(10.0, 5.0, 5), block(30.0, 5.0, 5)];
        assert_eq!(untimed_per_call_ms(&b), Some(3.0));
        assert_eq!(outer_per_call_ms(&b), vec![2.0, 6.0]);
    }
}
