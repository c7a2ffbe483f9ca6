//! Test hooks: a `Gate` that a test closes to hold a step of the running application at a
//! chosen point — a post cache load after its SQL and before its store, a timeline rebuild after
//! its SQL and before its fill — so that a race can be shown step by step instead of by sleeping
//! and hoping. Passing an open gate is one uncontended read lock: free in production.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedRwLockWriteGuard, RwLock};

#[derive(Default)]
pub struct Gate {
    lock: Arc<RwLock<()>>,
    reached: AtomicU64,
}

impl Gate {
    /// Closes the gate until the guard is dropped: every step that reaches it waits.
    pub async fn hold(&self) -> OwnedRwLockWriteGuard<()> {
        self.lock.clone().write_owned().await
    }

    /// How many steps have reached the gate so far (held or not).
    pub fn reached(&self) -> u64 {
        self.reached.load(Ordering::SeqCst)
    }

    /// Called by the step: counts it, and waits while the gate is closed.
    pub async fn pass(&self) {
        self.reached.fetch_add(1, Ordering::SeqCst);
        let _open = self.lock.read().await;
    }
}
