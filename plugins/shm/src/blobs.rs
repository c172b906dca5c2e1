//! What the two ends of a connection tell each other at connect time.
//!
//! The receiver creates the segment and describes it ([`RecvInfo`]); the
//! sender only announces its pid ([`SendInfo`]). Distinct magics make a blob
//! from the wrong direction, another plugin or another version an error.

use ferrocx_sdk::{Blob, PluginError, PluginResult};

/// Magic of a receiver blob ("FXSHMRX1").
pub const RECV_MAGIC: u64 = u64::from_le_bytes(*b"FXSHMRX1");
/// Magic of a sender blob ("FXSHMTX1").
pub const SEND_MAGIC: u64 = u64::from_le_bytes(*b"FXSHMTX1");
/// Room for a segment name, including the leading '/'.
pub const NAME_BYTES: usize = 64;
/// Every segment name starts with this.
pub const NAME_PREFIX: &str = "/ferrocx-";

ferrocx_sdk::shareable! {
    /// The receiver's description of its segment.
    pub struct RecvInfo {
        /// [`RECV_MAGIC`].
        pub magic: u64,
        /// Segment size in bytes.
        pub seg_bytes: u64,
        /// Bytes per ring slot.
        pub chunk: u64,
        /// Receiver's process id (target of direct copies, watched for exit).
        pub pid: i32,
        /// Ring slots.
        pub nslots: u32,
        /// Handshake slots.
        pub nreg: u32,
        /// Bytes of `name` in use.
        pub name_len: u32,
        /// Segment name ("/ferrocx-…"), not NUL-terminated.
        pub name: [u8; NAME_BYTES],
    }
}

ferrocx_sdk::shareable! {
    /// The sender's announcement.
    pub struct SendInfo {
        /// [`SEND_MAGIC`].
        pub magic: u64,
        /// Sender's process id (watched for exit).
        pub pid: i32,
        /// Zero.
        pub reserved: u32,
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
            "{} bytes that are no shm blob (another plugin or version?)",
            blob.len
        ),
    };
    PluginError::invalid(format!(
        "shm connect: expected the {expected}'s blob, got {what}"
    ))
}

impl RecvInfo {
    /// Describe segment `name`.
    pub fn new(
        name: &str,
        seg_bytes: u64,
        chunk: u64,
        nslots: u32,
        nreg: u32,
        pid: i32,
    ) -> PluginResult<Self> {
        if name.len() > NAME_BYTES {
            return Err(PluginError::internal(format!(
                "segment name {name} exceeds {NAME_BYTES} bytes"
            )));
        }
        let mut bytes = [0u8; NAME_BYTES];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Ok(RecvInfo {
            magic: RECV_MAGIC,
            seg_bytes,
            chunk,
            pid,
            nslots,
            nreg,
            name_len: name.len() as u32,
            name: bytes,
        })
    }

    /// Parse and check a receiver blob.
    pub fn parse(blob: &Blob) -> PluginResult<Self> {
        if magic_of(blob) != Some(RECV_MAGIC) {
            return Err(wrong_blob("receiver", blob));
        }
        let info: RecvInfo = blob
            .read()
            .map_err(|e| PluginError::invalid(format!("shm connect: {}", e.message())))?;
        info.name()?;
        Ok(info)
    }

    /// The segment name, validated: "/ferrocx-" then printable ASCII without '/'.
    pub fn name(&self) -> PluginResult<&str> {
        let n = self.name_len as usize;
        let bad = || {
            PluginError::invalid(
                "shm connect: the receiver's blob carries a malformed segment name",
            )
        };
        let bytes = self.name.get(..n).ok_or_else(bad)?;
        let name = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let rest = name.strip_prefix(NAME_PREFIX).ok_or_else(bad)?;
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
            return Err(bad());
        }
        Ok(name)
    }
}

impl SendInfo {
    /// The sender `pid`'s announcement.
    pub fn new(pid: i32) -> Self {
        SendInfo {
            magic: SEND_MAGIC,
            pid,
            reserved: 0,
        }
    }

    /// Parse and check a sender blob.
    pub fn parse(blob: &Blob) -> PluginResult<Self> {
        if magic_of(blob) != Some(SEND_MAGIC) {
            return Err(wrong_blob("sender", blob));
        }
        blob.read()
            .map_err(|e| PluginError::invalid(format!("shm connect: {}", e.message())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejections() {
        let info = RecvInfo::new("/ferrocx-12-ab-0", 4096, 64, 8, 32, 12).unwrap();
        let mut blob = Blob::new();
        blob.write(&info).unwrap();
        let back = RecvInfo::parse(&blob).unwrap();
        assert_eq!(back, info);
        assert_eq!(back.name().unwrap(), "/ferrocx-12-ab-0");
        let err = SendInfo::parse(&blob).unwrap_err();
        assert!(
            err.message().contains("both ends set up as receivers"),
            "{err}"
        );

        let mut bad = info;
        bad.name[3] = b'/';
        blob.write(&bad).unwrap();
        assert!(RecvInfo::parse(&blob)
            .unwrap_err()
            .message()
            .contains("malformed segment name"));
        bad.name_len = 200;
        blob.write(&bad).unwrap();
        assert!(RecvInfo::parse(&blob).is_err());

        let mut short = Blob::new();
        short.set_bytes(&RECV_MAGIC.to_le_bytes()).unwrap();
        assert!(RecvInfo::parse(&short)
            .unwrap_err()
            .message()
            .contains("holds 8 bytes"));
        assert!(RecvInfo::parse(&Blob::new())
            .unwrap_err()
            .message()
            .contains("no shm blob"));

        blob.write(&SendInfo::new(7)).unwrap();
        assert_eq!(SendInfo::parse(&blob).unwrap().pid, 7);
    }
}
