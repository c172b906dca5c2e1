//! The ordered completion queue of one connection: actions that must happen
//! once the copies queued before them on the connection's stream completed
//! (publish a FIFO chunk, raise `copy_done`, hand a slot back, finish a
//! request), run strictly in the order they were queued.
//!
//! Each entry carries an optional [`Mark`] (an event recorded after its
//! copy); an entry without one is ready as soon as everything before it ran
//! (with a synchronous engine, every entry). Since the engine runs copies in
//! order, polling only the front mark is enough.

use crate::copy::{Engine, Mark};
use crate::error::PluginResult;
use std::collections::VecDeque;

/// Actions waiting for the stream.
#[derive(Debug)]
pub struct Pipeline<A> {
    q: VecDeque<(Option<Mark>, A)>,
}

impl<A> Pipeline<A> {
    /// An empty queue with room for `cap` entries before it reallocates.
    pub fn with_capacity(cap: usize) -> Self {
        Pipeline {
            q: VecDeque::with_capacity(cap),
        }
    }

    /// Queue `action`, to run once `mark` completed (and everything before it ran).
    pub fn push(&mut self, mark: Option<Mark>, action: A) {
        self.q.push_back((mark, action));
    }

    /// The front action if it may run now (its mark is released to the engine).
    pub fn pop_ready<E: Engine>(&mut self, engine: &mut E) -> PluginResult<Option<A>> {
        let ready = match self.q.front() {
            None => return Ok(None),
            Some((None, _)) => true,
            Some((Some(m), _)) => engine.poll(*m)?,
        };
        if !ready {
            return Ok(None);
        }
        let (mark, action) = self.q.pop_front().expect("front exists");
        if let Some(m) = mark {
            engine.release(m);
        }
        Ok(Some(action))
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Drop every entry (after the engine was drained), releasing their marks.
    pub fn clear<E: Engine>(&mut self, engine: &mut E) {
        for (mark, _) in self.q.drain(..) {
            if let Some(m) = mark {
                engine.release(m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::fake::FakeQueue;
    use crate::device::Queue;

    #[test]
    fn runs_in_order_once_marks_complete() {
        let mut e: Box<dyn Queue> = Box::new(FakeQueue::new(2));
        let mut p = Pipeline::with_capacity(4);
        let src = [7u8; 16];
        let mut dst = [0u8; 16];
        // SAFETY: both arrays outlive the drain below.
        unsafe { Engine::copy(&mut e, dst.as_mut_ptr() as u64, src.as_ptr() as u64, 16) }.unwrap();
        let m = Engine::mark(&mut e).unwrap();
        p.push(m, "copied");
        p.push(None, "after");
        assert_eq!(p.pop_ready(&mut e).unwrap(), None, "the fake needs polls");
        assert_eq!(dst, [0; 16], "nothing landed before completion");
        assert_eq!(p.pop_ready(&mut e).unwrap(), None);
        assert_eq!(p.pop_ready(&mut e).unwrap(), Some("copied"));
        assert_eq!(dst, [7; 16]);
        assert_eq!(p.pop_ready(&mut e).unwrap(), Some("after"));
        assert_eq!(p.len(), 0);
        assert_eq!(p.pop_ready(&mut e).unwrap(), None);
    }
}
