//! The messages of the runner protocol (docs/protocol.md), version [`PROTOCOL_VERSION`].
//!
//! Requests are built as typed structs and serialised with their `op`; replies are parsed into the
//! matching reply types. The envelope (`id`, `ok`, `error`) is handled by [`parse_reply`]. This
//! crate only describes messages; starting and talking to processes is `cudal1-supervisor`'s job.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::path::PathBuf;

pub const PROTOCOL_VERSION: u32 = 3;

/// A request: its `op` name and fields.
pub trait Request: Serialize {
    const OP: &'static str;
    type Reply: DeserializeOwned;

    /// The request as a JSON object with its `op` (the supervisor adds the `id`).
    fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("requests are plain data");
        if let serde_json::Value::Object(map) = &mut v {
            map.insert("op".into(), Self::OP.into());
        }
        v
    }
}

/// Why a runner could not do what was asked.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct RunnerError {
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default)]
    pub traceback: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    BadRequest,
    LoadError,
    MissingSymbol,
    CompileError,
    RuntimeError,
    CudaError,
    Oom,
    BadInputs,
    Internal,
    #[serde(other)]
    Unknown,
}

/// Splits a runner's reply into its payload or the runner's error ([`parse_envelope`]).
pub fn parse_reply<T: DeserializeOwned>(
    reply: serde_json::Value,
) -> Result<Result<T, RunnerError>, String> {
    parse_envelope(reply)
}

/// Splits the reply of any Python child (a runner, the model worker) into its payload `T` or
/// the child's error `E`: the one reader of the envelope every child's replies share
/// (docs/protocol.md): `{"id", "ok": true, ...payload}` or `{"id", "ok": false, "error": {...}}`.
/// The supervisor has matched the `id` already. `Err` is a reply that is neither.
pub fn parse_envelope<T: DeserializeOwned, E: DeserializeOwned>(
    reply: serde_json::Value,
) -> Result<Result<T, E>, String> {
    let ok = reply.get("ok").and_then(|v| v.as_bool()).ok_or("reply has no boolean `ok`")?;
    if ok {
        serde_json::from_value(reply).map(Ok).map_err(|e| format!("malformed reply: {e}"))
    } else {
        let err = reply.get("error").cloned().ok_or("failed reply has no `error`")?;
        serde_json::from_value(err).map(Err).map_err(|e| format!("malformed error: {e}"))
    }
}

/// A child's error as the envelope carries it, its kind left as text: the model worker's kinds
/// (`bad_request`, `not_loaded`, `load_error`, `oom`, `runtime_error`) are not a runner's.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct ChildError {
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hello {}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct HelloReply {
    pub protocol: u32,
    pub python: String,
    pub torch: String,
    pub cuda: Option<String>,
    #[serde(default)]
    pub devices: Vec<DeviceInfo>,
    pub driver: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    pub capability: String,
    pub memory_bytes: u64,
    pub l2_bytes: u64,
}

impl Request for Hello {
    const OP: &'static str = "hello";
    type Reply = HelloReply;
}

#[derive(Debug, Clone, Serialize)]
pub struct Load {
    pub reference: PathBuf,
    pub candidate: Option<PathBuf>,
    pub device: String,
    pub init_seed: u64,
    /// A trial on smaller inputs: the reference's module-level integers that give an input's
    /// leading dimension are multiplied by this (0 < scale <= 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct LoadReply {
    pub inputs: Vec<ValueSpec>,
    pub init_inputs: Vec<ValueSpec>,
    pub parameters: u64,
    /// What `scale` changed: `batch_size 4096 -> 1024` for each integer.
    #[serde(default)]
    pub scaled: Vec<String>,
    pub load_ms: f64,
    /// Wall time the process has spent inside extension builds (`load_inline`/`load`), built or
    /// found built.
    #[serde(default)]
    pub extension_ms: Option<f64>,
}

/// What one value of `get_inputs()` or `get_init_inputs()` is.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ValueSpec {
    Tensor {
        shape: Vec<u64>,
        dtype: String,
    },
    Int {
        value: i64,
    },
    Float {
        value: f64,
    },
    Bool {
        value: bool,
    },
    #[serde(other)]
    Other,
}

