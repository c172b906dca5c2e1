//! Socket helpers shared by the rendezvous and the mesh: resolving the root, bounded
//! connects and accepts, reads with a deadline, and both ends of the authentication
//! handshake (the logic is in `auth.rs`; this moves its bytes).

use super::auth::{self, Challenge, JobSecret, Link, Side};
use super::wire::{self, Frame, Kind, WireError, MAX_HELLO};
use crate::error::{Error, Result};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest single connect attempt: a black-holed address is retried rather than waited on
/// for the whole timeout, so a route that appears later is still picked up.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_millis(500);
/// Accept polling: short naps, growing while nothing comes.
const ACCEPT_NAP_MAX: Duration = Duration::from_millis(20);

/// `now + d`, saturating instead of panicking on absurd durations.
pub(crate) fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// Resolve `host:port` (IPv4, `[IPv6]:port` or a host name) to its addresses.
pub(crate) fn resolve(root: &str) -> Result<Vec<SocketAddr>> {
    if let Ok(a) = root.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    super::launch::split_host_port(root)
        .map_err(|why| Error::InvalidArgument(format!("bootstrap root address '{root}' {why}")))?;
    let addrs: Vec<SocketAddr> = root
        .to_socket_addrs()
        .map_err(|e| Error::Bootstrap(format!("cannot resolve the bootstrap root '{root}': {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::Bootstrap(format!(
            "the bootstrap root '{root}' resolves to no address"
        )));
    }
    Ok(addrs)
}

/// Listen on `root`'s port on every interface of its family: the root name may resolve to
/// an address other than the one peers use to reach this host. (std sets SO_REUSEADDR on
/// Unix, so a port left in TIME_WAIT by a previous run can be reused at once.)
pub(crate) fn bind_root(root: &str, addr: SocketAddr) -> Result<TcpListener> {
    let any = match addr {
        SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port()),
        SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), addr.port()),
    };
    TcpListener::bind(any).map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::AddrInUse {
            ": another process (maybe an earlier job) holds this port; pick another port in FERROCX_COMM_ID"
        } else {
            ""
        };
        Error::Bootstrap(format!("rank 0 cannot listen on {any} for the bootstrap root {root}: {e}{hint}"))
    })
}

/// Options every bootstrap connection gets: no Nagle delay (small request/answer frames),
/// and writes bounded by the timeout so a wedged peer cannot block a sender forever.
pub(crate) fn configure(s: &TcpStream, timeout: Duration) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
}

/// Connect to any of `addrs`, retrying refusals (the listener may not be up yet) with
/// backoff until `deadline`. On expiry: `Error::Timeout` about `what`, with the last error.
pub(crate) fn connect_retry(
    addrs: &[SocketAddr],
    deadline: Instant,
    timeout: Duration,
    what: &str,
    peer: Option<usize>,
) -> Result<TcpStream> {
    let mut backoff = RETRY_FIRST;
    let mut last = String::from("no attempt made");
    let mut attempts = 0u32;
    loop {
        for a in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            attempts += 1;
            match TcpStream::connect_timeout(a, left.min(CONNECT_ATTEMPT)) {
                Ok(s) => return Ok(s),
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout {
                what: connect_failure(what, addrs, attempts, &last),
                peer,
                after: timeout,
            });
        }
        std::thread::sleep(backoff.min(left));
        backoff = (backoff * 2).min(RETRY_MAX);
    }
}

/// What a [`connect_retry`] that timed out reports: `what`, every address tried when
/// there were several (a name that resolved to more than one), the number of attempts and
/// the last error (which names its address).
fn connect_failure(what: &str, addrs: &[SocketAddr], attempts: u32, last: &str) -> String {
    let tried = if addrs.len() > 1 {
        let list: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        format!("tried {}; ", list.join(", "))
    } else {
        String::new()
    };
    let plural = if attempts == 1 { "" } else { "s" };
    format!("{what} ({tried}{attempts} attempt{plural}; last error: {last})")
}

