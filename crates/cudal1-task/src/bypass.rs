//! KernelBench's two bypass patterns, as warnings of the static screen ([`crate::screen`]):
//!
//! - `reference_fallback`: a `try` whose body calls the program's own kernel (a name bound to a
//!   `load_inline`/`load` build, or a `@triton.jit` function) and whose `except` handler calls
//!   PyTorch or the reference instead (`try: return ext.f(x) except Exception: return
//!   torch.matmul(a, b)`): when the kernel fails, the program quietly runs the library.
//! - `unchanged_reference`: a `ModelNew` that subclasses `Model` and changes nothing that runs (no
//!   `forward` of its own, or one that only calls the parent's, and an `__init__` that only calls
//!   the parent's), or one that builds a `Model` and whose `forward` only calls it.
//!
//! Both are warnings, never verdicts: a fallback that never fires and a wrapper that is as fast
//! as its reference are still correct programs; what they run is measured elsewhere (the
//! own-kernel share of a profile).

use crate::syntax::text;
use std::collections::{HashMap, HashSet};
use tree_sitter::Node;

/// One bypass pattern: its class, message and 1-based line.
pub(crate) struct Bypass {
    pub class: &'static str,
    pub message: String,
    pub line: usize,
}

/// The bypass patterns of the module whose tree is `root`. `path` resolves an expression to the
/// dotted path it names with the module's import aliases (`F.relu` -> `torch.nn.functional.relu`).
pub(crate) fn find(root: Node, src: &str, path: &dyn Fn(Node) -> Option<String>) -> Vec<Bypass> {
    let mut found = Vec::new();
    let own = own_names(root, src, path);
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        match node.kind() {
            "try_statement" => fallback(node, src, path, &own, &mut found),
            "class_definition" => unchanged(node, src, path, &mut found),
            _ => {}
        }
        let mut c = node.walk();
        stack.extend(node.children(&mut c));
    }
    found
}

/// The functions a program defines under `@triton.jit` (or `@triton.autotune`, `@jit`): the
/// names its Triton kernels run under on the GPU.
pub fn triton_kernels(source: &str) -> Vec<String> {
    let tree = crate::syntax::parse(source);
    let mut out = Vec::new();
    let mut stack = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        if node.kind() == "decorated_definition" && jit_decorated(node, source) {
            if let Some(name) =
                node.child_by_field_name("definition").and_then(|d| d.child_by_field_name("name"))
            {
                out.push(text(name, source).to_owned());
            }
        }
        let mut c = node.walk();
        stack.extend(node.children(&mut c));
    }
    out.sort();
    out.dedup();
    out
}

fn jit_decorated(node: Node, src: &str) -> bool {
    let mut c = node.walk();
    let found = node.children(&mut c).filter(|d| d.kind() == "decorator").any(|d| {
        let t = text(d, src).trim();
        t.contains("triton.jit")
            || t.contains("triton.autotune")
            || t == "@jit"
            || t.starts_with("@jit(")
    });
    found
}

/// Names that stand for the program's own kernels: bound to a `load_inline`/`load` result
/// (`ext = load_inline(...)`, `self.ext = ext`), or defined under `@triton.jit`.
fn own_names(root: Node, src: &str, path: &dyn Fn(Node) -> Option<String>) -> HashSet<String> {
    let mut own = HashSet::new();
    let mut assigns: Vec<(String, Node)> = Vec::new();
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        match node.kind() {
            "assignment" => {
                if let (Some(l), Some(r)) =
                    (node.child_by_field_name("left"), node.child_by_field_name("right"))
                {
                    assigns.push((text(l, src).to_owned(), r));
                }
            }
            "decorated_definition" => {
                let jit = jit_decorated(node, src);
                if let Some(name) = node
                    .child_by_field_name("definition")
                    .and_then(|d| d.child_by_field_name("name"))
                {
                    if jit {
                        own.insert(text(name, src).to_owned());
                    }
                }
            }
            _ => {}
        }
        let mut c = node.walk();
        stack.extend(node.children(&mut c));
    }
    let builds = |r: Node| {
        r.kind() == "call"
            && r.child_by_field_name("function").and_then(path).is_some_and(|p| {
                let last = p.rsplit('.').next().unwrap_or("");
                matches!(last, "load_inline" | "load") && (p.contains("cpp_extension") || p == last)
            })
    };
    // Two rounds: a build's name, then the names that take it (`self.ext = ext`).
    for _ in 0..2 {
        for (left, right) in &assigns {
            if builds(*right) || own.contains(text(*right, src)) {
                own.insert(left.clone());
            }
        }
    }
    own
}

