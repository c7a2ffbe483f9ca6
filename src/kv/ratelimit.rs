//! Per-user rate limits in Redis (fixed window, one atomic script), shared by every instance:
//! like toggles, every other write (`WriteLimits`: posts, comments and replies, edits,
//! deletes; view starts are limited by `views`, in the script that also bounds open tickets),
//! and searches that look for matches afresh (`cache::search::FreshSearches`).
//! The window logic is `lua/fixed_window.lua`, which the buffered like toggle and the view
//! start also run inside their own scripts (one round trip for the limit and the write).

use std::time::Duration;

use crate::kv::Redis;
use redis::Script;

use crate::config::Settings;
use crate::error::{AppError, AppResult};
use crate::kv::keys::Keys;
use crate::telemetry::names;

/// Allows `limit` events per `window` per key; `limit == 0` disables the check.
#[derive(Clone)]
pub struct RateLimiter {
    redis: Redis,
    script: std::sync::Arc<Script>,
    limit: u32,
    window: Duration,
    /// What is counted, plural, for the refusal's message ("likes and unlikes").
    what: &'static str,
}

impl RateLimiter {
    pub fn new(redis: Redis, limit: u32, window: Duration, what: &'static str) -> Self {
        let script = std::sync::Arc::new(crate::kv::script(&[
            include_str!("../../lua/fixed_window.lua"),
            include_str!("../../lua/rate_limit.lua"),
        ]));
        Self { redis, script, limit, window, what }
    }

    /// Events allowed per window (0: no limit).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// Counts one event against `key`, or fails with RATE_LIMITED (counting nothing else).
    pub async fn check(&self, key: &str) -> AppResult<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let mut conn = self.redis.clone();
        let retry_after_ms: u64 =
            self.script.key(key).arg(self.limit).arg(self.window.as_millis() as u64).invoke_async(&mut conn).await?;
        if retry_after_ms > 0 {
            return Err(self.refusal(retry_after_ms));
        }
        Ok(())
    }

    /// The RATE_LIMITED error of this limit, the window resetting in `retry_after_ms`.
    pub fn refusal(&self, retry_after_ms: u64) -> AppError {
        AppError::RateLimited {
            what: format!(
                "too many {}: at most {} per {}",
                self.what,
                self.limit,
                humantime::format_duration(self.window)
            ),
            retry_after_ms,
        }
    }
}

/// The writes limited per user, each kind with its own setting and window counter. A kind
/// groups writes that cost alike: a reply is a comment, an edit of a post or of a comment is
/// an edit, a deletion of either is a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// `createPost`.
    Post,
    /// `createComment`, `createReply`.
    Comment,
    /// `editPost`, `editComment`.
    Edit,
    /// `deletePost`, `deleteComment`.
    Delete,
}

impl WriteKind {
    /// The kind's name in its Redis key and in the `kind` label of `write_limit_refusals_total`.
    pub fn name(self) -> &'static str {
        match self {
            WriteKind::Post => "post",
            WriteKind::Comment => "comment",
            WriteKind::Edit => "edit",
            WriteKind::Delete => "delete",
        }
    }
}

/// Every window of a write limit is one minute: the settings say "per minute".
pub(crate) const WRITE_WINDOW: Duration = Duration::from_secs(60);

/// The per-user limits on content writes. A mutation checks its limit after authentication
/// and its cheap argument checks, before any database work: a refused write has read and
/// written nothing. A write refused later (NOT_FOUND, FORBIDDEN) has been counted: probing
/// costs budget like writing does. When Redis cannot be reached the check fails with
/// UNAVAILABLE and the write is not made, as the like limit does: an unbounded write path
/// for as long as Redis is down is what the limit exists to prevent.
#[derive(Clone)]
pub struct WriteLimits {
    keys: Keys,
    posts: RateLimiter,
    comments: RateLimiter,
    edits: RateLimiter,
    deletes: RateLimiter,
}

impl WriteLimits {
    pub fn new(redis: Redis, keys: Keys, settings: &Settings) -> Self {
        let limiter = |limit, what| RateLimiter::new(redis.clone(), limit, WRITE_WINDOW, what);
        Self {
            keys,
            posts: limiter(settings.post_rate_per_minute, "new posts"),
            comments: limiter(settings.comment_rate_per_minute, "new comments and replies"),
            edits: limiter(settings.edit_rate_per_minute, "edits"),
            deletes: limiter(settings.delete_rate_per_minute, "deletions"),
        }
    }

    /// The limiter of a kind of write.
    pub fn limiter(&self, kind: WriteKind) -> &RateLimiter {
        match kind {
            WriteKind::Post => &self.posts,
            WriteKind::Comment => &self.comments,
            WriteKind::Edit => &self.edits,
            WriteKind::Delete => &self.deletes,
        }
    }

    /// Counts one write of `kind` by `user_id` (one script call), or refuses it with
    /// RATE_LIMITED and `retryAfterMs`.
    pub async fn check(&self, user_id: i64, kind: WriteKind) -> AppResult<()> {
        let outcome = self.limiter(kind).check(&self.keys.write_rate(user_id, kind.name())).await;
        if let Err(AppError::RateLimited { .. }) = &outcome {
            metrics::counter!(names::WRITE_LIMIT_REFUSALS, "kind" => kind.name()).increment(1);
        }
        outcome
    }
}
