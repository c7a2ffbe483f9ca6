//! Likes on posts and comments: idempotent like/unlike and the viewer's "liked" flags, at
//! three levels, chosen by `LIKE_MODE` (docs/architecture.md, and docs/operations.md "Running likes in production"):
//!
//! - `sync` (level 1, `sync.rs`): one statement per toggle, counter from RETURNING.
//! - `recount` (level 2, `recount.rs`): the row is written at once, the counter is recounted
//!   later by a job for targets marked dirty.
//! - `buffered` (level 3, `buffered.rs`, the default): Redis liked-sets answer; the toggle
//!   script appends an event to the shard's stream; the worker (`crate::worker`) applies
//!   events in batches through `apply.rs`.
//!
//! The caller (the GraphQL mutation) has already checked the trust boundary: the target is
//! live, in the course, and the user is a member. The database's primary key on
//! (target, user) is the last line against double likes at every level.

pub(crate) mod apply;
pub(crate) mod buffered;
pub(crate) mod committed;
pub(crate) mod first_touch;
pub(crate) mod recount;
pub(crate) mod sync;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::kv::Redis;
use sea_orm::{DatabaseConnection, FromQueryResult};

use crate::config::LikeMode;
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::kv::keys::Keys;
use crate::kv::ratelimit::RateLimiter;
use crate::telemetry::names;
use committed::AfterCommit;

pub use crate::like_event::LikeTarget;
pub(crate) use crate::like_event::{CountChange, LikeEvent};

/// The tables a like touches for one kind of target: the like rows, their key column, and the
/// table holding the counter. Level 1 and the recount build their SQL from it.
pub(crate) struct LikeTables {
    pub likes: &'static str,
    pub key: &'static str,
    pub target: &'static str,
    pub make: fn(i64) -> LikeTarget,
}

impl LikeTables {
    pub(crate) const POST: LikeTables =
        LikeTables { likes: "post_likes", key: "post_id", target: "posts", make: LikeTarget::Post };
    pub(crate) const COMMENT: LikeTables =
        LikeTables { likes: "comment_likes", key: "comment_id", target: "comments", make: LikeTarget::Comment };

    /// `SELECT id, course_id` of target `$1` when it is live and user `$2` is a member of its
    /// course: what every synchronous like insert selects from, so a like row is written only
    /// for a member (the like tables have no foreign key to users; see migration 0005), and
    /// names the course it was proved in (migration 0021).
    pub(crate) fn live_target_of_member_sql(&self) -> String {
        // A comment's post must be live too, as the worker's batch requires (`likes::apply`).
        let course =
            if self.target == "comments" { "JOIN posts p ON p.id = t.post_id AND p.deleted_at IS NULL" } else { "" };
        let course_id = if self.target == "comments" { "p.course_id" } else { "t.course_id" };
        format!(
            "SELECT t.id, {course_id} AS course_id FROM {target} t {course} \
             JOIN course_members m ON m.course_id = {course_id} AND m.user_id = $2 \
             WHERE t.id = $1 AND t.deleted_at IS NULL",
            target = self.target
        )
    }
}

impl LikeTarget {
    /// The tables of this target's kind, and its id.
    pub(crate) fn tables(&self) -> (LikeTables, i64) {
        match *self {
            LikeTarget::Post(id) => (LikeTables::POST, id),
            LikeTarget::Comment(id) => (LikeTables::COMMENT, id),
        }
    }
}

/// How the caller proved that the user may like in the course.
#[derive(Debug)]
pub enum Membership {
    /// PostgreSQL said the user is a member, in this request.
    Verified,
    /// As `Verified`, on a user's first touch in buffered mode: the same statement that read the
    /// memberships read the user's likes in the course (`members`, as liked-set members), with
    /// `xmin`, the oldest transaction its snapshot may not see. The toggle loads them if the set
    /// is not loaded, unless a transaction at or after `xmin` applied likes of the set since
    /// (`lua/like_toggle.lua`), instead of asking PostgreSQL again.
    Loaded { xmin: String, members: Vec<String> },
    /// PostgreSQL could not be asked (`why` is the error). A buffered like still goes ahead when
    /// the user's liked-set for the course is already loaded in Redis: it was loaded after a
    /// verified check, and the worker checks membership again when it applies the like (a user
    /// removed meanwhile gets nothing written). Anything that needs PostgreSQL answers `why`.
    Unverified { why: AppError },
}

