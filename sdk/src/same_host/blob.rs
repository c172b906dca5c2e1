//! What the two ends of a connection tell each other at connect time: plain
//! bytes only ([`crate::shareable!`]).
//!
//! The receiver creates the segment (and, for device back ends, allocates
//! the FIFO) and describes them ([`RecvInfo`]: the segment's name and
//! geometry, the FIFO's IPC handle); the sender announces itself
//! ([`SendInfo`]). Both carry the `conn_id`, the pid, the GPU's PCI location
//! and a random per-process token (two ends in one process can skip the
//! cross-process path). No pointer, stream, event or file descriptor is ever
//! in a blob: the peer opens the handle and maps the segment by name in its
//! own process. Magics name the transport and the direction, so a blob from
//! the wrong direction, another transport or another version is an error.

use super::segment::name_prefix;
use crate::blob::Blob;
use crate::device::{IpcHandle, HANDLE_BYTES};
use crate::error::{PluginError, PluginResult};

/// Room for a segment name, including the leading '/'.
pub const NAME_BYTES: usize = 64;

/// Version digit of the blobs (bumped with the segment layout).
const VERSION: u8 = b'2';

/// The magic of `transport`'s blobs in direction `dir` (`b"RX"` or `b"TX"`):
/// "FX", the name's first three letters upper-cased, the direction, the
/// version, e.g. `FXSHMRX2`.
pub fn magic(transport: &str, dir: &[u8; 2]) -> u64 {
    let mut b = *b"FX___RX2";
    for (d, s) in b[2..5].iter_mut().zip(transport.bytes()) {
        *d = s.to_ascii_uppercase();
    }
    b[5..7].copy_from_slice(dir);
    b[7] = VERSION;
    u64::from_le_bytes(b)
}

crate::shareable! {
    /// The receiver's description of its end.
    pub struct RecvInfo {
        /// [`magic`]`(transport, b"RX")`.
        pub magic: u64,
        /// The connection (equal on both ends).
        pub conn_id: u64,
        /// The receiver's process token.
        pub token: u64,
        /// Segment size in bytes.
        pub seg_bytes: u64,
        /// Bytes per FIFO slot.
        pub chunk: u64,
        /// Receiver's process id (target of direct writes for shm; messages).
        pub pid: i32,
        /// Packed PCI location of the receiver's GPU (-1: none).
        pub pci: i32,
        /// FIFO slots.
        pub nslots: u32,
        /// Handshake slots.
        pub nreg: u32,
        /// Revocation entries.
        pub nrevoke: u32,
        /// Bytes of `name` in use.
        pub name_len: u32,
        /// Segment name (`/ferrocx-<transport>-…`), not NUL-terminated.
        pub name: [u8; NAME_BYTES],
        /// IPC handle of the FIFO, when the back end allocates it (zeros otherwise).
        pub fifo: [u8; HANDLE_BYTES],
    }
}

crate::shareable! {
    /// The sender's announcement.
    pub struct SendInfo {
        /// [`magic`]`(transport, b"TX")`.
        pub magic: u64,
        /// The connection (equal on both ends).
        pub conn_id: u64,
        /// The sender's process token.
        pub token: u64,
        /// Sender's process id.
        pub pid: i32,
        /// Packed PCI location of the sender's GPU (-1: none).
        pub pci: i32,
    }
}

fn magic_of(blob: &Blob) -> Option<u64> {
    let b = blob.as_bytes();
    b.get(..8)
        .map(|m| u64::from_le_bytes(m.try_into().expect("8 bytes")))
}

fn wrong_blob(transport: &str, expected: &str, blob: &Blob) -> PluginError {
    let m = magic_of(blob);
    let what = if m == Some(magic(transport, b"RX")) {
        "a receiver's blob (both ends set up as receivers?)".to_string()
    } else if m == Some(magic(transport, b"TX")) {
        "a sender's blob (both ends set up as senders?)".to_string()
    } else {
        format!(
            "{} bytes that are no {transport} blob (another plugin or version?)",
            blob.len
        )
    };
    PluginError::invalid(format!(
        "{transport} connect: expected the {expected}'s blob, got {what}"
    ))
}

fn check_conn(transport: &str, kind: &str, got: u64, want: u64) -> PluginResult<()> {
    if got != want {
        return Err(PluginError::invalid(format!(
            "{transport} connect: the {kind}'s blob is for connection {got:#x}, this end is {want:#x} (blobs exchanged with the wrong peer?)"
        )));
    }
    Ok(())
}

fn read<T: crate::Shareable>(
    transport: &str,
    expected: &str,
    dir: &[u8; 2],
    blob: &Blob,
) -> PluginResult<T> {
    if magic_of(blob) != Some(magic(transport, dir)) {
        return Err(wrong_blob(transport, expected, blob));
    }
    blob.read()
        .map_err(|e| PluginError::invalid(format!("{transport} connect: {}", e.message())))
}

