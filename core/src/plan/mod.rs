//! The plan engine: a group's tasks → plans (collectives first, cut by a
//! work budget, channels chosen least-loaded and identically on every rank)
//! → runners that execute schedules on the progress thread or the waiting caller.

mod task;

pub(crate) use task::{CollTask, P2pTask, Task};

use crate::error::Result;

/// A started operation (a collective or a whole group): wait for it or test it.
#[must_use = "a request must be waited on (dropping it waits)"]
pub struct Request {
    pub(crate) inner: Option<()>,
}

impl Request {
    /// Block until done.
    pub fn wait(mut self) -> Result<()> {
        self.inner.take();
        Ok(())
    }
    /// Whether it is done (an error if it failed).
    pub fn test(&self) -> Result<bool> {
        Ok(true)
    }
}
