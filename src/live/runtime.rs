//! The websocket connections' own runtime: worker threads of their own, at a lower OS
//! priority (`LIVE_NICE`) than the request handlers' runtime.
//!
//! Why: a fan-out to thousands of watchers is elastic. Every socket takes the newest count
//! when its connection runs, so whatever CPU the connections get, they use, and on one
//! runtime they take it from the likes and pages queued beside them. On threads the kernel
//! schedules after the handlers', the handlers run first and the frames coalesce: a watcher
//! gets fewer frames under a storm, each carrying the newest count (a frame's age is bounded
//! by the coalescing interval, not by how often the socket gets one).
//!
//! What runs here: each connection's loop (reading, writing, keepalive) and the shared
//! subscriptions' frames. What does not: the schema's execution of a socket's operations,
//! the access rechecks and the groups' renders, which run on the handlers' runtime (the
//! `home` handle), so that a database or Redis connection a socket's work opens is driven by
//! the handlers' threads, never by these lower-priority ones.

use tokio::runtime::{Builder, Handle, Runtime};

use crate::error::{AppError, AppResult};

/// The runtime, shut down (without waiting for its tasks) when dropped.
pub(crate) struct LiveRuntime {
    runtime: Option<Runtime>,
}

impl LiveRuntime {
    /// `threads` workers at `nice` (0 to 19); no runtime of its own when `threads` is 0.
    pub(crate) fn start(threads: usize, nice: i32) -> AppResult<Self> {
        if threads == 0 {
            return Ok(Self { runtime: None });
        }
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("live-ws")
            .enable_all()
            .on_thread_start(move || lower_priority(nice))
            .build()
            .map_err(|e| AppError::Internal(format!("cannot start the websockets' runtime: {e}")))?;
        tracing::info!(threads, nice, "websocket connections run on their own runtime");
        Ok(Self { runtime: Some(runtime) })
    }

    /// Where connections are spawned; None: on the caller's runtime.
    pub(crate) fn handle(&self) -> Option<Handle> {
        self.runtime.as_ref().map(|runtime| runtime.handle().clone())
    }

    /// Waits until every connection on it has ended, or `deadline`: at shutdown each was told
    /// to close with 1001, and dropping the runtime before would cut the ones its threads had
    /// not reached yet. Nothing else runs there, so its live tasks are its connections.
    pub(crate) async fn drain(&self, deadline: tokio::time::Instant) {
        let Some(runtime) = &self.runtime else { return };
        let metrics = runtime.handle().metrics();
        while metrics.num_alive_tasks() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for LiveRuntime {
    fn drop(&mut self) {
        // Dropped inside the server's async code: a blocking shutdown would panic there.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Raises the calling thread's nice value by `nice` (Linux schedules threads, so this is the
/// thread's alone). Lowering a priority needs no privilege; a failure is logged, not fatal.
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    // SAFETY: getpriority and setpriority read their arguments only; `who` 0 is the calling
    // thread on Linux. The thread starts at the process's nice value; this one is `nice` higher.
    let result = unsafe {
        let base = libc::getpriority(libc::PRIO_PROCESS, 0);
        libc::setpriority(libc::PRIO_PROCESS, 0, (base + nice).min(19))
    };
    if result != 0 {
        tracing::warn!(nice, error = %std::io::Error::last_os_error(), "cannot lower the websocket threads' priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_threads_run_at_the_nice_value_given_and_zero_threads_make_no_runtime() {
        assert!(LiveRuntime::start(0, 5).expect("starts").handle().is_none());
        let live = LiveRuntime::start(1, 7).expect("starts");
        let handle = live.handle().expect("a runtime of its own");
        let nice_there = handle.block_on(async {
            tokio::task::spawn(async {
                // SAFETY: getpriority reads its arguments only.
                unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
            })
            .await
            .expect("runs")
        });
        // SAFETY: as above.
        let nice_here = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(nice_there, (nice_here + 7).min(19));
    }
}
