//! Reduction kernels for device memory (being written).
