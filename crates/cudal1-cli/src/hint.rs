//! The CLI's words for what to do: libraries return what failed and what can be done about it as
//! data ([`cudal1_eval::Remedy`], [`cudal1_python::Remedy`], error variants), and only here does
//! that become a `hint:` line naming this CLI's flags.

use cudal1_eval::memory::LimitBeyondHost;
use cudal1_eval::Remedy;
use cudal1_supervisor::human_bytes;
use std::error::Error;

/// A size as `--memory` takes it: `23G`.
pub fn memory_flag_value(bytes: u64) -> String {
    human_bytes(bytes).replace(' ', "").replace("iB", "")
}

/// One hint for an evaluation that would not fit, its remedies joined best first; `None` when
/// there are none.
pub fn for_memory(remedies: &[Remedy]) -> Option<String> {
    let said: Vec<String> = remedies
        .iter()
        .map(|r| match r {
            Remedy::RaiseMemoryLimit { to } => format!("raise the limit (`--memory {}`)", memory_flag_value(*to)),
            Remedy::ScaleTask { factor } => format!(
                "`--scale {factor}` (or smaller) shrinks the task's leading input dimensions for a trial on this machine"
            ),
            Remedy::MoreMemory => "use a machine with more memory".to_owned(),
        })
        .collect();
    (!said.is_empty()).then(|| said.join(", or "))
}

/// The hint for a Python interpreter that cannot be used: where `--python` named it, that first
/// (the library says only "your choice of interpreter").
fn for_python(e: &cudal1_python::PythonError) -> Option<String> {
    use cudal1_python::{PythonError as E, Remedy as R, Source};
    let named = matches!(
        e,
        E::NoTorch { source_kind: Source::Flag, .. } | E::Probe { source_kind: Source::Flag, .. }
    );
    let said: Vec<String> = e
        .remedies()
        .iter()
        .map(|r| match r {
            R::RunSetup => "run `bash scripts/setup.sh` to create `.venv` with PyTorch".to_owned(),
            R::InstallTorch { python } => {
                format!("install it with `{} -m pip install torch`", python.display())
            }
            R::ChooseInterpreter => {
                "point `--python` at an interpreter that has PyTorch".to_owned()
            }
        })
        .collect();
    match (named, said.is_empty()) {
        (false, true) => None,
        (false, false) => Some(said.join(", or ")),
        (true, true) => Some(
            "`--python` named it: point `--python` at a working Python interpreter with PyTorch, \
             or leave the flag out to use CUDAL1_PYTHON, VIRTUAL_ENV, `.venv` or `python3`"
                .to_owned(),
        ),
        (true, false) => Some(format!("`--python` named it: {}", said.join(", or "))),
    }
}

