//! The receiving end's listeners (one per rail) and the sockets that connect to them:
//! a socket is accepted once its hello presents the connection's token, and the hello
//! says which of the sender's sockets it is (so a reconnected socket replaces its
//! predecessor).

use crate::wire::{self, HELLO_BYTES};
use ferrocx_sdk::{Host, PluginError, PluginResult};
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// An accepted socket whose hello is not complete yet.
struct Candidate {
    stream: TcpStream,
    from: SocketAddr,
    hello: [u8; HELLO_BYTES],
    got: usize,
}

/// Listening sockets of one connection and the candidates being checked.
pub(crate) struct Acceptor {
    listeners: Vec<TcpListener>,
    candidates: Vec<Candidate>,
}

impl Acceptor {
    /// Listen on every rail address (port chosen by the kernel); returns the bound addresses.
    pub fn listen(rails: &[SocketAddr]) -> PluginResult<(Acceptor, Vec<SocketAddr>)> {
        let mut listeners = Vec::new();
        let mut bound = Vec::new();
        for a in rails {
            let l = TcpListener::bind(a)
                .map_err(|e| PluginError::io(format!("net-socket: cannot listen on {a}"), e))?;
            l.set_nonblocking(true)
                .map_err(|e| PluginError::io("net-socket: set_nonblocking", e))?;
            bound.push(
                l.local_addr()
                    .map_err(|e| PluginError::io("net-socket: local_addr", e))?,
            );
            listeners.push(l);
        }
        Ok((
            Acceptor {
                listeners,
                candidates: Vec::new(),
            },
            bound,
        ))
    }

    /// Accept what is waiting and read hellos; returns the sockets that presented
    /// `token`, with the socket index each announced. Wrong hellos are dropped (warned).
    pub fn poll(
        &mut self,
        token: u64,
        host: Host,
        what: &str,
    ) -> PluginResult<Vec<(u32, TcpStream)>> {
        for l in &self.listeners {
            loop {
                match l.accept() {
                    Ok((stream, from)) => {
                        stream
                            .set_nonblocking(true)
                            .and_then(|_| stream.set_nodelay(true))
                            .map_err(|e| PluginError::io("net-socket: socket options", e))?;
                        self.candidates.push(Candidate {
                            stream,
                            from,
                            hello: [0; HELLO_BYTES],
                            got: 0,
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                    Err(e) => return Err(PluginError::io(format!("{what}: accept"), e)),
                }
            }
        }
        let mut ready = Vec::new();
        let mut i = 0;
        while i < self.candidates.len() {
            let c = &mut self.candidates[i];
            let verdict = loop {
                if c.got == HELLO_BYTES {
                    break Some(wire::hello_stream(&c.hello, token));
                }
                match c.stream.read(&mut c.hello[c.got..]) {
                    Ok(0) => break Some(None),
                    Ok(n) => c.got += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break Some(None),
                }
            };
            match verdict {
                None => i += 1,
                Some(Some(index)) => {
                    let c = self.candidates.swap_remove(i);
                    host.debug(format!("{what}: accepted socket {index} from {}", c.from));
                    ready.push((index, c.stream));
                }
                Some(None) => {
                    let c = self.candidates.swap_remove(i);
                    host.warn(format!(
                        "{what}: rejected a connection from {} (no or wrong token)",
                        c.from
                    ));
                }
            }
        }
        Ok(ready)
    }
}