impl ValueSpec {
    /// `float32[16, 1024]`, `int 3`.
    pub fn describe(&self) -> String {
        match self {
            ValueSpec::Tensor { shape, dtype } => {
                let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
                format!("{dtype}[{}]", dims.join(", "))
            }
            ValueSpec::Int { value } => format!("int {value}"),
            ValueSpec::Float { value } => format!("float {value}"),
            ValueSpec::Bool { value } => format!("bool {value}"),
            ValueSpec::Other => "other".into(),
        }
    }
}

impl Request for Load {
    const OP: &'static str = "load";
    type Reply = LoadReply;
}

/// What a task takes and holds, read without allocating its tensors where possible.
#[derive(Debug, Clone, Serialize)]
pub struct Describe {
    pub reference: PathBuf,
    /// As [`Load::scale`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// Never run the task for real: when meta tensors fail, answer `method: "none"` without sizes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub meta_only: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct DescribeReply {
    pub inputs: Vec<ValueSpec>,
    pub init_inputs: Vec<ValueSpec>,
    pub parameters: u64,
    /// `meta` (shapes only, nothing allocated) or `cpu` (the task had to be run for real).
    pub method: String,
    /// Why the meta device was not enough, when it was not.
    #[serde(default)]
    pub note: Option<String>,
    /// Bytes the inputs of one call take, the model's parameters and buffers take, and (when a
    /// call on meta tensors could tell) the outputs of one call take.
    #[serde(default)]
    pub input_bytes: Option<u64>,
    #[serde(default)]
    pub parameter_bytes: Option<u64>,
    #[serde(default)]
    pub output_bytes: Option<u64>,
    #[serde(default)]
    pub outputs: Vec<ValueSpec>,
    /// As [`LoadReply::scaled`].
    #[serde(default)]
    pub scaled: Vec<String>,
}

impl Request for Describe {
    const OP: &'static str = "describe";
    type Reply = DescribeReply;
}

#[derive(Debug, Clone, Serialize)]
pub struct Outputs {
    pub seeds: Vec<u64>,
    pub dir: PathBuf,
    /// On a GPU, outputs are kept on the device instead of saved, up to this many bytes in all
    /// until [`Release`]: the candidate exports them ([`SeedResult::shared`]), the reference keeps
    /// its expected ones ([`SeedResult::kept`]). 0: every output is saved to a file.
    #[serde(default)]
    pub share_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct OutputsReply {
    pub results: Vec<SeedResult>,
    /// As in [`LoadReply`], up to the end of this request.
    #[serde(default)]
    pub extension_ms: Option<f64>,
    /// `expected` on a GPU (the trusted reference only, version 3): the most device memory the
    /// process's allocator has held since the task loaded (`torch.cuda.max_memory_reserved`).
    #[serde(default)]
    pub device_peak_bytes: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct SeedResult {
    pub seed: u64,
    /// The saved outputs; absent where they were kept on the device.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The candidate's outputs exported on the device (CUDA IPC), as the reference opens them.
    #[serde(default)]
    pub shared: Option<Vec<SharedTensor>>,
    /// The reference's expected outputs kept in its own device memory (compare with
    /// [`OutputRef::Kept`]).
    #[serde(default)]
    pub kept: bool,
    /// The outputs' bytes (a claim where the candidate says it).
    #[serde(default)]
    pub nbytes: Option<u64>,
    pub ms: f64,
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// The digest of the saved outputs, as `compare` recomputes it (docs/protocol.md).
    #[serde(default)]
    pub fingerprint: Option<String>,
}

impl SeedResult {
    /// Where the outputs are, for a [`Compare`]; `None` where the reply names no place at all.
    pub fn output(&self) -> Option<OutputRef> {
        output_ref(self.path.as_ref(), self.shared.as_ref(), self.kept.then_some(self.seed))
    }
}

fn output_ref(
    path: Option<&PathBuf>,
    shared: Option<&Vec<SharedTensor>>,
    kept: Option<u64>,
) -> Option<OutputRef> {
    match (path, shared, kept) {
        (Some(p), None, None) => Some(OutputRef::File(p.clone())),
        (None, Some(s), None) => Some(OutputRef::Shared(s.clone())),
        (None, None, Some(seed)) => Some(OutputRef::Kept(seed)),
        _ => None,
    }
}

/// One output tensor exported on the device by the candidate's runner: a claim, which the
/// reference checks against the driver's own record of the memory before it reads a byte
/// (docs/protocol.md, "Outputs on the device").
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SharedTensor {
    /// The CUDA IPC handle of the allocation, 64 bytes in hex; `None` for an empty tensor.
    pub handle: Option<String>,
    pub offset: u64,
    pub dtype: String,
    pub shape: Vec<u64>,
}

/// Where a [`Compare`] finds outputs.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum OutputRef {
    /// A saved file (a candidate's, taken into the reference's custody first).
    File(PathBuf),
    /// The reference's expected outputs of this seed, kept on its device.
    Kept(u64),
    /// A candidate's outputs exported on the device.
    Shared(Vec<SharedTensor>),
}

/// Drops what `share_bytes` kept on the device (the candidate's exported outputs, the
/// reference's expected ones).
#[derive(Debug, Clone, Serialize)]
pub struct Release {}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ReleaseReply {
    #[serde(default)]
    pub released_bytes: u64,
}

impl Request for Release {
    const OP: &'static str = "release";
    type Reply = ReleaseReply;
}

/// Something a runner noticed about a candidate's behaviour (see the protocol for the kinds).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Finding {
    pub kind: String,
    #[serde(default)]
    pub detail: String,
}

