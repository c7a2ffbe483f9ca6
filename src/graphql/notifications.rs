//! The GraphQL side of notifications: the `notifications` connection with its unread count,
//! `markNotificationsRead`, and the stream behind the `notifications` subscription (the
//! `Notification` object is in `types`, with the other nodes). Every reader passes the viewer's courses as they are now, so
//! a notification from a course the viewer has left is neither shown, counted nor delivered.
//! The viewer's notifications include the announcements of their courses (`notifications::announcements`).

use async_graphql::connection::{Connection, Edge};
use async_graphql::{Context, Object, Result};
use futures_util::{Stream, StreamExt};
use tokio_stream::wrappers::BroadcastStream;

use super::context::{state, viewer};
use super::types::Notification;
use crate::cursor::KeyCursor;
use crate::error::{AppError, AppResult};
use crate::forum::paging::PageRequest;
use crate::notifications::{self, NotificationRow};
use crate::state::AppState;

/// The viewer's notifications with the count of those unread.
pub(crate) struct NotificationTotals {
    user_id: i64,
    courses: Vec<i64>,
}

#[Object]
impl NotificationTotals {
    /// How many of your notifications are unread (from your courses only, like the list).
    async fn unread_count(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(notifications::unread_count(&state(ctx)?.db, self.user_id, &self.courses).await?)
    }
}

/// The viewer's courses as they are now.
async fn courses_of_viewer(ctx: &Context<'_>) -> Result<(i64, Vec<i64>)> {
    let viewer = viewer(ctx)?;
    let roles = viewer.memberships(&state(ctx)?.db).await?;
    Ok((viewer.user_id, roles.keys().copied().collect()))
}

/// `Query.notifications`: newest first, forward only.
pub(crate) async fn page(
    ctx: &Context<'_>,
    first: Option<i32>,
    after: Option<String>,
) -> Result<Connection<KeyCursor, Notification, NotificationTotals>> {
    // Newest first: the cursor is an upper bound on the id, as `after` in a NEW list of posts.
    let keys = &state(ctx)?.cursor_keys;
    let page = PageRequest::new(first, keys.key(after.as_deref())?, None, None)?;
    let before = page.cursor;
    let (user_id, courses) = courses_of_viewer(ctx).await?;
    let (rows, more) = notifications::page(&state(ctx)?.db, user_id, &courses, before, page.limit).await?;
    let mut conn = Connection::with_additional_fields(before.is_some(), more, NotificationTotals { user_id, courses });
    conn.edges.extend(rows.into_iter().map(|row| Edge::new(KeyCursor::new(keys, row.id), Notification(row))));
    Ok(conn)
}

/// A notification by id, for `node(id:)`: only its recipient sees it.
pub(crate) async fn by_id(ctx: &Context<'_>, id: i64) -> Result<Notification> {
    let (user_id, courses) = courses_of_viewer(ctx).await?;
    let row = notifications::find(&state(ctx)?.db, user_id, &courses, id).await?;
    Ok(Notification(row.ok_or_else(|| AppError::not_found("notification"))?))
}

pub(crate) struct NotificationsRead {
    user_id: i64,
    courses: Vec<i64>,
}

/// What `markNotificationsRead` answers: the unread count after it.
#[Object]
impl NotificationsRead {
    /// How many of your notifications are still unread.
    async fn unread_count(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(notifications::unread_count(&state(ctx)?.db, self.user_id, &self.courses).await?)
    }
}

/// `Mutation.markNotificationsRead`.
pub(crate) async fn mark_read(ctx: &Context<'_>, up_to: i64) -> Result<NotificationsRead> {
    let (user_id, courses) = courses_of_viewer(ctx).await?;
    notifications::mark_read(&state(ctx)?.db, user_id, up_to).await?;
    // Other tabs and devices of the same user update their count.
    state(ctx)?.publisher.notifications(vec![(user_id, None)]).await;
    Ok(NotificationsRead { user_id, courses })
}

