//! A content hash that ignores comments and layout noise, so that the same
//! program sampled twice is evaluated once.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// sha256 (hex) of `code` with Python comments removed, trailing whitespace
/// stripped, blank lines dropped and line endings unified. A `#` inside a
/// string literal (a `#include` in inline CUDA source, a format string) is
/// text, not a comment, and is kept.
pub fn normalized_hash(code: &str) -> String {
    let normalized = normalize(code);
    let digest = Sha256::digest(normalized.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The text [`normalized_hash`] hashes.
pub fn normalize(code: &str) -> String {
    let stripped = strip_comments(&code.replace("\r\n", "\n").replace('\r', "\n"));
    let mut out = String::with_capacity(stripped.len());
    for line in stripped.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Where the scanner is.
#[derive(Clone, Copy, PartialEq)]
enum State {
    Code,
    /// Inside a string opened by `quote`, triple-quoted or not.
    Str {
        quote: char,
        triple: bool,
    },
}

/// Removes `#` comments, tracking single-, double- and triple-quoted strings
/// with backslash escapes. Prefixes (r, b, f, u) need no special care: even
/// in a raw string a backslash keeps the next quote from closing it.
fn strip_comments(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut state = State::Code;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let triple_at = |q: char| chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q);
        match state {
            State::Code => match c {
                '#' => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                    continue;
                }
                '\'' | '"' => {
                    let triple = triple_at(c);
                    state = State::Str { quote: c, triple };
                    let n = if triple { 3 } else { 1 };
                    out.extend(&chars[i..i + n]);
                    i += n;
                    continue;
                }
                _ => out.push(c),
            },
            State::Str { quote, triple } => {
                if c == '\\' {
                    out.extend(chars.get(i..(i + 2).min(chars.len())).unwrap_or(&[]));
                    i += 2;
                    continue;
                }
                if c == quote && (!triple || triple_at(c)) {
                    let n = if triple { 3 } else { 1 };
                    out.extend(&chars[i..i + n]);
                    i += n;
                    state = State::Code;
                    continue;
                }
                // An unescaped newline ends a one-line string (a syntax error
                // in Python; recover rather than swallow the rest of the file).
                if c == '\n' && !triple {
                    state = State::Code;
                }
                out.push(c);
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_hex_of_the_normalised_text() {
        // `printf 'x = 1\n' | sha256sum`; trailing spaces, a comment and a missing
        // final newline all normalise to that text.
        let want = "9e26bf369911c45c243c684147b23fc9e1dcfcf257d299a1c632016a6fcd33f4";
        assert_eq!(normalized_hash("x = 1\n"), want);
        assert_eq!(normalized_hash("x = 1   # one"), want);
    }

    #[test]
    fn comments_blank_lines_and_trailing_space_do_not_matter() {
        let a =
            "import torch\n\nclass ModelNew:  \n    def f(self):  # fast path\n        return 1\n";
        let b = "# header comment\nimport torch\r\nclass ModelNew:\n\n\n    def f(self):\n        return 1   \n# end\n";
        assert_eq!(normalized_hash(a), normalized_hash(b));
    }

    #[test]
    fn real_changes_do_matter() {
        assert_ne!(normalized_hash("x = 1\n"), normalized_hash("x = 2\n"));
        // Indentation is meaning in Python.
        assert_ne!(
            normalized_hash("if a:\n    b()\nc()\n"),
            normalized_hash("if a:\n    b()\n    c()\n")
        );
    }

    #[test]
    fn hash_signs_inside_strings_are_kept() {
        let cuda =
            "src = '''\n#include <torch/extension.h>\n__global__ void k() {} // not python\n'''\n";
        assert_eq!(normalize(cuda), cuda);
        assert_eq!(normalize("s = \"a # b\"  # real comment\n"), "s = \"a # b\"\n");
        assert_eq!(normalize("s = 'it\\'s # kept' # gone\n"), "s = 'it\\'s # kept'\n");
        assert_eq!(normalize("s = r\"\\\" # kept\" # gone\n"), "s = r\"\\\" # kept\"\n");
        assert_ne!(normalized_hash("s = '#a'\n"), normalized_hash("s = '#b'\n"));
    }

    #[test]
    fn triple_quotes_hold_other_quotes_and_end_properly() {
        let code = "d = \"\"\"it's \"quoted\" # kept\"\"\" # gone\nx = 1 # gone\n";
        assert_eq!(normalize(code), "d = \"\"\"it's \"quoted\" # kept\"\"\"\nx = 1\n");
    }

    #[test]
    fn an_unterminated_one_line_string_does_not_swallow_the_file() {
        assert_eq!(normalize("s = 'oops\nx = 1 # gone\n"), "s = 'oops\nx = 1\n");
    }
}
