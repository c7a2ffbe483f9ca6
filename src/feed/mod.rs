//! The home feed (docs/architecture.md, "Home feed and caching"): one newest-first page of posts from all the viewer's
//! courses, with the celebrity hybrid.
//!
//! Writing (`fanout`): a post and its `feed_outbox` row commit in one statement. The fan-out
//! job claims outbox rows (`FOR UPDATE SKIP LOCKED`) and, for a course below
//! `FEED_FANOUT_MAX_MEMBERS`, pushes the post id into every member's timeline that exists
//! (active users), pipelined; a celebrity course's post goes into that course's one list instead.
//! Then it deletes the rows and commits; a crash before that replays idempotent pushes.
//!
//! Reading (`Feed::page`): one round trip reads the viewer's timeline and the list of every
//! course of theirs that has one (which is what makes a course a celebrity, see `fanout`). A
//! timeline is valid when its sentinel names exactly the viewer's current non-celebrity courses;
//! otherwise (missing, inactive user, Redis lost it, memberships changed without any API call)
//! ONE request rebuilds it from PostgreSQL under the timeline's lock while the others wait
//! briefly. The lists are merged newest first (keyset by post id, so posts arriving between
//! pages never duplicate or shift items), each is trusted only down to its floor, the page is
//! hydrated through the post cache in one batch, deleted posts and posts of courses the viewer
//! has left are skipped (more are read instead, so pages stay full), and below the lists'
//! floors the page continues from PostgreSQL, so paging reaches the oldest post.

pub(crate) mod fanout;
pub(crate) mod lists;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;

use crate::cache::PostCache;
use crate::config::Settings;
use crate::error::{AppError, AppResult};
use crate::forum::paging::{Page, PageRequest};
use crate::forum::posts::{self, PostRow};
use crate::hooks::Gate;
use crate::kv::Redis;
use crate::kv::keys::Keys;
use crate::kv::lock::Locks;
use crate::telemetry::names;
use lists::{Lists, Window};

/// Waiting for another request's rebuild: the first pause, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(50);

#[derive(Clone, Debug)]
pub struct FeedConfig {
    /// Courses with at least this many members are celebrities (not fanned out).
    pub max_members: usize,
    /// Post ids kept per timeline and per celebrity list.
    pub cap: usize,
    pub timeline_ttl: Duration,
    /// How long a rebuild's lock lives, and the longest a reader waits for someone's rebuild.
    pub lock_ttl: Duration,
    pub fanout_interval: Duration,
    pub fanout_batch: usize,
}

impl FeedConfig {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            max_members: settings.feed_fanout_max_members.max(1),
            cap: settings.feed_timeline_cap.max(1),
            timeline_ttl: settings.feed_timeline_ttl,
            lock_ttl: settings.cache_lock_ttl,
            fanout_interval: settings.feed_fanout_interval,
            fanout_batch: settings.feed_fanout_batch.max(1),
        }
    }
}

/// Counters tests and benchmarks read (the same events are `metrics` counters).
#[derive(Debug, Default)]
pub struct FeedStats {
    /// Timelines rebuilt from PostgreSQL.
    pub rebuilds: AtomicU64,
    /// Page reads that went to PostgreSQL (below the lists' floors, or instead of them).
    pub database_reads: AtomicU64,
}

impl FeedStats {
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }

    pub fn database_reads(&self) -> u64 {
        self.database_reads.load(Ordering::Relaxed)
    }
}

/// Test hooks, free when unused: a test can fan a post out exactly inside a rebuild.
#[derive(Default)]
pub struct FeedHooks {
    /// Every timeline rebuild passes it after reading PostgreSQL, before filling the timeline.
    pub rebuilds: Gate,
}

/// The timeline's sentinel for a set of fanned-out courses (sorted): `c:3,8,12`.
pub(crate) fn timeline_sentinel(courses: &[i64]) -> String {
    let ids: Vec<String> = courses.iter().map(i64::to_string).collect();
    format!("c:{}", ids.join(","))
}

/// The lists one page reads: the viewer's timeline first, then the viewer's celebrity courses'.
struct Sources {
    lists: Vec<(String, Option<Duration>)>,
    /// Their windows below the page's cursor, read while validating the timeline.
    first: Vec<Window>,
}

/// Reads home feed pages. Cheap to clone.
#[derive(Clone)]
pub struct Feed {
    db: DatabaseConnection,
    redis: Redis,
    keys: Keys,
    lists: Lists,
    locks: Locks,
    cache: PostCache,
    config: FeedConfig,
    stats: Arc<FeedStats>,
    hooks: Arc<FeedHooks>,
}

