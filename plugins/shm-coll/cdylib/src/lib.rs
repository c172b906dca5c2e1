//! Thin wrapper: exports the shm-coll collective plugin as `ferrocx_collective_v1`.
//! Kept apart from `ferrocx-shm-coll` so binaries that link it as a built-in carry
//! no exported symbol that would clash with a loaded `.so`.
ferrocx_sdk::export_collective!(ferrocx_shm_coll::ShmColl);
