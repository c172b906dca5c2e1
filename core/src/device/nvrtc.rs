//! NVRTC loaded at run time (being written).
