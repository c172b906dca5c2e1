//! Pieces shared by transports between processes of one host (shm, p2p): the
//! table of posted requests, the idle-connection watchdog, peer-process
//! liveness by pid, the shared-memory region connection segments live in, and
//! the direct-copy handshake (`P2pRegInfo`) that both run over it.

pub mod ops;
pub mod proc;
pub mod region;
pub mod regslot;
pub mod watchdog;
