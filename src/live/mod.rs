//! Live updates after commit. Whoever commits a change — the like worker after a
//! batch, the sync and recount paths, the content mutations — publishes it to ONE Redis
//! Pub/Sub channel; every server process holds ONE subscription to it (`hub::run_relay`)
//! and fans messages out in-process to its websocket subscribers (`hub::Hub`). Nothing is
//! published before its transaction committed, so a subscriber never sees a number that
//! could still roll back. The websocket connections that receive them run on a runtime of
//! their own, at a lower OS priority than the request handlers (`runtime`).

pub(crate) mod fanout;
pub(crate) mod hub;
pub(crate) mod runtime;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::kv::Redis;
use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::cache::pages::CoursePages;
use crate::error::AppResult;
use crate::like_event::{CountChange, LikeTarget};
use crate::telemetry::names;

// The messages themselves are a leaf of their own: `cache::pages` applies them too, and
// `live` imports `cache`.
pub use crate::live_message::{Activity, ActivityKind, LiveMessage};

/// The committed like counts of `targets` (deleted ones left out), in one statement: what the
/// relay reads again after a gap in its subscription.
pub(crate) async fn committed_counts(db: &impl ConnectionTrait, targets: &[LikeTarget]) -> AppResult<Vec<CountChange>> {
    #[derive(FromQueryResult)]
    struct Row {
        is_post: bool,
        id: i64,
        like_count: i32,
        like_version: i64,
    }
    let (mut posts, mut comments) = (Vec::new(), Vec::new());
    for target in targets {
        match target {
            LikeTarget::Post(id) => posts.push(*id),
            LikeTarget::Comment(id) => comments.push(*id),
        }
    }
    let rows = Row::find_by_statement(crate::db::stmt(
        "SELECT true AS is_post, id, like_count, like_version FROM posts WHERE id = ANY($1) AND deleted_at IS NULL \
         UNION ALL \
         SELECT false, id, like_count, like_version FROM comments WHERE id = ANY($2) AND deleted_at IS NULL",
        [posts.into(), comments.into()],
    ))
    .all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| CountChange {
            target: if r.is_post { LikeTarget::Post(r.id) } else { LikeTarget::Comment(r.id) },
            like_count: r.like_count,
            version: r.like_version,
        })
        .collect())
}

/// A shared fan-out group's place in the hub: the target, and the caller's key of the
/// rendering (`fanout`).
pub(crate) type GroupKey = (LikeTarget, Arc<str>);

/// The members of one shared fan-out group (`fanout`), by their key in the group: each a
/// socket's mailbox and the subscription's key in it.
#[derive(Default)]
pub(crate) struct Group {
    members: std::sync::Mutex<HashMap<u64, (std::sync::Weak<fanout::Mailbox>, u64)>>,
    next_member: AtomicU64,
    /// Told when the last member leaves.
    emptied: tokio::sync::Notify,
}

/// Microseconds since the Unix epoch (the wall clock every instance shares, give or take NTP).
pub fn now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// Publishes committed changes. Best effort: a lost publication costs a stale number on a
/// screen until the next change, never a wrong number in the database, so failures are logged
/// and swallowed rather than failing the write that already committed.
#[derive(Clone)]
pub struct Publisher {
    redis: Redis,
    channel: String,
    /// This instance's course pages: each message is applied to them before it is published,
    /// so the writer's next read already shows its write.
    local_pages: Option<CoursePages>,
    /// Messages this publisher (and its clones) delivered to Redis: with the relay's
    /// `messages_received`, tells when an instance has heard its own echoes.
    published: Arc<AtomicU64>,
}

impl Publisher {
    pub fn new(redis: Redis, channel: String) -> Self {
        Self { redis, channel, local_pages: None, published: Arc::new(AtomicU64::new(0)) }
    }

    /// A publisher that also applies what it publishes to this instance's course pages.
    pub fn with_local_pages(mut self, pages: CoursePages) -> Self {
        self.local_pages = Some(pages);
        self
    }

    /// How many messages were published so far (by this publisher and its clones).
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Committed like counts, to every instance's subscribers. Called by the after-commit step
    /// (`likes::committed::AfterCommit`), which patches the post cache first.
    pub async fn counts(&self, changes: &[CountChange], committed_at_us: i64) {
        if !changes.is_empty() {
            self.publish(&LiveMessage::counts(changes, committed_at_us)).await;
        }
    }

    pub async fn activity(&self, activity: Activity) {
        self.publish(&LiveMessage::Activity { activity }).await;
    }

    /// Posts whose rows changed (an edit), for the instances' in-process caches.
    pub async fn posts_changed(&self, posts: &[i64]) {
        if !posts.is_empty() {
            self.publish(&LiveMessage::PostsChanged { posts: posts.to_vec() }).await;
        }
    }

    /// Committed view counts, for the instances' in-process caches.
    pub async fn view_counts(&self, counts: &[(i64, i64)]) {
        if !counts.is_empty() {
            self.publish(&LiveMessage::ViewCounts { counts: counts.to_vec() }).await;
        }
    }

    /// Committed notification changes, to the recipients' `notifications` subscriptions.
    pub async fn notifications(&self, changes: Vec<(i64, Option<i64>)>) {
        if !changes.is_empty() {
            self.publish(&LiveMessage::Notifications { changes }).await;
        }
    }

    /// A committed change to the notifications of every member of a course (an announcement
    /// written or withdrawn): ONE message, whatever the number of members.
    pub async fn course_notifications(&self, course_id: i64, added: Option<i64>) {
        self.publish(&LiveMessage::CourseNotifications { course_id, added }).await;
    }

    /// A user's committed read marks in a course (`post_id` None for the whole course), to
    /// that user's own `unreadCounts` streams on every instance.
    pub async fn read_marks(&self, user_id: i64, course_id: i64, post_id: Option<i64>) {
        self.publish(&LiveMessage::ReadMarks { user_id, course_id, post_id }).await;
    }

    #[tracing::instrument(name = "live.publish", level = "debug", skip_all, fields(otel.kind = "producer"))]
    async fn publish(&self, message: &LiveMessage) {
        if let Some(pages) = &self.local_pages {
            pages.apply(message);
        }
        let kind = match message {
            LiveMessage::Counts { .. } => "counts",
            LiveMessage::Activity { .. } => "activity",
            LiveMessage::PostsChanged { .. } => "posts_changed",
            LiveMessage::ViewCounts { .. } => "view_counts",
            LiveMessage::Notifications { .. } => "notifications",
            LiveMessage::CourseNotifications { .. } => "course_notifications",
            LiveMessage::ReadMarks { .. } => "read_marks",
        };
        match self.try_publish(message).await {
            Ok(()) => {
                self.published.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(names::LIVE_MESSAGES_PUBLISHED, "kind" => kind).increment(1)
            }
            Err(err) => {
                metrics::counter!(names::LIVE_PUBLISH_FAILURES).increment(1);
                tracing::warn!(error = %err, "could not publish a live update");
            }
        }
    }

    async fn try_publish(&self, message: &LiveMessage) -> AppResult<()> {
        let json = serde_json::to_string(message)
            .map_err(|e| crate::error::AppError::Internal(format!("cannot encode live message: {e}")))?;
        // With traces on, the payload carries the publisher's context: every instance relays it
        // in a span of the same trace (`hub::dispatch`).
        let payload = crate::telemetry::otel::frame_payload(json);
        crate::kv::pubsub::publish(&self.redis, &self.channel, &payload).await?;
        Ok(())
    }
}
