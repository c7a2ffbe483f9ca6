//! Subscriptions that end when access ends. A subscription proves its viewer's membership when
//! it starts; `until_access_lost` keeps proving it: whenever the instance hears that the
//! viewer's membership may have changed (`membership::MembershipWatch`: a notification about
//! them, or "everything changed" after the listener reconnected), it reads the memberships
//! again, and if a watched course is no longer among them the stream yields one FORBIDDEN error
//! and ends (the client sees `next` with the error, then `complete`). A subscription watching a
//! private post of someone else ends the same way when its viewer stops being staff.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;

use crate::error::AppError;
use crate::forum::courses::Role;
use crate::membership::{MembershipWatch, Memberships};
use crate::telemetry::names;

/// Pause between two readings of the memberships when PostgreSQL does not answer.
const RECHECK_RETRY: Duration = Duration::from_millis(250);

/// Who is watched, in which courses, and where to read their memberships.
pub(crate) struct AccessScope {
    pub memberships: Memberships,
    pub db: sea_orm::DatabaseConnection,
    pub user_id: i64,
    pub courses: Vec<i64>,
    /// Courses where the user must also stay staff: they watch a private post there that is
    /// not theirs, which only staff may read.
    pub staff_in: Vec<i64>,
    /// Where the memberships are read: the runtime that made the scope (the request handlers'),
    /// whichever runtime polls the subscription (`live::runtime`).
    pub home: tokio::runtime::Handle,
}

impl AccessScope {
    /// Whether the user still belongs to every watched course (as staff where it must be).
    async fn holds(&self) -> Result<bool, AppError> {
        let (memberships, db, user_id) = (self.memberships.clone(), self.db.clone(), self.user_id);
        let roles = self
            .home
            .spawn(async move { memberships.roles_of_user(&db, user_id).await })
            .await
            .map_err(|e| AppError::Internal(format!("reading the memberships failed: {e}")))??;
        Ok(self.courses.iter().all(|course| roles.contains_key(course))
            && self.staff_in.iter().all(|course| roles.get(course) == Some(&Role::Instructor)))
    }
}

/// A future that owns what it works on, so it can be kept across polls.
type Owned<O> = Pin<Box<dyn Future<Output = O> + Send>>;

/// The stream `until_access_lost` returns. The wait for a membership change is made once and
/// kept while items flow (a subscription delivering an update every 100 ms must not register
/// and drop waiters on the process-wide channels for every update); it is made again only after
/// a change was heard and checked.
struct UntilAccessLost<T> {
    items: Pin<Box<dyn Stream<Item = T> + Send>>,
    scope: Arc<AccessScope>,
    /// Waiting for the next change (None while one is being checked, or once ended).
    waiting: Option<Owned<MembershipWatch>>,
    /// Checking access after a change: nothing is delivered until it answers.
    checking: Option<Owned<(MembershipWatch, bool)>>,
    /// Told false while a change is checked and true once it passed: for items delivered
    /// outside this stream (`shared_live`), which must wait for the check too.
    gate: Option<Gate>,
    ended: bool,
}

/// Told whether items may be delivered (`UntilAccessLost::gate`).
pub(crate) type Gate = Box<dyn Fn(bool) + Send>;

fn wait_for_change(mut watch: MembershipWatch) -> Owned<MembershipWatch> {
    Box::pin(async move {
        watch.changed().await;
        watch
    })
}

impl<T> Stream for UntilAccessLost<T> {
    type Item = async_graphql::Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            // A change first: nothing more is delivered to someone who may have lost access.
            if let Some(waiting) = this.waiting.as_mut()
                && let Poll::Ready(watch) = waiting.as_mut().poll(cx)
            {
                let scope = this.scope.clone();
                this.waiting = None;
                if let Some(gate) = &this.gate {
                    gate(false);
                }
                this.checking = Some(Box::pin(async move {
                    let allowed = still_allowed(&scope).await;
                    (watch, allowed)
                }));
            }
            let Some(checking) = this.checking.as_mut() else { break };
            let Poll::Ready((watch, allowed)) = checking.as_mut().poll(cx) else { return Poll::Pending };
            this.checking = None;
            if !allowed {
                metrics::counter!(names::SUBSCRIPTIONS_REVOKED).increment(1);
                tracing::debug!(user = this.scope.user_id, "subscription ended: access lost");
                this.ended = true;
                let forbidden = AppError::Forbidden("you are no longer a member of this course".into());
                return Poll::Ready(Some(Err(forbidden.into())));
            }
            this.waiting = Some(wait_for_change(watch));
            if let Some(gate) = &this.gate {
                gate(true);
            }
        }
        match this.items.as_mut().poll_next(cx) {
            Poll::Ready(Some(item)) => Poll::Ready(Some(Ok(item))),
            Poll::Ready(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `items`, until the scope's user loses access to one of its courses: then one FORBIDDEN
/// error, and the end. A change is checked before any further item is delivered.
pub(crate) fn until_access_lost<T: Send + 'static>(
    items: impl Stream<Item = T> + Send + 'static,
    watch: MembershipWatch,
    scope: AccessScope,
) -> impl Stream<Item = async_graphql::Result<T>> + Send {
    until_access_lost_gated(items, watch, scope, None)
}

/// `until_access_lost`, also telling `gate` when items may not be delivered (false while a
/// change is checked) and when they may again (true once it passed).
pub(crate) fn until_access_lost_gated<T: Send + 'static>(
    items: impl Stream<Item = T> + Send + 'static,
    watch: MembershipWatch,
    scope: AccessScope,
    gate: Option<Gate>,
) -> impl Stream<Item = async_graphql::Result<T>> + Send {
    UntilAccessLost {
        items: Box::pin(items),
        scope: Arc::new(scope),
        waiting: Some(wait_for_change(watch)),
        checking: None,
        gate,
        ended: false,
    }
}

/// Reads the memberships until PostgreSQL answers (a subscription is not ended for an outage).
async fn still_allowed(scope: &AccessScope) -> bool {
    loop {
        match scope.holds().await {
            Ok(holds) => return holds,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read memberships to recheck a subscription; retrying");
                tokio::time::sleep(RECHECK_RETRY).await;
            }
        }
    }
}
