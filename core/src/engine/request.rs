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
    engine: Arc<Engine>,
    done: Option<Arc<StageDone>>,
    /// `submit` already counted the creator as driving progress.
    registered: bool,
}

impl Request {
    pub(crate) fn new(engine: Arc<Engine>, done: Arc<StageDone>, registered: bool) -> Self {
        Request {
            engine,
            done: Some(done),
            registered,
        }
    }

    /// A request for work that already finished (a collective plugin ran it).
    pub(crate) fn finished(engine: Arc<Engine>) -> Self {
        Request {
            engine,
            done: None,
            registered: false,
        }
    }

    /// Block until done (driving progress while there is some).
    pub fn wait(mut self) -> Result<()> {
        match self.done.take() {
            Some(d) => self.engine.wait(&d, self.registered),
            None => Ok(()),
        }
    }

    /// Whether it is done; its error if it failed.
    pub fn test(&self) -> Result<bool> {
        match &self.done {
            Some(d) if d.is_done() => match d.error() {
                Some(e) => Err(e),
                None => Ok(true),
            },
            Some(_) => {
                self.engine.poke();
                Ok(false)
            }
            None => Ok(true),
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if let Some(d) = self.done.take() {
            if let Err(e) = self.engine.wait(&d, self.registered) {
                tracing::warn!(target: "ferrocx::comm", "request dropped without wait failed: {e}");
            }
        }
    }
}
