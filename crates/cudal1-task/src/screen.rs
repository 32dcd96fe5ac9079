//! Static screening of candidate programs: a cheap first filter, by parsing, never by regular
//! expressions.
//!
//! The syntax tree is walked once with the module's import aliases resolved (`import torch as t`,
//! `from torch.backends import cuda`), so `t.backends.cuda.matmul.allow_tf32 = True` is seen for
//! what it is. A few tricks are decisive on their own and make the candidate an exploit without
//! running it (switching TF32 on, replacing torch, timer or harness functions, replacing
//! `ModelNew.__call__`/`forward` from outside the class, scanning `gc`, reading frames). The rest
//! are warnings: threads, side streams, CUDA graphs, lower precision, and code that hides from
//! this screen (`exec`, `getattr` with a computed name, decoded strings), and KernelBench's bypass
//! patterns ([`crate::bypass`]: a fallback to PyTorch in an exception handler around the program's
//! own kernel, a `ModelNew` that is the reference unchanged). Hiding is expected; the runner's
//! dynamic checks catch the same tricks at run time.

use crate::syntax::{parse, text};
use std::collections::HashMap;
use tree_sitter::Node;

/// One thing the screen noticed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScreenFinding {
    /// `static_tf32`, `static_monkey_patch`, ... for decisive findings; a plain word for warnings.
    pub class: String,
    pub message: String,
    /// 1-based.
    pub line: usize,
    /// Decisive findings are exploits by themselves.
    pub decisive: bool,
}

/// Everything the screen noticed in one program, in source order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Screening {
    pub findings: Vec<ScreenFinding>,
}

impl Screening {
    /// The first decisive finding, if any.
    pub fn decisive(&self) -> Option<&ScreenFinding> {
        self.findings.iter().find(|f| f.decisive)
    }

    pub fn warnings(&self) -> impl Iterator<Item = &ScreenFinding> {
        self.findings.iter().filter(|f| !f.decisive)
    }
}

/// Screens a program. A program that does not parse gets no findings (it fails elsewhere).
pub fn screen(source: &str) -> Screening {
    let tree = parse(source);
    let root = tree.root_node();
    let mut s = Screener { src: source, aliases: HashMap::new(), findings: Vec::new() };
    s.collect_imports(root);
    s.walk(root, &Scope::default());
    let bypasses = crate::bypass::find(root, source, &|n| s.path(n));
    for b in bypasses {
        s.findings.push(ScreenFinding {
            class: b.class.to_owned(),
            message: b.message,
            line: b.line,
            decisive: false,
        });
    }
    s.findings.sort_by_key(|f| f.line);
    // One warning per class and line is plenty.
    s.findings.dedup_by(|a, b| a.class == b.class && a.line == b.line);
    Screening { findings: s.findings }
}

/// Which kinds of custom kernel a program builds: CUDA (a `torch.utils.cpp_extension`
/// `load_inline`/`load` build, seen through import aliases) and Triton (a function under
/// `@triton.jit`, [`crate::triton_kernels`]). A program with neither is plain PyTorch. Read from
/// the source without running it, like the rest of the screen: a program that hides its build
/// (`exec`, a computed name) counts as neither.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelKinds {
    pub cuda: bool,
    pub triton: bool,
}

/// The kinds of custom kernel `source` builds ([`KernelKinds`]). Sources that name neither
/// `triton` nor a `load` are not parsed.
pub fn kernel_kinds(source: &str) -> KernelKinds {
    let triton = source.contains("triton") && !crate::triton_kernels(source).is_empty();
    let cuda = source.contains("load") && cuda_build(source);
    KernelKinds { cuda, triton }
}

/// Whether a call in `source` resolves to `torch.utils.cpp_extension.load_inline`/`load` (or a
/// bare `load_inline`, as `builds` in [`crate::bypass`] reads it).
fn cuda_build(source: &str) -> bool {
    let tree = parse(source);
    let root = tree.root_node();
    let mut s = Screener { src: source, aliases: HashMap::new(), findings: Vec::new() };
    s.collect_imports(root);
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if node.kind() == "call" {
            let p = node.child_by_field_name("function").and_then(|f| s.path(f));
            if let Some(p) = p {
                let last = p.rsplit('.').next().unwrap_or("");
                if last == "load_inline" || (last == "load" && p.contains("cpp_extension")) {
                    return true;
                }
            }
        }
        let mut c = node.walk();
        stack.extend(node.children(&mut c));
    }
    false
}

