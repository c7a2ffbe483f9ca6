//! The post cache (docs/architecture.md, "Home feed and caching"): what `post(id)`, every access check on a post and the
//! home feed's hydration read instead of PostgreSQL, built so that a hot post expiring never
//! sends a stampede of requests to the database.
//!
//! - **Logical expiration.** An entry (a Redis HASH, see `kv::keys`) carries its own
//!   fresh-until stamp. A stale entry is still served at once, while the ONE request that takes
//!   the post's lock reloads it in the background: no reader waits on the database.
//! - **Lock and brief wait.** A cold key (never loaded, or physically expired at 10 × its
//!   freshness) is loaded by the one request holding the post's lock (`kv::lock`: SET NX PX,
//!   released only by its owner); the others poll Redis briefly and read what it stored.
//! - **Jitter.** Freshness is `POST_CACHE_TTL` plus a random part up to
//!   `POST_CACHE_TTL_JITTER`, so posts loaded together do not expire together.
//! - **Penetration.** An id that does not exist (or a deleted post) is cached as `missing` for
//!   `POST_CACHE_MISSING_TTL`: a flood of reads of an unknown id costs one query.
//! - **Only for readers with access.** `get_admitted` (the access checks' way in) stores a
//!   post it loads only if the reader belongs to its course: a non-member's reads load it, are
//!   refused, and leave nothing behind.
//! - **Invalidation.** Every write path that changes a post calls `invalidate`, `post_deleted`,
//!   `like_counts_committed` or `view_counts_committed`. Each moves the post's generation (or
//!   patches the entry with a newer counter), and a load stores only if the generation did not
//!   move since it began: a load that read the row before a write never puts the old row back.
//!
//! How stale a cached post can be: title, body and comment count are invalidated by the write
//! itself, before the mutation answers; like and view counts are patched in right after the
//! commit that changed them (the like worker, the sync and recount paths through
//! `likes::committed::AfterCommit`, the view aggregator after its flush). A change that bypasses these
//! paths (SQL by hand, `course-forum reconcile`) or a patch lost to a Redis error shows at most
//! `POST_CACHE_TTL + POST_CACHE_TTL_JITTER` late, plus the one background reload.
//!
//! Beside it, in process memory: `pages` (course pages' rows, dropped or patched by the
//! published changes) and `users` (authors, which never change), both bounded in bytes by
//! `budget` (`CACHE_BUDGET_BYTES`, split among every in-process cache by fixed shares).

pub(crate) mod budget;
pub(crate) mod pages;
pub(crate) mod search;
pub(crate) mod titles;
pub(crate) mod users;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{FromRedisValue, Script, Value};
use sea_orm::DatabaseConnection;

use crate::config::Settings;
use crate::error::{AppError, AppResult};
use crate::forum::posts::{self, PostRow};
use crate::hooks::Gate;
use crate::kv::keys::Keys;
use crate::kv::lock::Locks;
use crate::kv::{self, Redis};
use crate::like_event::{CountChange, LikeTarget};
use crate::telemetry::names;

/// Whether a reader may see a post (`PostCache::get_admitted`): their access check.
pub(crate) type Admit<'a> = dyn Fn(&PostRow) -> futures_util::future::BoxFuture<'a, bool> + Send + Sync + 'a;

/// The fields of an entry, in the order `HMGET` asks for them. The counters inside `row` are
/// overridden by the entry's own counter fields, which commits patch one by one.
const FIELDS: [&str; 7] = ["s", "fresh", "row", "likes", "like_v", "comments", "views"];

/// A live entry is kept in Redis this many times its freshness window, so a post read now and
/// then is stale (served at once, reloaded in the background) rather than cold (a lock wait).
const KEEP_FACTOR: u32 = 10;

/// How long a post's invalidation generation outlives its last write: far longer than any load.
const GENERATION_TTL: Duration = Duration::from_secs(24 * 3600);

/// Waiting for another request's load: the first pause, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(50);

#[derive(Clone, Debug)]
pub struct CacheConfig {
    pub ttl: Duration,
    pub jitter: Duration,
    pub missing_ttl: Duration,
    /// How long a load's lock lives, and the longest a request waits for someone else's load.
    pub lock_ttl: Duration,
}

impl CacheConfig {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            ttl: settings.post_cache_ttl,
            jitter: settings.post_cache_ttl_jitter,
            missing_ttl: settings.post_cache_missing_ttl,
            lock_ttl: settings.cache_lock_ttl,
        }
    }
}

