//! Thin wrapper: exports the ibgda plugin as `ferrocx_devnet_v1`. Kept apart
//! from `ferrocx-ibgda-host` so binaries that link it as a built-in carry no
//! exported symbol that would clash with a loaded `.so`.
ferrocx_sdk::export_devnet!(ferrocx_ibgda_host::Ibgda);
