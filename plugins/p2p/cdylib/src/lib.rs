//! Thin wrapper: exports the p2p transport as `ferrocx_transport_v1`.
//! Kept apart from `ferrocx-p2p` so binaries that link p2p as a built-in
//! carry no exported symbol that would clash with a loaded `.so`.
ferrocx_sdk::export_transport!(ferrocx_p2p::P2p);