/// Counters tests and benchmarks read (the same events are `metrics` counters).
#[derive(Debug, Default)]
pub struct CacheStats {
    /// SQL statements the loader ran: each loads every post one request found cold or stale.
    pub loads: AtomicU64,
    /// Loads whose result was not stored because a write moved the generation meanwhile.
    pub stores_refused: AtomicU64,
    /// Reads served without the cache (Redis failed, or a lock holder took too long).
    pub bypasses: AtomicU64,
}

impl CacheStats {
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }
}

/// Test hooks, free when unused: hold loads between reading PostgreSQL and storing, and move
/// the cache's clock, so tests can show who waits and who does not without sleeping.
#[derive(Default)]
pub struct CacheHooks {
    /// Every load passes it after its SQL, before its store.
    pub stores: Gate,
    clock_skew_ms: AtomicI64,
}

impl CacheHooks {
    /// Moves the cache's clock forward (entries expire as if that much time had passed).
    pub fn advance_clock(&self, by: Duration) {
        self.clock_skew_ms.fetch_add(by.as_millis() as i64, Ordering::Relaxed);
    }
}

/// What an entry says.
#[derive(Clone, Debug)]
enum Entry {
    /// Boxed: a row is far larger than a "missing" marker, and entries travel in vectors.
    Live {
        row: Box<PostRow>,
        fresh_until: i64,
    },
    Missing {
        fresh_until: i64,
    },
}

impl Entry {
    fn fresh_until(&self) -> i64 {
        match self {
            Entry::Live { fresh_until, .. } | Entry::Missing { fresh_until } => *fresh_until,
        }
    }

    /// The answer this entry gives when a load would otherwise be needed: a live row even if
    /// stale (its reload is someone else's job), "missing" only while fresh.
    fn answer(&self, now: i64) -> Option<Option<PostRow>> {
        match self {
            Entry::Live { row, .. } => Some(Some(PostRow::clone(row))),
            Entry::Missing { fresh_until } if *fresh_until > now => Some(None),
            Entry::Missing { .. } => None,
        }
    }
}

/// One post's lock attempt, with what Redis held at that moment.
struct Claim {
    id: i64,
    /// Our owner token, when we took the lock.
    token: Option<String>,
    /// The generation before our load (`0` when none).
    generation: String,
    entry: Option<Entry>,
}

struct Scripts {
    store: Script,
    invalidate: Script,
    count: Script,
}

struct Inner {
    db: DatabaseConnection,
    redis: Redis,
    keys: Keys,
    locks: Locks,
    config: CacheConfig,
    scripts: Scripts,
    stats: CacheStats,
    hooks: CacheHooks,
}

/// The post cache. Cheap to clone.
#[derive(Clone)]
pub struct PostCache {
    inner: Arc<Inner>,
}

impl PostCache {
    pub fn new(db: DatabaseConnection, redis: Redis, keys: Keys, config: CacheConfig) -> Self {
        let scripts = Scripts {
            store: Script::new(include_str!("../../lua/post_cache_store.lua")),
            invalidate: Script::new(include_str!("../../lua/post_cache_invalidate.lua")),
            count: Script::new(include_str!("../../lua/post_cache_count.lua")),
        };
        let locks = Locks::new(redis.clone());
        Self {
            inner: Arc::new(Inner {
                db,
                redis,
                keys,
                locks,
                config,
                scripts,
                stats: CacheStats::default(),
                hooks: CacheHooks::default(),
            }),
        }
    }

    /// Loads the scripts into Redis (at start-up), so the first pipelines find them.
    pub async fn load_scripts(&self) -> AppResult<()> {
        let s = &self.inner.scripts;
        kv::load_scripts(&self.inner.redis, &[&s.store, &s.invalidate, &s.count, self.inner.locks.release_script()])
            .await
    }

    pub fn stats(&self) -> &CacheStats {
        &self.inner.stats
    }

    pub fn hooks(&self) -> &CacheHooks {
        &self.inner.hooks
    }

    /// A live post, or `None` when it does not exist or was deleted.
    pub async fn get(&self, id: i64) -> AppResult<Option<PostRow>> {
        Ok(self.get_many(&[id]).await?.remove(&id))
    }

