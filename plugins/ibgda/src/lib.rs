//! # ferrocx-ibgda — foundations of the device-networking plugin
//!
//! `plugins/ibgda` will let GPU threads post their own RDMA work (put, put with
//! signal, quiet) with a backup path per peer, as NVSHMEM's IBGDA does with the
//! fault tolerance of reference note 004 (issue 20). **This crate is only its
//! sans-IO foundations**: pure logic, no device, no system calls, no `unsafe`,
//! unit-tested on a machine with neither GPU nor RDMA NIC.
//!
//! What exists:
//!
//! * [`health`] — the per-(me, peer) path health state machine: completion
//!   deadlines for every request (atomics included), failover of a timed-out
//!   request to the other path, the switch back to the primary after a quiet
//!   recovery window, an error naming the peer and both paths when both are bad,
//!   and a receiver that applies each request exactly once although it may
//!   arrive on both paths.
//! * [`pairing`] — choosing each GPU's primary NIC port by PCI distance and its
//!   backup (the other port of a dual-port NIC, else the even↔odd adjacent NIC,
//!   else the closest other NIC) from a modelled topology.
//! * [`wqe`] — encoding mlx5 send WQEs (RDMA WRITE, WRITE WITH IMMEDIATE, atomic
//!   fetch-add) into the bytes the NIC reads, and the send-queue ring arithmetic
//!   (index wrap, slots, doorbell record).
//! * [`queue`] — the per-(rank, peer, path) work queue a GPU thread writes (put,
//!   put with signal set/add, fetch-add, quiet/fence records of 64 bytes) and the
//!   completion queue written back (request id, status, peer, paths, fetched
//!   value): explicit little-endian layouts, stamped entries so a half-written
//!   one is never taken (a request ring is consumed by stamps alone: the GPU
//!   keeps no producer index), full-queue refusal, laps of wrap; over any
//!   [`queue::QueueMemory`] (plain bytes in tests, pinned host memory a GPU
//!   writes in the plugin), touched only as whole 8-byte words.
//! * [`proxy`] — the proxy NIC handler's logic: consumes the queues, routes each
//!   request through [`health::Sender`], posts to a [`proxy::Carrier`] (the
//!   transport, later), writes exactly one completion per request (an error
//!   naming the peer and paths when it is unreachable; a bad-record one for what
//!   the carrier says it can never carry), and honours quiet.
//! * [`fault`] — fault injection: drop or delay the completions of a chosen path
//!   after N requests; plans parsed from text (`FERROCX_IBGDA_FAULT`).
//! * [`moe`] — the MoE all-to-all-v of the example: which bytes each rank puts
//!   where to dispatch tokens to their experts' ranks and to combine the
//!   outputs back (DeepEP's shape), from an all-gather of counts.
//! * `include/ferrocx_ibgda.h` — the device header: the records, posting them
//!   into a request queue, taking completions, waiting for one, quiet, signal
//!   waits (compiled and host-checked, never run on a GPU).
//!
//! What does not exist yet: the GPU-side health rules, the plugin
//! ABI table (`ferrocx_devnet_v1`), any verbs or mlx5 object creation (QPs, CQs,
//! UAR and doorbell mapping, memory registration), the proxy's thread and its
//! real carriers (ce, net-socket, net-ib), GPU-visible mapping of the queues
//! (here only the [`queue::QueueMemory`] seam it plugs into), the MoE example's
//! kernel and benchmark. **None of this crate has run on hardware**: the WQE
//! layout is checked against the published layout only, and the queues and the
//! proxy only against an in-memory carrier and a producer thread on atomic
//! words. `docs/IBGDA.md` says what is tested
//! and what comes next.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod fault;
pub mod health;
pub mod moe;
pub mod pairing;
pub mod proxy;
pub mod queue;
pub mod wqe;

#[cfg(test)]
mod rng;
