//! The plan engine: a group's tasks → plans (collectives first, cut by a
//! work budget, channels chosen least-loaded and identically on every rank)
//! → runners that execute schedules on the progress thread or the waiting
//! caller. Finished plans return to the submitting side through an MPSC
//! queue and are dropped there.

mod cache;
mod done;
mod hoist;
mod local;
mod own_block;
mod planner;
mod runner;
mod task;

pub(crate) use cache::ScheduleCache;
pub(crate) use done::StageDone;
pub(crate) use planner::{plan, Plan, PlanConfig, PlanDevice};
pub(crate) use runner::{Post, Poster, ScratchBuf, Step};
pub(crate) use task::{CollTask, P2pTask, Task};

use crate::comm::Engine;
use crate::error::Result;
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
