//! Copies between a window (GPU memory, or host memory in the tests) and
//! buffers this module owns, on one copy queue: a put's bytes read out of
//! this rank's window before they are sent, and a received put's bytes
//! written into this rank's window. The only module of the net carrier with
//! `unsafe`: it keeps each buffer alive, unmoved, until the mark after its
//! copy completed, and bounds every window range by the registered window.

use crate::carrier::Win;
use ferrocx_sdk::copy::Mark;
use ferrocx_sdk::device::Queue;
use std::collections::VecDeque;

/// A finished copy: its tag, and its buffer (what was read; for a write, the
/// bytes written) or why it failed.
pub type Done<T> = (T, Result<Vec<u8>, String>);

/// Copies queued behind one mark: each tag with its buffer.
type Batch<T> = Vec<(T, Vec<u8>)>;

/// One copy queue with the buffers of the copies it has in flight.
pub struct Copies<T> {
    q: Box<dyn Queue>,
    unmarked: Batch<T>,
    batches: VecDeque<(Mark, Batch<T>)>,
}

/// `off .. off + len` of `w` as an address, if it lies inside the window.
fn range(w: &Win, off: u64, len: usize) -> Result<u64, String> {
    off.checked_add(len as u64)
        .filter(|&end| end <= w.bytes)
        .map(|_| w.base + off)
        .ok_or_else(|| {
            format!(
                "{len} bytes at offset {off} run past the window's {} bytes",
                w.bytes
            )
        })
}

impl<T> Copies<T> {
    /// Copies on `q` (bound to this rank's device).
    pub fn new(q: Box<dyn Queue>) -> Self {
        Copies {
            q,
            unmarked: Vec::new(),
            batches: VecDeque::new(),
        }
    }

    /// Queues a read of `len` bytes at `off` of this rank's window `w` into a
    /// new buffer.
    pub fn read(&mut self, w: &Win, off: u64, len: u32, tag: T) -> Result<(), String> {
        let len = len as usize;
        let from = range(w, off, len)?;
        let mut buf = vec![0u8; len];
        // SAFETY: `from .. + len` lies inside a registered window (checked
        // above), which stays registered while requests naming it are in
        // flight (the ABI's rule for window_deregister); `buf` is owned by
        // `self` until the mark after this copy completed (`progress`), and
        // its heap block does not move when the Vec is moved.
        unsafe { self.q.copy(buf.as_mut_ptr() as u64, from, len) }
            .map_err(|e| e.message().to_string())?;
        self.unmarked.push((tag, buf));
        Ok(())
    }

    /// Queues a write of `data` at `off` of this rank's window `w`.
    pub fn write(&mut self, w: &Win, off: u64, data: Vec<u8>, tag: T) -> Result<(), String> {
        let to = range(w, off, data.len())?;
        // SAFETY: as in `read`: the window range is checked and registered,
        // and `data` is kept, unmoved, until the mark after the copy completed.
        unsafe { self.q.copy(to, data.as_ptr() as u64, data.len()) }
            .map_err(|e| e.message().to_string())?;
        self.unmarked.push((tag, data));
        Ok(())
    }

    /// Copies queued and not finished.
    pub fn in_flight(&self) -> usize {
        self.unmarked.len() + self.batches.iter().map(|b| b.1.len()).sum::<usize>()
    }

    /// Marks what was queued since the last call, and moves the copies whose
    /// mark completed into `done`, in queue order; the count moved.
    pub fn progress(&mut self, done: &mut Vec<Done<T>>) -> usize {
        let mut n = 0;
        if !self.unmarked.is_empty() {
            let copies = std::mem::take(&mut self.unmarked);
            match self.q.mark() {
                Ok(m) => self.batches.push_back((m, copies)),
                // Nothing tells when these finish: fail them, after the
                // queue drained so their buffers are no longer in use.
                Err(e) => {
                    let drained = self.drain();
                    let why = format!("no mark for the copy: {}", e.message());
                    n += copies.len();
                    for (t, b) in copies {
                        if !drained {
                            std::mem::forget(b);
                        }
                        done.push((t, Err(why.clone())));
                    }
                }
            }
        }
        while let Some((m, _)) = self.batches.front() {
            let m = *m;
            let ok = match self.q.poll(m) {
                Ok(false) => break,
                Ok(true) => Ok(()),
                Err(e) => Err(format!("the copy failed: {}", e.message())),
            };
            let (_, copies) = self.batches.pop_front().expect("front exists");
            self.q.release(m);
            n += copies.len();
            for (t, b) in copies {
                match &ok {
                    Ok(()) => done.push((t, Ok(b))),
                    Err(e) => {
                        // Whether the copy still runs is unknown: its buffer
                        // is leaked rather than freed under it.
                        std::mem::forget(b);
                        done.push((t, Err(e.clone())));
                    }
                }
            }
        }
        n
    }
}

impl<T> Copies<T> {
    /// Waits (at most 10 s) for every queued copy; whether they all finished.
    fn drain(&mut self) -> bool {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        matches!(self.q.drain(until, &|| false), Ok(true))
    }
}

impl<T> Drop for Copies<T> {
    fn drop(&mut self) {
        // The buffers must outlive the copies that use them: leaked when the
        // queue does not drain.
        if self.in_flight() > 0 && !self.drain() {
            for (_, b) in self.unmarked.drain(..) {
                std::mem::forget(b);
            }
            for (_, batch) in self.batches.drain(..) {
                for (_, b) in batch {
                    std::mem::forget(b);
                }
            }
        }
    }
}
