//! Turning the reference runner's comparison statistics into pass or fail, with a reason.

use crate::settings::Tolerance;
use cudal1_protocol::CompareReply;

/// The verdict on one seed's outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedOutcome {
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    pub mismatches: u64,
    /// Why it failed; `None` when it passed.
    pub failure: Option<String>,
    /// The candidate file's fingerprint, as the reference computed it.
    pub fingerprint: Option<String>,
}

/// The tolerance the runner must use for each output: it reports dtypes, so the first comparison
/// may need a second pass at another tolerance (see [`judge`]).
pub fn distinct_tolerances(reply: &CompareReply, tol: &Tolerance) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for o in &reply.outputs {
        let t = tol.for_dtype(&o.expected_dtype);
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// Judges one seed. `replies` holds the comparison at each tolerance asked for, keyed by it; each
/// output is judged with the reply made at its own dtype's tolerance.
pub fn judge(replies: &[((f64, f64), CompareReply)], tol: &Tolerance) -> SeedOutcome {
    let (_, first) = &replies[0];
    let fail = |msg: String| SeedOutcome {
        max_abs: None,
        max_rel: None,
        mismatches: 0,
        failure: Some(msg),
        fingerprint: None,
    };
    if let Some(e) = &first.load_error {
        return fail(format!("its output could not be read: {e}"));
    }
    if first.count_actual != first.count_expected {
        return fail(format!(
            "it returned {} output(s), the reference returns {}",
            first.count_actual, first.count_expected
        ));
    }
    let mut outcome = SeedOutcome {
        max_abs: Some(0.0),
        max_rel: Some(0.0),
        mismatches: 0,
        failure: None,
        fingerprint: None,
    };
    for (i, o) in first.outputs.iter().enumerate() {
        if o.actual_shape != o.expected_shape {
            return fail(format!(
                "output {} has shape {:?}, the reference's has shape {:?}",
                o.index, o.actual_shape, o.expected_shape
            ));
        }
        if o.actual_dtype != o.expected_dtype {
            return fail(format!(
                "output {} has dtype {}, the reference's is {}",
                o.index, o.actual_dtype, o.expected_dtype
            ));
        }
        let (atol, rtol) = tol.for_dtype(&o.expected_dtype);
        let o = replies
            .iter()
            .find(|(t, _)| *t == (atol, rtol))
            .and_then(|(_, r)| r.outputs.get(i))
            .unwrap_or(o);
        outcome.max_abs = max_opt(outcome.max_abs, o.max_abs);
        outcome.max_rel = max_opt(outcome.max_rel, o.max_rel);
        outcome.mismatches += o.mismatches;
        if outcome.failure.is_some() {
            continue;
        }
        if o.nonfinite_mismatches > 0 {
            outcome.failure = Some(format!(
                "output {} has {} NaN/inf value(s) that do not match the reference",
                o.index, o.nonfinite_mismatches
            ));
        } else if o.mismatches > 0 && (o.exact || crate::settings::exact_dtype(&o.expected_dtype)) {
            outcome.failure = Some(format!("output {} differs at {} of {} elements, and {} outputs must match exactly (max abs error {})", o.index, o.mismatches, o.numel, o.expected_dtype, fmt_err(o.max_abs)));
        } else if o.mismatches > 0 {
            outcome.failure = Some(format!(
                "output {} differs at {} of {} elements (max abs error {}, max rel error {}; atol {atol:e}, rtol {rtol:e})",
                o.index,
                o.mismatches,
                o.numel,
                fmt_err(o.max_abs),
                fmt_err(o.max_rel),
            ));
        }
    }
    outcome
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn fmt_err(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.3e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudal1_protocol::OutputComparison;

    fn out(dtype: &str, mismatches: u64, nonfinite: u64, shape: Vec<u64>) -> OutputComparison {
        OutputComparison {
            index: 0,
            expected_shape: vec![4],
            actual_shape: shape,
            expected_dtype: dtype.into(),
            actual_dtype: dtype.into(),
            numel: 4,
            max_abs: Some(if mismatches > 0 { 0.5 } else { 1e-7 }),
            max_rel: Some(1e-6),
            mismatches,
            nonfinite_mismatches: nonfinite,
            expected_nonfinite: 0,
            exact: false,
        }
    }

    fn reply(outputs: Vec<OutputComparison>) -> CompareReply {
        CompareReply {
            count_expected: outputs.len(),
            count_actual: outputs.len(),
            outputs,
            load_error: None,
            fingerprint: None,
        }
    }

    #[test]
    fn passes_within_tolerance() {
        let r = reply(vec![out("float32", 0, 0, vec![4])]);
        let o = judge(&[((1e-4, 1e-4), r)], &Tolerance::PerDtype);
        assert_eq!(o.failure, None);
        assert_eq!(o.max_abs, Some(1e-7));
    }

    #[test]
    fn names_the_first_failing_property() {
        let tol = Tolerance::PerDtype;
        let cases = [
            (out("float32", 2, 0, vec![4]), "differs at 2 of 4 elements"),
            (out("float32", 0, 1, vec![4]), "NaN/inf"),
            (out("float32", 0, 0, vec![2, 2]), "shape [2, 2]"),
        ];
        for (o, needle) in cases {
            let got = judge(&[((1e-4, 1e-4), reply(vec![o]))], &tol).failure.unwrap();
            assert!(got.contains(needle), "{got}");
        }
        let mut r = reply(vec![out("float32", 0, 0, vec![4])]);
        r.count_actual = 2;
        assert!(judge(&[((1e-4, 1e-4), r)], &tol).failure.unwrap().contains("2 output(s)"));
    }

    #[test]
    fn integer_outputs_fail_on_any_difference() {
        let tol = Tolerance::PerDtype;
        assert_eq!(tol.for_dtype("int64"), (0.0, 0.0));
        assert_eq!(Tolerance::KernelBenchV0.for_dtype("bool"), (0.0, 0.0));
        assert_eq!(Tolerance::Fixed { atol: 1.0, rtol: 1.0 }.for_dtype("int32"), (0.0, 0.0));
        let mut o = out("int64", 1, 0, vec![4]);
        o.exact = true;
        let got = judge(
            &[
                ((1e-4, 1e-4), reply(vec![o])),
                ((0.0, 0.0), reply(vec![out("int64", 1, 0, vec![4])])),
            ],
            &tol,
        )
        .failure
        .unwrap();
        assert!(got.contains("must match exactly"), "{got}");
    }

    #[test]
    fn half_precision_outputs_use_their_own_tolerance_pass() {
        let tol = Tolerance::PerDtype;
        let strict = reply(vec![out("float16", 3, 0, vec![4])]);
        assert_eq!(distinct_tolerances(&strict, &tol), vec![(1e-2, 1e-2)]);
        let loose = reply(vec![out("float16", 0, 0, vec![4])]);
        let o = judge(&[((1e-4, 1e-4), strict), ((1e-2, 1e-2), loose)], &tol);
        assert_eq!(o.failure, None);
    }
}
