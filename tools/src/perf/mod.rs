//! fxperf: nccl-tests-style benchmarks over a ferrocx communicator.

pub mod args;
pub mod coll;
pub mod data;
pub mod device;
pub mod sendrecv;
pub mod table;
pub mod timing;
