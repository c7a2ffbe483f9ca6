//! Live updates after commit (DESIGN §4). Whoever commits a change — the like worker after a
//! batch, the sync and recount paths, the content mutations — publishes it to ONE Redis
//! Pub/Sub channel; every server process holds ONE subscription to it (`hub::run_relay`)
//! and fans messages out in-process to its websocket subscribers (`hub::Hub`). Nothing is
//! published before its transaction committed, so a subscriber never sees a number that
//! could still roll back.

pub mod hub;

use crate::kv::Redis;
use serde::{Deserialize, Serialize};

use crate::cache::PostCache;
use crate::error::AppResult;
use crate::likes::{CountChange, LikeTarget};
use crate::telemetry::names;

/// What happened in a course, for `courseActivity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, async_graphql::Enum)]
pub enum ActivityKind {
    PostCreated,
    CommentCreated,
    ReplyCreated,
    PostDeleted,
    CommentDeleted,
    ReplyDeleted,
}

/// A committed change in a course: ids only; subscribers resolve the rest lazily.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    pub course_id: i64,
    pub kind: ActivityKind,
    /// The post, comment or reply the event is about.
    pub node_id: i64,
    pub post_id: i64,
}

/// The wire format on the Pub/Sub channel.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveMessage {
    /// `(member, like_count, version)` per target, e.g. `("p:12", 40, 57)`.
    Counts {
        counts: Vec<(String, i32, i64)>,
        /// When the transaction behind these counts committed, in microseconds since the Unix
        /// epoch by the publisher's clock (absent from older publishers). Subscribers get it as
        /// `committedAt`, so commit→client latency can be measured end to end.
        #[serde(default)]
        committed_at_us: Option<i64>,
    },
    Activity {
        activity: Activity,
    },
}

impl LiveMessage {
    pub fn counts(changes: &[CountChange], committed_at_us: i64) -> Self {
        LiveMessage::Counts {
            counts: changes.iter().map(|c| (c.target.member(), c.like_count, c.version)).collect(),
            committed_at_us: Some(committed_at_us),
        }
    }

    /// The counts of a `Counts` message, skipping members that do not parse.
    pub fn count_changes(counts: &[(String, i32, i64)]) -> Vec<CountChange> {
        counts
            .iter()
            .filter_map(|(member, like_count, version)| {
                LikeTarget::parse_member(member).map(|target| CountChange {
                    target,
                    like_count: *like_count,
                    version: *version,
                })
            })
            .collect()
    }
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
    /// Every path that commits a like count (worker, sync, recount) publishes it here, so this
    /// is also where cached posts learn their new counts.
    post_cache: Option<PostCache>,
}

impl Publisher {
    pub fn new(redis: Redis, channel: String) -> Self {
        Self { redis, channel, post_cache: None }
    }

    /// Also patches committed like counts into the post cache.
    pub fn with_post_cache(mut self, cache: PostCache) -> Self {
        self.post_cache = Some(cache);
        self
    }

    /// Committed counts: into cached posts first (a subscriber reloading the post sees the new
    /// count), then to every instance's subscribers. Every caller calls this right after its
    /// COMMIT returned, so the time taken on entry is the commit time as this process saw it.
    pub async fn counts(&self, changes: &[CountChange]) {
        if !changes.is_empty() {
            let committed_at_us = now_micros();
            if let Some(cache) = &self.post_cache {
                cache.like_counts_committed(changes).await;
            }
            self.publish(&LiveMessage::counts(changes, committed_at_us)).await;
        }
    }

    pub async fn activity(&self, activity: Activity) {
        self.publish(&LiveMessage::Activity { activity }).await;
    }

    async fn publish(&self, message: &LiveMessage) {
        let kind = match message {
            LiveMessage::Counts { .. } => "counts",
            LiveMessage::Activity { .. } => "activity",
        };
        match self.try_publish(message).await {
            Ok(()) => metrics::counter!(names::LIVE_MESSAGES_PUBLISHED, "kind" => kind).increment(1),
            Err(err) => {
                metrics::counter!(names::LIVE_PUBLISH_FAILURES).increment(1);
                tracing::warn!(error = %err, "could not publish a live update");
            }
        }
    }

    async fn try_publish(&self, message: &LiveMessage) -> AppResult<()> {
        let payload = serde_json::to_string(message)
            .map_err(|e| crate::error::AppError::Internal(format!("cannot encode live message: {e}")))?;
        let mut conn = self.redis.clone();
        let _: i64 = redis::cmd("PUBLISH").arg(&self.channel).arg(payload).query_async(&mut conn).await?;
        Ok(())
    }
}
