//! The drop-in answers to NCCL's SONAME, so that programs linked against
//! `libnccl.so.2` (and `LD_PRELOAD`) resolve to it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
