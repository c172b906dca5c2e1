//! What the net carrier's TCP connections carry, sans-IO: [`encode`] appends
//! one message to a byte buffer, a [`Decoder`] takes bytes as they arrive and
//! gives whole messages back, or an error for bytes that cannot be one (the
//! connection is then that path's failure: nothing after a bad header can be
//! framed again).
//!
//! Every message starts with a 64-byte header, little-endian; a put's
//! payload (`bytes` long) follows its header.
//!
//! | offset | field |
//! |---|---|
//! | 0 | u32 [`MAGIC`] |
//! | 4 | u8 kind: [`KIND_PUT`], [`KIND_PUT_SIGNAL`], [`KIND_FETCH_ADD`], [`KIND_ACK`], [`KIND_HELLO`] |
//! | 5 | u8 request: signal op ([`SIGNAL_SET`], [`SIGNAL_ADD`]; put with signal only); ack: status |
//! | 6 | u8 ack: 1 when a fetched value is carried; hello: path (0 primary, 1 backup) |
//! | 7 | u8 reserved, zero |
//! | 8 | u32 sender rank (request, hello) or acknowledging rank (ack) |
//! | 12 | u32 window (put kinds); hello: [`VERSION`] |
//! | 16 | u64 sequence number (request, ack); hello: the communicator's token |
//! | 24 | u64 `completed_below` (request) |
//! | 32 | u64 destination offset (put kinds), word offset (fetch-add); ack: fetched value |
//! | 40 | u32 payload bytes (put kinds) |
//! | 44 | u32 reserved, zero |
//! | 48 | u64 signal word offset (put with signal) |
//! | 56 | u64 signal value (put with signal), addend (fetch-add) |
//!
//! Fields a kind does not use are zero, and a decoder refuses them otherwise:
//! garbage is far more likely to be caught by the header than to pass as a
//! request.

use ferrocx_ibgda::queue::SignalOp;
use std::fmt;

/// Header magic ("FXGN").
pub const MAGIC: u32 = 0x4658_474e;
/// Wire version, carried by the hello. 2: the accepting side answers a
/// reconnect's hello with its own (`relink`).
pub const VERSION: u32 = 2;
/// Bytes of every header.
pub const HEADER_BYTES: usize = 64;
/// Kind byte of a put.
pub const KIND_PUT: u8 = 1;
/// Kind byte of a put with signal.
pub const KIND_PUT_SIGNAL: u8 = 2;
/// Kind byte of a fetch-add.
pub const KIND_FETCH_ADD: u8 = 3;
/// Kind byte of an acknowledgement.
pub const KIND_ACK: u8 = 4;
/// Kind byte of the hello that opens each connection.
pub const KIND_HELLO: u8 = 5;
/// Signal op byte: store.
pub const SIGNAL_SET: u8 = 1;
/// Signal op byte: add.
pub const SIGNAL_ADD: u8 = 2;

/// What a request does at the receiving rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Write the payload at `dst` of window `window`, then (with a signal)
    /// apply `op` with `value` to the signal word at `signal`.
    Put {
        /// The window, by the number every rank gave it.
        window: u32,
        /// Offset in the receiver's window.
        dst: u64,
        /// The signal to apply once the data landed: (word offset, value, op).
        signal: Option<(u64, u64, SignalOp)>,
    },
    /// Fetch-add `add` on the receiver's signal word at `dst`.
    FetchAdd {
        /// Offset of the word in the signal words.
        dst: u64,
        /// Addend.
        add: u64,
    },
}

/// One request on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireRequest {
    /// The sending rank.
    pub from: u32,
    /// Its per-peer sequence number (the same on every attempt).
    pub seq: u64,
    /// Every request of the sender below this has completed there.
    pub completed_below: u64,
    /// What to do.
    pub op: Op,
    /// The bytes of a put (empty for a fetch-add).
    pub payload: Vec<u8>,
}

