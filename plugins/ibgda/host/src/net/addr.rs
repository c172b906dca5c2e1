//! The record each rank publishes in `comm_init`'s all-gather: where its two
//! paths listen, or that it could not listen (every rank then learns it and
//! fails the same way). Fixed size, little-endian, checked on decode.
//!
//! | offset | field |
//! |---|---|
//! | 0 | u32 [`ADDR_MAGIC`] |
//! | 4 | u8 1: listening, 0: no addresses |
//! | 5 | 3 bytes zero |
//! | 8 + 32 p | path p (0 primary, 1 backup): u8 family (4 or 6), u8 zero, u16 port, u32 IPv6 scope, 16 bytes address (IPv4 in the first 4), 8 bytes zero |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

/// Record magic ("FXGA").
pub const ADDR_MAGIC: u32 = 0x4658_4741;
/// Bytes of a record.
pub const ADDR_BYTES: usize = 8 + 2 * 32;

/// The record of a rank listening at `paths` ([primary, backup]), or of one
/// that could not (`None`).
pub fn encode(paths: Option<&[SocketAddr; 2]>) -> [u8; ADDR_BYTES] {
    let mut b = [0u8; ADDR_BYTES];
    b[..4].copy_from_slice(&ADDR_MAGIC.to_le_bytes());
    let Some(paths) = paths else {
        return b;
    };
    b[4] = 1;
    for (p, a) in paths.iter().enumerate() {
        let at = 8 + 32 * p;
        b[at + 2..at + 4].copy_from_slice(&a.port().to_le_bytes());
        match a {
            SocketAddr::V4(v4) => {
                b[at] = 4;
                b[at + 8..at + 12].copy_from_slice(&v4.ip().octets());
            }
            SocketAddr::V6(v6) => {
                b[at] = 6;
                b[at + 4..at + 8].copy_from_slice(&v6.scope_id().to_le_bytes());
                b[at + 8..at + 24].copy_from_slice(&v6.ip().octets());
            }
        }
    }
    b
}

/// Rank `rank`'s record: its paths' addresses, `Ok(None)` when it could not
/// listen, or what is wrong with the bytes.
pub fn decode(rank: usize, b: &[u8]) -> Result<Option<[SocketAddr; 2]>, String> {
    let bad = |why: String| Err(format!("rank {rank}'s net address record: {why}"));
    if b.len() != ADDR_BYTES {
        return bad(format!("{} bytes, expected {ADDR_BYTES}", b.len()));
    }
    let magic = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
    if magic != ADDR_MAGIC {
        return bad(format!("magic {magic:#010x}"));
    }
    if b[5..8] != [0; 3] {
        return bad("reserved bytes not zero".into());
    }
    match b[4] {
        0 if b[8..].iter().all(|&x| x == 0) => return Ok(None),
        0 => return bad("addresses after a 'not listening' flag".into()),
        1 => {}
        f => return bad(format!("flag {f}")),
    }
    let mut out = [SocketAddr::from(([0, 0, 0, 0], 0)); 2];
    for (p, slot) in out.iter_mut().enumerate() {
        let e = &b[8 + 32 * p..8 + 32 * (p + 1)];
        let port = u16::from_le_bytes([e[2], e[3]]);
        let scope = u32::from_le_bytes(e[4..8].try_into().expect("4 bytes"));
        if e[1] != 0 || e[24..].iter().any(|&x| x != 0) || port == 0 {
            return bad(format!("path {p}: reserved bytes not zero or port 0"));
        }
        *slot = match e[0] {
            4 if scope == 0 && e[12..24].iter().all(|&x| x == 0) => {
                let ip: [u8; 4] = e[8..12].try_into().expect("4 bytes");
                SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)
            }
            6 => {
                let ip: [u8; 16] = e[8..24].try_into().expect("16 bytes");
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope))
            }
            f => return bad(format!("path {p}: family byte {f}")),
        };
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_ones_are_refused_naming_the_rank() {
        let v4: SocketAddr = "10.1.2.3:4000".parse().unwrap();
        let v6 = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 5000, 0, 3));
        for paths in [[v4, v4], [v4, "10.9.9.9:1".parse().unwrap()], [v6, v6]] {
            assert_eq!(decode(2, &encode(Some(&paths))), Ok(Some(paths)));
        }
        assert_eq!(decode(2, &encode(None)), Ok(None));
        let good = encode(Some(&[v4, v4]));
        let mut cases: Vec<(Vec<u8>, &str)> = Vec::new();
        cases.push((good[..10].to_vec(), "10 bytes"));
        for (at, v, needle) in [
            (0, 0u8, "magic"),
            (4, 2, "flag 2"),
            (6, 1, "reserved"),
            (8, 5, "family byte 5"),
            (10, 0, "port 0"),
            (11, 0, "port 0"),
            (9, 1, "reserved"),
            (35, 1, "reserved"),
            (14, 1, "path 0: family byte 4"),
        ] {
            let mut b = good.to_vec();
            b[at] = v;
            if at == 10 {
                b[11] = 0;
            }
            if at == 11 {
                b[10] = 0;
            }
            cases.push((b, needle));
        }
        let mut b = encode(None).to_vec();
        b[20] = 1;
        cases.push((b, "after a 'not listening'"));
        for (b, needle) in cases {
            let e = decode(2, &b).unwrap_err();
            assert!(e.contains("rank 2") && e.contains(needle), "{needle}: {e}");
        }
    }
}
