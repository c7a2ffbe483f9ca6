//! The per-request SQL statement budget: the last fence behind the cost model and the batched
//! loaders. A request runs inside `StatementBudget::scope` (a task-local, carried into its
//! DataLoaders' spawned batches by `StatementBudget::spawn`); every statement the requests'
//! pool runs is charged to the budget of the task that ran it (`charge_current`, from the pool's
//! metric callback). When a request goes over, `exceeded` resolves and the HTTP layer abandons
//! it with STATEMENT_BUDGET_EXCEEDED; statements still in flight are cancelled by PostgreSQL at
//! `STATEMENT_TIMEOUT` and a transaction dropped unfinished rolls back.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

tokio::task_local! {
    static CURRENT: Arc<StatementBudget>;
}

/// How many statements one request may run, and how many it has.
#[derive(Debug)]
pub(crate) struct StatementBudget {
    limit: u64,
    used: AtomicU64,
    over: Notify,
}

impl StatementBudget {
    pub(crate) fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self { limit, used: AtomicU64::new(0), over: Notify::new() })
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Runs `work` with this budget charged for its statements.
    pub(crate) async fn scope<F: Future>(self: &Arc<Self>, work: F) -> F::Output {
        CURRENT.scope(self.clone(), work).await
    }

    /// Spawns one of the request's DataLoader batches, charged to this budget.
    pub(crate) fn spawn(self: &Arc<Self>, batch: BoxFuture<'static, ()>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(CURRENT.scope(self.clone(), batch))
    }

    /// Resolves once the request has run more statements than its limit.
    pub(crate) async fn exceeded(&self) {
        let notified = self.over.notified();
        tokio::pin!(notified);
        // Registered before the check: a charge between the two still wakes it.
        notified.as_mut().enable();
        if self.used() > self.limit {
            return;
        }
        notified.await;
    }

    fn charge(&self) {
        if self.used.fetch_add(1, Ordering::Relaxed) + 1 == self.limit + 1 {
            self.over.notify_waiters();
        }
    }
}

/// Charges one statement to the running request's budget, if the task runs for one.
pub(crate) fn charge_current() {
    let _ = CURRENT.try_with(|budget| budget.charge());
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{StatementBudget, charge_current};

    #[tokio::test]
    async fn a_request_over_its_budget_is_told_and_others_are_not_charged() {
        let budget = StatementBudget::new(3);
        let other = StatementBudget::new(3);
        budget
            .scope(async {
                charge_current();
                charge_current();
                charge_current();
            })
            .await;
        assert!(tokio::time::timeout(Duration::from_millis(50), budget.exceeded()).await.is_err(), "3 of 3");
        let spawned = budget.spawn(Box::pin(async { charge_current() }));
        spawned.await.expect("spawned batch");
        assert_eq!(budget.used(), 4, "a loader's batch is charged to its request");
        assert!(tokio::time::timeout(Duration::from_millis(50), budget.exceeded()).await.is_ok());
        assert_eq!(other.used(), 0);
        charge_current(); // outside any request: charged to nobody
        assert_eq!(budget.used(), 4);
    }
}
