//! What travels on the sockets: the hello each one opens with, and the frame
//! headers (the connect blobs are in `blob`).

use ferrocx_sdk::{PluginError, PluginResult};

/// Hello magic, the first bytes a sender writes on each socket ("FXSH").
pub const HELLO_MAGIC: u32 = 0x4658_5348;
/// Frame magic ("FXSM").
pub const FRAME_MAGIC: u32 = 0x4658_534d;
/// Wire version (2: rails, chunked frames, acknowledgements; 3: goodbyes), also in
/// the blobs.
pub const VERSION: u32 = 3;
/// Bytes of the hello.
pub const HELLO_BYTES: usize = 24;
/// Bytes of a frame header (data, acknowledgement or ping).
pub const FRAME_BYTES: usize = 32;

/// The hello a sender writes first on each socket: magic, version, token, socket index.
pub fn encode_hello(token: u64, stream: u32) -> [u8; HELLO_BYTES] {
    let mut b = [0u8; HELLO_BYTES];
    b[..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&token.to_le_bytes());
    b[16..20].copy_from_slice(&stream.to_le_bytes());
    b
}

/// The socket index a hello announces, if it carries `token`.
pub fn hello_stream(b: &[u8; HELLO_BYTES], token: u64) -> Option<u32> {
    let mut s = [0u8; 4];
    s.copy_from_slice(&b[16..20]);
    let stream = u32::from_le_bytes(s);
    (*b == encode_hello(token, stream)).then_some(stream)
}

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Sender → receiver: a chunk of message `seq` (of `total` bytes) at `offset`,
    /// payload follows.
    Data,
    /// Receiver → sender: the chunk of `seq` at `offset` is in place.
    Ack,
    /// Sender → receiver, no payload: keeps unacknowledged TCP data on an idle
    /// socket so a dead path is noticed (`TCP_USER_TIMEOUT`).
    Ping,
    /// Receiver → sender, when it frees its end: every message below `seq` is in
    /// place. The sender completes them even if some acknowledgements were lost with
    /// a failed rail (nobody is left to acknowledge their resent chunks).
    Bye,
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// What it is.
    pub kind: Kind,
    /// Message sequence number on the connection.
    pub seq: u64,
    /// Message length (data frames).
    pub total: u64,
    /// Chunk offset in the message.
    pub offset: u64,
}

impl Frame {
    /// The 32 bytes on the wire.
    pub fn encode(&self) -> [u8; FRAME_BYTES] {
        let kind: u32 = match self.kind {
            Kind::Data => 1,
            Kind::Ack => 2,
            Kind::Ping => 3,
            Kind::Bye => 4,
        };
        let mut b = [0u8; FRAME_BYTES];
        b[..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&kind.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.total.to_le_bytes());
        b[24..].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    /// Decode, or say why these bytes are not a frame.
    pub fn decode(b: &[u8; FRAME_BYTES]) -> PluginResult<Self> {
        let word = |r: std::ops::Range<usize>| -> u64 {
            let mut w = [0u8; 8];
            w[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(w)
        };
        let kind = match word(4..8) {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Ping,
            4 => Kind::Bye,
            _ => Kind::Ping, // rejected below together with a bad magic
        };
        if word(0..4) != u64::from(FRAME_MAGIC) || !(1..=4).contains(&word(4..8)) {
            return Err(PluginError::internal(format!(
                "net-socket protocol error: bad frame header {b:02x?}"
            )));
        }
        Ok(Frame {
            kind,
            seq: word(8..16),
            total: word(16..24),
            offset: word(24..32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        for kind in [Kind::Data, Kind::Ack, Kind::Ping, Kind::Bye] {
            let f = Frame {
                kind,
                seq: u64::from(u32::MAX) + 5,
                total: 1 << 40,
                offset: 3 << 20,
            };
            assert_eq!(Frame::decode(&f.encode()).unwrap(), f);
        }
        let good = Frame {
            kind: Kind::Data,
            seq: 1,
            total: 2,
            offset: 0,
        }
        .encode();
        let mut bad = good;
        bad[0] ^= 1;
        assert!(Frame::decode(&bad).is_err());
        let mut bad = good;
        bad[4] = 9;
        assert!(Frame::decode(&bad).is_err());
    }

    #[test]
    fn hellos_carry_the_token() {
        assert_eq!(hello_stream(&encode_hello(42, 3), 42), Some(3));
        assert_eq!(hello_stream(&encode_hello(42, 3), 43), None);
    }
}
