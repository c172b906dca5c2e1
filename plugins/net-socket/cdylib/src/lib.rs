//! Thin wrapper: exports the net-socket transport as `ferrocx_transport_v1`.
//! Kept apart from `ferrocx-net-socket` so binaries that link it as a built-in
//! carry no exported symbol that would clash with a loaded `.so`.
ferrocx_sdk::export_transport!(ferrocx_net_socket::NetSocket);