/// Where a node sits: inside which class and function.
#[derive(Debug, Clone, Default)]
struct Scope {
    class: Option<String>,
    function: Option<String>,
}

struct Screener<'s> {
    src: &'s str,
    /// Local name -> the dotted path it stands for.
    aliases: HashMap<String, String>,
    findings: Vec<ScreenFinding>,
}

/// Module attributes that timing, synchronisation and comparison go through: replacing any of
/// them is decisive.
const PATCH_ROOTS: [&str; 7] =
    ["torch", "time", "builtins", "gc", "_thread", "threading", "cudal1_runner"];
/// Assignments under these are settings, not patches (TF32 is judged separately).
const SETTINGS: [&str; 4] = [
    "torch.backends.",
    "torch._dynamo.config.",
    "torch._inductor.config.",
    "torch._functorch.config.",
];
const TF32_FLAGS: [&str; 2] =
    ["torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32"];
const GC_SCANS: [&str; 3] = ["gc.get_objects", "gc.get_referrers", "gc.get_referents"];
const FRAME_READS: [&str; 9] = [
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "inspect.currentframe",
    "inspect.stack",
    "inspect.getouterframes",
    "traceback.extract_stack",
    "threading.settrace",
];
const HIDING: [&str; 11] = [
    "exec",
    "eval",
    "compile",
    "__import__",
    "importlib.import_module",
    "base64.b64decode",
    "codecs.decode",
    "bytes.fromhex",
    "marshal.loads",
    "pickle.loads",
    "zlib.decompress",
];
const THREADS: [&str; 6] = [
    "threading.Thread",
    "_thread.start_new_thread",
    "concurrent.futures.ThreadPoolExecutor",
    "multiprocessing.Process",
    "os.fork",
    "subprocess.Popen",
];

