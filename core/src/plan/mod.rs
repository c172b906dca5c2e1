//! The plan engine: a group's tasks → plans (collectives first, cut by a
//! work budget, channels chosen least-loaded and identically on every rank)
//! → runners that execute schedules on the progress thread or the waiting
//! caller. Finished plans return to the submitting side through an MPSC
//! queue and are dropped there.

mod cache;
mod check;
mod done;
mod hoist;
mod local;
mod own_block;
mod pairs;
mod planner;
mod post;
mod runner;
mod spec;
mod task;
mod to_self;

pub(crate) use cache::ScheduleCache;
pub(crate) use done::StageDone;
pub(crate) use local::copy_host;
pub(crate) use planner::{plan, Plan, PlanConfig, PlanDevice};
pub(crate) use runner::{Post, Poster, ScratchBuf, Step};
pub use spec::CollSpec;
pub(crate) use task::{label, CollTask, Label, P2pTask, Task, Tasks};
pub(crate) use to_self::{copy_self_pairs, has_self_ops, self_pairs};
