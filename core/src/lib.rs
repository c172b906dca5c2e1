//! # ferrocx — collectives and point-to-point over pluggable transports
//!
//! The core: bootstrap (rendezvous and out-of-band exchange), the plugin
//! registry (built-ins and `.so` files) and per-peer transport selection,
//! the proxy service and progress threads, and the [`Communicator`] API.
//!
//! ```no_run
//! // Launched with: fxrun -n 2 -- ./my_program
//! let comm = ferrocx::Communicator::from_env()?;
//! let peer = 1 - comm.rank();
//! let out = vec![comm.rank() as u8; 4096];
//! let mut inp = vec![0u8; 4096];
//! let mut g = comm.group_start();
//! g.send(&out, peer)?;
//! g.recv(&mut inp, peer)?;
//! g.group_end()?;
//! comm.destroy()?;
//! # Ok::<(), ferrocx::Error>(())
//! ```

pub use ferrocx_algo as algo;
pub mod bootstrap;
pub mod collective;
mod comm;
pub mod config;
pub mod device;
pub mod devnet;
mod engine;
mod error;
pub mod log;
mod plan;
pub mod plugin;
pub mod proxy;
pub mod window;
pub use ferrocx_algo::reduce;
mod registration;
mod shared;
mod signal;
mod status;
use ferrocx_algo::types;

pub use algo::{Algo, CollKind, VCounts};
pub use comm::{CommConfig, Communicator, Group};
pub use device::{AsStream, RawStream};
pub use engine::{EngineStats, Request};
pub use error::{Error, Result};
pub use plan::CollSpec;
pub use plugin::Dir;
pub use registration::RegHandle;
pub use types::{Bf16, DataType, Element, RedOp, F16, F8E4M3, F8E5M2};

#[cfg(feature = "builtin-ce")]
use ferrocx_ce as _;
#[cfg(feature = "builtin-ibgda")]
use ferrocx_ibgda_host as _;
#[cfg(feature = "builtin-net-socket")]
use ferrocx_net_socket as _;
#[cfg(feature = "builtin-p2p")]
use ferrocx_p2p as _;
#[cfg(feature = "builtin-shm")]
use ferrocx_shm as _;
#[cfg(feature = "builtin-shm-coll")]
use ferrocx_shm_coll as _;
