//! The proxy service thread: runs setup/connect/register work on behalf of
//! the communicator's callers (and, through them, of peers), one job at a
//! time, parked on its channel when idle.

use crate::error::{Error, Result};
use std::sync::mpsc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// Handle on the service thread.
pub struct ServiceThread {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

impl ServiceThread {
    /// Start the thread (named `fx-service-<rank>`).
    pub fn start(rank: usize) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let handle = std::thread::Builder::new()
            .name(format!("fx-service-{rank}"))
            .spawn(move || {
                // recv() parks the thread until a job or the hang-up arrives.
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .map_err(|e| Error::Io(format!("cannot start the proxy service thread: {e}")))?;
        Ok(ServiceThread {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Run `f` on the service thread and wait for its result.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.call_watching(f, std::time::Duration::MAX, || {})
    }

    /// [`call`](Self::call), running `watch` in the calling thread whenever it
    /// has waited `every` more (the job may wait on peers for long).
    pub fn call_watching<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<R> + Send + 'static,
        every: std::time::Duration,
        mut watch: impl FnMut(),
    ) -> Result<R> {
        let (rtx, rrx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .unwrap_or_else(|_| Err(Error::Io("the proxy service job panicked".into())));
            let _ = rtx.send(r);
        });
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| Error::Destroyed("proxy service thread stopped".into()))?;
        tx.send(job)
            .map_err(|_| Error::Destroyed("proxy service thread stopped".into()))?;
        loop {
            match rrx.recv_timeout(every) {
                Ok(r) => return r,
                Err(mpsc::RecvTimeoutError::Timeout) => watch(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::Destroyed("proxy service thread stopped".into()))
                }
            }
        }
    }

    /// Stop and join.
    pub fn stop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for ServiceThread {
    fn drop(&mut self) {
        self.stop();
    }
}
