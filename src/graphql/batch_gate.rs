//! When a request's DataLoader batches start: only while the request's task is parked.
//!
//! async-graphql's DataLoader starts a batch on a timer (1 ms after its first key), on another
//! task. On a multi-threaded runtime that timer can fire while the request is still walking a
//! level: a page of 50 posts with 90 comments each resolves 4,500 comment objects, which takes
//! longer than a millisecond, and each firing takes the keys registered so far, so one level's
//! authors split into several statements. The results of a batch also reach the request one
//! by one, each wake followed by a short pass, so "not being polled right now" is not enough
//! either. The gate records whether the request future is being polled and whether it has been
//! woken since its last poll; a batch waits out its window, then until the request is parked
//! (not polled and not woken: every resolver that could still add a key has added it or waits
//! on something else), and only then takes its keys.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::task::{ArcWake, AtomicWaker};
use tokio::sync::Notify;

/// How long a batch collects keys before it waits for the request to park (async-graphql's
/// own default window).
pub(crate) const BATCH_WINDOW: Duration = Duration::from_millis(1);

/// Whether one request's future is being polled, or woken and about to be.
#[derive(Debug, Default)]
pub(crate) struct BatchGate {
    polling: AtomicBool,
    woken: AtomicBool,
    parked: Notify,
    /// The waker of the request's task, behind the gate's own (`ArcWake` below).
    task: AtomicWaker,
}

impl BatchGate {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Runs the request's future under this gate.
    pub(crate) fn run<F: Future>(self: &Arc<Self>, request: F) -> Gated<F> {
        Gated { request: Box::pin(request), waker: futures_util::task::waker(self.clone()), gate: self.clone() }
    }

    /// A batch future that starts only after its window, once the request is parked. The
    /// DataLoader's own delay must be zero: the batch takes its keys on its first poll.
    pub(crate) fn hold(self: &Arc<Self>, batch: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
        let gate = self.clone();
        Box::pin(async move {
            tokio::time::sleep(BATCH_WINDOW).await;
            gate.until_parked().await;
            batch.await;
        })
    }

    fn is_parked(&self) -> bool {
        !self.polling.load(Ordering::Acquire) && !self.woken.load(Ordering::Acquire)
    }

    async fn until_parked(&self) {
        loop {
            let parked = self.parked.notified();
            tokio::pin!(parked);
            // Registered before the check: a poll that ends between the two still wakes it.
            parked.as_mut().enable();
            if self.is_parked() {
                return;
            }
            parked.await;
        }
    }
}

/// The gate's waker: notes the wake, then wakes the request's task.
impl ArcWake for BatchGate {
    fn wake_by_ref(gate: &Arc<Self>) {
        gate.woken.store(true, Ordering::Release);
        gate.task.wake();
    }
}

/// A request future that tells its gate when it is being polled or woken.
pub(crate) struct Gated<F> {
    request: Pin<Box<F>>,
    waker: Waker,
    gate: Arc<BatchGate>,
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.gate.task.register(cx.waker());
        this.gate.polling.store(true, Ordering::Release);
        this.gate.woken.store(false, Ordering::Release);
        let polled = this.request.as_mut().poll(&mut Context::from_waker(&this.waker));
        this.gate.polling.store(false, Ordering::Release);
        if this.gate.is_parked() {
            this.gate.parked.notify_waiters();
        }
        polled
    }
}

/// An abandoned request (past its deadline or budget) releases the batches it held back: they
/// run, and their results go nowhere.
impl<F> Drop for Gated<F> {
    fn drop(&mut self) {
        self.gate.polling.store(false, Ordering::Release);
        self.gate.woken.store(false, Ordering::Release);
        self.gate.parked.notify_waiters();
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
        // One long pass: 20 ms of work without yielding, as a resolver walk over a big level;
        // then the request parks on the batch, as a resolver does on its loader.
        gate.run(async move {
            let handle = tokio::spawn(batch);
            std::thread::sleep(Duration::from_millis(20));
            seen.store(flag.load(Ordering::SeqCst), Ordering::SeqCst);
            handle.await.expect("batch task");
        })
        .await;
        assert!(!seen_during_pass.load(Ordering::SeqCst), "the batch started during the pass");
        assert!(started.load(Ordering::SeqCst), "and it ran once the request parked");
    }

    /// A request woken and not yet polled again (the first of a batch's results reached it) is
    /// not parked: a batch waits for that poll.
    #[tokio::test]
    async fn a_woken_request_is_not_parked_until_polled() {
        let gate = BatchGate::new();
        let task_waker: Arc<std::sync::Mutex<Option<Waker>>> = Arc::default();
        let keep = task_waker.clone();
        let mut request = Box::pin(gate.run(futures_util::future::poll_fn(move |cx| {
            *keep.lock().expect("lock") = Some(cx.waker().clone());
            Poll::<()>::Pending
        })));
        let noop = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&noop);
        assert!(request.as_mut().poll(&mut cx).is_pending());

        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let batch = tokio::spawn(gate.hold(Box::pin(async move { flag.store(true, Ordering::SeqCst) })));
        // Woken, not polled: the batch waits past its window.
        task_waker.lock().expect("lock").take().expect("a waker").wake();
        tokio::time::sleep(BATCH_WINDOW * 20).await;
        assert!(!ran.load(Ordering::SeqCst), "the batch ran while the request had a wake pending");
        // The poll that follows the wake parks it again: the batch runs.
        assert!(request.as_mut().poll(&mut cx).is_pending());
        batch.await.expect("batch task");
        assert!(ran.load(Ordering::SeqCst));
    }
}
