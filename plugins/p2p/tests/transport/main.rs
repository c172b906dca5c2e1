//! Tests of the whole p2p transport through its `Transport` trait, in one
//! binary (`scripts/gpu-build.sh` ships it to the GPU host as `p2p-tests`):
//!
//! * `protocol`: both ends in this process on the SDK's stand-in driver;
//! * `gpu`: CUDA in one process (skipped with a printed reason without a GPU);
//! * `two_process`: the binary re-runs itself as the peer rank; every
//!   scenario on the stand-in, and on CUDA when present.

#[path = "../common/mod.rs"]
mod common;
mod gpu;
mod protocol;
mod two_process;
