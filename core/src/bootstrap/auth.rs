//! Mutual challenge-response on bootstrap connections (sans-IO: `root.rs` and `mesh.rs`
//! move the bytes).
//!
//! Every rank of a job holds the same [`JobSecret`] (`FERROCX_SECRET` or
//! `FERROCX_SECRET_FILE`). On each connection the side that connects (a rank joining the
//! root, a lower rank joining a higher one) sends a fresh random challenge in its hello;
//! the side that accepted answers with its own fresh challenge and
//! `HMAC-SHA256(secret, label(link, acceptor) || 0 || connector challenge || acceptor
//! challenge || hello)`; the connector checks that and answers with the same MAC under the
//! connector's label. Each side therefore proves knowledge of the secret over a challenge
//! it did not choose, bound to the hello (ranks, sizes, nonce) of this very connection.
//! The secret never goes on the wire.
//!
//! Why each piece: fresh challenges on both sides make a recorded answer useless later
//! (no replay); the per-side label keeps the acceptor's answer from being reflected back
//! as the connector's (and the per-link label keeps root answers out of the mesh);
//! answers are compared in constant time (`hmac`'s `verify_slice`), so timing tells an
//! attacker nothing about how close a guess was.
//!
//! Not covered: frames after the handshake are not MACed. This keeps strangers out of a
//! job; it is no protection against an attacker on the path who can rewrite traffic
//! (that needs TLS or a private network).

use crate::error::{Error, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::sync::Arc;

/// Bytes in a challenge.
pub(crate) const CHALLENGE_LEN: usize = 32;
/// Bytes in an answer (an HMAC-SHA256 tag).
pub(crate) const ANSWER_LEN: usize = 32;

/// A fresh random challenge.
pub(crate) type Challenge = [u8; CHALLENGE_LEN];
/// An answer to a pair of challenges.
pub(crate) type Answer = [u8; ANSWER_LEN];

/// The secret every rank of a job shares; it authenticates bootstrap connections.
///
/// Read from `FERROCX_SECRET` or `FERROCX_SECRET_FILE` by
/// [`secret_from_env`](crate::config::secret_from_env); `fxrun` makes a fresh one per
/// job. Cheap to clone; `Debug` shows only its length.
#[derive(Clone)]
pub struct JobSecret(Arc<[u8]>);

impl JobSecret {
    /// A secret from its bytes; `None` when empty (an empty secret is no secret).
    pub fn new(bytes: impl AsRef<[u8]>) -> Option<JobSecret> {
        let b = bytes.as_ref();
        (!b.is_empty()).then(|| JobSecret(Arc::from(b)))
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: an empty secret cannot be made.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobSecret({} bytes, hidden)", self.0.len())
    }
}

/// Which kind of bootstrap connection is being authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    /// A rank joining the root at rendezvous.
    Root,
    /// A lower rank joining a higher rank's peer listener.
    Mesh,
}

/// Which end of the connection answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The end that accepted the connection (the root, the higher rank).
    Acceptor,
    /// The end that connected.
    Connector,
}

/// Domain separation: one label per (link, side), none a prefix of another (each is
/// followed by a 0 byte in the MAC input).
fn label(link: Link, side: Side) -> &'static [u8] {
    match (link, side) {
        (Link::Root, Side::Acceptor) => b"ferrocx bootstrap v2 auth: root, acceptor",
        (Link::Root, Side::Connector) => b"ferrocx bootstrap v2 auth: root, connector",
        (Link::Mesh, Side::Acceptor) => b"ferrocx bootstrap v2 auth: mesh, acceptor",
        (Link::Mesh, Side::Connector) => b"ferrocx bootstrap v2 auth: mesh, connector",
    }
}

/// The MAC over one exchange, keyed by the secret, before finalizing.
fn mac(
    secret: &JobSecret,
    link: Link,
    side: Side,
    connector: &Challenge,
    acceptor: &Challenge,
    hello: &[u8],
) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).expect("HMAC takes any key size");
    m.update(label(link, side));
    m.update(&[0]);
    m.update(connector);
    m.update(acceptor);
    // Last and the only variable-length part: the input is unambiguous.
    m.update(hello);
    m
}

