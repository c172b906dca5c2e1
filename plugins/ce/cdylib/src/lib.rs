//! Thin wrapper: exports the ce collective plugin as `ferrocx_collective_v1`.
//! Kept apart from `ferrocx-ce` so binaries that link ce as a built-in carry
//! no exported symbol that would clash with a loaded `.so`.
ferrocx_sdk::export_collective!(ferrocx_ce::Ce);