/// Whether `node` calls one of `own` (`ext.f(x)`, `self.ext.f(x)`, `kernel[grid](...)`).
fn calls_own(node: Node, src: &str, own: &HashSet<String>) -> bool {
    any_call(node, &mut |call| {
        let Some(mut f) = call.child_by_field_name("function") else { return false };
        if f.kind() == "subscript" {
            f = f.child_by_field_name("value").unwrap_or(f);
        }
        let t = text(f, src);
        own.iter()
            .any(|o| t == o || t.strip_prefix(o.as_str()).is_some_and(|rest| rest.starts_with('.')))
    })
}

/// Whether a call in `node` satisfies `pred` (nested definitions left out).
fn any_call(node: Node, pred: &mut dyn FnMut(Node) -> bool) -> bool {
    if node.kind() == "call" && pred(node) {
        return true;
    }
    let mut c = node.walk();
    let children: Vec<Node> = node.children(&mut c).collect();
    children.into_iter().any(|ch| {
        !matches!(ch.kind(), "function_definition" | "class_definition") && any_call(ch, pred)
    })
}

/// A call of PyTorch or of the reference: what a fallback runs instead of the kernel.
fn library_call(call: Node, src: &str, path: &dyn Fn(Node) -> Option<String>) -> Option<String> {
    let f = call.child_by_field_name("function")?;
    let t = text(f, src);
    if let Some(p) = path(f) {
        if p.starts_with("torch.") || p == "Model" || p.starts_with("Model.") {
            return Some(t.to_owned());
        }
    }
    // `super().forward(x)`, `super(ModelNew, self).forward(x)`.
    (t.starts_with("super(") && t.ends_with(".forward")).then(|| t.to_owned())
}

fn fallback(
    node: Node,
    src: &str,
    path: &dyn Fn(Node) -> Option<String>,
    own: &HashSet<String>,
    found: &mut Vec<Bypass>,
) {
    let Some(body) = node.child_by_field_name("body") else { return };
    if !calls_own(body, src, own) {
        return;
    }
    let mut c = node.walk();
    for handler in node.children(&mut c).filter(|h| h.kind() == "except_clause") {
        let mut what = None;
        any_call(handler, &mut |call| {
            what = library_call(call, src, path);
            what.is_some()
        });
        if let Some(what) = what {
            found.push(Bypass {
                class: "reference_fallback",
                message: format!(
                    "an exception handler around the program's own kernel falls back to `{what}(...)`: \
                     when the kernel fails, PyTorch runs instead"
                ),
                line: handler.start_position().row + 1,
            });
        }
    }
}

/// The statements of a block, docstrings and `pass` left out.
fn statements<'t>(block: Node<'t>, src: &str) -> Vec<Node<'t>> {
    let mut c = block.walk();
    block
        .named_children(&mut c)
        .filter(|s| s.kind() != "comment" && s.kind() != "pass_statement")
        .filter(|s| {
            !(s.kind() == "expression_statement"
                && s.named_child(0).is_some_and(|e| e.kind() == "string"))
        })
        .filter(|s| !text(*s, src).is_empty())
        .collect()
}

