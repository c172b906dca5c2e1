//! The proxy handler's carrier across hosts, over TCP (net-socket's kind of
//! transport; docs/IBGDA.md, "The net carrier"):
//!
//! * [`wire`] — the message format, sans-IO: requests (put, put with signal,
//!   fetch-add), acknowledgements, the hello;
//! * [`addr`] — the record each rank publishes for the setup all-gather;
//! * [`rails`] — the local addresses of the two paths;
//! * [`conn`] — one path's non-blocking connection, and the setup's steps;
//! * [`setup`] — connecting every pair on both paths, collectively;
//! * (the non-blocking connect is the SDK's `tcp`, shared with net-socket);
//! * [`relink`] — replacing a broken connection: dialing it again, or
//!   accepting the peer's new one;
//! * [`stage`] — copies between windows and the carrier's buffers;
//! * [`carrier`] — the [`Carrier`](ferrocx_ibgda::proxy::Carrier) itself.

pub mod addr;
pub mod carrier;
pub mod conn;
pub mod rails;
pub mod relink;
pub mod setup;
pub mod stage;
pub mod wire;

pub use carrier::NetCarrier;
