//! Subscriptions that end when access ends. A subscription proves its viewer's membership when
//! it starts; `until_access_lost` keeps proving it: whenever the instance hears that the
//! viewer's membership may have changed (`membership::MembershipWatch`: a notification about
//! them, or "everything changed" after the listener reconnected), it reads the memberships
//! again, and if a watched course is no longer among them the stream yields one FORBIDDEN error
//! and ends (the client sees `next` with the error, then `complete`). A subscription watching a
//! private post of someone else ends the same way when its viewer stops being staff.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};

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
}

impl AccessScope {
    /// Whether the user still belongs to every watched course (as staff where it must be).
    async fn holds(&self) -> Result<bool, AppError> {
        let roles = self.memberships.roles_of_user(&self.db, self.user_id).await?;
        Ok(self.courses.iter().all(|course| roles.contains_key(course))
            && self.staff_in.iter().all(|course| roles.get(course) == Some(&Role::Instructor)))
    }
}

struct Running<T> {
    items: Pin<Box<dyn Stream<Item = T> + Send>>,
    watch: MembershipWatch,
    scope: AccessScope,
}

/// `items`, until the scope's user loses access to one of its courses: then one FORBIDDEN
/// error, and the end. A change is checked before any further item is delivered.
pub(crate) fn until_access_lost<T: Send + 'static>(
    items: impl Stream<Item = T> + Send + 'static,
    watch: MembershipWatch,
    scope: AccessScope,
) -> impl Stream<Item = async_graphql::Result<T>> + Send {
    let running = Running { items: Box::pin(items), watch, scope };
    futures_util::stream::unfold(Some(running), |running| async move {
        let mut running = running?;
        loop {
            tokio::select! {
                // A change first: nothing more is delivered to someone who may have lost access.
                biased;
                () = running.watch.changed() => {
                    if !still_allowed(&running.scope).await {
                        metrics::counter!(names::SUBSCRIPTIONS_REVOKED).increment(1);
                        tracing::debug!(user = running.scope.user_id, "subscription ended: access lost");
                        let forbidden = AppError::Forbidden("you are no longer a member of this course".into());
                        return Some((Err(forbidden.into()), None));
                    }
                }
                item = running.items.next() => {
                    return item.map(|item| (Ok(item), Some(running)));
                }
            }
        }
    })
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