/// Accept one connection on a non-blocking `listener`, or `None` once `deadline` passes or
/// `stop` is raised. Polls with short naps: std has no accept timeout, and this runs only
/// while a communicator is being set up.
pub(crate) fn accept_until(
    listener: &TcpListener,
    deadline: Instant,
    stop: &AtomicBool,
) -> io::Result<Option<(TcpStream, SocketAddr)>> {
    let mut nap = Duration::from_millis(1);
    loop {
        match listener.accept() {
            Ok((s, from)) => {
                // Accepted sockets must block: callers rely on read timeouts, not polling.
                s.set_nonblocking(false)?;
                return Ok(Some((s, from)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // The client gave up between SYN and accept, or a signal: try again.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        std::thread::sleep(nap.min(left));
        nap = (nap * 2).min(ACCEPT_NAP_MAX);
    }
}

/// Read one frame, giving up at `deadline`.
pub(crate) fn read_frame_by(
    s: &TcpStream,
    deadline: Instant,
    max_len: u64,
) -> Result<Frame, WireError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(WireError::Timeout);
    }
    s.set_read_timeout(Some(left))?;
    let mut r = s;
    wire::read_frame(&mut r, max_len)
}

/// What every auth refusal tells the user to do.
const SET_THE_SECRET: &str =
    "set the same FERROCX_SECRET or FERROCX_SECRET_FILE for every rank of the job (fxrun does)";

/// What the handshake of one connection authenticates: the connector's hello.
#[derive(Clone, Copy)]
pub(crate) struct AuthHello<'a> {
    /// Which kind of connection this is.
    pub link: Link,
    /// The hello frame's payload, exactly as sent.
    pub bytes: &'a [u8],
    /// The connector's challenge in it; `None`: the connector has no secret.
    pub challenge: Option<&'a Challenge>,
}

/// Acceptor side of the handshake, once the connector's `hello` has been read: `me`
/// names us in what we tell the connector ("the bootstrap root", "rank 3"). `Ok` when
/// both hold the secret and proved it, or neither holds one. `Err` is why the connection
/// is refused, worded to follow "it claims rank N but " in the warning; the connector has
/// been sent `AuthFail` where that helps it say what is wrong.
pub(crate) fn accept_auth(
    s: &TcpStream,
    secret: Option<&JobSecret>,
    me: &str,
    hello: &AuthHello<'_>,
    by: Instant,
) -> std::result::Result<(), String> {
    let AuthHello {
        link,
        bytes: hello,
        challenge: theirs,
    } = *hello;
    let fail = |reason: String| {
        // Best effort: it may be gone, or not a ferrocx rank at all.
        let _ = wire::write_frame(&mut &*s, Kind::AuthFail, 0, reason.as_bytes());
    };
    let (secret, theirs) = match (secret, theirs) {
        (None, None) => return Ok(()),
        (Some(_), None) => {
            fail(format!(
                "{me} has a job secret and this process has none: {SET_THE_SECRET}"
            ));
            return Err(
                "has no job secret and this job has one: a process outside the job, or a rank started without \
                 the secret"
                    .into(),
            );
        }
        (None, Some(_)) => {
            fail(format!(
                "this process has a job secret and {me} has none: {SET_THE_SECRET}"
            ));
            return Err(format!(
                "has a job secret and {me} has none: {SET_THE_SECRET}"
            ));
        }
        (Some(s), Some(c)) => (s, c),
    };
    let mine = auth::challenge().map_err(|e| e.to_string())?;
    let ours = auth::answer(secret, link, Side::Acceptor, theirs, &mine, hello);
    wire::write_frame(
        &mut &*s,
        Kind::AuthChallenge,
        0,
        &wire::encode_auth_challenge(&mine, &ours),
    )
    .map_err(|e| format!("dropped the connection before our challenge: {e}"))?;
    let f = read_frame_by(s, by, MAX_HELLO).map_err(|e| match e {
        WireError::Timeout => "did not answer our challenge".to_string(),
        WireError::Closed => "closed the connection instead of answering our challenge".to_string(),
        e => format!("failed while answering our challenge: {e}"),
    })?;
    match f.kind {
        Kind::AuthAnswer => {
            if auth::verify(
                secret,
                link,
                Side::Connector,
                theirs,
                &mine,
                hello,
                &f.payload,
            ) {
                Ok(())
            } else {
                fail(format!(
                    "{me} could not verify this process's answer: {SET_THE_SECRET}"
                ));
                Err("answered our challenge wrongly: it does not know the job secret".into())
            }
        }
        // Its reason is ours to know already: our answer did not verify there.
        Kind::AuthFail => {
            Err("refused our answer to its challenge: its job secret differs from ours".into())
        }
        k => Err(format!(
            "sent a {k:?} frame instead of answering our challenge"
        )),
    }
}

/// Connector side of the handshake. We sent `hello` (with our challenge when we hold the
/// secret) to `peer` (named as in errors: "the bootstrap root 10.0.0.1:29500", "rank 3
/// (pid …)"); `first` is the first frame it answered with, and `read` reads the next one
/// (with the caller's error mapping). Returns the first frame after the handshake (the
/// table, a reject, an ack); `Err(Error::Auth)` when the peer refused us or could not
/// prove the secret, or only one side holds one.
pub(crate) fn connect_auth(
    s: &TcpStream,
    secret: Option<&JobSecret>,
    peer: &str,
    hello: &AuthHello<'_>,
    first: Frame,
    mut read: impl FnMut() -> Result<Frame>,
) -> Result<Frame> {
    let AuthHello {
        link,
        bytes: hello,
        challenge: mine,
    } = *hello;
    let refused = |f: &Frame| {
        Error::Auth(format!(
            "{peer} refused this rank: {}",
            String::from_utf8_lossy(&f.payload)
        ))
    };
    match (secret.zip(mine), first.kind) {
        (_, Kind::AuthFail) => Err(refused(&first)),
        (Some((secret, mine)), Kind::AuthChallenge) => {
            let (theirs, answer) = wire::decode_auth_challenge(&first.payload)
                .map_err(|e| Error::Auth(format!("{peer} sent a malformed challenge: {e}")))?;
            if !auth::verify(secret, link, Side::Acceptor, mine, &theirs, hello, &answer) {
                let _ = wire::write_frame(
                    &mut &*s,
                    Kind::AuthFail,
                    0,
                    b"its answer to our challenge is wrong: our job secrets differ",
                );
                return Err(Error::Auth(format!(
                    "{peer} does not know this rank's job secret: its answer to our challenge is wrong. Either the \
                     ranks were given different secrets, or another process answers at that address: {SET_THE_SECRET}"
                )));
            }
            let ours = auth::answer(secret, link, Side::Connector, mine, &theirs, hello);
            wire::write_frame(&mut &*s, Kind::AuthAnswer, 0, &ours).map_err(|e| {
                Error::Bootstrap(format!("{peer} dropped the connection during authentication: {e}"))
            })?;
            let next = read()?;
            if next.kind == Kind::AuthFail {
                return Err(refused(&next));
            }
            Ok(next)
        }
        (None, Kind::AuthChallenge) => Err(Error::Auth(format!(
            "{peer} asks for the job secret and this rank has none: {SET_THE_SECRET}"
        ))),
        // Holding a secret, we take nothing but a refusal from a peer that skipped the proof.
        (Some(_), Kind::Table | Kind::PeerAck) => Err(Error::Auth(format!(
            "{peer} answered without proving the job secret: it has none, or is not part of this job: \
             {SET_THE_SECRET}"
        ))),
        _ => Ok(first),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_timeout_names_the_address_and_says_it_timed_out() {
        let addr: SocketAddr = "10.200.0.99:29500".parse().unwrap();
        let start = Instant::now();
        // A deadline already passed: no attempt, and the error still names everything.
        let e = connect_retry(
            &[addr],
            start,
            Duration::from_secs(3),
            "connecting to X",
            Some(0),
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("timed out after 3.0s waiting for rank 0"),
            "{text}"
        );
        assert!(
            text.contains("connecting to X (0 attempts; last error: no attempt made)"),
            "{text}"
        );
        assert_eq!(e.peer(), Some(0));

        // Several addresses: each is listed.
        let v6: SocketAddr = "[fd00::1]:29500".parse().unwrap();
        let what = connect_failure("connecting to root", &[addr, v6], 1, "x: refused");
        assert_eq!(
            what,
            "connecting to root (tried 10.200.0.99:29500, [fd00::1]:29500; 1 attempt; last error: x: refused)"
        );
    }

    #[test]
    fn a_refused_connect_is_retried_until_the_deadline() {
        // A port nothing listens on: bind, note the port, close.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let t = Duration::from_millis(300);
        let start = Instant::now();
        let e = connect_retry(
            &[addr],
            deadline_after(t),
            t,
            "connecting to the root",
            None,
        )
        .unwrap_err();
        let took = start.elapsed();
        let text = e.to_string();
        assert!(took >= t && took < t + Duration::from_secs(2), "{took:?}");
        assert!(text.contains("timed out after 0.3s"), "{text}");
        assert!(
            text.contains(&format!("last error: 127.0.0.1:{port}: ")),
            "{text}"
        );
        assert!(
            !text.contains(" 1 attempt;"),
            "refusals are retried: {text}"
        );
    }
}
