//! Which window a GPU run's speedup uses, and the spin that makes the GPU window the GPU's alone.
//!
//! Each GPU call yields two windows on the caller's stream (python/cudal1_runner/timing.py):
//! `ms`, from the start of the call to its return, and `full_ms`, until the device was idle after
//! a device-wide synchronisation. With a spin queued before the start, the host has issued the
//! whole call before the GPU gets there, so `ms` is the GPU's own work and does not move with the
//! host's speed (a ~20 us task spread 15% between runs when the host's launch was in its window;
//! docs/bench/2026-11-22-gpu-session4). `full_ms - ms` (the tail) is then the same latency of
//! the synchronisation on both sides, unless one side left work running on another stream: then
//! both sides are timed until the device was idle, so that work is counted.
//!
//! What the spin cannot do is keep the call's own work off it: a kernel the call launches on
//! another stream (one that does not wait for the caller's) runs beside the spin, before `start`,
//! and no event of the caller's stream sees it; nor does cudal1's clock, since the spin takes as
//! long on both sides. Nor does the host's work inside the call, done while the spin runs. So the
//! GPU window can hide up to one spin per call, and it is used only where that is a small share of
//! the candidate's own time ([`spin_could_hide`]); elsewhere both sides are timed without a spin,
//! from an idle GPU to the end of the synchronisation ([`WindowUsed::SpinCouldHide`]).

use crate::settings::{EvalSettings, TimingWindow};
use crate::timing::TimingRun;
use cudal1_stats::median;
use serde::{Deserialize, Serialize};

/// The window a run's speedup was computed from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum WindowUsed {
    /// The CPU's host clock.
    #[default]
    Host,
    /// The GPU's work on the caller's stream.
    Gpu,
    /// Until the device was idle, because one side's work outlived its calls by this much more
    /// than the other's (median per call).
    UntilIdle { excess_ms: f64 },
    /// `--window wall`: from an idle GPU to the end of the synchronisation.
    Wall,
    /// As `Wall`, chosen by cudal1: a spin of `spin_us` before each call could have hidden work
    /// of the call on other streams (or on the host) as long as more than [`SPIN_HIDE_SHARE`] of
    /// the candidate's own time per call, `candidate_ms` (median, with the spin).
    SpinCouldHide { spin_us: f64, candidate_ms: f64 },
}

impl WindowUsed {
    /// Whether the times run until the device was idle (`full_ms`) rather than to the return.
    pub fn until_idle(&self) -> bool {
        matches!(
            self,
            WindowUsed::Wall | WindowUsed::UntilIdle { .. } | WindowUsed::SpinCouldHide { .. }
        )
    }
}

/// Headroom of the spin over the host's issue time: the host's speed changes in spells, seen to
/// double a call's host time (docs/bench/2026-11-22-gpu-session4).
const SPIN_FACTOR: f64 = 2.0;
const SPIN_MIN_MS: f64 = 0.02;
/// A candidate may hide at most this much more host time than twice the reference's: beyond it,
/// the GPU waits for its launches and the wait is counted.
const SPIN_ALLOWANCE_MS: f64 = 0.5;
/// A call that synchronises inside issues for as long as it runs; a spin cannot help it, so its
/// cost (a spin per call) is bounded.
const SPIN_MAX_MS: f64 = 5.0;

/// The spin before each timed call, in microseconds, from each side's median issue time in ms;
/// `None` where calls are not timed in the GPU window.
pub fn spin_us(
    settings: &EvalSettings,
    reference_issue_ms: f64,
    candidate_issue_ms: f64,
) -> Option<f64> {
    if !settings.device.is_cuda() || settings.window != TimingWindow::Gpu {
        return None;
    }
    let wanted = SPIN_FACTOR * reference_issue_ms.max(candidate_issue_ms);
    let bound = SPIN_FACTOR * reference_issue_ms + SPIN_ALLOWANCE_MS;
    Some((wanted.min(bound) + SPIN_MIN_MS).min(SPIN_MAX_MS) * 1e3)
}

/// The share of the candidate's time per call that work hidden beside the spin may reach: a
/// speedup in the GPU window is then at most this much above the truth.
pub const SPIN_HIDE_SHARE: f64 = 0.05;

/// Whether a spin of `spin_us` before each call could hide more than [`SPIN_HIDE_SHARE`] of a
/// candidate whose calls take `candidate_ms` (its median in the window with the spin): then the
/// GPU window cannot bound its time, and both sides are timed from an idle GPU instead.
pub fn spin_could_hide(spin_us: f64, candidate_ms: f64) -> bool {
    spin_us / 1e3 > SPIN_HIDE_SHARE * candidate_ms
}

/// Per-call tails above the other side's that mean work outlived the call. The synchronisation's
/// own latency grows with how long the host waited in it: on an H100 an honest 0.08 ms candidate
/// had 13.5 us against its 2.7 ms reference's 33.7 us, and 7.6 ms references reached 36 us
/// (docs/bench/2026-11-22-gpu-session5). So the bound scales with the longer side's call. Work
/// hidden below it that writes the output is still caught by the output check after each return.
const TAIL_EXCESS_MS: f64 = 0.005;
const TAIL_EXCESS_SHARE: f64 = 0.01;

