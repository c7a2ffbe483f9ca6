//! Level 3, the Redis side: per (user, course) liked-sets, the atomic toggle that checks the
//! user's rate limit, appends to the shard's stream and records the event as pending beside
//! the set (`lua/like_toggle.lua`), loading a set when it is not loaded (inside the toggle's
//! second call, or its first when a first touch read the rows with the memberships,
//! `first_touch::FirstTouches`; `lua/liked_set_warm.lua` for reads), and `likedByMe` by SMISMEMBER.
//!
//! A liked-set caches PostgreSQL's rows PLUS what the stream accepted and the worker has not
//! applied yet. So a load, whatever dropped the set (TTL, eviction, `reset-like-cache`, a
//! refused event, a crash), overlays the (user, course) pending records on the rows, in one
//! script (`lua/liked_set_load.lua`); a per-bucket load generation, read before the rows and
//! moved by the worker whenever it retires a record, makes a load whose rows predate an apply
//! read them again. The worker retires records after COMMIT (`worker::LikeWorker`). A
//! first-touch load, whose rows were read with the memberships and no generation before them,
//! uses the bucket's load stamp instead (`lua/load_stamp.lua`): the highest transaction id
//! that changed its rows and was retired, against the xmin of the statement's snapshot.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::kv::Redis;
use redis::Script;
use sea_orm::{DatabaseConnection, FromQueryResult};

use super::{LikeEvent, LikeStats, LikeTarget, Membership};
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::hooks::Gate;
use crate::kv::keys::Keys;
use crate::kv::ratelimit::RateLimiter;

/// The user's ($1) likes in the course ($2) as set members (`p:<id>`, `c:<id>`), from the
/// (user_id, course_id, target) indexes of both like tables alone (migration 0021).
const MEMBERS_SQL: &str = "SELECT 'p:' || post_id AS member FROM post_likes WHERE user_id = $1 AND course_id = $2 \
     UNION ALL \
     SELECT 'c:' || comment_id FROM comment_likes WHERE user_id = $1 AND course_id = $2";

/// What a first touch read in one statement (`first_touch::FirstTouches`, shared with the first
/// touches beside it): the user's memberships (course id and role, every
/// course), their likes in one course as set members, and the `xmin` of the statement's
/// snapshot (the oldest transaction it may not see), which stands for the generation a load
/// reads before its rows (`lua/load_stamp.lua`).
pub(crate) struct FirstTouch {
    pub roles: Vec<(i64, String)>,
    pub members: Vec<String>,
    pub xmin: String,
}

/// The sentinel member every loaded set holds.
pub(crate) const SENTINEL: &str = "_";

/// How many times a load reads PostgreSQL again because an apply moved its generation: each
/// retry means a batch of the same bucket committed within one short read, so a few suffice.
const MAX_LOAD_ATTEMPTS: usize = 8;

/// A short, growing pause before reading the rows again (1, 2, 4 … ms): a batch of the same
/// bucket just committed, and the next one is likely a few milliseconds away.
async fn pause_before_reload(attempt: usize) {
    tokio::time::sleep(Duration::from_millis(1 << attempt.min(5))).await;
}

fn load_kept_moving(set: &str) -> AppError {
    AppError::Internal(format!("liked-set {set} could not be loaded: the worker's applies kept moving its generation"))
}

/// Counts one liked-set lookup: a hit found the set loaded, a miss had to warm it.
fn cache_lookup(hit: bool) {
    let result = if hit { "hit" } else { "miss" };
    metrics::counter!(crate::telemetry::names::CACHE_REQUESTS, "cache" => "liked_set", "result" => result).increment(1);
}

#[derive(Clone)]
pub struct LikedSets {
    db: DatabaseConnection,
    redis: Redis,
    keys: Keys,
    ttl: Duration,
    /// The like rate limit, enforced inside the toggle script.
    limiter: RateLimiter,
    toggle: Arc<Script>,
    warm: Arc<Script>,
    forget: Arc<Script>,
    stats: Arc<LikeStats>,
    /// Test hook: passed by every load after it read the rows from PostgreSQL and before the
    /// script loads them (where an apply committing meanwhile must not be lost).
    pub rows_read: Arc<Gate>,
}

impl LikedSets {
    pub fn new(
        db: DatabaseConnection,
        redis: Redis,
        keys: Keys,
        ttl: Duration,
        limiter: RateLimiter,
        stats: Arc<LikeStats>,
    ) -> Self {
        Self {
            db,
            redis,
            keys,
            ttl,
            limiter,
            toggle: Arc::new(crate::kv::script(&[
                include_str!("../../lua/fixed_window.lua"),
                include_str!("../../lua/liked_set_load.lua"),
                include_str!("../../lua/like_toggle.lua"),
            ])),
            warm: Arc::new(crate::kv::script(&[
                include_str!("../../lua/liked_set_load.lua"),
                include_str!("../../lua/liked_set_warm.lua"),
            ])),
            forget: Arc::new(crate::kv::script(&[
                include_str!("../../lua/load_stamp.lua"),
                include_str!("../../lua/liked_set_forget.lua"),
            ])),
            stats,
            rows_read: Arc::new(Gate::default()),
        }
    }

