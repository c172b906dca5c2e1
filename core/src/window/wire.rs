//! One rank's window record as the bootstrap carries it (plain bytes:
//! addresses are only compared or used by address-based plugins, the IPC
//! handle is made to cross processes).

use crate::error::{Error, Result};

const LEN: usize = 1 + 4 + 8 * 3 + 64;

/// One rank's window.
pub(crate) struct Record {
    pub ok: bool,
    pub mem: i32,
    pub bytes: u64,
    pub addr: u64,
    /// Offset of the window in its allocation (device windows).
    pub offset: u64,
    /// The allocation's IPC handle (device windows), else zero.
    pub handle: [u8; 64],
}

impl Record {
    pub fn failed() -> Self {
        Record {
            ok: false,
            mem: 0,
            bytes: 0,
            addr: 0,
            offset: 0,
            handle: [0; 64],
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(LEN);
        v.push(self.ok as u8);
        v.extend_from_slice(&self.mem.to_le_bytes());
        for x in [self.bytes, self.addr, self.offset] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&self.handle);
        v
    }

    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != LEN {
            return Err(Error::Bootstrap(format!(
                "window record of {} bytes, expected {LEN} (a rank of another build?)",
                b.len()
            )));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Record {
            ok: b[0] == 1,
            mem: i32::from_le_bytes(b[1..5].try_into().expect("4 bytes")),
            bytes: u64_at(5),
            addr: u64_at(13),
            offset: u64_at(21),
            handle: b[29..93].try_into().expect("64 bytes"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_wrong_length() {
        let mut h = [0u8; 64];
        h[3] = 7;
        let r = Record {
            ok: true,
            mem: 1,
            bytes: 1 << 40,
            addr: 0xdead_beef,
            offset: 12,
            handle: h,
        };
        let back = Record::decode(&r.encode()).unwrap();
        assert!(back.ok && back.mem == 1 && back.bytes == 1 << 40);
        assert!(back.addr == 0xdead_beef && back.offset == 12 && back.handle == h);
        assert!(!Record::decode(&Record::failed().encode()).unwrap().ok);
        assert!(Record::decode(&[0; 10]).is_err());
    }
}
