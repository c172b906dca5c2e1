//! Thin wrapper: exports the shm transport as `ferrocx_transport_v1`.
//! Kept apart from `ferrocx-shm` so binaries that link shm as a built-in
//! carry no exported symbol that would clash with a loaded `.so`.
ferrocx_sdk::export_transport!(ferrocx_shm::Shm);