/// `side`'s answer on a `link` whose connector sent `connector` (in `hello`, the
/// connector's hello payload) and whose acceptor sent `acceptor`.
pub(crate) fn answer(
    secret: &JobSecret,
    link: Link,
    side: Side,
    connector: &Challenge,
    acceptor: &Challenge,
    hello: &[u8],
) -> Answer {
    mac(secret, link, side, connector, acceptor, hello)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `got` is `side`'s answer for this exchange; compared in constant time.
pub(crate) fn verify(
    secret: &JobSecret,
    link: Link,
    side: Side,
    connector: &Challenge,
    acceptor: &Challenge,
    hello: &[u8],
    got: &[u8],
) -> bool {
    mac(secret, link, side, connector, acceptor, hello)
        .verify_slice(got)
        .is_ok()
}

/// A fresh challenge from the OS random source.
pub(crate) fn challenge() -> Result<Challenge> {
    let mut c = [0u8; CHALLENGE_LEN];
    getrandom::fill(&mut c).map_err(|e| {
        Error::Io(format!(
            "the OS random source failed while making a bootstrap challenge: {e}"
        ))
    })?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> JobSecret {
        JobSecret::new(s).unwrap()
    }

    /// One full exchange: returns (acceptor's answer ok at the connector, connector's
    /// answer ok at the acceptor), each side with its own secret.
    fn exchange(connector_secret: &JobSecret, acceptor_secret: &JobSecret) -> (bool, bool) {
        let (cc, ac) = (challenge().unwrap(), challenge().unwrap());
        let hello = b"hello from rank 1 of 4";
        let from_acceptor = answer(acceptor_secret, Link::Root, Side::Acceptor, &cc, &ac, hello);
        let acceptor_ok = verify(
            connector_secret,
            Link::Root,
            Side::Acceptor,
            &cc,
            &ac,
            hello,
            &from_acceptor,
        );
        let from_connector = answer(
            connector_secret,
            Link::Root,
            Side::Connector,
            &cc,
            &ac,
            hello,
        );
        let connector_ok = verify(
            acceptor_secret,
            Link::Root,
            Side::Connector,
            &cc,
            &ac,
            hello,
            &from_connector,
        );
        (acceptor_ok, connector_ok)
    }

    #[test]
    fn the_right_secret_verifies_both_ways() {
        let s = secret("job 17");
        assert_eq!(exchange(&s, &s.clone()), (true, true));
        assert_eq!(exchange(&s, &secret("job 17")), (true, true));
    }

    #[test]
    fn a_wrong_secret_fails_both_ways() {
        assert_eq!(
            exchange(&secret("job 17"), &secret("job 18")),
            (false, false)
        );
        // A prefix of the key is another key.
        assert_eq!(
            exchange(&secret("job 1"), &secret("job 17")),
            (false, false)
        );
    }

    #[test]
    fn tampered_challenges_hellos_and_answers_fail() {
        let s = secret("k");
        let (cc, ac) = (challenge().unwrap(), challenge().unwrap());
        let hello = b"rank 1 -> rank 3, nonce 5";
        let a = answer(&s, Link::Mesh, Side::Connector, &cc, &ac, hello);
        let ok = |cc: &Challenge, ac: &Challenge, hello: &[u8], a: &[u8]| {
            verify(&s, Link::Mesh, Side::Connector, cc, ac, hello, a)
        };
        assert!(ok(&cc, &ac, hello, &a));
        let mut cc2 = cc;
        cc2[7] ^= 1;
        assert!(!ok(&cc2, &ac, hello, &a), "connector challenge changed");
        let mut ac2 = ac;
        ac2[31] ^= 0x80;
        assert!(!ok(&cc, &ac2, hello, &a), "acceptor challenge changed");
        assert!(!ok(&ac, &cc, hello, &a), "challenges swapped");
        assert!(
            !ok(&cc, &ac, b"rank 2 -> rank 3, nonce 5", &a),
            "hello changed"
        );
        let mut a2 = a;
        a2[0] ^= 1;
        assert!(!ok(&cc, &ac, hello, &a2), "answer changed");
        assert!(!ok(&cc, &ac, hello, &a[..31]), "answer cut");
        assert!(!ok(&cc, &ac, hello, &[]), "no answer");
    }

    #[test]
    fn a_replayed_or_reflected_answer_fails() {
        let s = secret("k");
        let hello = b"h";
        // Recorded from an earlier exchange: the acceptor's fresh challenge differs now.
        let cc = challenge().unwrap();
        let old = answer(
            &s,
            Link::Root,
            Side::Connector,
            &cc,
            &challenge().unwrap(),
            hello,
        );
        let now = challenge().unwrap();
        assert!(!verify(
            &s,
            Link::Root,
            Side::Connector,
            &cc,
            &now,
            hello,
            &old
        ));
        // The acceptor's own answer sent back to it as the connector's.
        let mine = answer(&s, Link::Root, Side::Acceptor, &cc, &now, hello);
        assert!(!verify(
            &s,
            Link::Root,
            Side::Connector,
            &cc,
            &now,
            hello,
            &mine
        ));
        // A root answer presented on a mesh link.
        let root = answer(&s, Link::Root, Side::Connector, &cc, &now, hello);
        assert!(!verify(
            &s,
            Link::Mesh,
            Side::Connector,
            &cc,
            &now,
            hello,
            &root
        ));
    }

    #[test]
    fn challenges_are_fresh_and_secrets_hidden() {
        assert_ne!(challenge().unwrap(), challenge().unwrap());
        assert!(JobSecret::new("").is_none());
        let s = secret("hunter2");
        assert_eq!(s.len(), 7);
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(shown, "JobSecret(7 bytes, hidden)");
    }
}
