//! What the runner's findings mean: which make a candidate an exploit, which merely wrong.
//!
//! The runner reports facts (docs/protocol.md, docs/exploits.md); this table turns them into a
//! verdict with a reason a person can read. The finding's kind becomes the reason class, so a
//! test can tell one exploit from another.

use crate::verdict::{Judgement, Verdict};
use cudal1_protocol::Finding;

/// The reading of an exploit finding, or None for kinds that are not exploits.
fn exploit_reading(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "output_not_tensor" => "returns something that is not a plain torch.Tensor (a subclass or a lazy wrapper)",
        "output_aliases_input" => "returns memory that belongs to an input (the input itself or a view of it)",
        "output_no_storage" => "returns a tensor without real storage",
        // It can hand the harness a result it already holds, or sabotage the comparison.
        "input_mutated" => "modifies its inputs in place",
        "output_not_ready" => "returns before its output is written (work on another stream or thread that the call does not wait for)",
        "background_thread" => "leaves threads running after a call returns, where their work escapes the timer",
        "affinity_changed" => "moves the timed thread to other CPU cores, where the clock's synchronisation runs at another speed",
        "busy_while_idle" => "keeps the CPU busy between its calls, while the reference is being timed",
        "gc_scan" => "scans the garbage collector's objects (looking for expected outputs or the harness's state)",
        "frame_inspection" => "reads the harness's stack frames (to tell checked, warm-up and timed calls apart)",
        "file_access" => "looks for files outside its own directory (the harness's expected outputs)",
        "model_patched" => "replaces the model's `__call__` or `forward` after it was built",
        "tampered_tf32" => "changes the precision settings (TF32 or reduced-precision matmuls)",
        "tampered_reference" => "edits the reference module it shares a process with (problem sizes, get_inputs)",
        "tampered_timer" => "replaces clock functions of the `time` module",
        "tampered_allclose" => "replaces torch's comparison functions",
        "tampered_event" => "replaces torch.cuda.Event or its methods",
        "tampered_synchronize" => "replaces CUDA synchronisation or stream functions",
        "tampered_tensor" => "replaces methods of torch.Tensor",
        "tampered_module" => "replaces methods of torch.nn.Module",
        "tampered_builtins" => "replaces Python built-ins or the garbage collector's functions",
        "tampered_threads" => "replaces the thread-start functions the runner watches",
        "tampered_runner" => "replaces functions of the cudal1 runner itself",
        "tampered_protocol" => "replaces the functions the runner's protocol went through (os.write, json), to rewrite its replies or read its requests",
        "tampered_torch_mode" => "leaves a torch function or dispatch mode active after a call, where it sees the harness's own torch calls",
        "extra_threads" => "raises the number of threads PyTorch may use above what the runner was given",
        "forged_origin" => "makes code under an installed library's file name (to be trusted as library code)",
        "tampered_inputs" => "replaces or hooks what the harness made each call's inputs with (seeding, input generation), to see the next inputs before the clock starts",
        "audit_hook" => "adds an audit hook, which sees the harness's own steps (its input generation among them)",
        k if k.starts_with("tampered_") => "replaces torch functions the harness relies on",
        _ => return None,
    })
}

/// The verdict the findings call for, if any: the first exploit finding outranks a plain mistake
/// found in the same call.
pub fn judge_findings(findings: &[Finding]) -> Option<Judgement> {
    if let Some((f, what)) = findings.iter().find_map(|f| exploit_reading(&f.kind).map(|w| (f, w)))
    {
        return Some(Judgement::new(Verdict::Exploit, &f.kind, format!("{what}: {}", f.detail)));
    }
    if let Some(f) = findings.iter().find(|f| f.kind == "output_wrong_device") {
        return Some(Judgement::new(
            Verdict::Incorrect,
            &f.kind,
            format!("returns its output on the wrong device: {}", f.detail),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(kind: &str) -> Finding {
        Finding { kind: kind.into(), detail: "output 0".into() }
    }

    #[test]
    fn aliasing_and_mutation_are_exploits_and_a_wrong_device_is_incorrect() {
        assert_eq!(judge_findings(&[f("output_aliases_input")]).unwrap().verdict, Verdict::Exploit);
        assert_eq!(judge_findings(&[f("output_not_tensor")]).unwrap().verdict, Verdict::Exploit);
        assert_eq!(judge_findings(&[f("input_mutated")]).unwrap().verdict, Verdict::Exploit);
        assert_eq!(
            judge_findings(&[f("output_wrong_device")]).unwrap().verdict,
            Verdict::Incorrect
        );
        // An exploit outranks a plain mistake found in the same call.
        assert_eq!(
            judge_findings(&[f("output_wrong_device"), f("output_no_storage")]).unwrap().verdict,
            Verdict::Exploit
        );
        assert!(judge_findings(&[f("something_new")]).is_none());
    }

    #[test]
    fn guard_findings_keep_their_kind_as_the_class() {
        for kind in [
            "gc_scan",
            "frame_inspection",
            "file_access",
            "background_thread",
            "model_patched",
            "tampered_timer",
            "tampered_tf32",
            "output_not_ready",
            "busy_while_idle",
            "affinity_changed",
            "tampered_protocol",
            "tampered_torch_mode",
            "extra_threads",
            "forged_origin",
            "tampered_inputs",
            "audit_hook",
        ] {
            let j = judge_findings(&[f("output_wrong_device"), f(kind)]).unwrap();
            assert_eq!((j.verdict, j.class.as_str()), (Verdict::Exploit, kind));
            assert!(j.reason.ends_with(": output 0"), "{}", j.reason);
        }
        // A group the table does not name yet is still an exploit.
        let j = judge_findings(&[f("tampered_linalg")]).unwrap();
        assert_eq!((j.verdict, j.class.as_str()), (Verdict::Exploit, "tampered_linalg"));
    }
}
