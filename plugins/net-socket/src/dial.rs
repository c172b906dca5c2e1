//! The sending end's side of one socket: a non-blocking connect from a rail's local
//! address, then the hello (token and socket index) that lets the receiver accept it.

use crate::sock::{self, Io};
use crate::wire::{self, HELLO_BYTES};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

/// A socket being connected.
pub(crate) struct Dial {
    stream: TcpStream,
    /// Where it connects to (for messages).
    pub to: SocketAddr,
    hello: [u8; HELLO_BYTES],
    sent: usize,
    /// When the attempt began (probes give up after the rail timeout).
    pub started: Instant,
}

impl Dial {
    /// Start connecting socket `index` to `to`, leaving from `from` (port 0).
    pub fn start(
        to: SocketAddr,
        from: Option<SocketAddr>,
        token: u64,
        index: u32,
    ) -> io::Result<Dial> {
        Ok(Dial {
            stream: sock::start_connect(&to, from.as_ref())?,
            to,
            hello: wire::encode_hello(token, index),
            sent: 0,
            started: Instant::now(),
        })
    }

    /// One non-blocking step: `Ok(true)` once connected and the hello is written.
    pub fn poll(&mut self) -> io::Result<bool> {
        if let Some(e) = self.stream.take_error()? {
            return Err(e);
        }
        match self.stream.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(false),
            Err(e) => return Err(e),
        }
        while self.sent < HELLO_BYTES {
            let rest = &self.hello[self.sent..];
            // SAFETY: `rest` is a live slice of our own hello.
            match unsafe {
                sock::send2(
                    &self.stream,
                    (rest.as_ptr(), rest.len()),
                    (std::ptr::null(), 0),
                )
            }? {
                Io::Moved(n) => self.sent += n,
                Io::Again => return Ok(false),
            }
        }
        self.stream.set_nodelay(true)?;
        Ok(true)
    }

    /// The connected socket (after `poll` returned true).
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }
}
