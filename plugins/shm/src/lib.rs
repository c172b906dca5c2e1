//! shm transport (being written).
