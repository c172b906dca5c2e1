//! What a started operation (a collective or a whole group) hands back: a
//! [`Request`] to wait on or test, driving the engine while it waits.

use super::Engine;
use crate::error::Result;
use crate::plan::StageDone;
use std::sync::Arc;

/// A started operation (a collective or a whole group): wait for it or test it.
///
/// Dropping a request that was not waited on waits for it (errors are then
/// only logged).
#[must_use = "a request must be waited on (dropping it waits)"]
pub struct Request {
    /// `None` once waited on, or for work that finished before the request
    /// was made (no reference counting on that path: small calls make many).
    pending: Option<Pending>,
}

struct Pending {
    engine: Arc<Engine>,
    done: Arc<StageDone>,
    /// `submit` already counted the creator as driving progress.
    registered: bool,
}

impl Request {
    pub(crate) fn new(engine: Arc<Engine>, done: Arc<StageDone>, registered: bool) -> Self {
        Request {
            pending: Some(Pending {
                engine,
                done,
                registered,
            }),
        }
    }

    /// A request for work that already finished (a collective plugin ran it).
    #[inline]
    pub(crate) fn finished() -> Self {
        Request { pending: None }
    }

    /// Block until done (driving progress while there is some).
    #[inline]
    pub fn wait(mut self) -> Result<()> {
        match self.pending.take() {
            Some(p) => p.engine.wait(&p.done, p.registered),
            None => Ok(()),
        }
    }

    /// Whether it is done; its error if it failed.
    pub fn test(&self) -> Result<bool> {
        match &self.pending {
            Some(p) if p.done.is_done() => match p.done.error() {
                Some(e) => Err(e),
                None => Ok(true),
            },
            Some(p) => {
                p.engine.poke();
                Ok(false)
            }
            None => Ok(true),
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            if let Err(e) = p.engine.wait(&p.done, p.registered) {
                tracing::warn!(target: "ferrocx::comm", "request dropped without wait failed: {e}");
            }
        }
    }
}
