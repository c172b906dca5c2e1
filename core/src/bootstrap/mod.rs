//! Bootstrap (being written).
