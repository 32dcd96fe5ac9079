//! Finding the candidate program in an LLM's reply.

/// Why a reply holds no usable program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    #[error("no code block: the reply has no ```python, ```py or bare ``` block")]
    NoCodeBlock,
    #[error("no ModelNew in the code: no python block defines `class ModelNew`")]
    NoModelNew,
    #[error("empty block: every python block in the reply is empty")]
    EmptyBlock,
    #[error(
        "unterminated block: the reply ends inside a code block (cut off by the token limit?)"
    )]
    Unterminated,
}

/// One fenced block, as CommonMark reads it (backtick fences only).
#[derive(Debug)]
struct Block {
    python: bool,
    body: String,
    terminated: bool,
}

/// The last fenced python block (```python, ```py, ```python3 or bare ```)
/// that defines `class ModelNew`. Blocks of other languages are skipped, a
/// block still open at the end of the reply is never used, and when nothing
/// fits the error says why.
pub fn extract_program(reply: &str) -> Result<String, ExtractError> {
    let blocks = fenced_blocks(reply);
    let python: Vec<&Block> = blocks.iter().filter(|b| b.python).collect();
    if let Some(block) = python.iter().rev().find(|b| b.terminated && defines_model_new(&b.body)) {
        return Ok(block.body.clone());
    }
    if python.iter().any(|b| !b.terminated) {
        return Err(ExtractError::Unterminated);
    }
    if python.is_empty() {
        return Err(ExtractError::NoCodeBlock);
    }
    if python.iter().all(|b| b.body.trim().is_empty()) {
        return Err(ExtractError::EmptyBlock);
    }
    Err(ExtractError::NoModelNew)
}

fn fenced_blocks(reply: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = reply.lines();
    while let Some(line) = lines.next() {
        let Some((indent, ticks, info)) = opening_fence(line) else { continue };
        let lang = info.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
        let python = matches!(lang.as_str(), "" | "python" | "py" | "python3");
        let mut body = String::new();
        let mut terminated = false;
        for inner in lines.by_ref() {
            if is_closing_fence(inner, ticks) {
                terminated = true;
                break;
            }
            body.push_str(strip_indent(inner, indent));
            body.push('\n');
        }
        blocks.push(Block { python, body, terminated });
    }
    blocks
}

/// `(indent, backtick count, info string)` of an opening fence: up to three
/// spaces, three or more backticks, and an info string without backticks.
fn opening_fence(line: &str) -> Option<(usize, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ticks = rest.len() - rest.trim_start_matches('`').len();
    if ticks < 3 {
        return None;
    }
    let info = rest[ticks..].trim();
    (!info.contains('`')).then_some((indent, ticks, info))
}

fn is_closing_fence(line: &str, opening_ticks: usize) -> bool {
    let trimmed = line.trim();
    let indent = line.len() - line.trim_start_matches(' ').len();
    indent <= 3 && trimmed.len() >= opening_ticks && trimmed.bytes().all(|b| b == b'`')
}

/// Content lines lose as much leading space as the fence had (CommonMark),
/// so a block inside a list item comes out as valid Python.
fn strip_indent(line: &str, indent: usize) -> &str {
    let spaces = line.len() - line.trim_start_matches(' ').len();
    &line[spaces.min(indent)..]
}

/// A top-level or nested `class ModelNew(` / `class ModelNew:` line.
fn defines_model_new(code: &str) -> bool {
    code.lines().any(|line| {
        let Some(rest) = line.trim_start().strip_prefix("class") else { return false };
        if !rest.starts_with([' ', '\t']) {
            return false;
        }
        rest.trim_start()
            .strip_prefix("ModelNew")
            .is_some_and(|after| after.trim_start().starts_with(['(', ':']))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: &str = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n";

    #[test]
    fn takes_a_python_block() {
        let reply = format!("Analysis...\n\n```python\n{PROGRAM}```\nDone.");
        assert_eq!(extract_program(&reply).unwrap(), PROGRAM);
    }

    #[test]
    fn accepts_py_bare_and_crlf() {
        assert_eq!(extract_program(&format!("```py\n{PROGRAM}```")).unwrap(), PROGRAM);
        assert_eq!(extract_program(&format!("```\n{PROGRAM}```")).unwrap(), PROGRAM);
        let crlf = format!("```Python\r\n{}```\r\n", PROGRAM.replace('\n', "\r\n"));
        assert_eq!(extract_program(&crlf).unwrap(), PROGRAM);
    }

    #[test]
    fn takes_the_last_block_that_defines_model_new() {
        let first = "class ModelNew(nn.Module):\n    v = 1\n";
        let second = "class ModelNew(nn.Module):\n    v = 2\n";
        let reply = format!(
            "```python\n{first}```\nthen a helper\n```python\ndef helper(): pass\n```\nfinal:\n```python\n{second}```\nand a build line\n```bash\nclass ModelNew: echo\n```\n"
        );
        assert_eq!(extract_program(&reply).unwrap(), second);
    }

    #[test]
    fn a_cut_off_final_block_falls_back_to_a_complete_one() {
        let reply = format!("```python\n{PROGRAM}```\nimproved:\n```python\nclass ModelNew(nn.Module):\n    def for");
        assert_eq!(extract_program(&reply).unwrap(), PROGRAM);
    }

    #[test]
    fn longer_fences_may_hold_triple_backticks() {
        let reply = "````python\nclass ModelNew:\n    doc = '''\n```\n'''\n````\n";
        assert_eq!(extract_program(reply).unwrap(), "class ModelNew:\n    doc = '''\n```\n'''\n");
    }

    #[test]
    fn indented_fences_are_dedented() {
        let reply = "1. Code:\n   ```python\n   class ModelNew(nn.Module):\n       pass\n   ```\n";
        assert_eq!(extract_program(reply).unwrap(), "class ModelNew(nn.Module):\n    pass\n");
    }

    #[test]
    fn reasons_for_failure() {
        assert_eq!(extract_program("I cannot help with that."), Err(ExtractError::NoCodeBlock));
        assert_eq!(extract_program("```cpp\nint main() {}\n```"), Err(ExtractError::NoCodeBlock));
        assert_eq!(
            extract_program("```python\nclass Model(nn.Module): pass\n```"),
            Err(ExtractError::NoModelNew)
        );
        assert_eq!(
            extract_program("```python\n```\n```py\n\n  \n```"),
            Err(ExtractError::EmptyBlock)
        );
        assert_eq!(
            extract_program("```python\nclass ModelNew(nn.Module):\n    pass\n"),
            Err(ExtractError::Unterminated)
        );
        let msg = ExtractError::NoModelNew.to_string();
        assert!(msg.starts_with("no ModelNew in the code"), "{msg}");
    }

    #[test]
    fn model_new_must_be_a_class_definition() {
        assert!(defines_model_new("class ModelNew(nn.Module):"));
        assert!(defines_model_new("    class  ModelNew :"));
        assert!(!defines_model_new("class ModelNewer(nn.Module):"));
        assert!(!defines_model_new("# class ModelNew is below"));
        assert!(!defines_model_new("classModelNew:"));
        assert!(!defines_model_new("x = ModelNew()"));
    }
}
