//! Parsing Python with tree-sitter: syntax errors with positions, and top-level definitions.

use tree_sitter::{Node, Parser, Tree};

/// The names a module defines at its top level.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Definitions {
    pub classes: Vec<String>,
    pub functions: Vec<String>,
}

/// The first syntax error of a file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxProblem {
    pub line: usize,
    pub column: usize,
    pub snippet: String,
}

pub fn parse(source: &str) -> Tree {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .expect("the bundled tree-sitter-python grammar matches the tree-sitter version");
    parser
        .parse(source, None)
        .expect("parsing without a timeout or cancellation flag always returns a tree")
}

/// Parses `source` and lists its top-level classes and functions, or returns the first syntax error.
pub fn find_definitions(source: &str) -> Result<Definitions, SyntaxProblem> {
    let tree = parse(source);
    let root = tree.root_node();
    if root.has_error() {
        return Err(first_error(root, source));
    }
    let mut defs = Definitions::default();
    let mut cursor = root.walk();
    for child in root.children(&mut cursor) {
        let node = if child.kind() == "decorated_definition" {
            match child.child_by_field_name("definition") {
                Some(n) => n,
                None => continue,
            }
        } else {
            child
        };
        let name = node.child_by_field_name("name").map(|n| text(n, source).to_owned());
        match (node.kind(), name) {
            ("class_definition", Some(n)) => defs.classes.push(n),
            ("function_definition", Some(n)) => defs.functions.push(n),
            _ => {}
        }
    }
    Ok(defs)
}

fn first_error(root: Node, source: &str) -> SyntaxProblem {
    let mut stack = vec![root];
    let mut found = root;
    // Depth-first, leftmost first: the earliest error or missing node in the file.
    while let Some(node) = stack.pop() {
        if node.is_error() || node.is_missing() {
            found = node;
            break;
        }
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).filter(|c| c.has_error()).collect();
        for c in children.into_iter().rev() {
            stack.push(c);
        }
    }
    let pos = found.start_position();
    let line_text = source.lines().nth(pos.row).unwrap_or("").trim();
    SyntaxProblem { line: pos.row + 1, column: pos.column + 1, snippet: format!("`{line_text}`") }
}

pub(crate) fn text<'s>(node: Node, source: &'s str) -> &'s str {
    &source[node.byte_range()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_decorated_and_plain_definitions() {
        let src =
            "import x\n@dec\nclass A: pass\ndef f(): pass\nclass B(A):\n    def g(self): pass\n";
        let d = find_definitions(src).unwrap();
        assert_eq!(d.classes, ["A", "B"]);
        assert_eq!(d.functions, ["f"]);
    }

    #[test]
    fn error_points_at_the_bad_line() {
        let p = find_definitions("a = 1\nb = (2,\nc = 3\n").unwrap_err();
        assert!(p.line >= 2, "{p:?}");
        let p = find_definitions("def f(:\n    pass\n").unwrap_err();
        assert_eq!(p.line, 1);
    }
}