impl Feed {
    pub fn new(db: DatabaseConnection, redis: Redis, keys: Keys, cache: PostCache, config: FeedConfig) -> Self {
        Self {
            lists: Lists::new(redis.clone(), config.cap),
            locks: Locks::new(redis.clone()),
            db,
            redis,
            keys,
            cache,
            config,
            stats: Arc::new(FeedStats::default()),
            hooks: Arc::new(FeedHooks::default()),
        }
    }

    pub fn stats(&self) -> &FeedStats {
        &self.stats
    }

    pub fn hooks(&self) -> &FeedHooks {
        &self.hooks
    }

    pub fn lists(&self) -> &Lists {
        &self.lists
    }

    /// One page of the home feed of `user_id`, a member of `courses` (read from PostgreSQL for
    /// this request), newest first, after the cursor of `page`.
    pub async fn page(&self, user_id: i64, courses: &[i64], page: &PageRequest) -> AppResult<Page<PostRow>> {
        if page.backward {
            return Err(AppError::bad_input("the home feed pages forward only: use `first` and `after`"));
        }
        let mut courses = courses.to_vec();
        courses.sort_unstable();
        courses.dedup();
        // One more than asked tells whether there is a next page.
        let want = page.limit as usize + 1;
        let rows = if courses.is_empty() {
            Vec::new()
        } else {
            match self.newest(user_id, &courses, page.cursor, want).await {
                Err(AppError::Redis(err)) => {
                    tracing::warn!(error = %err, "feed lists unavailable; this page comes from PostgreSQL");
                    self.read_from_database(&courses, page.cursor, want, "redis_error").await?
                }
                other => other?,
            }
        };
        Ok(page.finish(rows))
    }

    /// Up to `want` live posts of `courses` with ids below `after`, newest first.
    async fn newest(&self, user_id: i64, courses: &[i64], after: Option<i64>, want: usize) -> AppResult<Vec<PostRow>> {
        // Enough per list that one round usually fills the page even with a few deleted posts.
        let count = (want * 2).max(20);
        let Some(sources) = self.sources(user_id, courses, after, count).await? else {
            return self.read_from_database(courses, after, want, "timeline_busy").await;
        };
        let members: HashSet<i64> = courses.iter().copied().collect();
        let mut out = Vec::with_capacity(want);
        let mut below = after;
        let mut windows = sources.first;
        loop {
            // Each list is known complete down to its floor, or, when this read filled the
            // window, down to the last id read. Below the highest of those, some list may hold
            // posts not read yet: only ids at or above it are certain this round.
            let mut certain_from = 0;
            let mut floor = 0;
            for window in &windows {
                let reach =
                    if window.ids.len() >= count { window.ids.last().copied().unwrap_or(0) } else { window.floor };
                certain_from = certain_from.max(reach);
                floor = floor.max(window.floor);
            }
            let mut candidates: Vec<i64> =
                windows.iter().flat_map(|w| w.ids.iter().copied()).filter(|id| *id >= certain_from).collect();
            candidates.sort_unstable_by(|a, b| b.cmp(a));
            candidates.dedup();
            self.hydrate(&candidates, &members, want, &mut out).await?;
            if out.len() >= want || certain_from == 0 {
                return Ok(out);
            }
            let next_below = below.map_or(certain_from, |b| b.min(certain_from));
            if next_below <= floor {
                // Every list is read down to its floor: older posts live only in PostgreSQL.
                out.extend(
                    self.read_from_database(courses, Some(next_below), want - out.len(), "older_than_lists").await?,
                );
                return Ok(out);
            }
            below = Some(next_below);
            match self.lists.windows(&sources.lists, below, count).await?.into_iter().collect::<Option<Vec<_>>>() {
                Some(next) => windows = next,
                // A list vanished between two reads (expired or evicted): finish from PostgreSQL.
                None => {
                    out.extend(self.read_from_database(courses, below, want - out.len(), "list_vanished").await?);
                    return Ok(out);
                }
            }
        }
    }

