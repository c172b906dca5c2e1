//! The mlx5 handler's host side: the verbs objects behind each path's
//! queues (`queues`, through the run-time-loaded entry points of `verbs`),
//! their buffers mapped for the GPU (`map`), and the collective bring-up
//! that connects them and hands kernels the `struct fxg_mlx5_peer` table
//! (`setup`). Never run on a NIC (docs/IBGDA.md).

pub mod map;
pub mod queues;
pub mod setup;
pub mod verbs;