    /// Counts the toggle against the user's rate limit and likes or unlikes in the set and, if
    /// that changed the set, appends the event to the stream and records it as pending: one
    /// script, one round trip. A set that is not loaded costs a second call carrying its rows
    /// from PostgreSQL, which loads them with the pending records on top and toggles; with
    /// `Membership::Loaded` (a first touch) the first call carries the rows the caller read with
    /// the memberships. Returns whether the set changed.
    pub async fn toggle(
        &self,
        user_id: i64,
        course_id: i64,
        target: LikeTarget,
        liked: bool,
        membership: Membership,
    ) -> AppResult<bool> {
        // The rows read from PostgreSQL and the load generation read before them, once needed:
        // already, when the caller read them with the membership check (a first touch).
        let (mut membership, mut rows) = match membership {
            Membership::Loaded { xmin, members } => {
                LikeStats::bump(&self.stats.set_warms);
                self.rows_read.pass().await;
                (None, Some((format!("~{xmin}"), members)))
            }
            other => (Some(other), None),
        };
        let event = LikeEvent { target, user_id, course_id, liked };
        let set = self.keys.liked_set(user_id, course_id);
        let shard = self.keys.shard_of(user_id);
        let member = target.member();
        // With traces on, the entry carries this mutation's context: the worker's batch that
        // applies it links back to it (`telemetry::otel`).
        let fields = event.stream_fields_traced(crate::telemetry::otel::current_traceparent());
        let bucket = self.keys.load_generation_bucket(user_id, course_id);
        for attempt in 0..MAX_LOAD_ATTEMPTS {
            let mut invocation = self.toggle.key(&set);
            invocation
                .key(self.keys.like_stream(shard))
                .key(self.keys.like_rate(user_id))
                .key(self.keys.liked_pending(user_id, course_id))
                .key(self.keys.load_generations(shard))
                .arg(&member)
                .arg(event.pending_op())
                .arg(self.ttl.as_millis() as u64)
                .arg(self.limiter.limit())
                .arg(self.limiter.window().as_millis() as u64)
                .arg(bucket);
            match &rows {
                Some((generation, members)) => invocation.arg(generation).arg(fields.len()).arg(&fields).arg(members),
                None => invocation.arg("").arg(fields.len()).arg(&fields),
            };
            let mut conn = self.redis.clone();
            let (status, value): (i64, String) = invocation.invoke_async(&mut conn).await?;
            if attempt == 0 {
                // Rows read beforehand count as a miss: the set was not known to be loaded.
                cache_lookup(status != -1 && rows.is_none());
            }
            match status {
                1 => return Ok(true),
                0 => return Ok(false),
                2 => return Err(self.limiter.refusal(value.parse().unwrap_or(1000))),
                -1 | -3 => {
                    // A set not loaded is loaded from PostgreSQL, and only after a verified
                    // membership: an unverified like needs the set a verified check loaded.
                    if let Some(Membership::Unverified { why }) = membership.take() {
                        return Err(why);
                    }
                    if status == -3 {
                        pause_before_reload(attempt).await;
                    }
                    // `value` is the generation as it is now, read before the rows.
                    rows = Some((value, self.members_in_database(user_id, course_id).await?));
                    LikeStats::bump(&self.stats.set_warms);
                    self.rows_read.pass().await;
                }
                other => {
                    return Err(AppError::Internal(format!("like_toggle.lua answered {other}: out of date?")));
                }
            }
        }
        Err(load_kept_moving(&set))
    }

    /// The user's likes in the course as set members (`p:<id>`, `c:<id>`), from PostgreSQL.
    async fn members_in_database(&self, user_id: i64, course_id: i64) -> AppResult<Vec<String>> {
        #[derive(FromQueryResult)]
        struct Member {
            member: String,
        }
        let members =
            Member::find_by_statement(stmt(MEMBERS_SQL, [user_id.into(), course_id.into()])).all(&self.db).await?;
        Ok(members.into_iter().map(|m| m.member).collect())
    }

