//! Which GPU a rank uses: `FERROCX_DEVICE`, else its local rank modulo the number of
//! visible devices (one device per rank, as NCCL expects after `cudaSetDevice`).

use crate::error::{Error, Result};

/// The device ordinal for a rank with `local_rank`, or `None` when CUDA is not usable
/// here or `FERROCX_DEVICE=-1`. An invalid `FERROCX_DEVICE` is an error naming it.
pub fn choose_device(local_rank: usize) -> Result<Option<i32>> {
    let count = match ferrocx_sdk::cuda::available() {
        Ok(n) => n,
        Err(why) => {
            tracing::debug!(target: "ferrocx::device", "no GPU support: {why}");
            return Ok(None);
        }
    };
    match std::env::var("FERROCX_DEVICE") {
        Ok(v) if !v.trim().is_empty() => {
            let d: i64 = v.trim().parse().map_err(|_| Error::Config {
                var: "FERROCX_DEVICE".into(),
                message: format!("'{v}' is not a device ordinal (0..{count}, or -1 for none)"),
            })?;
            if d < 0 {
                return Ok(None);
            }
            if d as usize >= count {
                return Err(Error::Config {
                    var: "FERROCX_DEVICE".into(),
                    message: format!("device {d} does not exist ({count} visible)"),
                });
            }
            Ok(Some(d as i32))
        }
        _ => Ok(Some((local_rank % count) as i32)),
    }
}

/// `device`, chosen by the caller (a split's parent, NCCL's current device): an
/// error when CUDA is not usable here or the device does not exist.
pub fn check_device(device: i32) -> Result<i32> {
    let count = ferrocx_sdk::cuda::available()
        .map_err(|why| Error::Unsupported(format!("CUDA device {device} asked for: {why}")))?;
    if device as usize >= count {
        return Err(Error::invalid(format!(
            "CUDA device {device} does not exist ({count} visible)"
        )));
    }
    Ok(device)
}