/// The hint for one error of a chain, where a library said what can be done about it.
pub fn for_error(e: &(dyn Error + 'static)) -> Option<String> {
    if let Some(e) = e.downcast_ref::<cudal1_python::PythonError>() {
        return for_python(e);
    }
    if let Some(cudal1_store::StoreError::Connect { .. }) =
        e.downcast_ref::<cudal1_store::StoreError>()
    {
        return Some(
            "check that the server runs and the URL (user, host, port, database) is right".into(),
        );
    }
    if let Some(e) = e.downcast_ref::<cudal1_eval::ReferenceError>() {
        return for_memory(&e.remedies());
    }
    if let Some(e) = e.downcast_ref::<cudal1_eval::TooLarge>() {
        return for_memory(&e.remedies());
    }
    if let Some(cudal1_optimize::OptimizeError::Reference { remedies, .. }) =
        e.downcast_ref::<cudal1_optimize::OptimizeError>()
    {
        return for_memory(remedies);
    }
    if let Some(cudal1_train::TrainError::Mismatch { .. }) =
        e.downcast_ref::<cudal1_train::TrainError>()
    {
        return Some(
            "rerun with the run's own settings, or give the new run another `--out`".into(),
        );
    }
    if let Some(e) = e.downcast_ref::<cudal1_eval::profile::ProfileError>() {
        use cudal1_eval::profile::ProfileError as P;
        return match e {
            P::NcuNotFound | P::NcuNotExecutable(_) => {
                Some("`--ncu PATH` names Nsight Compute's `ncu`".into())
            }
            P::NeedsGpu => Some("profile on a GPU: `--device cuda` or `cuda:N`".into()),
            P::Timeout(_) => Some("`--profile-timeout` gives each profiled run longer".into()),
            _ => None,
        };
    }
    if let Some(cudal1_eval::own::OwnError::NotMangled) =
        e.downcast_ref::<cudal1_eval::own::OwnError>()
    {
        return Some("`--force` profiles the program again".into());
    }
    None
}

/// The hint under a verdict, where the CLI has a flag for it: a candidate killed at its memory
/// limit (not one the GPU ran out under).
pub fn for_verdict(e: &cudal1_eval::Evaluation) -> Option<String> {
    (e.reason_class == "out_of_memory" && e.reason.contains("over its memory limit"))
        .then(|| "`--memory` sets the limit of a candidate's processes".to_owned())
}

/// The warning for a `--memory` the host cannot give.
pub fn limit_beyond_host(b: &LimitBeyondHost) -> String {
    format!(
        "`--memory {}` is more than the host's {} ({}): a candidate may then take memory the reference and cudal1 need, and the machine's OOM killer decides instead of the limit",
        memory_flag_value(b.limit),
        if b.of_total { "memory" } else { "available memory" },
        human_bytes(b.room)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_refusals_remedies_read_as_the_clis_flags() {
        let over_limit = [
            Remedy::RaiseMemoryLimit { to: 23 * GIB },
            Remedy::ScaleTask { factor: 0.25 },
            Remedy::MoreMemory,
        ];
        assert_eq!(
            for_memory(&over_limit).unwrap(),
            "raise the limit (`--memory 23G`), or `--scale 0.25` (or smaller) shrinks the task's leading input dimensions for a trial on this machine, or use a machine with more memory"
        );
        assert_eq!(for_memory(&[]), None);
    }

    #[test]
    fn a_limit_beyond_the_host_is_said_with_the_flag() {
        let over_total =
            limit_beyond_host(&LimitBeyondHost { limit: 32 * GIB, room: 24 * GIB, of_total: true });
        assert!(
            over_total.starts_with("`--memory 32G` is more than the host's memory (24 GiB)"),
            "{over_total}"
        );
        let over_available = limit_beyond_host(&LimitBeyondHost {
            limit: 22 * GIB,
            room: 20 * GIB,
            of_total: false,
        });
        assert!(
            over_available.contains("the host's available memory (20 GiB)"),
            "{over_available}"
        );
    }

    #[test]
    fn library_errors_get_their_hint_here() {
        let missing = cudal1_python::PythonError::NotFound { searched: vec!["python3".into()] };
        assert!(!missing.to_string().contains("hint"));
        let hint = for_error(&missing).unwrap();
        assert!(hint.contains("scripts/setup.sh") && hint.contains("`--python`"), "{hint}");
        // The library says the interpreter was named; the hint says by which flag.
        let probe = cudal1_python::PythonError::Probe {
            path: "/nonexistent/python".into(),
            source_kind: cudal1_python::Source::Flag,
            detail: "no such file".into(),
        };
        assert!(!probe.to_string().contains("--python"), "{probe}");
        let hint = for_error(&probe).unwrap();
        assert!(hint.starts_with("`--python` named it: point `--python` at a working"), "{hint}");
        let no_torch = cudal1_python::PythonError::NoTorch {
            path: "/usr/bin/python3".into(),
            source_kind: cudal1_python::Source::Flag,
            error: "No module named 'torch'".into(),
        };
        let hint = for_error(&no_torch).unwrap();
        assert_eq!(
            hint,
            "`--python` named it: install it with `/usr/bin/python3 -m pip install torch`, or \
             point `--python` at an interpreter that has PyTorch"
        );
        let from_variable = cudal1_python::PythonError::Probe {
            path: "/nonexistent/python".into(),
            source_kind: cudal1_python::Source::EnvVar,
            detail: "no such file".into(),
        };
        assert_eq!(for_error(&from_variable), None, "no flag named it; the message says where");
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let store = cudal1_store::StoreError::Connect {
            store: "postgres://db".into(),
            source: Box::new(refused),
        };
        assert!(for_error(&store).unwrap().contains("the URL"));
    }
}