    /// Loads the user's likes in the course into the set, unless it exists: PostgreSQL's rows
    /// plus the pending records (`lua/liked_set_load.lua`).
    pub async fn warm(&self, user_id: i64, course_id: i64) -> AppResult<()> {
        let set = self.keys.liked_set(user_id, course_id);
        let pending = self.keys.liked_pending(user_id, course_id);
        let generations = self.keys.load_generations(self.keys.shard_of(user_id));
        let bucket = self.keys.load_generation_bucket(user_id, course_id);
        for attempt in 0..MAX_LOAD_ATTEMPTS {
            if attempt > 0 {
                pause_before_reload(attempt).await;
            }
            let mut conn = self.redis.clone();
            // Read before the rows: an apply that commits after our read moves it.
            let generation: Option<String> =
                redis::cmd("HGET").arg(&generations).arg(bucket).query_async(&mut conn).await?;
            let members = self.members_in_database(user_id, course_id).await?;
            LikeStats::bump(&self.stats.set_warms);
            self.rows_read.pass().await;
            let mut invocation = self.warm.key(&set);
            invocation
                .key(&pending)
                .key(&generations)
                .arg(self.ttl.as_millis() as u64)
                .arg(bucket)
                .arg(generation.as_deref().unwrap_or("0"))
                .arg(&members);
            let loaded: i64 = invocation.invoke_async(&mut conn).await?;
            if loaded != -3 {
                return Ok(());
            }
        }
        Err(load_kept_moving(&set))
    }

    /// Forgets the (user, course) liked-set, so the next buffered use reloads it: called after
    /// a like written straight to PostgreSQL (sync and recount modes), which the set would
    /// otherwise contradict. Also moves the set's load generation, so a buffered load whose rows
    /// predate that write reads them again, and stamps it with the writing transaction `xid`,
    /// for first-touch loads (`lua/liked_set_forget.lua`). Best effort: startup in those modes
    /// drops every set anyway.
    pub async fn forget(&self, user_id: i64, course_id: i64, xid: Option<i64>) {
        let shard = self.keys.shard_of(user_id);
        let mut conn = self.redis.clone();
        // Both keys share the shard's slot: one script.
        let mut invocation = self.forget.key(self.keys.liked_set(user_id, course_id));
        invocation
            .key(self.keys.load_generations(shard))
            .arg(self.keys.load_generation_bucket(user_id, course_id))
            .arg(xid.map(|x| x.to_string()).unwrap_or_default());
        let dropped: redis::RedisResult<i64> = invocation.invoke_async(&mut conn).await;
        if let Err(err) = dropped {
            tracing::warn!(error = %err, user_id, course_id, "could not drop a liked-set after a direct write");
        }
    }

    /// Which of `targets` the user likes: ONE SMISMEMBER per (user, course) set, all sent in
    /// one pipeline; a set found missing (sentinel absent) is warmed and asked again.
    pub async fn liked(&self, user_id: i64, targets: &[(i64, LikeTarget)]) -> AppResult<HashSet<LikeTarget>> {
        let mut by_course: BTreeMap<i64, Vec<LikeTarget>> = BTreeMap::new();
        for (course_id, target) in targets {
            by_course.entry(*course_id).or_default().push(*target);
        }
        let courses: Vec<i64> = by_course.keys().copied().collect();
        let mut answers = self.smismember(user_id, &courses, &by_course).await?;
        let cold: Vec<i64> = courses
            .iter()
            .zip(&answers)
            .filter(|(_, a)| !a.first().copied().unwrap_or(false))
            .map(|(c, _)| *c)
            .collect();
        for _ in 0..courses.len() - cold.len() {
            cache_lookup(true);
        }
        for _ in &cold {
            cache_lookup(false);
        }
        if !cold.is_empty() {
            for course_id in &cold {
                self.warm(user_id, *course_id).await?;
            }
            let rewarmed = self.smismember(user_id, &cold, &by_course).await?;
            for (course_id, answer) in cold.iter().zip(rewarmed) {
                if let Some(position) = courses.iter().position(|c| c == course_id) {
                    answers[position] = answer;
                }
            }
        }
        let mut liked = HashSet::new();
        for (course_id, answer) in courses.iter().zip(answers) {
            let asked = &by_course[course_id];
            // answer[0] is the sentinel; the rest line up with `asked`.
            liked.extend(asked.iter().zip(answer.into_iter().skip(1)).filter(|(_, is)| *is).map(|(t, _)| *t));
        }
        Ok(liked)
    }

    async fn smismember(
        &self,
        user_id: i64,
        courses: &[i64],
        by_course: &BTreeMap<i64, Vec<LikeTarget>>,
    ) -> AppResult<Vec<Vec<bool>>> {
        let mut pipe = redis::pipe();
        for course_id in courses {
            let cmd = pipe.cmd("SMISMEMBER").arg(self.keys.liked_set(user_id, *course_id)).arg(SENTINEL);
            for target in &by_course[course_id] {
                cmd.arg(target.member());
            }
            self.stats.smismember_calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let mut conn = self.redis.clone();
        let raw: Vec<Vec<i64>> = pipe.query_async(&mut conn).await?;
        Ok(raw.into_iter().map(|flags| flags.into_iter().map(|f| f == 1).collect()).collect())
    }

    /// Drops every liked-set (SCAN + UNLINK), so each reloads from PostgreSQL on next use.
    /// Returns how many were dropped.
    pub async fn drop_all(&self) -> AppResult<u64> {
        crate::kv::unlink_matching(&self.redis, &self.keys.liked_set_pattern()).await
    }
}
