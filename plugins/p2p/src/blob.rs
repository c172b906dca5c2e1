//! What the two ends of a connection tell each other at connect time, and
//! what `register` describes: plain bytes only ([`ferrocx_sdk::shareable!`]).
//!
//! The receiver allocates the FIFO and creates the segment ([`RecvInfo`]: the
//! segment's name, the FIFO's IPC handle and geometry); the sender announces
//! itself ([`SendInfo`]). Both carry the `conn_id`, the pid, the GPU's PCI
//! location and a random per-process token (two ends in one process skip IPC,
//! which refuses a process's own handles). No pointer, stream, event or file
//! descriptor is ever in a blob: the peer opens the handle and maps the
//! segment by name in its own process. Distinct magics make a blob from the
//! wrong direction, another plugin or another version an error.

use crate::backend::{IpcHandle, HANDLE_BYTES};
use ferrocx_sdk::{Blob, PluginError, PluginResult};

/// Magic of a receiver blob ("FXP2PRX1").
pub const RECV_MAGIC: u64 = u64::from_le_bytes(*b"FXP2PRX1");
/// Magic of a sender blob ("FXP2PTX1").
pub const SEND_MAGIC: u64 = u64::from_le_bytes(*b"FXP2PTX1");
/// Magic of a registration blob ("FXP2PMR1").
pub const REG_MAGIC: u64 = u64::from_le_bytes(*b"FXP2PMR1");
/// Room for a segment name, including the leading '/'.
pub const NAME_BYTES: usize = 64;
/// Every connection segment name starts with this.
pub const NAME_PREFIX: &str = "/ferrocx-p2p-";

ferrocx_sdk::shareable! {
    /// The receiver's description of its end.
    pub struct RecvInfo {
        /// [`RECV_MAGIC`].
        pub magic: u64,
        /// The connection (equal on both ends).
        pub conn_id: u64,
        /// The receiver's process token.
        pub token: u64,
        /// Segment size in bytes.
        pub seg_bytes: u64,
        /// Bytes per FIFO slot.
        pub chunk: u64,
        /// Receiver's process id (for messages; liveness uses segment locks).
        pub pid: i32,
        /// Packed PCI location of the receiver's GPU.
        pub pci: i32,
        /// FIFO slots.
        pub nslots: u32,
        /// Handshake slots.
        pub nreg: u32,
        /// Revocation entries.
        pub nrevoke: u32,
        /// Bytes of `name` in use.
        pub name_len: u32,
        /// Segment name ("/ferrocx-p2p-…"), not NUL-terminated.
        pub name: [u8; NAME_BYTES],
        /// IPC handle of the FIFO in the receiver's GPU memory.
        pub fifo: [u8; HANDLE_BYTES],
    }
}

ferrocx_sdk::shareable! {
    /// The sender's announcement.
    pub struct SendInfo {
        /// [`SEND_MAGIC`].
        pub magic: u64,
        /// The connection (equal on both ends).
        pub conn_id: u64,
        /// The sender's process token.
        pub token: u64,
        /// Sender's process id.
        pub pid: i32,
        /// Packed PCI location of the sender's GPU.
        pub pci: i32,
    }
}

ferrocx_sdk::shareable! {
    /// A registration as other processes may use it: the allocation's handle
    /// and where the registered bytes lie in it.
    pub struct RegInfo {
        /// [`REG_MAGIC`].
        pub magic: u64,
        /// Offset of the registered bytes in the allocation.
        pub offset: u64,
        /// Registered bytes.
        pub len: u64,
        /// The allocation's size.
        pub alloc_size: u64,
        /// The allocation's IPC handle.
        pub handle: [u8; HANDLE_BYTES],
    }
}

fn magic_of(blob: &Blob) -> Option<u64> {
    let b = blob.as_bytes();
    b.get(..8)
        .map(|m| u64::from_le_bytes(m.try_into().expect("8 bytes")))
}

fn wrong_blob(expected: &str, blob: &Blob) -> PluginError {
    let what = match magic_of(blob) {
        Some(RECV_MAGIC) => "a receiver's blob (both ends set up as receivers?)".to_string(),
        Some(SEND_MAGIC) => "a sender's blob (both ends set up as senders?)".to_string(),
        _ => format!(
            "{} bytes that are no p2p blob (another plugin or version?)",
            blob.len
        ),
    };
    PluginError::invalid(format!(
        "p2p connect: expected the {expected}'s blob, got {what}"
    ))
}

