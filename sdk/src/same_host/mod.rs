//! The same-host transport core: one implementation of a transport between
//! processes of one host, generic over a copy back end ([`Backend`]). shm
//! (host memory, `memcpy` and `process_vm_writev`) and p2p (CUDA device
//! memory, copy engines and CUDA IPC) are each a back end of a few hundred
//! lines; everything else lives here once:
//!
//! * [`segment`] / [`layout`]: the connection's shared segment (named
//!   `/ferrocx-<transport>-<pid>-…`, unlinked once both ends mapped it,
//!   liveness locks) and its byte layout;
//! * [`conn`]: setup, connect, posting, testing, watching the peer, teardown;
//! * [`send`] / [`recv`]: the state machines moving messages through the
//!   FIFO ([`fifo`]: slot flags, inline small chunks) or by a direct write
//!   into the receive buffer ([`regslot`]: the `P2pRegInfo` handshake);
//! * [`revoke`]: the receiver withdrawing published targets; [`pipeline`]:
//!   actions that wait for an asynchronous engine's copies;
//! * [`config`]: the settings every such transport has; [`blob`]: what the
//!   two ends tell each other; [`ops`]: posted requests; [`watchdog`]: when
//!   an idle connection looks at its peer.
//!
//! A plugin supplies a [`Backend`] and says `pub type X = SameHost<XBackend>;`.

pub mod backend;
pub mod blob;
pub mod config;
pub mod conn;
pub mod ctx;
pub mod fifo;
pub mod layout;
pub mod ops;
pub mod pipeline;
pub mod recv;
pub mod regslot;
pub mod revoke;
pub mod segment;
pub mod send;
pub mod stats;
pub mod transport;
pub mod watchdog;

pub use backend::{Backend, FifoPlace, SenderEnd, WriteError, Writer};
pub use config::{Knobs, RingConfig};
pub use conn::{Conn, Request};
pub use ops::RecvOp;
pub use regslot::{P2pRegInfo, WriteTarget};
pub use revoke::{Revocations, Revoked};
pub use stats::{ConnStats, CtxStats};
pub use transport::SameHost;
