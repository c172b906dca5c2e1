//! The single-copy handshake, [`P2pRegInfo`] slots in the segment: the SDK's
//! one implementation of the protocol (`ferrocx_sdk::same_host::regslot`,
//! which p2p shares), with shm's copy back end needing only the receiver's
//! address (`cma`: `process_vm_writev`). 64 bytes a slot.

use ferrocx_sdk::same_host::regslot as proto;
pub use proto::{slot_index, P2pRegInfo, NREG};

/// One slot: the handshake and the copied length; the target is the address.
pub type RegSlot = proto::RegSlot<u64>;
