//! Pieces shared by transports between processes of one host (shm, p2p): the
//! table of posted requests, the idle-connection watchdog, peer-process
//! liveness by pid, and the shared-memory region connection segments live in.

pub mod ops;
pub mod proc;
pub mod region;
pub mod watchdog;
