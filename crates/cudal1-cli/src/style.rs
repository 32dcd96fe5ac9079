//! How output looks, decided once per process ([`init`]): colours (on a terminal, never with
//! `NO_COLOR`, always with `CLICOLOR_FORCE`), the width tables must fit (`COLUMNS`, else the
//! terminal's), and how much detail people asked for (`-v`).

use comfy_table::{Cell, Color, ContentArrangement, Table};
use cudal1_eval::Verdict;
use std::io::IsTerminal;
use std::sync::OnceLock;

struct Style {
    color_out: bool,
    color_err: bool,
    width: Option<u16>,
    verbose: u8,
}

static STYLE: OnceLock<Style> = OnceLock::new();

/// Reads the environment and the terminals; later calls keep the first answer.
pub fn init(verbose: u8) {
    STYLE.get_or_init(|| Style {
        color_out: wants_color(std::io::stdout().is_terminal()),
        color_err: wants_color(std::io::stderr().is_terminal()),
        width: terminal_width(),
        verbose,
    });
}

/// Whether what goes to stderr (messages, logs) is coloured.
pub fn stderr_in_color() -> bool {
    style().color_err
}

fn style() -> &'static Style {
    STYLE.get_or_init(|| Style { color_out: false, color_err: false, width: None, verbose: 0 })
}

/// `NO_COLOR` (any value) turns colours off, `CLICOLOR_FORCE` (not `0`) on, else a terminal
/// that is not `dumb` has them (<https://no-color.org>).
fn wants_color(terminal: bool) -> bool {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    if set("NO_COLOR") {
        return false;
    }
    if std::env::var_os("CLICOLOR_FORCE").is_some_and(|v| !v.is_empty() && v != "0") {
        return true;
    }
    terminal && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// `COLUMNS`, else the width of the terminal on stdout; none when stdout is a file or pipe
/// (tables then keep their full text).
fn terminal_width() -> Option<u16> {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|c| *c >= 20)
    {
        return Some(c);
    }
    if !std::io::stdout().is_terminal() {
        return None;
    }
    // SAFETY: an all-zero winsize is a valid value; TIOCGWINSZ only writes into it.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local winsize, on the stdout descriptor.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col >= 20).then_some(size.ws_col)
}

/// The width tables must fit, when there is one.
pub fn width() -> Option<u16> {
    style().width
}

/// Whether people asked for every detail (`-v`): full reasons in tables.
pub fn verbose() -> bool {
    style().verbose > 0
}

/// A table for stdout that fits the terminal (long cells wrap) and has colours where wanted.
pub fn table() -> Table {
    let s = style();
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    if s.color_out {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    if let Some(w) = s.width {
        t.set_width(w);
    }
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t
}

fn verdict_color(v: Verdict) -> Color {
    match v {
        Verdict::Correct => Color::Green,
        Verdict::Incorrect | Verdict::CompileError | Verdict::RuntimeError => Color::Red,
        Verdict::Timeout => Color::Yellow,
        Verdict::Exploit => Color::Magenta,
    }
}

/// A table cell in the verdict's colour.
pub fn verdict_cell(v: Verdict, text: String) -> Cell {
    Cell::new(text).fg(verdict_color(v))
}

/// Colours of text outside tables.
#[derive(Clone, Copy)]
pub enum Paint {
    Verdict(Verdict),
    Error,
    Warning,
    Hint,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Paint::Verdict(v) => match verdict_color(v) {
                Color::Green => "32",
                Color::Yellow => "33",
                Color::Magenta => "35",
                _ => "31",
            },
            Paint::Error => "1;31",
            Paint::Warning => "33",
            Paint::Hint => "36",
        }
    }
}

fn paint(text: &str, p: Paint, on: bool) -> String {
    if on {
        format!("\x1b[{}m{text}\x1b[0m", p.code())
    } else {
        text.to_owned()
    }
}

/// `text` in colour for stdout, where stdout has colours.
pub fn out(text: &str, p: Paint) -> String {
    paint(text, p, style().color_out)
}

/// `text` in colour for stderr, where stderr has colours.
pub fn err(text: &str, p: Paint) -> String {
    paint(text, p, style().color_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paint_wraps_text_in_an_escape_only_when_on() {
        assert_eq!(
            paint("correct", Paint::Verdict(Verdict::Correct), true),
            "\x1b[32mcorrect\x1b[0m"
        );
        assert_eq!(paint("error:", Paint::Error, false), "error:");
    }
}
