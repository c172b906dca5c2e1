//! Two shm contexts driven through the `Transport` trait in one process.

pub(crate) use crate as shm;

mod harness;
mod transport;
