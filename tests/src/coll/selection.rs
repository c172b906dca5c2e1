//! `selection COLL/BYTES=PATH …`: the selection table's cells
//! (`Communicator::collective_choice`, what `fxinfo` prints) on host
//! buffers, each compared with the path expected — the winner and its own
//! words: a plugin's `describe` hook, the core's algorithm.

use super::e2s;
use ferrocx::{CollKind, CollSpec, Communicator, DataType, RedOp};

pub fn run(cells: &[String]) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let mut out = Vec::new();
    for cell in cells {
        let (call, want) = cell
            .split_once('=')
            .ok_or_else(|| format!("'{cell}' is not COLL/BYTES=PATH"))?;
        let (name, bytes) = call
            .split_once('/')
            .ok_or_else(|| format!("'{call}' is not COLL/BYTES"))?;
        let kind = CollKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| format!("unknown collective '{name}'"))?;
        let bytes: usize = bytes.parse().map_err(|e| format!("{bytes}: {e}"))?;
        let count = bytes.div_ceil(4).max(1);
        // Buffers as large as the call's largest (all_gather's receive, alltoall's both).
        let n = comm.nranks();
        let (send, recv) = (vec![0f32; count * n], vec![0f32; count * n]);
        let spec = CollSpec::new(kind, DataType::F32, count).op(RedOp::Sum);
        let choice = comm
            .collective_choice(
                &spec,
                send.as_ptr() as u64,
                recv.as_ptr() as u64,
                false,
                false,
            )
            .map_err(e2s)?;
        let got = choice.winner_path();
        if got != want {
            return Err(format!(
                "{call}: '{got}', expected '{want}' ({})",
                choice.explain()
            ));
        }
        out.push(format!("{call}: {got}"));
    }
    Ok(out.join("; "))
}
