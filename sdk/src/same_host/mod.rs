//! Pieces shared by transports between processes of one host (shm, p2p): the
//! table of posted requests, the idle-connection watchdog, and peer-process
//! liveness by pid.

pub mod ops;
pub mod proc;
pub mod watchdog;
