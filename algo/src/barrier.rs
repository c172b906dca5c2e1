//! Dissemination barrier: ⌈log2 n⌉ rounds of empty messages; in round k
//! rank r signals r + 2^k and waits for r − 2^k. After the last round every
//! rank has (transitively) heard from every other.

use super::*;

pub(crate) fn dissemination(a: &CollArgs) -> Schedule {
    let (n, r) = (a.nranks, a.rank);
    let empty = Region::new(Buf::Recv, 0, 0);
    let mut s = Schedule::default();
    let mut d = 1;
    while d < n {
        s.push(Stage {
            sends: vec![Xfer {
                peer: (r + d) % n,
                region: empty,
            }],
            recvs: vec![Xfer {
                peer: (r + n - d) % n,
                region: empty,
            }],
            locals: vec![],
        });
        d <<= 1;
    }
    s
}
