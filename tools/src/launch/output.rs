//! Per-stream reader threads that prefix every line of a rank's output with `[rank] `.
//!
//! Bytes are passed through untouched (no UTF-8 assumption). A batch of complete lines is
//! written with one `write_all` under the stream's lock, so lines of different ranks never
//! interleave. A partial last line is flushed at EOF with a newline added; a line longer
//! than [`MAX_LINE`] is cut into several prefixed lines.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

/// Longest line kept in memory before it is emitted in pieces.
pub(crate) const MAX_LINE: usize = 1 << 20;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

impl Sink {
    /// Writes `bytes` in one go; returns false once the destination is gone (EPIPE & co).
    fn write(self, bytes: &[u8]) -> bool {
        fn put(mut w: impl Write, bytes: &[u8]) -> bool {
            w.write_all(bytes).and_then(|()| w.flush()).is_ok()
        }
        match self {
            Sink::Stdout => put(io::stdout().lock(), bytes),
            Sink::Stderr => put(io::stderr().lock(), bytes),
        }
    }
}

/// Starts a thread copying `src` to `sink` with `[rank] ` in front of each line.
/// `open` is decremented when the stream reaches EOF.
pub(crate) fn spawn_pump<R: Read + Send + 'static>(
    rank: usize,
    src: R,
    sink: Sink,
    open: Arc<AtomicUsize>,
) -> io::Result<thread::JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("fxrun-out-{rank}"))
        .spawn(move || {
            pump(rank, src, |bytes| sink.write(bytes));
            open.fetch_sub(1, Ordering::Release);
        })
}

fn pump(rank: usize, mut src: impl Read, mut emit: impl FnMut(&[u8]) -> bool) {
    let prefix = format!("[{rank}] ").into_bytes();
    let mut partial: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    // After the destination breaks we keep draining so the rank never blocks on a full pipe.
    let mut sink_ok = true;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        out.clear();
        let mut data = &buf[..n];
        while let Some(pos) = data.iter().position(|&b| b == b'\n') {
            out.extend_from_slice(&prefix);
            out.append(&mut partial);
            out.extend_from_slice(&data[..=pos]);
            data = &data[pos + 1..];
        }
        partial.extend_from_slice(data);
        if partial.len() >= MAX_LINE {
            out.extend_from_slice(&prefix);
            out.append(&mut partial);
            out.push(b'\n');
        }
        if sink_ok && !out.is_empty() {
            sink_ok = emit(&out);
        }
    }
    if sink_ok && !partial.is_empty() {
        out.clear();
        out.extend_from_slice(&prefix);
        out.append(&mut partial);
        out.push(b'\n');
        emit(&out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its data in fixed-size pieces, to split lines across reads.
    struct Chunked<'a>(&'a [u8], usize);

    impl Read for Chunked<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn run(rank: usize, input: &[u8], chunk: usize) -> Vec<u8> {
        let mut got = Vec::new();
        pump(rank, Chunked(input, chunk), |b| {
            got.extend_from_slice(b);
            true
        });
        got
    }

    #[test]
    fn prefixes_lines_and_flushes_partial_tail() {
        for chunk in [1, 2, 3, 7, 1024] {
            assert_eq!(
                run(3, b"a\nbc\n\nd", chunk),
                b"[3] a\n[3] bc\n[3] \n[3] d\n"
            );
        }
    }

    #[test]
    fn binary_bytes_pass_through() {
        let input = [0xffu8, 0x00, b'x', b'\n', 0xc3];
        let mut want = b"[0] ".to_vec();
        want.extend_from_slice(&[0xff, 0x00, b'x', b'\n']);
        want.extend_from_slice(b"[0] ");
        want.extend_from_slice(&[0xc3, b'\n']);
        assert_eq!(run(0, &input, 2), want);
    }

    #[test]
    fn empty_input_writes_nothing() {
        assert!(run(1, b"", 4).is_empty());
    }

    #[test]
    fn keeps_draining_after_sink_breaks() {
        let mut calls = 0;
        let input = b"1\n2\n3\n".repeat(1000);
        pump(0, Chunked(&input, 5), |_| {
            calls += 1;
            false
        });
        assert_eq!(calls, 1);
    }
}