impl<'s> Screener<'s> {
    fn text(&self, node: Node) -> &'s str {
        text(node, self.src)
    }

    fn note(&mut self, node: Node, class: &str, decisive: bool, message: String) {
        self.findings.push(ScreenFinding {
            class: class.to_owned(),
            message,
            line: node.start_position().row + 1,
            decisive,
        });
    }

    fn collect_imports(&mut self, node: Node) {
        let mut cursor = node.walk();
        match node.kind() {
            "import_statement" => {
                for name in node.children_by_field_name("name", &mut cursor) {
                    if name.kind() == "aliased_import" {
                        if let (Some(n), Some(a)) =
                            (name.child_by_field_name("name"), name.child_by_field_name("alias"))
                        {
                            self.aliases.insert(self.text(a).to_owned(), self.text(n).to_owned());
                        }
                    } else {
                        // `import torch.nn` binds `torch`.
                        let full = self.text(name);
                        let head = full.split('.').next().unwrap_or(full);
                        self.aliases.insert(head.to_owned(), head.to_owned());
                    }
                }
            }
            "import_from_statement" => {
                let Some(module) = node.child_by_field_name("module_name") else { return };
                let module = self.text(module).to_owned();
                for name in node.children_by_field_name("name", &mut cursor) {
                    let (full, local) = if name.kind() == "aliased_import" {
                        match (name.child_by_field_name("name"), name.child_by_field_name("alias"))
                        {
                            (Some(n), Some(a)) => (self.text(n), self.text(a)),
                            _ => continue,
                        }
                    } else {
                        (self.text(name), self.text(name))
                    };
                    self.aliases.insert(local.to_owned(), format!("{module}.{full}"));
                }
            }
            _ => {
                for child in node.children(&mut cursor) {
                    self.collect_imports(child);
                }
            }
        }
    }

    /// The dotted path an expression names (`t.cuda.synchronize` -> `torch.cuda.synchronize`),
    /// or None for anything that is not a chain of names.
    fn path(&self, node: Node) -> Option<String> {
        match node.kind() {
            "identifier" => {
                let name = self.text(node);
                Some(self.aliases.get(name).cloned().unwrap_or_else(|| name.to_owned()))
            }
            "attribute" => {
                let object = self.path(node.child_by_field_name("object")?)?;
                Some(format!("{object}.{}", self.text(node.child_by_field_name("attribute")?)))
            }
            // `torch.__dict__["allclose"]` and `vars(torch)["allclose"]` name the same attribute.
            "subscript" => {
                let key = string_literal(self.src, node.child_by_field_name("subscript")?)?;
                let value = node.child_by_field_name("value")?;
                let base = match value.kind() {
                    "call" if self.path(value.child_by_field_name("function")?)? == "vars" => {
                        self.path(first_argument(value)?)?
                    }
                    _ => self.path(value)?.strip_suffix(".__dict__")?.to_owned(),
                };
                Some(format!("{base}.{key}"))
            }
            "parenthesized_expression" => self.path(node.named_child(0)?),
            // `type(self).forward` names the class of `self`.
            "call" if self.path(node.child_by_field_name("function")?)? == "type" => {
                Some(format!("type({})", self.text(first_argument(node)?)))
            }
            _ => None,
        }
    }

    fn walk(&mut self, node: Node, scope: &Scope) {
        let mut inner = scope.clone();
        match node.kind() {
            "class_definition" => {
                inner.class = node.child_by_field_name("name").map(|n| self.text(n).to_owned());
                inner.function = None;
            }
            "function_definition" => {
                inner.function = node.child_by_field_name("name").map(|n| self.text(n).to_owned())
            }
            "assignment" | "augmented_assignment" => self.assignment(node, scope),
            // tree-sitter reads `type(self).forward = f` as a PEP 695 `type` alias statement.
            "type_alias_statement" => self.type_call_assignment(node, scope),
            "call" => self.call(node, scope),
            "attribute" => self.attribute_use(node),
            _ => {}
        }
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            self.walk(child, &inner);
        }
    }

    fn assignment(&mut self, node: Node, scope: &Scope) {
        let Some(left) = node.child_by_field_name("left") else { return };
        let value = node.child_by_field_name("right");
        let targets: Vec<Node> = if left.kind() == "pattern_list" || left.kind() == "tuple_pattern"
        {
            let mut c = left.walk();
            left.named_children(&mut c).collect()
        } else {
            vec![left]
        };
        for target in targets {
            if let Some(path) = self.path(target) {
                self.assigned(node, &path, value, scope);
            }
        }
    }

    fn type_call_assignment(&mut self, node: Node, scope: &Scope) {
        let left = node.child_by_field_name("left").and_then(|t| t.named_child(0));
        let Some(attr) = left.filter(|n| n.kind() == "attribute") else { return };
        let (Some(object), Some(name)) =
            (attr.child_by_field_name("object"), attr.child_by_field_name("attribute"))
        else {
            return;
        };
        if object.kind() != "parenthesized_expression" {
            return;
        }
        let path = format!("type{}.{}", self.text(object), self.text(name));
        let value = node.child_by_field_name("right").and_then(|t| t.named_child(0));
        self.assigned(node, &path, value, scope);
    }

    /// `path = value` (or `setattr` doing the same).
    fn assigned(&mut self, node: Node, path: &str, value: Option<Node>, scope: &Scope) {
        let value_text = value.map(|v| self.text(v).trim()).unwrap_or("");
        if TF32_FLAGS.contains(&path) {
            if value_text != "False" {
                self.note(
                    node,
                    "static_tf32",
                    true,
                    format!("turns TF32 on: `{path} = {value_text}`"),
                );
            }
            return;
        }
        if path.ends_with(".fp32_precision") && path.starts_with("torch.backends.") {
            if !matches!(
                value.and_then(|v| string_literal(self.src, v)).as_deref(),
                Some("ieee" | "none")
            ) {
                self.note(
                    node,
                    "static_tf32",
                    true,
                    format!("lowers fp32 precision: `{path} = {value_text}`"),
                );
            }
            return;
        }
        if path == "torch.backends.cudnn.benchmark" {
            self.note(node, "cudnn_benchmark", false, "sets `torch.backends.cudnn.benchmark`: the candidate's process picks its own convolution algorithms".into());
            return;
        }
        let (owner, attr) = path.rsplit_once('.').unwrap_or(("", path));
        if matches!(attr, "__call__" | "forward") {
            let by_class =
                owner == "ModelNew" || owner.ends_with("__class__") || owner.starts_with("type(");
            let on_self = owner == "self";
            // `ModelNew` is not bound inside its own class body, so a class-level assignment
            // through it always comes from outside.
            if by_class {
                self.note(
                    node,
                    "static_model_patched",
                    true,
                    format!("replaces `{path}` after the class is defined"),
                );
            } else if on_self && scope.function.as_deref() != Some("__init__") {
                self.note(
                    node,
                    "static_model_patched",
                    true,
                    format!("replaces `{path}` while the model runs"),
                );
            } else if on_self {
                self.note(
                    node,
                    "forward_on_instance",
                    false,
                    format!("sets `{path}` in `__init__`"),
                );
            }
            return;
        }
        let root = path.split('.').next().unwrap_or("");
        if PATCH_ROOTS.contains(&root)
            && path.contains('.')
            && !SETTINGS.iter().any(|s| path.starts_with(s))
        {
            self.note(
                node,
                "static_monkey_patch",
                true,
                format!("replaces `{path}`, which the harness relies on"),
            );
        }
    }

    fn call(&mut self, node: Node, scope: &Scope) {
        let Some(function) = node.child_by_field_name("function") else { return };
        let Some(path) = self.path(function) else { return };
        let path = path.as_str();
        match path {
            "setattr" => {
                let args = arguments(node);
                let (Some(obj), Some(name)) = (args.first(), args.get(1)) else { return };
                match (self.path(*obj), string_literal(self.src, *name)) {
                    (Some(owner), Some(attr)) => {
                        self.assigned(node, &format!("{owner}.{attr}"), args.get(2).copied(), scope)
                    }
                    (Some(owner), None)
                        if PATCH_ROOTS.contains(&owner.split('.').next().unwrap_or(""))
                            || owner == "ModelNew" =>
                    {
                        self.note(node, "dynamic_code", false, format!("`setattr` on `{owner}` with a computed name hides from this screen"));
                    }
                    _ => {}
                }
            }
            "getattr" => {
                if let Some(name) = arguments(node).get(1) {
                    if string_literal(self.src, *name).is_none() {
                        self.note(
                            node,
                            "dynamic_code",
                            false,
                            "`getattr` with a computed name hides from this screen".into(),
                        );
                    }
                }
            }
            "torch.set_float32_matmul_precision" => {
                let mode = arguments(node).first().and_then(|a| string_literal(self.src, *a));
                if mode.as_deref() != Some("highest") {
                    self.note(
                        node,
                        "static_tf32",
                        true,
                        format!("lowers fp32 matmul precision: `{}`", self.text(node)),
                    );
                }
            }
            _ if GC_SCANS.contains(&path) => {
                self.note(node, "static_gc_scan", true, format!("`{path}()` scans the process's objects (expected outputs, the harness's state)"));
            }
            _ if FRAME_READS.contains(&path) => {
                self.note(
                    node,
                    "static_frame_inspection",
                    true,
                    format!(
                        "`{path}()` reads the harness's frames (which call is timed or checked)"
                    ),
                );
            }
            _ if HIDING.contains(&path) => {
                self.note(
                    node,
                    "dynamic_code",
                    false,
                    format!("`{path}()` runs or decodes code that this screen cannot read"),
                );
            }
            _ if THREADS.contains(&path) => {
                self.note(node, "threads", false, format!("`{path}()`: work outside the calling thread must finish before `forward` returns"));
            }
            "torch.cuda.Stream" | "torch.cuda.stream" => {
                self.note(node, "side_stream", false, "uses its own CUDA stream: it must be joined to the caller's stream before `forward` returns".into());
            }
            "torch.cuda.CUDAGraph" | "torch.cuda.graph" | "torch.cuda.make_graphed_callables" => {
                self.note(node, "cuda_graph", false, "uses a CUDA graph: fresh inputs must be copied into its static buffers on every call".into());
            }
            "torch.autocast"
            | "torch.cuda.amp.autocast"
            | "torch.amp.autocast"
            | "torch.cpu.amp.autocast" => {
                self.note(
                    node,
                    "lower_precision",
                    false,
                    "autocast lowers precision; results must stay within the task's tolerance"
                        .into(),
                );
            }
            _ => {
                if let Some(method) = path.rsplit('.').next() {
                    if matches!(method, "half" | "bfloat16") && function.kind() == "attribute" {
                        self.note(node, "lower_precision", false, format!("`.{method}()` lowers precision; results must stay within the task's tolerance"));
                    } else if method == "data_ptr" && function.kind() == "attribute" {
                        self.note(
                            node,
                            "pointer_key",
                            false,
                            "reads `data_ptr()`: results must not be cached on input addresses"
                                .into(),
                        );
                    }
                }
            }
        }
    }

    fn attribute_use(&mut self, node: Node) {
        // Only the outermost attribute of a chain, so `sys.modules.items` is one use.
        if node.parent().is_some_and(|p| p.kind() == "attribute") {
            return;
        }
        if let Some(path) = self.path(node) {
            if path == "sys.modules" || path.starts_with("sys.modules.") {
                self.note(
                    node,
                    "module_scan",
                    false,
                    "reads `sys.modules`: the reference module must not be touched".into(),
                );
            }
        }
    }
}

