//! `hang stop`: rank 2 stops calling after op #4 (it sleeps past the timeout) while
//! ranks 0 and 1 go on to op #5: ranks 0 and 1 must fail with `Error::Hang` whose
//! report names rank 2 as the one behind, and rank 2's next call fails the same way.
//! `hang report`: the same stall, shorter than the timeout; rank 2 asks for the
//! status report (the API) and sends SIGUSR1 to rank 0 (`FERROCX_STATUS_SIGNAL=1`,
//! set by the test), then joins op #5: the job completes.

use ferrocx::{Communicator, Error, RedOp};
use std::time::Duration;

const N: usize = 1000;

fn all_reduce(comm: &Communicator, x: &mut [f32]) -> ferrocx::Result<()> {
    let send = x.to_vec();
    comm.all_reduce(&send, x, RedOp::Sum)
}

pub fn run(case: &str) -> Result<String, String> {
    let comm = Communicator::from_env().map_err(|e| e.to_string())?;
    let me = comm.rank();
    let mut x = vec![1.0f32; N];
    for _ in 0..5 {
        x.fill(1.0);
        all_reduce(&comm, &mut x).map_err(|e| e.to_string())?;
    }
    match (case, me) {
        ("stop", 2) => {
            std::thread::sleep(comm.timeout() + Duration::from_secs(2));
            match all_reduce(&comm, &mut x) {
                Err(e @ Error::Hang { .. }) => Ok(format!("HANG {e}")),
                other => Err(format!("rank 2 after its stall: {other:?}")),
            }
        }
        ("stop", _) => match all_reduce(&comm, &mut x) {
            Err(e @ Error::Hang { .. }) => Ok(format!("HANG {e}")),
            other => Err(format!("expected Error::Hang, got {other:?}")),
        },
        ("report", 2) => {
            // Let ranks 0 and 1 reach op #5.
            std::thread::sleep(Duration::from_millis(500));
            let report = comm.status_report().map_err(|e| e.to_string())?;
            let rank0 = comm.peers()[0].pid.to_string();
            let killed = std::process::Command::new("kill")
                .args(["-USR1", &rank0])
                .status()
                .map_err(|e| format!("kill: {e}"))?;
            if !killed.success() {
                return Err(format!("kill -USR1 {rank0}: {killed}"));
            }
            // Give rank 0 time to print before the job moves on.
            std::thread::sleep(Duration::from_millis(500));
            x.fill(1.0);
            all_reduce(&comm, &mut x).map_err(|e| e.to_string())?;
            Ok(format!("REPORT {report}"))
        }
        ("report", _) => {
            x.fill(1.0);
            all_reduce(&comm, &mut x).map_err(|e| e.to_string())?;
            if x.iter().any(|&v| v != 3.0) {
                return Err(format!("op #5 result {}", x[0]));
            }
            Ok("completed op #5".into())
        }
        _ => Err(format!("unknown hang case {case}")),
    }
}
