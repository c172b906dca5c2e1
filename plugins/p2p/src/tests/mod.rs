//! Tests of the whole transport. They all live in the library's test binary
//! (`cargo test -p ferrocx-p2p --lib`), the one `scripts/gpu-build.sh` ships
//! to the GPU host as `p2p-tests`:
//!
//! * `protocol`: both ends in this process on the host-memory stand-in;
//! * `gpu`: CUDA in one process (skipped with a printed reason without a GPU);
//! * `two_process`: the binary re-runs itself as the peer rank; every
//!   scenario on the stand-in, and on CUDA when present.

mod gpu;
mod harness;
mod protocol;
mod two_process;