fn arguments(call: Node) -> Vec<Node> {
    let Some(args) = call.child_by_field_name("arguments") else { return vec![] };
    let mut c = args.walk();
    args.named_children(&mut c).filter(|n| n.kind() != "comment").collect()
}

fn first_argument(call: Node) -> Option<Node> {
    arguments(call).into_iter().next()
}

/// The value of a plain string literal (no f-string interpolation, no concatenation).
fn string_literal(src: &str, node: Node) -> Option<String> {
    if node.kind() != "string" {
        return None;
    }
    let mut c = node.walk();
    let mut out = String::new();
    for child in node.children(&mut c) {
        match child.kind() {
            "string_start" | "string_end" => {}
            "string_content" => out.push_str(text(child, src)),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(src: &str) -> Vec<(String, bool)> {
        screen(src).findings.into_iter().map(|f| (f.class, f.decisive)).collect()
    }

    fn decisive(src: &str) -> Option<String> {
        screen(src).decisive().map(|f| f.class.clone())
    }

    #[test]
    fn kernel_kinds_tell_cuda_triton_both_and_plain_pytorch() {
        let cuda = "import torch\nfrom torch.utils.cpp_extension import load_inline\next = load_inline(name='e', cpp_sources='', cuda_sources='')\n";
        assert_eq!(kernel_kinds(cuda), KernelKinds { cuda: true, triton: false });
        let aliased =
            "import torch.utils.cpp_extension as ce\next = ce.load(name='e', sources=['k.cu'])\n";
        assert_eq!(kernel_kinds(aliased), KernelKinds { cuda: true, triton: false });
        let triton =
            "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr):\n    pass\n";
        assert_eq!(kernel_kinds(triton), KernelKinds { cuda: false, triton: true });
        let both = format!("{cuda}{triton}");
        assert_eq!(kernel_kinds(&both), KernelKinds { cuda: true, triton: true });
        // Words in strings and comments, or another module's `load`, build nothing.
        let plain = "import torch, json\n# a triton port would load_inline here\ncfg = json.load(open('c'))\ns = 'triton.jit'\nclass ModelNew(torch.nn.Module):\n    pass\n";
        assert_eq!(kernel_kinds(plain), KernelKinds::default());
    }

    #[test]
    fn tf32_through_aliases_is_decisive_and_false_is_not() {
        assert_eq!(
            decisive("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n").as_deref(),
            Some("static_tf32")
        );
        assert_eq!(
            decisive("import torch as t\nt.backends.cudnn.allow_tf32 = 1\n").as_deref(),
            Some("static_tf32")
        );
        assert_eq!(
            decisive("from torch.backends import cuda\ncuda.matmul.allow_tf32 = True\n").as_deref(),
            Some("static_tf32")
        );
        assert_eq!(
            decisive("import torch\ntorch.set_float32_matmul_precision('high')\n").as_deref(),
            Some("static_tf32")
        );
        assert_eq!(
            decisive("import torch\ntorch.backends.cuda.matmul.fp32_precision = 'tf32'\n")
                .as_deref(),
            Some("static_tf32")
        );
        assert_eq!(decisive("import torch\ntorch.backends.cuda.matmul.allow_tf32 = False\ntorch.set_float32_matmul_precision('highest')\n"), None);
    }

    #[test]
    fn replacing_harness_functions_is_decisive() {
        for src in [
            "import torch\ntorch.allclose = lambda *a, **k: True\n",
            "import time\ntime.perf_counter = lambda: 0.0\n",
            "from time import perf_counter\nimport time as clock\nclock.perf_counter_ns = perf_counter\n",
            "import torch\nsetattr(torch.cuda, 'synchronize', lambda: None)\n",
            "import torch\ntorch.cuda.Event.elapsed_time = lambda s, e: 0.0\n",
            "import torch\ntorch.Tensor.clone = lambda self: self\n",
            "import torch\ntorch.__dict__['allclose'] = None\n",
            "import torch\nvars(torch)['equal'] = None\n",
        ] {
            assert_eq!(decisive(src).as_deref(), Some("static_monkey_patch"), "{src}");
        }
        // Settings are not patches.
        assert_eq!(decisive("import torch\ntorch._dynamo.config.suppress_errors = True\n"), None);
        assert_eq!(
            classes("import torch\ntorch.backends.cudnn.benchmark = True\n"),
            [("cudnn_benchmark".into(), false)]
        );
    }

    #[test]
    fn model_entry_points_replaced_from_outside_the_class() {
        let cls = "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n";
        assert_eq!(
            decisive(&format!("{cls}ModelNew.__call__ = lambda self, *a: a[0]\n")).as_deref(),
            Some("static_model_patched")
        );
        assert_eq!(
            decisive(&format!("{cls}setattr(ModelNew, 'forward', None)\n")).as_deref(),
            Some("static_model_patched")
        );
        let in_forward = "class ModelNew:\n    def forward(self, x):\n        self.forward = self.fast\n        type(self).__call__ = None\n";
        let got = screen(in_forward);
        assert_eq!(
            got.findings.iter().map(|f| (f.class.as_str(), f.line)).collect::<Vec<_>>(),
            [("static_model_patched", 3), ("static_model_patched", 4)],
            "{got:?}"
        );
        // Choosing an implementation at construction is only worth a warning.
        let init = "class ModelNew:\n    def __init__(self):\n        self.forward = self.fast\n";
        assert_eq!(classes(init), [("forward_on_instance".into(), false)]);
        // An alias inside the class body is ordinary Python.
        assert_eq!(
            classes("class ModelNew:\n    def f(self, x):\n        return x\n    forward = f\n"),
            []
        );
    }

    #[test]
    fn gc_and_frames_are_decisive() {
        assert_eq!(
            decisive("import gc\nfor o in gc.get_objects():\n    pass\n").as_deref(),
            Some("static_gc_scan")
        );
        assert_eq!(
            decisive("from gc import get_referrers as g\ng(1)\n").as_deref(),
            Some("static_gc_scan")
        );
        assert_eq!(
            decisive("import sys\nsys._getframe(1)\n").as_deref(),
            Some("static_frame_inspection")
        );
        assert_eq!(
            decisive("import inspect\ninspect.stack()\n").as_deref(),
            Some("static_frame_inspection")
        );
    }

    #[test]
    fn hiding_and_risky_constructs_are_warnings_with_lines() {
        let src = "import torch, threading, importlib\nexec('x=1')\nm = importlib.import_module('ti' + 'me')\ngetattr(m, 'perf' + '_counter')\nthreading.Thread(target=print).start()\ns = torch.cuda.Stream()\nwith torch.autocast('cuda'):\n    y = x.half()\n";
        let s = screen(src);
        assert!(s.decisive().is_none(), "{s:?}");
        let got: Vec<(&str, usize)> = s.warnings().map(|f| (f.class.as_str(), f.line)).collect();
        assert_eq!(
            got,
            [
                ("dynamic_code", 2),
                ("dynamic_code", 3),
                ("dynamic_code", 4),
                ("threads", 5),
                ("side_stream", 6),
                ("lower_precision", 7),
                ("lower_precision", 8)
            ]
        );
    }

    #[test]
    fn an_honest_candidate_is_clean() {
        let src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nclass ModelNew(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.lin = nn.Linear(n, n)\n        self.register_buffer('wt', self.lin.weight.t().contiguous())\n\n    def forward(self, x):\n        out = torch.empty_like(x)\n        return F.gelu(torch.addmm(self.lin.bias, x, self.wt, out=out))\n\nN = 4\ndef get_inputs():\n    return [torch.randn(N, N)]\n";
        assert_eq!(screen(src), Screening::default());
    }

    fn warned(src: &str) -> Vec<(String, usize)> {
        screen(src)
            .warnings()
            .filter(|f| f.class == "reference_fallback" || f.class == "unchanged_reference")
            .map(|f| (f.class.clone(), f.line))
            .collect()
    }

    const EXT: &str = "import torch\nfrom torch.utils.cpp_extension import load_inline\next = load_inline(name='e', cpp_sources='', cuda_sources='', functions=['f'])\n";
    const MODEL: &str = "import torch\nclass Model(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.l = torch.nn.Linear(n, n)\n    def forward(self, x):\n        return self.l(x)\n";

    #[test]
    fn a_fallback_to_pytorch_around_the_kernel_is_a_warning() {
        let direct = format!("{EXT}class ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        try:\n            return ext.f(a, b)\n        except Exception:\n            return torch.matmul(a, b)\n");
        assert_eq!(warned(&direct), [("reference_fallback".to_owned(), 8)]);
        let s = screen(&direct);
        assert!(s.decisive().is_none());
        assert!(s.findings[0].message.contains("`torch.matmul(...)`"), "{s:?}");
        // Through `self`, an alias of torch.nn.functional, and a bare `except`.
        let through_self = format!("{EXT}import torch.nn.functional as F\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.k = ext\n    def forward(self, x):\n        try:\n            y = self.k.f(x)\n        except:\n            y = F.relu(x)\n        return y\n");
        assert_eq!(warned(&through_self), [("reference_fallback".to_owned(), 12)]);
        // The parent's forward, under a Triton kernel.
        let triton = "import torch, triton\n@triton.jit\ndef k(x_ptr):\n    pass\nclass ModelNew(Model):\n    def forward(self, x):\n        try:\n            k[(1,)](x)\n            return x\n        except RuntimeError:\n            return super().forward(x)\n";
        assert_eq!(warned(triton), [("reference_fallback".to_owned(), 10)]);
    }

    #[test]
    fn honest_exception_handlers_do_not_warn() {
        // A build guarded at import, a handler that re-raises, torch code guarded by torch code.
        let guarded = "import torch\ntry:\n    from torch.utils.cpp_extension import load_inline\n    ext = load_inline(name='e', cpp_sources='')\nexcept ImportError:\n    ext = None\n";
        assert_eq!(warned(guarded), []);
        let reraise = format!("{EXT}class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        try:\n            return ext.f(x)\n        except RuntimeError as e:\n            raise RuntimeError(f'kernel failed: {{e}}')\n");
        assert_eq!(warned(&reraise), []);
        let torch_only = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        try:\n            return torch.compile(torch.relu)(x)\n        except Exception:\n            return torch.relu(x)\n";
        assert_eq!(warned(torch_only), []);
        // A handler that calls the kernel again on a contiguous copy is no fallback.
        let retry = format!("{EXT}class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        try:\n            return ext.f(x)\n        except TypeError:\n            return ext.f(x.contiguous())\n");
        assert_eq!(warned(&retry), []);
    }

    #[test]
    fn the_reference_unchanged_is_a_warning() {
        for new in [
            "class ModelNew(Model):\n    pass\n",
            "class ModelNew(Model):\n    \"\"\"Faster.\"\"\"\n    def __init__(self, n):\n        super().__init__(n)\n    def forward(self, x):\n        return super().forward(x)\n",
            "class ModelNew(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.inner = Model(n)\n    def forward(self, x):\n        return self.inner(x)\n",
        ] {
            assert_eq!(warned(&format!("{MODEL}{new}")), [("unchanged_reference".to_owned(), 8)], "{new}");
        }
    }

    #[test]
    fn subclasses_and_wrappers_that_change_what_runs_do_not_warn() {
        for new in [
            // Its own forward.
            "class ModelNew(Model):\n    def forward(self, x):\n        return torch.addmm(self.l.bias, x, self.l.weight.t())\n",
            // A submodule replaced in __init__: the parent's forward runs the new one.
            "class ModelNew(Model):\n    def __init__(self, n):\n        super().__init__(n)\n        self.l = FastLinear(n)\n",
            // A helper the parent may call.
            "class ModelNew(Model):\n    def helper(self, x):\n        return x\n",
            // Wraps the reference for its weights, runs its own computation.
            "class ModelNew(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.inner = Model(n)\n    def forward(self, x):\n        return torch.relu(x @ self.inner.l.weight.t())\n",
            // A class that is not the candidate.
            "class Helper(Model):\n    pass\n",
        ] {
            assert_eq!(warned(&format!("{MODEL}{new}")), [], "{new}");
        }
    }

    #[test]
    fn a_broken_program_gets_no_panic() {
        let _ = screen("class ModelNew(:\n  torch.allclose = \n");
    }
}
