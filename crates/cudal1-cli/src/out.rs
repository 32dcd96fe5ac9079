//! Standard output is for data only, written a line at a time and flushed, so that a pipe sees
//! rows as they finish. A reader that went away (`cudal1 eval ... --json | head`) is not an error:
//! the command stops quietly, as ripgrep does ([`is_broken_pipe`]).

use std::io::Write;

/// Writes one line to stdout.
pub fn line(text: impl std::fmt::Display) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

/// Whether an error comes from writing to a closed pipe.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