/// Records which window the speedup uses.
pub fn choose(run: &mut TimingRun, settings: &EvalSettings) {
    run.window = if !settings.device.is_cuda() {
        WindowUsed::Host
    } else if settings.window == TimingWindow::Wall {
        WindowUsed::Wall
    } else if let Some((spin_us, candidate_ms)) = run.spin_dropped {
        WindowUsed::SpinCouldHide { spin_us, candidate_ms }
    } else {
        match tail_excess_ms(run) {
            Some(excess_ms) if excess_ms > TAIL_EXCESS_MS + TAIL_EXCESS_SHARE * longest_ms(run) => {
                WindowUsed::UntilIdle { excess_ms }
            }
            _ => WindowUsed::Gpu,
        }
    };
}

/// How much longer one side's median tail (`full_ms - ms`) is than the other's.
fn tail_excess_ms(run: &TimingRun) -> Option<f64> {
    match tails_ms(run) {
        (Some(reference), Some(candidate)) => Some((candidate - reference).abs()),
        _ => None,
    }
}

/// The median tail of each side (reference, candidate): how long the device stayed busy or
/// synchronising after a call returned.
pub fn tails_ms(run: &TimingRun) -> (Option<f64>, Option<f64>) {
    (
        median_tail(&run.reference_call_ms, &run.reference_full_ms),
        median_tail(&run.candidate_call_ms, &run.candidate_full_ms),
    )
}

fn median_tail(ms: &[f64], full_ms: &[f64]) -> Option<f64> {
    if ms.len() != full_ms.len() {
        return None;
    }
    median(&ms.iter().zip(full_ms).map(|(m, f)| f - m).collect::<Vec<_>>())
}

fn longest_ms(run: &TimingRun) -> f64 {
    median(&run.reference_call_ms).unwrap_or(0.0).max(median(&run.candidate_call_ms).unwrap_or(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Device;

    fn gpu() -> EvalSettings {
        EvalSettings::for_device(Device::Cuda(0))
    }

    fn run(reference: (f64, f64), candidate: (f64, f64)) -> TimingRun {
        TimingRun {
            reference_call_ms: vec![reference.0; 9],
            reference_full_ms: vec![reference.1; 9],
            candidate_call_ms: vec![candidate.0; 9],
            candidate_full_ms: vec![candidate.1; 9],
            ..TimingRun::default()
        }
    }

    #[test]
    fn the_spin_covers_both_sides_issue_time_up_to_a_bound_set_by_the_reference() {
        let s = gpu();
        // 10 us and 15 us to issue: twice the longer, plus 20 us.
        assert!((spin_us(&s, 0.010, 0.015).unwrap() - 50.0).abs() < 1e-9);
        // A candidate with 3 ms of host work per call hides no more than 2 x 10 us + 0.5 ms.
        assert!((spin_us(&s, 0.010, 3.0).unwrap() - 540.0).abs() < 1e-9);
        // A call that synchronises inside issues for its whole run: the spin stops at 5 ms.
        assert!((spin_us(&s, 40.0, 40.0).unwrap() - 5000.0).abs() < 1e-9);
        assert_eq!(spin_us(&EvalSettings::for_device(Device::Cpu), 0.01, 0.01), None);
        let wall = EvalSettings { window: TimingWindow::Wall, ..gpu() };
        assert_eq!(spin_us(&wall, 0.01, 0.01), None);
    }

    #[test]
    fn equal_tails_keep_the_gpu_window() {
        let mut r = run((0.007, 0.020), (0.005, 0.021));
        choose(&mut r, &gpu());
        assert_eq!(r.window, WindowUsed::Gpu);
        assert_eq!((r.reference_ms()[0], r.candidate_ms()[0]), (0.007, 0.005));
    }

    #[test]
    fn a_longer_wait_in_the_synchronisation_of_a_long_reference_is_not_hidden_work() {
        // Seen on an H100 (level1/5_Diagonal_Matmul): tails 33.7 us and 13.5 us, both honest.
        let mut r = run((2.724, 2.724 + 0.0337), (0.076, 0.076 + 0.0135));
        choose(&mut r, &gpu());
        assert_eq!(r.window, WindowUsed::Gpu);
    }

    #[test]
    fn work_left_on_another_stream_moves_both_sides_to_the_until_idle_window() {
        // The candidate returns after 0.01 ms while its side stream works 2 ms more.
        let mut r = run((2.0, 2.015), (0.01, 2.03));
        choose(&mut r, &gpu());
        let WindowUsed::UntilIdle { excess_ms } = r.window else { panic!("{:?}", r.window) };
        assert!((excess_ms - 2.005).abs() < 1e-9, "{excess_ms}");
        assert_eq!((r.reference_ms()[0], r.candidate_ms()[0]), (2.015, 2.03));
        // On a ~20 us task, 8 us hidden on a side stream is enough.
        let mut r = run((0.007, 0.020), (0.001, 0.028));
        choose(&mut r, &gpu());
        assert!(matches!(r.window, WindowUsed::UntilIdle { .. }), "{:?}", r.window);
    }

    #[test]
    fn the_wall_window_and_the_cpu_keep_their_own_clocks() {
        let mut r = run((0.007, 0.030), (0.005, 0.031));
        choose(&mut r, &EvalSettings { window: TimingWindow::Wall, ..gpu() });
        assert_eq!(
            (r.window, r.reference_ms()[0], r.candidate_ms()[0]),
            (WindowUsed::Wall, 0.030, 0.031)
        );
        let mut r = run((1.0, 1.0), (0.5, 3.0));
        choose(&mut r, &EvalSettings::for_device(Device::Cpu));
        assert_eq!((r.window, r.candidate_ms()[0]), (WindowUsed::Host, 0.5));
    }
}
