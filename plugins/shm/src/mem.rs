//! Registrations: the receiver's promise that a host buffer stays put.

/// A registered host buffer. It carries no kernel state: `process_vm_writev`
/// needs only the address, which the receiver publishes per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmMem {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

impl ShmMem {
    /// Whether `addr..addr+len` lies inside the registration.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment() {
        let m = ShmMem { addr: 100, len: 50 };
        assert!(m.contains(100, 50) && m.contains(120, 0) && m.contains(149, 1));
        assert!(!m.contains(99, 2) && !m.contains(140, 11) && !m.contains(usize::MAX, 2));
    }
}