/// The methods of a class body by name.
fn methods<'t>(body: Node<'t>, src: &str) -> HashMap<String, Node<'t>> {
    let mut out = HashMap::new();
    let mut c = body.walk();
    for child in body.named_children(&mut c) {
        let def = if child.kind() == "decorated_definition" {
            child.child_by_field_name("definition")
        } else {
            Some(child)
        };
        if let Some(def) = def.filter(|d| d.kind() == "function_definition") {
            if let Some(name) = def.child_by_field_name("name") {
                out.insert(text(name, src).to_owned(), def);
            }
        }
    }
    out
}

/// Whether the single statement `s` only calls `callee` (as `return callee(...)` or a bare call).
fn only_calls(s: Node, src: &str, callee: &dyn Fn(&str) -> bool) -> bool {
    let expr = match s.kind() {
        "return_statement" | "expression_statement" => s.named_child(0),
        _ => None,
    };
    expr.filter(|e| e.kind() == "call")
        .and_then(|e| e.child_by_field_name("function"))
        .is_some_and(|f| callee(text(f, src)))
}

fn unchanged(
    class: Node,
    src: &str,
    path: &dyn Fn(Node) -> Option<String>,
    found: &mut Vec<Bypass>,
) {
    if class.child_by_field_name("name").map(|n| text(n, src)) != Some("ModelNew") {
        return;
    }
    let Some(body) = class.child_by_field_name("body") else { return };
    let defs = methods(body, src);
    let line = class.start_position().row + 1;
    let bases: Vec<String> = class
        .child_by_field_name("superclasses")
        .map(|b| {
            let mut c = b.walk();
            b.named_children(&mut c).filter_map(path).collect()
        })
        .unwrap_or_default();
    let to_parent =
        |f: &str| f.starts_with("super(") && f.ends_with(".forward") || f == "Model.forward";
    let to_parent_init =
        |f: &str| f.starts_with("super(") && f.ends_with(".__init__") || f == "Model.__init__";
    let trivial = |name: &str, callee: &dyn Fn(&str) -> bool| {
        defs.get(name).is_none_or(|d| {
            let block = d.child_by_field_name("body");
            let stmts = block.map(|b| statements(b, src)).unwrap_or_default();
            stmts.iter().all(|s| only_calls(*s, src, callee))
        })
    };
    // Anything else defined in the body (attributes, helpers) may change what runs.
    let others = statements(body, src).len() > defs.len();
    if bases.iter().any(|b| b == "Model")
        && !others
        && defs.keys().all(|k| k == "__init__" || k == "forward")
    {
        if trivial("forward", &to_parent) && trivial("__init__", &to_parent_init) {
            found.push(Bypass {
                class: "unchanged_reference",
                message:
                    "`ModelNew` subclasses the reference `Model` and changes nothing that runs"
                        .into(),
                line,
            });
        }
        return;
    }
    // A wrapper: `self.x = Model(...)` in `__init__`, and a `forward` that only calls it.
    let Some(init) = defs.get("__init__").and_then(|d| d.child_by_field_name("body")) else {
        return;
    };
    let mut wrapped = Vec::new();
    for s in statements(init, src) {
        let Some(a) = s.named_child(0).filter(|a| a.kind() == "assignment") else { continue };
        let (Some(l), Some(r)) = (a.child_by_field_name("left"), a.child_by_field_name("right"))
        else {
            continue;
        };
        let builds_model = r.kind() == "call"
            && r.child_by_field_name("function").and_then(path).as_deref() == Some("Model");
        if builds_model {
            wrapped.push(text(l, src).to_owned());
        }
    }
    let calls_wrapped = |f: &str| wrapped.iter().any(|w| f == w || f == format!("{w}.forward"));
    let Some(forward) = defs.get("forward").and_then(|d| d.child_by_field_name("body")) else {
        return;
    };
    let stmts = statements(forward, src);
    if !wrapped.is_empty() && stmts.len() == 1 && only_calls(stmts[0], src, &calls_wrapped) {
        found.push(Bypass {
            class: "unchanged_reference",
            message: "`ModelNew` builds the reference `Model` and its `forward` only calls it"
                .into(),
            line,
        });
    }
}