impl RecvInfo {
    /// Parse and check `transport`'s receiver blob for connection `conn_id`.
    pub fn parse(transport: &str, blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        let info: RecvInfo = read(transport, "receiver", b"RX", blob)?;
        check_conn(transport, "receiver", info.conn_id, conn_id)?;
        info.name(transport)?;
        Ok(info)
    }

    /// Store the segment name.
    pub fn set_name(&mut self, name: &str) -> PluginResult<()> {
        if name.len() > NAME_BYTES {
            return Err(PluginError::internal(format!(
                "segment name {name} exceeds {NAME_BYTES} bytes"
            )));
        }
        self.name = [0; NAME_BYTES];
        self.name[..name.len()].copy_from_slice(name.as_bytes());
        self.name_len = name.len() as u32;
        Ok(())
    }

    /// The segment name, validated: `transport`'s prefix, then printable
    /// ASCII without '/'.
    pub fn name(&self, transport: &str) -> PluginResult<&str> {
        let bad = || {
            PluginError::invalid(format!(
                "{transport} connect: the receiver's blob carries a malformed segment name"
            ))
        };
        let bytes = self.name.get(..self.name_len as usize).ok_or_else(bad)?;
        let name = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let rest = name
            .strip_prefix(name_prefix(transport).as_str())
            .ok_or_else(bad)?;
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
            return Err(bad());
        }
        Ok(name)
    }

    /// The FIFO's handle.
    pub fn fifo_handle(&self) -> IpcHandle {
        IpcHandle(self.fifo)
    }
}

impl SendInfo {
    /// Parse and check `transport`'s sender blob for connection `conn_id`.
    pub fn parse(transport: &str, blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        let info: SendInfo = read(transport, "sender", b"TX", blob)?;
        check_conn(transport, "sender", info.conn_id, conn_id)?;
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv_info() -> RecvInfo {
        let mut r = RecvInfo {
            magic: magic("p2p", b"RX"),
            conn_id: 0xabc,
            token: 5,
            seg_bytes: 8192,
            chunk: 4096,
            pid: 12,
            pci: 0x1a08,
            nslots: 8,
            nreg: 32,
            nrevoke: 32,
            name_len: 0,
            name: [0; NAME_BYTES],
            fifo: [3; HANDLE_BYTES],
        };
        r.set_name("/ferrocx-p2p-12-abc-0").unwrap();
        r
    }

    #[test]
    fn magics_name_transport_direction_and_version() {
        assert_eq!(magic("shm", b"RX").to_le_bytes(), *b"FXSHMRX2");
        assert_eq!(magic("p2p", b"TX").to_le_bytes(), *b"FXP2PTX2");
        assert_eq!(magic("ab", b"RX").to_le_bytes(), *b"FXAB_RX2");
    }

    #[test]
    fn round_trip_and_rejections() {
        let info = recv_info();
        assert!(std::mem::size_of::<RecvInfo>() <= crate::abi::FX_BLOB_BYTES);
        let mut blob = Blob::new();
        blob.write(&info).unwrap();
        let back = RecvInfo::parse("p2p", &blob, 0xabc).unwrap();
        assert_eq!(back, info);
        assert_eq!(back.name("p2p").unwrap(), "/ferrocx-p2p-12-abc-0");
        assert_eq!(back.fifo_handle(), IpcHandle([3; HANDLE_BYTES]));
        let err = RecvInfo::parse("p2p", &blob, 0xabd).unwrap_err();
        assert!(err.message().contains("wrong peer"), "{err}");
        let err = SendInfo::parse("p2p", &blob, 0xabc).unwrap_err();
        assert!(
            err.message().contains("both ends set up as receivers"),
            "{err}"
        );
        let err = RecvInfo::parse("shm", &blob, 0xabc).unwrap_err();
        assert!(err.message().contains("no shm blob"), "{err}");

        let mut bad = info;
        bad.name[14] = b'/';
        blob.write(&bad).unwrap();
        assert!(RecvInfo::parse("p2p", &blob, 0xabc)
            .unwrap_err()
            .message()
            .contains("malformed segment name"));
        bad.name_len = 200;
        blob.write(&bad).unwrap();
        assert!(RecvInfo::parse("p2p", &blob, 0xabc).is_err());

        let mut short = Blob::new();
        short.set_bytes(&magic("p2p", b"RX").to_le_bytes()).unwrap();
        assert!(RecvInfo::parse("p2p", &short, 0xabc)
            .unwrap_err()
            .message()
            .contains("holds 8 bytes"));
        assert!(RecvInfo::parse("p2p", &Blob::new(), 0xabc)
            .unwrap_err()
            .message()
            .contains("no p2p blob"));

        let s = SendInfo {
            magic: magic("p2p", b"TX"),
            conn_id: 0xabc,
            token: 9,
            pid: 7,
            pci: -1,
        };
        blob.write(&s).unwrap();
        assert_eq!(SendInfo::parse("p2p", &blob, 0xabc).unwrap(), s);
        assert!(RecvInfo::parse("p2p", &blob, 0xabc)
            .unwrap_err()
            .message()
            .contains("both ends set up as senders"));
    }
}