    /// As `get`, for a reader who may not be allowed to see the post: a post this request
    /// loads is stored only if `admit` says yes (the reader's access check), so readers
    /// without access cannot fill the cache. "No such post" is stored as usual. The caller
    /// still checks access on what it gets (a post already cached is not asked about).
    pub async fn get_admitted(&self, id: i64, admit: &Admit<'_>) -> AppResult<Option<PostRow>> {
        match self.get_many_cached(&[id], Some(admit)).await {
            Err(AppError::Redis(err)) => {
                tracing::warn!(error = %err, "post cache unavailable; reading PostgreSQL directly");
                Ok(self.load_uncached(&[id], "redis_error").await?.remove(&id))
            }
            other => Ok(other?.remove(&id)),
        }
    }

    /// The live posts among `ids` (absent: no such post, or deleted): one Redis round trip for
    /// all of them, and at most one SQL statement for those this request must load.
    pub async fn get_many(&self, ids: &[i64]) -> AppResult<HashMap<i64, PostRow>> {
        let mut wanted = ids.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            return Ok(HashMap::new());
        }
        match self.get_many_cached(&wanted, None).await {
            Err(AppError::Redis(err)) => {
                tracing::warn!(error = %err, "post cache unavailable; reading PostgreSQL directly");
                self.load_uncached(&wanted, "redis_error").await
            }
            other => other,
        }
    }

    async fn get_many_cached(&self, ids: &[i64], admit: Option<&Admit<'_>>) -> AppResult<HashMap<i64, PostRow>> {
        let now = self.now_ms();
        let entries = self.read(ids).await?;
        let mut found = HashMap::with_capacity(ids.len());
        let mut stale = Vec::new();
        let mut cold = Vec::new();
        for (id, entry) in ids.iter().copied().zip(entries) {
            let result = match entry {
                Some(Entry::Live { row, fresh_until }) => {
                    found.insert(id, *row);
                    if fresh_until > now {
                        "hit"
                    } else {
                        stale.push(id);
                        "stale"
                    }
                }
                Some(Entry::Missing { fresh_until }) if fresh_until > now => "missing",
                Some(Entry::Missing { .. }) | None => {
                    cold.push(id);
                    "miss"
                }
            };
            metrics::counter!(names::CACHE_REQUESTS, "cache" => "post", "result" => result).increment(1);
        }
        if !stale.is_empty() {
            self.refresh_in_background(&stale).await;
        }
        if !cold.is_empty() {
            found.extend(self.load_cold(cold, admit).await?);
        }
        Ok(found)
    }

    /// Serves stale entries as they are; whoever takes a post's lock here reloads it in a
    /// background task. Taking the locks costs this reader one Redis round trip, never a query.
    async fn refresh_in_background(&self, stale: &[i64]) {
        let claims = match self.claim(stale).await {
            Ok(claims) => claims,
            Err(err) => {
                tracing::warn!(error = %err, "could not claim stale posts for a reload; serving them stale");
                return;
            }
        };
        let now = self.now_ms();
        let mut ours = Vec::new();
        let mut not_needed = Vec::new();
        for claim in claims {
            let Some(token) = claim.token.clone() else { continue };
            // Someone reloaded it between our read and our lock: nothing left to do.
            if claim.entry.as_ref().is_some_and(|e| e.fresh_until() > now) {
                not_needed.push((claim.id, token));
            } else {
                ours.push(claim);
            }
        }
        if !not_needed.is_empty() {
            self.release_all(&not_needed).await;
        }
        if ours.is_empty() {
            return;
        }
        let cache = self.clone();
        tokio::spawn(async move {
            let ids: Vec<i64> = ours.iter().map(|c| c.id).collect();
            if let Err(err) = cache.load_and_store(ours, None).await {
                tracing::warn!(error = %err, ?ids, "background reload of stale posts failed; they stay stale");
            }
        });
    }

    /// Cold posts: load the ones whose lock we take, wait for the others' holders, and after
    /// `lock_ttl` of waiting read the rest directly.
    async fn load_cold(&self, mut pending: Vec<i64>, admit: Option<&Admit<'_>>) -> AppResult<HashMap<i64, PostRow>> {
        let mut found = HashMap::new();
        let deadline = Instant::now() + self.inner.config.lock_ttl;
        let mut pause = FIRST_PAUSE;
        loop {
            let now = self.now_ms();
            let mut to_load = Vec::new();
            let mut waiting = Vec::new();
            let mut not_needed = Vec::new();
            for claim in self.claim(&pending).await? {
                // The entry read after the lock attempt: a holder that stored and released
                // since our first read left its answer here (double-checked locking).
                match (claim.entry.as_ref().and_then(|e| e.answer(now)), claim.token.clone()) {
                    (Some(answer), token) => {
                        if let Some(row) = answer {
                            found.insert(claim.id, row);
                        }
                        if let Some(token) = token {
                            not_needed.push((claim.id, token));
                        }
                    }
                    (None, Some(_)) => to_load.push(claim),
                    (None, None) => waiting.push(claim.id),
                }
            }
            if !not_needed.is_empty() {
                self.release_all(&not_needed).await;
            }
            if !to_load.is_empty() {
                found.extend(self.load_and_store(to_load, admit).await?);
            }
            if waiting.is_empty() {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                tracing::warn!(posts = ?waiting, "a post cache lock holder took too long; reading PostgreSQL directly");
                found.extend(self.load_uncached(&waiting, "lock_timeout").await?);
                return Ok(found);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
            pending = waiting;
        }
    }

    /// One SQL statement for every claimed post, then one pipeline storing each (unless its
    /// generation moved) and releasing its lock.
    async fn load_and_store(&self, claims: Vec<Claim>, admit: Option<&Admit<'_>>) -> AppResult<HashMap<i64, PostRow>> {
        let ids: Vec<i64> = claims.iter().map(|c| c.id).collect();
        let rows = match self.load_rows(&ids).await {
            Ok(rows) => rows,
            Err(err) => {
                // Give the locks back now, so the next request retries at once.
                let held: Vec<(i64, String)> =
                    claims.iter().filter_map(|c| c.token.clone().map(|token| (c.id, token))).collect();
                self.release_all(&held).await;
                return Err(err);
            }
        };
        self.inner.hooks.stores.pass().await;
        // Rows the reader may not see are returned (the caller refuses them) but not stored.
        let mut not_admitted = Vec::new();
        if let Some(admit) = admit {
            for row in rows.values() {
                if !admit(row).await {
                    not_admitted.push(row.id);
                }
            }
        }
        let keys = &self.inner.keys;
        let mut pipe = redis::pipe();
        let mut store_replies = Vec::with_capacity(claims.len());
        for claim in &claims {
            if not_admitted.contains(&claim.id) {
                if let Some(token) = &claim.token {
                    self.inner.locks.release_in(&mut pipe, &keys.post_cache_lock(claim.id), token);
                }
                continue;
            }
            store_replies.push(pipe.len());
            let mut store = self.inner.scripts.store.prepare_invoke();
            store.key(keys.post_cache_entry(claim.id)).key(keys.post_cache_gen(claim.id)).arg(&claim.generation);
            match rows.get(&claim.id) {
                Some(row) => {
                    let (fresh_until, keep) = self.live_expiry();
                    let json = serde_json::to_string(row)
                        .map_err(|e| AppError::Internal(format!("cannot encode a post for the cache: {e}")))?;
                    store
                        .arg("live")
                        .arg(fresh_until)
                        .arg(keep.as_millis() as u64)
                        .arg(json)
                        .arg(row.like_count)
                        .arg(row.like_version)
                        .arg(row.comment_count)
                        .arg(row.view_count);
                }
                None => {
                    let ttl = self.inner.config.missing_ttl;
                    store.arg("missing").arg(self.now_ms() + ttl.as_millis() as i64).arg(ttl.as_millis() as u64);
                }
            }
            pipe.invoke_script(&store);
            if let Some(token) = &claim.token {
                self.inner.locks.release_in(&mut pipe, &keys.post_cache_lock(claim.id), token);
            }
        }
        let replies: Vec<Value> = kv::query_scripts(
            &self.inner.redis,
            &pipe,
            &[&self.inner.scripts.store, self.inner.locks.release_script()],
        )
        .await?;
        // A store answers 0 when a write moved the generation since the load began.
        let refused = store_replies.iter().filter(|i| matches!(replies.get(**i), Some(Value::Int(0)))).count();
        if refused > 0 {
            self.inner.stats.stores_refused.fetch_add(refused as u64, Ordering::Relaxed);
            metrics::counter!(names::CACHE_STORES_REFUSED, "cache" => "post").increment(refused as u64);
        }
        Ok(rows)
    }

    /// Reads posts straight from PostgreSQL and stores nothing (Redis failing, or waiting for a
    /// lock holder took too long).
    async fn load_uncached(&self, ids: &[i64], reason: &'static str) -> AppResult<HashMap<i64, PostRow>> {
        self.inner.stats.bypasses.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::CACHE_BYPASSES, "cache" => "post", "reason" => reason).increment(1);
        self.load_rows(ids).await
    }

    /// The loader's one SQL statement (counted: tests assert how many loads a burst caused).
    async fn load_rows(&self, ids: &[i64]) -> AppResult<HashMap<i64, PostRow>> {
        self.inner.stats.loads.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::CACHE_LOADS, "cache" => "post").increment(1);
        let rows = posts::find_many(&self.inner.db, ids).await?;
        Ok(rows.into_iter().map(|row| (row.id, row)).collect())
    }

    /// Every entry in one pipelined round trip (HMGET per post).
    async fn read(&self, ids: &[i64]) -> AppResult<Vec<Option<Entry>>> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET").arg(self.inner.keys.post_cache_entry(*id)).arg(&FIELDS[..]);
        }
        let replies: Vec<Vec<Option<String>>> = pipe.query_async(&mut self.inner.redis.clone()).await?;
        Ok(replies.iter().map(|fields| parse_entry(fields)).collect())
    }

    /// Tries to take each post's lock, and reads its generation and entry after the attempt,
    /// all in one round trip.
    async fn claim(&self, ids: &[i64]) -> AppResult<Vec<Claim>> {
        let keys = &self.inner.keys;
        let tokens: Vec<String> = ids.iter().map(|_| Locks::token()).collect();
        let mut pipe = redis::pipe();
        for (id, token) in ids.iter().zip(&tokens) {
            Locks::acquire_in(&mut pipe, &keys.post_cache_lock(*id), token, self.inner.config.lock_ttl);
            pipe.cmd("GET").arg(keys.post_cache_gen(*id));
            pipe.cmd("HMGET").arg(keys.post_cache_entry(*id)).arg(&FIELDS[..]);
        }
        let replies: Vec<Value> = pipe.query_async(&mut self.inner.redis.clone()).await?;
        let mut replies = replies.into_iter();
        let mut claims = Vec::with_capacity(ids.len());
        for (id, token) in ids.iter().zip(tokens) {
            let (Some(taken), Some(generation), Some(fields)) = (replies.next(), replies.next(), replies.next()) else {
                return Err(AppError::Internal("post cache: short reply to a lock pipeline".into()));
            };
            let taken: Option<String> = from_reply(taken)?;
            let generation: Option<String> = from_reply(generation)?;
            let fields: Vec<Option<String>> = from_reply(fields)?;
            claims.push(Claim {
                id: *id,
                token: taken.map(|_| token),
                generation: generation.unwrap_or_else(|| "0".to_owned()),
                entry: parse_entry(&fields),
            });
        }
        Ok(claims)
    }

    async fn release_all(&self, held: &[(i64, String)]) {
        let mut pipe = redis::pipe();
        for (id, token) in held {
            self.inner.locks.release_in(&mut pipe, &self.inner.keys.post_cache_lock(*id), token);
        }
        let released: AppResult<Vec<i64>> =
            kv::query_scripts(&self.inner.redis, &pipe, &[self.inner.locks.release_script()]).await;
        if let Err(err) = released {
            tracing::warn!(error = %err, "could not release post cache locks; they expire by themselves");
        }
    }

    /// A write changed the post (edit, new comment or reply, a comment deleted) or created it
    /// (a "missing" marker for its id must go): the next read loads it again. Best effort:
    /// a failure is logged, and the entry's freshness bounds the staleness.
    pub async fn invalidate(&self, post_id: i64) {
        self.run_invalidate(post_id, "drop").await;
    }

    /// The post was deleted: its entry becomes a "missing" marker at once, so every read answers
    /// NOT_FOUND from now on without a load.
    pub async fn post_deleted(&self, post_id: i64) {
        self.run_invalidate(post_id, "missing").await;
    }

    async fn run_invalidate(&self, post_id: i64, how: &'static str) {
        let keys = &self.inner.keys;
        let ttl = self.inner.config.missing_ttl;
        let done: AppResult<i64> = async {
            Ok(self
                .inner
                .scripts
                .invalidate
                .key(keys.post_cache_entry(post_id))
                .key(keys.post_cache_gen(post_id))
                .arg(GENERATION_TTL.as_millis() as u64)
                .arg(how)
                .arg(self.now_ms() + ttl.as_millis() as i64)
                .arg(ttl.as_millis() as u64)
                .invoke_async(&mut self.inner.redis.clone())
                .await?)
        }
        .await;
        if let Err(err) = done {
            metrics::counter!(names::CACHE_INVALIDATION_FAILURES, "cache" => "post").increment(1);
            tracing::warn!(error = %err, post_id, "could not invalidate a cached post; it may show stale until it expires");
        }
    }

    /// Committed like counts (worker, sync, recount): patched into cached posts that hold an
    /// older count. Comments' counts are not cached here.
    pub async fn like_counts_committed(&self, changes: &[CountChange]) {
        let posts: Vec<(i64, i64, i64)> = changes
            .iter()
            .filter_map(|c| match c.target {
                LikeTarget::Post(id) => Some((id, i64::from(c.like_count), c.version)),
                LikeTarget::Comment(_) => None,
            })
            .collect();
        self.patch_counts("likes", &posts).await;
    }

    /// Committed view counts (the aggregator's flush): patched in where larger.
    pub async fn view_counts_committed(&self, counts: &[(i64, i64)]) {
        let posts: Vec<(i64, i64, i64)> = counts.iter().map(|(id, views)| (*id, *views, 0)).collect();
        self.patch_counts("views", &posts).await;
    }

    /// `(post, value, version)` per post, one pipelined script each. Best effort, like
    /// `invalidate`.
    async fn patch_counts(&self, field: &'static str, posts: &[(i64, i64, i64)]) {
        if posts.is_empty() {
            return;
        }
        let keys = &self.inner.keys;
        let mut pipe = redis::pipe();
        for (post_id, value, version) in posts {
            pipe.invoke_script(
                self.inner
                    .scripts
                    .count
                    .key(keys.post_cache_entry(*post_id))
                    .key(keys.post_cache_gen(*post_id))
                    .arg(field)
                    .arg(*value)
                    .arg(*version)
                    .arg(GENERATION_TTL.as_millis() as u64),
            );
        }
        let patched: AppResult<Vec<i64>> =
            kv::query_scripts(&self.inner.redis, &pipe, &[&self.inner.scripts.count]).await;
        if let Err(err) = patched {
            metrics::counter!(names::CACHE_INVALIDATION_FAILURES, "cache" => "post").increment(posts.len() as u64);
            tracing::warn!(error = %err, field, "could not patch committed counts into cached posts");
        }
    }

    /// Fresh-until (ms) and physical TTL of a live entry stored now: the freshness window gets a
    /// random part, so entries loaded together expire apart.
    fn live_expiry(&self) -> (i64, Duration) {
        let config = &self.inner.config;
        let jitter_ms = config.jitter.as_millis() as u64;
        let jitter = Duration::from_millis(if jitter_ms == 0 { 0 } else { rand::random_range(0..=jitter_ms) });
        let fresh_for = config.ttl + jitter;
        (self.now_ms() + fresh_for.as_millis() as i64, fresh_for * KEEP_FACTOR)
    }

    /// Wall-clock milliseconds (entries written by several instances compare against it), moved
    /// by `CacheHooks::advance_clock` in tests.
    fn now_ms(&self) -> i64 {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
        wall + self.inner.hooks.clock_skew_ms.load(Ordering::Relaxed)
    }
}

fn from_reply<T: FromRedisValue>(value: Value) -> AppResult<T> {
    T::from_redis_value(value).map_err(|e| AppError::Redis(e.into()))
}

/// An entry from its HMGET reply; `None` when absent or unreadable (then it is reloaded).
fn parse_entry(fields: &[Option<String>]) -> Option<Entry> {
    let field = |i: usize| fields.get(i).and_then(|f| f.as_deref());
    let fresh_until = field(1)?.parse::<i64>().ok()?;
    match field(0)? {
        "missing" => Some(Entry::Missing { fresh_until }),
        "live" => {
            let mut row: PostRow = serde_json::from_str(field(2)?).ok()?;
            row.like_count = field(3)?.parse().ok()?;
            row.like_version = field(4)?.parse().ok()?;
            row.comment_count = field(5)?.parse().ok()?;
            row.view_count = field(6)?.parse().ok()?;
            Some(Entry::Live { row: Box::new(row), fresh_until })
        }
        _ => None,
    }
}