/// How the receiving rank answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    /// Applied (or applied before: a duplicate).
    Ok = 0,
    /// The window is not registered at the receiver.
    NoWindow = 1,
    /// The put runs past the receiver's window.
    OutOfBounds = 2,
    /// The signal or fetch-add word is not an aligned word of the receiver's
    /// signal words.
    BadWord = 3,
    /// The receiver's copy into its window failed.
    CopyFailed = 4,
}

impl AckStatus {
    fn from_u8(v: u8) -> Option<AckStatus> {
        Some(match v {
            0 => AckStatus::Ok,
            1 => AckStatus::NoWindow,
            2 => AckStatus::OutOfBounds,
            3 => AckStatus::BadWord,
            4 => AckStatus::CopyFailed,
            _ => return None,
        })
    }
}

impl fmt::Display for AckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AckStatus::Ok => "ok",
            AckStatus::NoWindow => "the window is not registered at the receiver",
            AckStatus::OutOfBounds => "the put runs past the receiver's window",
            AckStatus::BadWord => "the word is not an aligned word of the receiver's signal words",
            AckStatus::CopyFailed => "the receiver's copy into its window failed",
        })
    }
}

/// The answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The acknowledging rank.
    pub from: u32,
    /// The request's sequence number.
    pub seq: u64,
    /// How it went.
    pub status: AckStatus,
    /// A fetch-add's fetched value.
    pub fetched: Option<u64>,
}

/// The first message on each connection, from the dialing rank; on a
/// reconnect the accepting rank answers with its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The dialing rank.
    pub rank: u32,
    /// 0: primary path, 1: backup.
    pub path: u8,
    /// The communicator's token (its hash): a stray connection is refused.
    pub token: u64,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A put or fetch-add.
    Request(WireRequest),
    /// An answer.
    Ack(Ack),
    /// A connection's opening.
    Hello(Hello),
}

/// Bytes that are not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The header does not start with [`MAGIC`].
    Magic(u32),
    /// An unknown kind byte.
    Kind(u8),
    /// A field of the kind that cannot be (the op, status or flag byte, a
    /// reserved field or one the kind does not use not zero).
    Field {
        /// The kind.
        kind: u8,
        /// Which field.
        field: &'static str,
        /// What it held.
        value: u64,
    },
    /// A hello of another wire version.
    Version(u32),
    /// A payload longer than the decoder accepts.
    TooLong {
        /// Announced bytes.
        bytes: u32,
        /// The limit.
        max: u32,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Magic(m) => write!(f, "bad magic {m:#010x} (expected {MAGIC:#010x})"),
            WireError::Kind(k) => write!(f, "unknown message kind {k}"),
            WireError::Field { kind, field, value } => {
                write!(f, "message kind {kind}: field {field} holds {value:#x}")
            }
            WireError::Version(v) => write!(f, "wire version {v} (this build speaks {VERSION})"),
            WireError::TooLong { bytes, max } => {
                write!(f, "a put of {bytes} bytes (at most {max} accepted)")
            }
        }
    }
}

