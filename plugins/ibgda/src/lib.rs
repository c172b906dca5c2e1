//! # ferrocx-ibgda — the sans-IO core of the device-networking plugin
//!
//! `plugins/ibgda` lets GPU threads post their own work (put, put with signal,
//! fetch-add, quiet) with a backup path per peer, as NVSHMEM's IBGDA does with
//! the fault tolerance of reference note 004 (issue 20). **This crate is its
//! sans-IO logic**: no device, no system calls, no `unsafe`, unit-tested on a
//! machine with neither GPU nor RDMA NIC. The I/O around it — the
//! `ferrocx_devnet_v1` table, the GPU-visible queues and the proxy handler's
//! thread and carrier — is `plugins/ibgda/host` (`ferrocx-ibgda-host`).
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
//! * [`cqe`] — reading mlx5 completion queue entries (owner bit and lap,
//!   WQE counter, error syndromes and whether a failure is the path's or the
//!   request's) and the CQ's consumer index and doorbell record.
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
//!   host crate's copy-engine carrier on one host), writes exactly one completion per request (an error
//!   naming the peer and paths when it is unreachable; a bad-record one for what
//!   the carrier says it can never carry), and honours quiet.
//! * [`rc`] — connecting the mlx5 handler's RC queue pairs: the record each
//!   rank publishes per path (port address, window and key on that NIC, its
//!   QP to every peer) with its wire format and checks, and each QP's RESET →
//!   INIT → RTR → RTS attributes (primary meets primary, backup meets backup;
//!   the ACK timeout from the health timeout).
//! * [`mlx5_peer`] — the mlx5 handler's per-peer table a kernel reads
//!   (`struct fxg_mlx5_peer`: both paths' queues, the peer's window on each
//!   NIC, the health at its start), as bytes in the device header's layout.
//! * [`fault`] — fault injection: drop or delay the completions of a chosen path
//!   after N requests; plans parsed from text (`FERROCX_IBGDA_FAULT`).
//! * [`moe`] — the MoE all-to-all-v of the example: which bytes each rank puts
//!   where to dispatch tokens to their experts' ranks and to combine the
//!   outputs back (DeepEP's shape), from an all-gather of counts.
//! * `include/ferrocx_ibgda.h` — the device header: the records, posting them
//!   into a request queue (per thread, warp or block), taking completions,
//!   waiting for one, quiet, signal waits, the view the host side hands a
//!   kernel, and the mlx5 WQE writers; run on an H100 by the proxy handler's
//!   tests (the mlx5 writers compared with [`wqe`] byte for byte, never read by
//!   a NIC).
//!
//! What does not exist yet: the mlx5 handler's verbs side (creating the QPs
//! and CQs, applying [`rc`]'s transitions, UAR and doorbell mapping, memory
//! registration) and the GPU-side health rules it
//! needs, and carriers across hosts (net-socket, net-ib). `docs/IBGDA.md` says
//! what runs, what is tested and what comes next.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cqe;
pub mod fault;
pub mod health;
pub mod mlx5_peer;
pub mod moe;
pub mod pairing;
pub mod proxy;
pub mod queue;
pub mod rc;
pub mod wqe;

#[cfg(test)]
mod rng;