/// One update of the `notifications` subscription.
pub(crate) struct NotificationUpdate {
    notification: Option<NotificationRow>,
    unread_count: i64,
}

/// A change to your notifications: a new one, or your unread count moving (some were
/// withdrawn because their cause was deleted, or marked read elsewhere).
#[Object]
impl NotificationUpdate {
    /// The new notification; null when the update only moves the unread count.
    async fn notification(&self) -> Option<Notification> {
        self.notification.clone().map(Notification)
    }
    /// How many of your notifications are unread now.
    async fn unread_count(&self) -> i64 {
        self.unread_count
    }
}

/// What a user's notification stream heard.
enum Heard {
    /// A change on the user's channel: a new notification (or announcement) id, or None when
    /// the unread count moved otherwise (also after falling behind).
    Change(Option<i64>),
    /// The user's membership may have changed.
    Membership,
}

/// The viewer's courses, sorted, from memory when it vouches for them.
async fn courses_of(state: &AppState, user_id: i64) -> AppResult<Vec<i64>> {
    let roles = state.memberships.roles_of_user(&state.db, user_id).await?;
    let mut courses: Vec<i64> = roles.keys().copied().collect();
    courses.sort_unstable();
    Ok(courses)
}

/// The stream behind `Subscription.notifications`: each change heard for the user becomes one
/// update, read after its commit with the user's courses as they are at that moment. A new
/// notification from a course the user has left is not delivered. Announcements of the user's
/// courses arrive on the same channel (the hub fans a course's message out to its members'
/// channels); when the user's courses change, the hub is told, and the stream sends the unread
/// count that goes with the new courses.
pub(crate) async fn updates<H: Send + Sync + 'static>(
    state: &AppState,
    user_id: i64,
    held: H,
) -> AppResult<impl Stream<Item = NotificationUpdate> + use<H>> {
    // Watching before reading the courses: a change meanwhile is heard.
    let membership = state.memberships.watch(user_id);
    let (receiver, guard) = state.live.watch_notifications(user_id);
    let courses = courses_of(state, user_id).await?;
    state.live.notification_courses(user_id, &courses);
    let known = std::sync::Arc::new(std::sync::Mutex::new(courses));
    let changes = BroadcastStream::new(receiver).map(|change| Heard::Change(change.unwrap_or(None)));
    let memberships = futures_util::stream::unfold(membership, |mut watch| async move {
        watch.changed().await;
        Some((Heard::Membership, watch))
    });
    let state = state.clone();
    let held = std::sync::Arc::new((guard, held));
    Ok(futures_util::stream::select(changes, memberships).filter_map(move |heard| {
        let (state, known, held) = (state.clone(), known.clone(), held.clone());
        async move {
            let _held = held;
            let courses = match courses_of(&state, user_id).await {
                Ok(courses) => courses,
                Err(err) => {
                    tracing::warn!(error = %err, user_id, "could not read memberships for a notification update");
                    return None;
                }
            };
            let moved = {
                let mut known = known.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let moved = *known != courses;
                if moved {
                    known.clone_from(&courses);
                    state.live.notification_courses(user_id, &courses);
                }
                moved
            };
            let notification = match heard {
                // Nothing to tell unless the courses, and with them the unread count, moved.
                Heard::Membership if !moved => return None,
                Heard::Membership | Heard::Change(None) => None,
                Heard::Change(Some(id)) => match notifications::find(&state.db, user_id, &courses, id).await {
                    Ok(Some(row)) => Some(row),
                    // Withdrawn meanwhile, from a course the user has left, or not theirs to see.
                    Ok(None) => return None,
                    Err(err) => {
                        tracing::warn!(error = %err, user_id, "could not read a new notification");
                        return None;
                    }
                },
            };
            match notifications::unread_count(&state.db, user_id, &courses).await {
                Ok(unread_count) => Some(NotificationUpdate { notification, unread_count }),
                Err(err) => {
                    tracing::warn!(error = %err, user_id, "could not count unread notifications");
                    None
                }
            }
        }
    }))
}