fn check_conn(kind: &str, got: u64, want: u64) -> PluginResult<()> {
    if got != want {
        return Err(PluginError::invalid(format!(
            "p2p connect: the {kind}'s blob is for connection {got:#x}, this end is {want:#x} (blobs exchanged with the wrong peer?)"
        )));
    }
    Ok(())
}

impl RecvInfo {
    /// Parse and check a receiver blob for connection `conn_id`.
    pub fn parse(blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        if magic_of(blob) != Some(RECV_MAGIC) {
            return Err(wrong_blob("receiver", blob));
        }
        let info: RecvInfo = blob
            .read()
            .map_err(|e| PluginError::invalid(format!("p2p connect: {}", e.message())))?;
        check_conn("receiver", info.conn_id, conn_id)?;
        info.name()?;
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

    /// The segment name, validated: the prefix, then printable ASCII without '/'.
    pub fn name(&self) -> PluginResult<&str> {
        let bad = || {
            PluginError::invalid(
                "p2p connect: the receiver's blob carries a malformed segment name",
            )
        };
        let bytes = self.name.get(..self.name_len as usize).ok_or_else(bad)?;
        let name = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let rest = name.strip_prefix(NAME_PREFIX).ok_or_else(bad)?;
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
    /// Parse and check a sender blob for connection `conn_id`.
    pub fn parse(blob: &Blob, conn_id: u64) -> PluginResult<Self> {
        if magic_of(blob) != Some(SEND_MAGIC) {
            return Err(wrong_blob("sender", blob));
        }
        let info: SendInfo = blob
            .read()
            .map_err(|e| PluginError::invalid(format!("p2p connect: {}", e.message())))?;
        check_conn("sender", info.conn_id, conn_id)?;
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv_info() -> RecvInfo {
        let mut r = RecvInfo {
            magic: RECV_MAGIC,
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
    fn round_trip_and_rejections() {
        let info = recv_info();
        assert!(std::mem::size_of::<RecvInfo>() <= ferrocx_sdk::abi::FX_BLOB_BYTES);
        let mut blob = Blob::new();
        blob.write(&info).unwrap();
        let back = RecvInfo::parse(&blob, 0xabc).unwrap();
        assert_eq!(back, info);
        assert_eq!(back.name().unwrap(), "/ferrocx-p2p-12-abc-0");
        assert_eq!(back.fifo_handle(), IpcHandle([3; HANDLE_BYTES]));
        let err = RecvInfo::parse(&blob, 0xabd).unwrap_err();
        assert!(err.message().contains("wrong peer"), "{err}");
        let err = SendInfo::parse(&blob, 0xabc).unwrap_err();
        assert!(
            err.message().contains("both ends set up as receivers"),
            "{err}"
        );

        let mut bad = info;
        bad.name[14] = b'/';
        blob.write(&bad).unwrap();
        assert!(RecvInfo::parse(&blob, 0xabc)
            .unwrap_err()
            .message()
            .contains("malformed segment name"));
        bad.name_len = 200;
        blob.write(&bad).unwrap();
        assert!(RecvInfo::parse(&blob, 0xabc).is_err());

        let mut short = Blob::new();
        short.set_bytes(&RECV_MAGIC.to_le_bytes()).unwrap();
        assert!(RecvInfo::parse(&short, 0xabc)
            .unwrap_err()
            .message()
            .contains("holds 8 bytes"));
        assert!(RecvInfo::parse(&Blob::new(), 0xabc)
            .unwrap_err()
            .message()
            .contains("no p2p blob"));

        let s = SendInfo {
            magic: SEND_MAGIC,
            conn_id: 0xabc,
            token: 9,
            pid: 7,
            pci: -1,
        };
        blob.write(&s).unwrap();
        assert_eq!(SendInfo::parse(&blob, 0xabc).unwrap(), s);
        assert!(RecvInfo::parse(&blob, 0xabc)
            .unwrap_err()
            .message()
            .contains("both ends set up as senders"));
        assert!(std::mem::size_of::<RegInfo>() <= ferrocx_sdk::abi::FX_BLOB_BYTES);
    }
}
