//! # ferrocx-net-ib — RDMA verbs transport (stub while building)
#![warn(missing_docs)]
pub mod blob;
pub mod config;
pub mod ctrl;
pub mod mr_cache;
pub mod rails;
pub mod topo;