impl Request for Outputs {
    const OP: &'static str = "outputs";
    type Reply = OutputsReply;
}

/// `expected` is `outputs` made by the reference role.
#[derive(Debug, Clone, Serialize)]
pub struct Expected {
    pub seeds: Vec<u64>,
    pub dir: PathBuf,
    /// As [`Outputs::share_bytes`]: expected outputs kept on the reference's device.
    #[serde(default)]
    pub share_bytes: u64,
}

impl Request for Expected {
    const OP: &'static str = "expected";
    type Reply = OutputsReply;
}

#[derive(Debug, Clone, Serialize)]
pub struct Compare {
    pub expected: OutputRef,
    pub actual: OutputRef,
    pub atol: f64,
    pub rtol: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct CompareReply {
    #[serde(default)]
    pub outputs: Vec<OutputComparison>,
    pub count_expected: usize,
    pub count_actual: usize,
    #[serde(default)]
    pub load_error: Option<String>,
    /// The digest of the `actual` file's outputs, computed by the (trusted) reference runner.
    #[serde(default)]
    pub fingerprint: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct OutputComparison {
    pub index: usize,
    pub expected_shape: Vec<u64>,
    pub actual_shape: Vec<u64>,
    pub expected_dtype: String,
    pub actual_dtype: String,
    pub numel: u64,
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    pub mismatches: u64,
    pub nonfinite_mismatches: u64,
    #[serde(default)]
    pub expected_nonfinite: u64,
    /// Integer and boolean outputs are compared exactly, whatever the tolerance asked for.
    #[serde(default)]
    pub exact: bool,
}

impl Request for Compare {
    const OP: &'static str = "compare";
    type Reply = CompareReply;
}

#[derive(Debug, Clone, Serialize)]
pub struct Time {
    /// One input seed per call, drawn from fresh randomness for every call: no call's inputs can
    /// be foreseen from another's.
    pub seeds: Vec<u64>,
    pub flush_l2: bool,
    pub warmup: bool,
    /// Every call's output is captured after it returns; the copies are kept (up to this many
    /// bytes) until the next request, for [`Reveal`].
    pub keep_bytes: u64,
    /// The CPU core the runner's main thread is pinned to for the block (both sides of a pair get
    /// the same one; docs/protocol.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// On a GPU, a spin of this many microseconds queued before each call's start event, so that
    /// the GPU window holds the GPU's work alone (docs/protocol.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spin_us: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct TimeReply {
    /// Per call: on a GPU the caller stream's window from the start of the call to its return;
    /// on the CPU the host clock.
    #[serde(default)]
    pub ms: Vec<f64>,
    /// Per call: from the start of the call until the device was idle (on the CPU, `ms`).
    #[serde(default)]
    pub full_ms: Vec<f64>,
    #[serde(default)]
    pub host_ms: Vec<f64>,
    /// Per call: the host's time to issue the call (warm-up blocks report these too).
    #[serde(default)]
    pub issue_ms: Vec<f64>,
    /// Per call: the digest of its output, captured right after it returned.
    #[serde(default)]
    pub fingerprints: Vec<String>,
    /// How many calls' outputs (the first ones) are kept for [`Reveal`].
    #[serde(default)]
    pub kept: usize,
    pub wall_ms: f64,
    /// What the candidate runner's guard saw during the block (empty for the reference).
    #[serde(default)]
    pub findings: Vec<Finding>,
}

impl Request for Time {
    const OP: &'static str = "time";
    type Reply = TimeReply;
}

/// Saves the kept outputs of some calls of the last block, chosen after it returned.
#[derive(Debug, Clone, Serialize)]
pub struct Reveal {
    pub calls: Vec<u32>,
    pub dir: PathBuf,
    /// As [`Outputs::share_bytes`].
    #[serde(default)]
    pub share_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct RevealReply {
    #[serde(default)]
    pub checked: Vec<CheckedCall>,
    #[serde(default)]
    pub findings: Vec<Finding>,
}

impl Request for Reveal {
    const OP: &'static str = "reveal";
    type Reply = RevealReply;
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct CheckedCall {
    pub seed: u64,
    #[serde(default)]
    pub path: Option<PathBuf>,
    #[serde(default)]
    pub shared: Option<Vec<SharedTensor>>,
    #[serde(default)]
    pub findings: Vec<Finding>,
}

impl CheckedCall {
    /// As [`SeedResult::output`].
    pub fn output(&self) -> Option<OutputRef> {
        output_ref(self.path.as_ref(), self.shared.as_ref(), None)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CompileRequest {
    pub candidate: PathBuf,
    pub reference: PathBuf,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct CompileReply {
    #[serde(default)]
    pub built: Vec<String>,
    pub compile_ms: f64,
    #[serde(default)]
    pub log: String,
    /// Calls of `load_inline`/`load` in the program's source.
    #[serde(default)]
    pub sites: usize,
    /// Where the build calls are that the compile role could not make happen (`line 42 in
    /// ModelNew.forward`): the candidate will build those in its own process.
    #[serde(default)]
    pub missed: Vec<String>,
}

impl Request for CompileRequest {
    const OP: &'static str = "compile";
    type Reply = CompileReply;
}

#[derive(Debug, Clone, Serialize)]
pub struct Shutdown {}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ShutdownReply {}

impl Request for Shutdown {
    const OP: &'static str = "shutdown";
    type Reply = ShutdownReply;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_their_op() {
        let v = Time {
            seeds: vec![9, 4],
            flush_l2: true,
            warmup: false,
            keep_bytes: 64,
            cpu: None,
            spin_us: None,
        }
        .to_json();
        assert_eq!(v["op"], "time");
        assert!(v.get("cpu").is_none(), "no core: the field is left out");
        assert_eq!(v["seeds"][1], 4);
        assert_eq!(v["keep_bytes"], 64);
        let v = Reveal { calls: vec![3], dir: "/d".into(), share_bytes: 0 }.to_json();
        assert_eq!((v["op"].as_str(), v["calls"][0].as_u64()), (Some("reveal"), Some(3)));
    }

    #[test]
    fn a_compare_names_where_each_side_is() {
        let shared = SharedTensor {
            handle: Some("ab".repeat(64)),
            offset: 512,
            dtype: "float32".into(),
            shape: vec![2, 3],
        };
        let v = Compare {
            expected: OutputRef::Kept(7),
            actual: OutputRef::Shared(vec![shared.clone()]),
            atol: 0.0,
            rtol: 0.0,
        }
        .to_json();
        assert_eq!(v["expected"], serde_json::json!({"kept": 7}));
        assert_eq!(v["actual"]["shared"][0]["offset"], 512);
        assert_eq!(v["actual"]["shared"][0]["shape"], serde_json::json!([2, 3]));
        let v = Compare {
            expected: OutputRef::File("/e.pt".into()),
            actual: OutputRef::File("/a.pt".into()),
            atol: 0.0,
            rtol: 0.0,
        }
        .to_json();
        assert_eq!(
            (v["expected"]["file"].as_str(), v["actual"]["file"].as_str()),
            (Some("/e.pt"), Some("/a.pt"))
        );
    }

    #[test]
    fn a_seed_result_names_exactly_one_place() {
        let parse = |extra: serde_json::Value| -> SeedResult {
            let mut v = serde_json::json!({"seed": 5, "ms": 1.0});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::from_value(v).unwrap()
        };
        let shared =
            serde_json::json!([{"handle": null, "offset": 0, "dtype": "float32", "shape": [0]}]);
        assert_eq!(
            parse(serde_json::json!({"path": "/s.pt"})).output(),
            Some(OutputRef::File("/s.pt".into()))
        );
        assert!(
            matches!(parse(serde_json::json!({"shared": shared})).output(), Some(OutputRef::Shared(t)) if t.len() == 1)
        );
        assert_eq!(parse(serde_json::json!({"kept": true})).output(), Some(OutputRef::Kept(5)));
        assert_eq!(parse(serde_json::json!({})).output(), None, "nowhere");
        assert_eq!(
            parse(serde_json::json!({"path": "/s.pt", "shared": shared})).output(),
            None,
            "two places at once"
        );
        assert_eq!(parse(serde_json::json!({"path": "/s.pt", "kept": true})).output(), None);
        // A timed call's output is never one the reference keeps.
        let checked: CheckedCall =
            serde_json::from_value(serde_json::json!({"seed": 1, "kept": true})).unwrap();
        assert_eq!(checked.output(), None);
        // An exported tensor with fields the reference does not know is refused outright.
        let odd = serde_json::json!({"handle": null, "offset": 0, "dtype": "float32", "shape": [], "size": 1});
        assert!(serde_json::from_value::<SharedTensor>(odd).is_err());
    }

    #[test]
    fn parses_ok_and_error_replies() {
        let ok: Result<HelloReply, _> = parse_reply(serde_json::json!({
            "id": 1, "ok": true, "protocol": 1, "python": "3.11", "torch": "2.11", "cuda": null,
            "devices": [], "driver": null
        }))
        .unwrap();
        assert_eq!(ok.unwrap().protocol, 1);
        let err: Result<HelloReply, _> = parse_reply(serde_json::json!({
            "id": 1, "ok": false, "error": {"kind": "cuda_error", "message": "illegal address"}
        }))
        .unwrap();
        assert_eq!(err.unwrap_err().kind, ErrorKind::CudaError);
        let unknown: Result<HelloReply, _> = parse_reply(serde_json::json!({
            "ok": false, "error": {"kind": "brand_new", "message": "x"}
        }))
        .unwrap();
        assert_eq!(unknown.unwrap_err().kind, ErrorKind::Unknown);
        assert!(parse_reply::<HelloReply>(serde_json::json!({"id": 1})).is_err());
    }

    #[test]
    fn any_child_error_is_read_from_the_same_envelope() {
        let refused: Result<ShutdownReply, ChildError> = parse_envelope(serde_json::json!({
            "id": 2, "ok": false, "error": {"kind": "not_loaded", "message": "load first"}
        }))
        .unwrap();
        assert_eq!(refused.unwrap_err().kind, "not_loaded");
        let missing = parse_envelope::<ShutdownReply, ChildError>(
            serde_json::json!({"id": 2, "ok": false, "error": {"kind": "oom"}}),
        );
        assert!(missing.unwrap_err().contains("malformed error"));
        let no_ok = parse_envelope::<ShutdownReply, ChildError>(serde_json::json!({"id": 2}));
        assert!(no_ok.unwrap_err().contains("boolean `ok`"));
    }

    #[test]
    fn value_specs_describe_themselves() {
        let s: ValueSpec = serde_json::from_value(
            serde_json::json!({"kind": "tensor", "shape": [2, 3], "dtype": "float32"}),
        )
        .unwrap();
        assert_eq!(s.describe(), "float32[2, 3]");
        let s: ValueSpec =
            serde_json::from_value(serde_json::json!({"kind": "int", "value": 4})).unwrap();
        assert_eq!(s.describe(), "int 4");
    }
}
