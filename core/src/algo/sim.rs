//! Simulated fabric (to be written).
