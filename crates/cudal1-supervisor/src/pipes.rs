//! The two reader threads of a worker: stdout split into lines with a length limit, stderr
//! drained into a bounded ring buffer. Both keep reading until EOF so that a worker can
//! never block on a full pipe, whatever it writes.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::Sender;

const CHUNK: usize = 64 << 10;

/// What the stdout thread reports, in order.
#[derive(Debug)]
pub(crate) enum StdoutEvent {
    /// One complete line, without its `\n` (a final unterminated line counts too).
    Line(Vec<u8>),
    /// A line grew past the limit; the rest of stdout is discarded.
    TooLong,
    /// Reading failed; treated like EOF.
    Failed(io::Error),
    /// Every writer closed its end.
    Eof,
}

/// Splits a byte stream into lines of at most `limit` bytes.
pub(crate) struct LineSplitter {
    limit: usize,
    pending: Vec<u8>,
    overflowed: bool,
}

impl LineSplitter {
    pub(crate) fn new(limit: usize) -> Self {
        Self { limit, pending: Vec::new(), overflowed: false }
    }

    /// Feeds bytes; emits complete lines, or one `TooLong` after which everything is dropped.
    pub(crate) fn feed(
        &mut self,
        mut bytes: &[u8],
        emit: &mut dyn FnMut(StdoutEvent) -> bool,
    ) -> bool {
        while !self.overflowed && !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let take = newline.unwrap_or(bytes.len());
            if self.pending.len() + take > self.limit {
                self.overflowed = true;
                self.pending = Vec::new();
                return emit(StdoutEvent::TooLong);
            }
            self.pending.extend_from_slice(&bytes[..take]);
            match newline {
                Some(i) => {
                    bytes = &bytes[i + 1..];
                    let mut line = std::mem::take(&mut self.pending);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    if !emit(StdoutEvent::Line(line)) {
                        return false;
                    }
                }
                None => bytes = &[],
            }
        }
        true
    }

    /// At EOF: the unterminated rest, if any.
    pub(crate) fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.overflowed && !self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }
}

pub(crate) fn spawn_stdout_reader(
    name: String,
    mut stdout: impl Read + Send + 'static,
    limit: usize,
    events: Sender<StdoutEvent>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name).spawn(move || {
        let mut splitter = LineSplitter::new(limit);
        let mut buf = vec![0u8; CHUNK];
        // Once the receiver is gone nobody wants lines, but we still drain to EOF so that
        // the worker never blocks on a full pipe.
        let mut listening = true;
        loop {
            match stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if listening {
                        listening = splitter.feed(&buf[..n], &mut |ev| events.send(ev).is_ok());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = events.send(StdoutEvent::Failed(e));
                    return;
                }
            }
        }
        if listening {
            if let Some(rest) = splitter.finish() {
                let _ = events.send(StdoutEvent::Line(rest));
            }
        }
        let _ = events.send(StdoutEvent::Eof);
    })
}

/// The last `capacity` bytes of a stream, plus whether the stream has closed.
pub(crate) struct StderrTail {
    state: Mutex<TailState>,
    closed: Condvar,
}

struct TailState {
    buf: VecDeque<u8>,
    capacity: usize,
    dropped: u64,
    closed: bool,
}

impl StderrTail {
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(TailState {
                buf: VecDeque::with_capacity(capacity.min(CHUNK)),
                capacity,
                dropped: 0,
                closed: false,
            }),
            closed: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TailState> {
        // A poisoned lock only means a reader thread panicked mid-push; the bytes are fine.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn push(&self, bytes: &[u8]) {
        let mut s = self.lock();
        let cap = s.capacity;
        let bytes = if bytes.len() > cap {
            s.dropped += (bytes.len() - cap) as u64;
            &bytes[bytes.len() - cap..]
        } else {
            bytes
        };
        let overflow = (s.buf.len() + bytes.len()).saturating_sub(cap);
        s.buf.drain(..overflow);
        s.dropped += overflow as u64;
        s.buf.extend(bytes);
    }

    fn close(&self) {
        self.lock().closed = true;
        self.closed.notify_all();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits until the stream closes or `deadline` passes; true if closed.
    pub(crate) fn wait_closed(&self, deadline: Instant) -> bool {
        let mut s = self.lock();
        while !s.closed {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = self
                .closed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }

    /// The kept bytes, lossily decoded, with a note of how much came before them.
    pub(crate) fn text(&self) -> String {
        let s = self.lock();
        let (a, b) = s.buf.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        let body = String::from_utf8_lossy(&bytes);
        if s.dropped > 0 {
            format!("[… {} earlier bytes of stderr dropped …]\n{body}", s.dropped)
        } else {
            body.into_owned()
        }
    }
}

pub(crate) fn spawn_stderr_reader(
    name: String,
    mut stderr: impl Read + Send + 'static,
    tail: Arc<StderrTail>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name).spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match stderr.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => tail.push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        tail.close();
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn split(limit: usize, chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::new(limit);
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, &mut |ev| {
                out.push(match ev {
                    StdoutEvent::Line(l) => String::from_utf8(l).unwrap(),
                    StdoutEvent::TooLong => "<too long>".into(),
                    other => panic!("{other:?}"),
                });
                true
            });
        }
        if let Some(rest) = s.finish() {
            out.push(format!("<rest {}>", String::from_utf8(rest).unwrap()));
        }
        out
    }

    #[test]
    fn lines_are_joined_across_chunks_and_split_within_them() {
        assert_eq!(split(100, &[b"ab", b"c\nde\r\n", b"\nf"]), ["abc", "de", "", "<rest f>"]);
    }

    #[test]
    fn a_line_at_the_limit_passes_and_one_byte_more_does_not() {
        assert_eq!(split(3, &[b"abc\n"]), ["abc"]);
        assert_eq!(split(3, &[b"ab", b"cd\nxy\n"]), ["<too long>"]);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_and_counts_the_rest() {
        let tail = StderrTail::new(8);
        tail.push(b"0123456789");
        tail.push(b"ab");
        assert_eq!(tail.text(), "[… 4 earlier bytes of stderr dropped …]\n456789ab");
    }

    #[test]
    fn the_stderr_thread_drains_everything_and_reports_close() {
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let tail = StderrTail::new(16);
        let handle =
            spawn_stderr_reader("t".into(), io::Cursor::new(data.clone()), tail.clone()).unwrap();
        assert!(tail.wait_closed(Instant::now() + Duration::from_secs(10)));
        handle.join().unwrap();
        let text = tail.text();
        assert!(text.starts_with("[… 999984 earlier bytes"), "{text}");
        assert!(tail.is_closed());
    }
}