    /// The viewer's valid timeline and celebrity lists, rebuilding the timeline when needed;
    /// `None` when someone else's rebuild did not finish within the lock's TTL.
    async fn sources(
        &self,
        user_id: i64,
        courses: &[i64],
        after: Option<i64>,
        count: usize,
    ) -> AppResult<Option<Sources>> {
        let timeline = self.keys.timeline(user_id);
        let mut lists: Vec<(String, Option<Duration>)> = vec![(timeline.clone(), Some(self.config.timeline_ttl))];
        lists.extend(courses.iter().map(|c| (self.keys.celebrity_list(*c), None)));
        let deadline = Instant::now() + self.config.lock_ttl;
        let mut pause = FIRST_PAUSE;
        loop {
            let mut windows = self.lists.windows(&lists, after, count).await?.into_iter();
            let timeline_window = windows.next().flatten();
            let mut celebrity = Vec::new();
            let mut pushed_courses = Vec::new();
            for (course, window) in courses.iter().zip(windows) {
                match window {
                    Some(window) => celebrity.push((self.keys.celebrity_list(*course), window)),
                    None => pushed_courses.push(*course),
                }
            }
            let expected = timeline_sentinel(&pushed_courses);
            if let Some(window) = timeline_window.filter(|w| w.sentinel == expected) {
                let mut sources =
                    Sources { lists: vec![(timeline, Some(self.config.timeline_ttl))], first: vec![window] };
                for (key, window) in celebrity {
                    sources.lists.push((key, None));
                    sources.first.push(window);
                }
                return Ok(Some(sources));
            }
            // Missing, being rebuilt, or built for other courses: ONE request rebuilds it. The
            // deadline also bounds our own rebuilds, should something keep undoing them.
            if Instant::now() >= deadline {
                tracing::warn!(user_id, "no valid timeline within CACHE_LOCK_TTL; this page comes from PostgreSQL");
                return Ok(None);
            }
            let (token, sentinel_now) = self.claim_rebuild(user_id).await?;
            if let Some(token) = token {
                // Double-checked: a rebuild that finished just before we took the lock is kept.
                if sentinel_now.as_deref() == Some(expected.as_str()) {
                    self.locks.release(&self.keys.timeline_lock(user_id), &token).await?;
                } else {
                    self.rebuild(user_id, &pushed_courses, &expected, &token).await?;
                }
                continue;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    /// Tries to take the timeline's rebuild lock and reads its sentinel after the attempt, in
    /// one round trip.
    async fn claim_rebuild(&self, user_id: i64) -> AppResult<(Option<String>, Option<String>)> {
        let token = Locks::token();
        let mut pipe = redis::pipe();
        Locks::acquire_in(&mut pipe, &self.keys.timeline_lock(user_id), &token, self.config.lock_ttl);
        pipe.cmd("ZRANGE").arg(self.keys.timeline(user_id)).arg(0).arg(0);
        let (taken, sentinel): (Option<String>, Vec<String>) = pipe.query_async(&mut self.redis.clone()).await?;
        Ok((taken.map(|_| token), sentinel.into_iter().next()))
    }

    /// Rebuilds the timeline from PostgreSQL (by the holder of its lock, released here): an
    /// empty `building` timeline first, so that fan-out pushes made while PostgreSQL is read
    /// land in it, then the newest `cap` ids of the fanned-out courses.
    async fn rebuild(&self, user_id: i64, pushed_courses: &[i64], sentinel: &str, token: &str) -> AppResult<()> {
        let key = self.keys.timeline(user_id);
        let building = format!("building:{token}");
        let rebuilt = async {
            self.lists.begin_rebuild(&key, &building, self.config.timeline_ttl).await?;
            let ids = posts::newest_ids_in_courses(&self.db, pushed_courses, self.config.cap as i64).await?;
            self.hooks.rebuilds.pass().await;
            self.lists.fill(&key, &building, sentinel, Some(self.config.timeline_ttl), &ids).await
        }
        .await;
        let released = self.locks.release(&self.keys.timeline_lock(user_id), token).await;
        if let Ok(true) = rebuilt {
            self.stats.rebuilds.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(names::FEED_TIMELINE_REBUILDS).increment(1);
            tracing::debug!(user_id, courses = pushed_courses.len(), "timeline rebuilt");
        }
        rebuilt?;
        released?;
        Ok(())
    }

    /// Appends to `out` the live posts among `candidates` (newest first) in the viewer's
    /// courses, until it holds `want`: one batched cache read per step, usually one in all.
    async fn hydrate(
        &self,
        candidates: &[i64],
        courses: &HashSet<i64>,
        want: usize,
        out: &mut Vec<PostRow>,
    ) -> AppResult<()> {
        let mut rest = candidates;
        while out.len() < want && !rest.is_empty() {
            let (batch, tail) = rest.split_at((want - out.len()).min(rest.len()));
            let mut rows = self.cache.get_many(batch).await?;
            for id in batch {
                if let Some(row) = rows.remove(id).filter(|row| courses.contains(&row.course_id)) {
                    out.push(row);
                }
            }
            rest = tail;
        }
        Ok(())
    }

    /// Keyset over PostgreSQL: up to `want` live posts of `courses` below `below`.
    async fn read_from_database(
        &self,
        courses: &[i64],
        below: Option<i64>,
        want: usize,
        reason: &'static str,
    ) -> AppResult<Vec<PostRow>> {
        self.stats.database_reads.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::FEED_DATABASE_READS, "reason" => reason).increment(1);
        posts::newest_in_courses(&self.db, courses, below, want as i64).await
    }
}