/// Counters operators and benchmarks read (exported as metrics by the operations layer).
#[derive(Debug, Default)]
pub struct LikeStats {
    /// Toggles that changed something / that repeated the current state.
    pub toggles_changed: AtomicU64,
    pub toggles_repeated: AtomicU64,
    /// SMISMEMBER commands sent for `likedByMe`.
    pub smismember_calls: AtomicU64,
    /// Liked-sets loaded from PostgreSQL.
    pub set_warms: AtomicU64,
}

impl LikeStats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Writes likes and answers "did this user like these?". Cheap to clone.
#[derive(Clone)]
pub struct Likes {
    db: DatabaseConnection,
    mode: LikeMode,
    limiter: RateLimiter,
    keys: Keys,
    buffered: buffered::LikedSets,
    recount: recount::DirtyMarks,
    after_commit: AfterCommit,
    stats: Arc<LikeStats>,
    /// Users' first buffered likes here, read together when they arrive together.
    first_touches: Arc<first_touch::FirstTouches>,
}

impl Likes {
    pub fn new(
        db: DatabaseConnection,
        redis: Redis,
        mode: LikeMode,
        limiter: RateLimiter,
        keys: Keys,
        set_ttl: Duration,
        after_commit: AfterCommit,
    ) -> Self {
        let stats = Arc::new(LikeStats::default());
        Self {
            buffered: buffered::LikedSets::new(
                db.clone(),
                redis.clone(),
                keys.clone(),
                set_ttl,
                limiter.clone(),
                stats.clone(),
            ),
            recount: recount::DirtyMarks::new(redis, keys.clone()),
            first_touches: first_touch::FirstTouches::new(db.clone()),
            db,
            mode,
            limiter,
            keys,
            after_commit,
            stats,
        }
    }

    /// First touches read on `pool` (`db::connect_first_touch`, whose generic plans suit their
    /// batches) instead of the requests' pool.
    pub(crate) fn with_first_touch_pool(mut self, pool: DatabaseConnection) -> Self {
        self.first_touches = first_touch::FirstTouches::new(pool);
        self
    }

    /// A user's memberships and their likes in `course_id`, for their first buffered like on
    /// this instance (`graphql::access`): one statement, shared with the first touches beside it.
    pub(crate) async fn first_touch(&self, user_id: i64, course_id: i64) -> AppResult<buffered::FirstTouch> {
        self.first_touches.read(user_id, course_id).await
    }

    /// The first-touch reads of this instance (the waiting, and a test hook that counts statements).
    pub fn first_touches(&self) -> &first_touch::FirstTouches {
        &self.first_touches
    }

    pub fn mode(&self) -> LikeMode {
        self.mode
    }

    pub fn stats(&self) -> &LikeStats {
        &self.stats
    }

    pub fn liked_sets(&self) -> &buffered::LikedSets {
        &self.buffered
    }

    /// Likes (`liked = true`) or unlikes `target` in `course_id` for `user_id`; repeating
    /// either is a no-op. `current` is the count the caller just read (PostgreSQL or the post
    /// cache). Returns the count to show: exact, with its version, in sync mode; in the deferred
    /// modes the committed count adjusted by this toggle, still carrying the version it was
    /// adjusted from (the worker or the recount job commits the exact one, with a higher
    /// version, shortly).
    #[tracing::instrument(name = "likes.set", skip(self, current, membership), fields(mode = ?self.mode))]
    pub async fn set(
        &self,
        user_id: i64,
        course_id: i64,
        target: LikeTarget,
        liked: bool,
        current: ShownCount,
        membership: Membership,
    ) -> AppResult<ShownCount> {
        let outcome = self.toggle(user_id, course_id, target, liked, current, membership).await;
        let result = match &outcome {
            Ok((_, true)) => "changed",
            Ok((_, false)) => "unchanged",
            Err(AppError::RateLimited { .. }) => "rate_limited",
            Err(err) if err.unreachable().is_some() => "unavailable",
            Err(_) => "failed",
        };
        metrics::counter!(names::LIKE_TOGGLES, "mode" => mode_name(self.mode), "result" => result).increment(1);
        let (count, changed) = outcome?;
        LikeStats::bump(if changed { &self.stats.toggles_changed } else { &self.stats.toggles_repeated });
        Ok(count)
    }

