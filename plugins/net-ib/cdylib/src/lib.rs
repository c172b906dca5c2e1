//! Thin wrapper: exports the net-ib transport as `ferrocx_transport_v1`.
//! net-ib is never a built-in of the core: operators load this `.so` with
//! `FERROCX_PLUGINS` (or put it in a `FERROCX_PLUGIN_PATH` directory).
ferrocx_sdk::export_transport!(ferrocx_net_ib::NetIb);