impl std::error::Error for WireError {}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get32(b: &[u8; HEADER_BYTES], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn get64(b: &[u8; HEADER_BYTES], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Appends `m` (header, then a put's payload) to `out`.
///
/// # Panics
/// When a put's payload is longer than `u32::MAX` (a request record cannot
/// say more).
pub fn encode(m: &Msg, out: &mut Vec<u8>) {
    let mut h = [0u8; HEADER_BYTES];
    put32(&mut h, 0, MAGIC);
    let mut payload: &[u8] = &[];
    match m {
        Msg::Request(r) => {
            put32(&mut h, 8, r.from);
            put64(&mut h, 16, r.seq);
            put64(&mut h, 24, r.completed_below);
            match r.op {
                Op::Put {
                    window,
                    dst,
                    signal,
                } => {
                    put32(&mut h, 12, window);
                    put64(&mut h, 32, dst);
                    let n = u32::try_from(r.payload.len()).expect("a put carries < 4 GiB");
                    put32(&mut h, 40, n);
                    payload = &r.payload;
                    match signal {
                        None => h[4] = KIND_PUT,
                        Some((word, value, op)) => {
                            h[4] = KIND_PUT_SIGNAL;
                            h[5] = match op {
                                SignalOp::Set => SIGNAL_SET,
                                SignalOp::Add => SIGNAL_ADD,
                            };
                            put64(&mut h, 48, word);
                            put64(&mut h, 56, value);
                        }
                    }
                }
                Op::FetchAdd { dst, add } => {
                    h[4] = KIND_FETCH_ADD;
                    put64(&mut h, 32, dst);
                    put64(&mut h, 56, add);
                }
            }
        }
        Msg::Ack(a) => {
            h[4] = KIND_ACK;
            h[5] = a.status as u8;
            put32(&mut h, 8, a.from);
            put64(&mut h, 16, a.seq);
            if let Some(v) = a.fetched {
                h[6] = 1;
                put64(&mut h, 32, v);
            }
        }
        Msg::Hello(x) => {
            h[4] = KIND_HELLO;
            h[6] = x.path;
            put32(&mut h, 8, x.rank);
            put32(&mut h, 12, VERSION);
            put64(&mut h, 16, x.token);
        }
    }
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

/// A header parsed; a put still waits for its payload.
fn parse(h: &[u8; HEADER_BYTES], max_payload: u32) -> Result<(Msg, u32), WireError> {
    let magic = get32(h, 0);
    if magic != MAGIC {
        return Err(WireError::Magic(magic));
    }
    let kind = h[4];
    let zero = |field: &'static str, value: u64| {
        if value == 0 {
            Ok(())
        } else {
            Err(WireError::Field { kind, field, value })
        }
    };
    zero("reserved byte 7", u64::from(h[7]))?;
    zero("reserved word 44", u64::from(get32(h, 44)))?;
    let req = |op: Op| {
        Msg::Request(WireRequest {
            from: get32(h, 8),
            seq: get64(h, 16),
            completed_below: get64(h, 24),
            op,
            payload: Vec::new(),
        })
    };
    match kind {
        KIND_PUT | KIND_PUT_SIGNAL => {
            zero("flag byte", u64::from(h[6]))?;
            let bytes = get32(h, 40);
            if bytes > max_payload {
                return Err(WireError::TooLong {
                    bytes,
                    max: max_payload,
                });
            }
            let signal = if kind == KIND_PUT {
                zero("signal op", u64::from(h[5]))?;
                zero("signal word", get64(h, 48))?;
                zero("signal value", get64(h, 56))?;
                None
            } else {
                let op = match h[5] {
                    SIGNAL_SET => SignalOp::Set,
                    SIGNAL_ADD => SignalOp::Add,
                    v => {
                        return Err(WireError::Field {
                            kind,
                            field: "signal op",
                            value: u64::from(v),
                        })
                    }
                };
                Some((get64(h, 48), get64(h, 56), op))
            };
            let op = Op::Put {
                window: get32(h, 12),
                dst: get64(h, 32),
                signal,
            };
            Ok((req(op), bytes))
        }
        KIND_FETCH_ADD => {
            zero("signal op", u64::from(h[5]))?;
            zero("flag byte", u64::from(h[6]))?;
            zero("window", u64::from(get32(h, 12)))?;
            zero("payload bytes", u64::from(get32(h, 40)))?;
            zero("signal word", get64(h, 48))?;
            let op = Op::FetchAdd {
                dst: get64(h, 32),
                add: get64(h, 56),
            };
            Ok((req(op), 0))
        }
        KIND_ACK => {
            let status = AckStatus::from_u8(h[5]).ok_or(WireError::Field {
                kind,
                field: "status",
                value: u64::from(h[5]),
            })?;
            let fetched = match h[6] {
                0 => {
                    zero("fetched value", get64(h, 32))?;
                    None
                }
                1 => Some(get64(h, 32)),
                v => {
                    return Err(WireError::Field {
                        kind,
                        field: "fetched flag",
                        value: u64::from(v),
                    })
                }
            };
            zero("window", u64::from(get32(h, 12)))?;
            zero("completed_below", get64(h, 24))?;
            zero("payload bytes", u64::from(get32(h, 40)))?;
            zero("signal word", get64(h, 48))?;
            zero("value", get64(h, 56))?;
            let a = Ack {
                from: get32(h, 8),
                seq: get64(h, 16),
                status,
                fetched,
            };
            Ok((Msg::Ack(a), 0))
        }
        KIND_HELLO => {
            let v = get32(h, 12);
            if v != VERSION {
                return Err(WireError::Version(v));
            }
            if h[6] > 1 {
                return Err(WireError::Field {
                    kind,
                    field: "path",
                    value: u64::from(h[6]),
                });
            }
            zero("byte 5", u64::from(h[5]))?;
            zero("completed_below", get64(h, 24))?;
            zero("offset", get64(h, 32))?;
            zero("payload bytes", u64::from(get32(h, 40)))?;
            zero("signal word", get64(h, 48))?;
            zero("value", get64(h, 56))?;
            let x = Hello {
                rank: get32(h, 8),
                path: h[6],
                token: get64(h, 16),
            };
            Ok((Msg::Hello(x), 0))
        }
        k => Err(WireError::Kind(k)),
    }
}

/// Takes a byte stream in any pieces and gives its messages back in order.
/// After an error it gives that error forever (the stream cannot be framed
/// again).
#[derive(Debug)]
pub struct Decoder {
    max_payload: u32,
    header: [u8; HEADER_BYTES],
    have: usize,
    /// A parsed request waiting for `want` payload bytes.
    body: Option<(Msg, usize)>,
    ready: std::collections::VecDeque<Msg>,
    error: Option<WireError>,
}

impl Decoder {
    /// A decoder refusing puts longer than `max_payload` bytes (so garbage
    /// cannot make it allocate 4 GiB).
    pub fn new(max_payload: u32) -> Decoder {
        Decoder {
            max_payload,
            header: [0; HEADER_BYTES],
            have: 0,
            body: None,
            ready: std::collections::VecDeque::new(),
            error: None,
        }
    }

    /// From now on, refuses puts longer than `max_payload` bytes (a
    /// connection that must open with a hello allows none until it did).
    pub fn set_max_payload(&mut self, max_payload: u32) {
        self.max_payload = max_payload;
    }

    /// Takes the next bytes of the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.error.is_none() {
            if let Some((msg, want)) = &mut self.body {
                let Msg::Request(r) = msg else {
                    unreachable!("only requests have bodies")
                };
                let take = (*want - r.payload.len()).min(bytes.len());
                r.payload.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if r.payload.len() == *want {
                    let (m, _) = self.body.take().expect("checked");
                    self.ready.push_back(m);
                }
                continue;
            }
            let take = (HEADER_BYTES - self.have).min(bytes.len());
            self.header[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have < HEADER_BYTES {
                break;
            }
            self.have = 0;
            match parse(&self.header, self.max_payload) {
                Ok((m, 0)) => self.ready.push_back(m),
                Ok((mut m, n)) => {
                    if let Msg::Request(r) = &mut m {
                        // Grows as bytes come: a header alone cannot reserve much.
                        r.payload.reserve((n as usize).min(1 << 20));
                    }
                    self.body = Some((m, n as usize));
                }
                Err(e) => self.error = Some(e),
            }
        }
    }

    /// The next whole message, `Ok(None)` until one is complete, or the
    /// error that ended the stream (after the messages before it).
    pub fn next(&mut self) -> Result<Option<Msg>, WireError> {
        if let Some(m) = self.ready.pop_front() {
            return Ok(Some(m));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(None),
        }
    }

    /// Whether the stream stopped in the middle of a message.
    pub fn partial(&self) -> bool {
        self.have > 0 || self.body.is_some()
    }
}

#[cfg(test)]
mod tests;
