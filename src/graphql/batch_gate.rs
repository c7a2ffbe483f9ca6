//! When a request's DataLoader batches start: only while the request's task is parked.
//!
//! async-graphql's DataLoader starts a batch on a timer (1 ms after its first key), on another
//! task. On a multi-threaded runtime that timer can fire while the request is still walking a
//! level: a page of 50 posts with 90 comments each resolves 4,500 comment objects in one pass,
//! which takes longer than a millisecond, and each firing takes the keys registered so far, so
//! one level's authors split into dozens of statements. The gate records whether the request
//! future is being polled; a batch waits out its window, then until the request is parked
//! (every resolver that could still add a key has added it or is waiting itself), and only
//! then takes its keys. A level's keys therefore land in one batch however long its pass runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

/// How long a batch collects keys before it waits for the request to park (async-graphql's
/// own default window).
pub const BATCH_WINDOW: Duration = Duration::from_millis(1);

/// Whether one request's future is being polled right now.
#[derive(Debug, Default)]
pub struct BatchGate {
    polling: AtomicBool,
    parked: Notify,
}

impl BatchGate {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Runs the request's future under this gate.
    pub fn run<F: Future>(self: &Arc<Self>, request: F) -> Gated<F> {
        Gated { request: Box::pin(request), gate: self.clone() }
    }

    /// A batch future that starts only after its window, once the request is parked. The
    /// DataLoader's own delay must be zero: the batch takes its keys on its first poll.
    pub fn hold(self: &Arc<Self>, batch: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
        let gate = self.clone();
        Box::pin(async move {
            tokio::time::sleep(BATCH_WINDOW).await;
            gate.until_parked().await;
            batch.await;
        })
    }

    async fn until_parked(&self) {
        loop {
            let parked = self.parked.notified();
            tokio::pin!(parked);
            // Registered before the check: a poll that ends between the two still wakes it.
            parked.as_mut().enable();
            if !self.polling.load(Ordering::Acquire) {
                return;
            }
            parked.await;
        }
    }
}

/// A request future that tells its gate when it is being polled.
pub struct Gated<F> {
    request: Pin<Box<F>>,
    gate: Arc<BatchGate>,
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.gate.polling.store(true, Ordering::Release);
        let polled = self.request.as_mut().poll(cx);
        self.gate.polling.store(false, Ordering::Release);
        self.gate.parked.notify_waiters();
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch held while the request is mid-poll starts only after that poll returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_batch_waits_for_the_request_to_park() {
        let gate = BatchGate::new();
        let started = Arc::new(AtomicBool::new(false));
        let seen_during_pass = Arc::new(AtomicBool::new(false));
        let flag = started.clone();
        let batch = gate.hold(Box::pin(async move { flag.store(true, Ordering::SeqCst) }));
        let (seen, flag) = (seen_during_pass.clone(), started.clone());
        // One long pass: 20 ms of work without yielding, as a resolver walk over a big level.
        let request = gate.run(async move {
            let handle = tokio::spawn(batch);
            std::thread::sleep(Duration::from_millis(20));
            seen.store(flag.load(Ordering::SeqCst), Ordering::SeqCst);
            handle
        });
        let handle = request.await;
        handle.await.expect("batch task");
        assert!(!seen_during_pass.load(Ordering::SeqCst), "the batch started during the pass");
        assert!(started.load(Ordering::SeqCst), "and it ran once the request parked");
    }
}