    /// `set` without the bookkeeping: the count to show and whether anything changed.
    async fn toggle(
        &self,
        user_id: i64,
        course_id: i64,
        target: LikeTarget,
        liked: bool,
        current: ShownCount,
        membership: Membership,
    ) -> AppResult<(ShownCount, bool)> {
        if self.mode != LikeMode::Buffered {
            // Levels 1 and 2 write to PostgreSQL now: without it there is nothing to do.
            if let Membership::Unverified { why } = membership {
                return Err(why);
            }
            // Buffered mode counts the toggle inside its toggle script (same round trip).
            self.limiter.check(&self.keys.like_rate(user_id)).await?;
        }
        Ok(match self.mode {
            LikeMode::Sync => {
                let outcome = sync::set(&self.db, user_id, target, liked)
                    .await?
                    .ok_or_else(|| AppError::not_found(target.kind_name()))?;
                if outcome.changed {
                    self.buffered.forget(user_id, course_id, outcome.xid).await;
                    // The statement autocommitted: the count is final.
                    let change = CountChange { target, like_count: outcome.like_count, version: outcome.version };
                    self.after_commit.one_like(change).await;
                }
                (ShownCount { like_count: outcome.like_count, version: outcome.version }, outcome.changed)
            }
            LikeMode::Recount => {
                let changed_by = recount::set_in_transaction(&self.db, user_id, target, liked).await?;
                let changed = changed_by.is_some();
                if changed {
                    self.buffered.forget(user_id, course_id, changed_by).await;
                    self.recount.mark(target).await?;
                }
                (adjusted(current, liked, changed), changed)
            }
            LikeMode::Buffered => {
                let changed = self.buffered.toggle(user_id, course_id, target, liked, membership).await?;
                (adjusted(current, liked, changed), changed)
            }
        })
    }

    /// The subset of `targets` (each with its course) that `user_id` likes: in buffered mode one
    /// SMISMEMBER per (user, course) set; otherwise one SQL statement.
    pub async fn liked_by(&self, user_id: i64, targets: &[(i64, LikeTarget)]) -> AppResult<HashSet<LikeTarget>> {
        match self.mode {
            LikeMode::Buffered => self.buffered.liked(user_id, targets).await,
            LikeMode::Sync | LikeMode::Recount => {
                let only_targets: Vec<LikeTarget> = targets.iter().map(|(_, t)| *t).collect();
                liked_in_database(&self.db, user_id, &only_targets).await
            }
        }
    }
}

/// `LIKE_MODE`'s value, as metrics and `/readyz` name it.
pub(crate) fn mode_name(mode: LikeMode) -> &'static str {
    match mode {
        LikeMode::Sync => "sync",
        LikeMode::Recount => "recount",
        LikeMode::Buffered => "buffered",
    }
}

/// A like count to show, with the `like_version` of the committed count it is (or was
/// predicted from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShownCount {
    pub like_count: i32,
    pub version: i64,
}

/// The committed count as this toggle will move it; the version stays the committed one's.
fn adjusted(current: ShownCount, liked: bool, changed: bool) -> ShownCount {
    let like_count = match (changed, liked) {
        (false, _) => current.like_count,
        (true, true) => current.like_count.saturating_add(1),
        (true, false) => (current.like_count - 1).max(0),
    };
    ShownCount { like_count, ..current }
}

/// The subset of `targets` with a like row of `user_id`, in one statement.
pub(crate) async fn liked_in_database(
    db: &DatabaseConnection,
    user_id: i64,
    targets: &[LikeTarget],
) -> AppResult<HashSet<LikeTarget>> {
    let mut posts = Vec::new();
    let mut comments = Vec::new();
    for target in targets {
        match target {
            LikeTarget::Post(id) => posts.push(*id),
            LikeTarget::Comment(id) => comments.push(*id),
        }
    }
    #[derive(FromQueryResult)]
    struct LikedRow {
        is_post: bool,
        target_id: i64,
    }
    let rows = LikedRow::find_by_statement(stmt(
        "SELECT true AS is_post, post_id AS target_id FROM post_likes WHERE user_id = $1 AND post_id = ANY($2) \
         UNION ALL \
         SELECT false, comment_id FROM comment_likes WHERE user_id = $1 AND comment_id = ANY($3)",
        [user_id.into(), posts.into(), comments.into()],
    ))
    .all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| if r.is_post { LikeTarget::Post(r.target_id) } else { LikeTarget::Comment(r.target_id) })
        .collect())
}
