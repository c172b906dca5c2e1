//! The proxy service thread: makes the communicator's connections
//! ([`Connecting`]) and runs its callers' jobs on them, parked on its channel
//! when nothing is being made.
//!
//! Between jobs it steps the connections being made, waiting for the peers'
//! setup messages in slices; a caller that hands it a job while it waits
//! wakes it with a message to itself ([`super::connect::wake_key`]), so jobs
//! run at once and several calls' connections are made side by side.

use super::connect::{wake_key, Connecting, Hooks, Need, Reply};
use crate::error::{Error, Result};
use crate::shared::CommShared;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

type Job = Box<dyn FnOnce(&mut Connecting) + Send>;

/// Handle on the service thread.
pub struct ServiceThread {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
    /// Set while the thread waits for setup messages: a new job must wake it.
    listening: Arc<AtomicBool>,
    shared: Arc<CommShared>,
}

impl ServiceThread {
    /// Start the thread (named `fx-service-<rank>`).
    pub(crate) fn start(shared: Arc<CommShared>, mut hooks: Hooks) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let listening = Arc::new(AtomicBool::new(false));
        let (sh, ls) = (shared.clone(), listening.clone());
        let handle = std::thread::Builder::new()
            .name(format!("fx-service-{}", shared.rank))
            .spawn(move || {
                ferrocx_sdk::cuda::relax_capture_checks_on_this_thread();
                let wake = wake_key(sh.rank);
                let mut work = Connecting::default();
                loop {
                    let job = if work.is_idle() {
                        // recv() parks the thread until a job or the hang-up arrives.
                        match rx.recv() {
                            Ok(job) => job,
                            Err(_) => break,
                        }
                    } else {
                        // Listening before looking: a job sent after this look
                        // sees the flag and wakes the step's wait.
                        ls.store(true, Ordering::SeqCst);
                        match rx.try_recv() {
                            Ok(job) => {
                                ls.store(false, Ordering::SeqCst);
                                job
                            }
                            Err(mpsc::TryRecvError::Empty) => {
                                work.step(&sh, &mut hooks, wake);
                                ls.store(false, Ordering::SeqCst);
                                continue;
                            }
                            Err(mpsc::TryRecvError::Disconnected) => break,
                        }
                    };
                    job(&mut work);
                }
                work.fail(Error::Destroyed("proxy service thread stopped".into()));
            })
            .map_err(|e| Error::Io(format!("cannot start the proxy service thread: {e}")))?;
        Ok(ServiceThread {
            tx: Some(tx),
            handle: Some(handle),
            listening,
            shared,
        })
    }

    fn send(&self, job: Job) -> Result<()> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| Error::Destroyed("proxy service thread stopped".into()))?;
        tx.send(job)
            .map_err(|_| Error::Destroyed("proxy service thread stopped".into()))?;
        self.wake();
        Ok(())
    }

    /// End the thread's wait for setup messages, if it is in one.
    fn wake(&self) {
        if self.listening.load(Ordering::SeqCst) {
            let (me, tag) = wake_key(self.shared.rank);
            let _ = self.shared.bootstrap.send(me, tag, &[]);
        }
    }

    /// Run `f` on the service thread and wait for what it answers (it may
    /// keep the reply and answer later), running `watch` in the calling
    /// thread whenever it has waited `every` more (the answer may wait on
    /// peers for long).
    fn call_watching<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connecting, Box<dyn FnOnce(Result<R>) + Send>) + Send + 'static,
        every: Duration,
        mut watch: impl FnMut(),
    ) -> Result<R> {
        let (rtx, rrx) = mpsc::sync_channel(1);
        self.send(Box::new(move |work| {
            let reply = Box::new(move |r| {
                let _ = rtx.send(r);
            });
            // A panicking job drops `reply`: the caller hears "stopped" below.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(work, reply)));
        }))?;
        loop {
            match rrx.recv_timeout(every) {
                Ok(r) => return r,
                Err(mpsc::RecvTimeoutError::Timeout) => watch(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::Io(
                        "the proxy service thread stopped or its job panicked".into(),
                    ))
                }
            }
        }
    }

    /// Announce the send sides of `needs` on the service thread, which goes
    /// on making them (and their receive sides) in the background.
    pub(crate) fn begin(&self, needs: Vec<Need>) -> Result<()> {
        let shared = self.shared.clone();
        self.call_watching(
            move |work, reply| reply(work.begin(&shared, &needs)),
            Duration::MAX,
            || {},
        )
    }

    /// Wait until none of `needs` is being made (made, or failed: the
    /// error), running `watch` every `every`.
    pub(crate) fn when_made(
        &self,
        needs: Vec<Need>,
        every: Duration,
        watch: impl FnMut(),
    ) -> Result<()> {
        self.call_watching(
            move |work, reply: Reply| work.when_made(needs, reply),
            every,
            watch,
        )
    }

    /// Stop and join.
    pub fn stop(&mut self) {
        self.tx.take();
        self.wake();
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
