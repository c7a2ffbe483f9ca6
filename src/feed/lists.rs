//! The Redis side of the feed: capped lists of post ids. A user's timeline and a celebrity
//! course's recent posts are the same shape — a ZSET of post ids scored by id, capped at
//! `FEED_TIMELINE_CAP`, plus one score-0 sentinel at rank 0 — so one set of scripts serves both:
//!
//! - `lua/feed_window.lua` reads a page's worth below a bound, with the sentinel and the floor
//!   (the oldest id the list is known to be complete from: 0 until it has been trimmed);
//! - `lua/feed_push.lua` adds ids only to a list that exists (fan-out skips inactive users);
//! - `lua/timeline_begin.lua` and `lua/feed_fill.lua` rebuild a list from PostgreSQL.
//!
//! Lists are never shortened except by trimming from the old end: deleted posts stay in them
//! and are skipped when a page is hydrated, so the floor stays true.

use std::sync::Arc;
use std::time::Duration;

use redis::{Script, Value};

use crate::error::{AppError, AppResult};
use crate::kv::{self, Redis};

/// A page's worth of one list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// What the list says about itself: `c:<courses>` or `building:<token>` for a timeline,
    /// `_` for a celebrity list.
    pub sentinel: String,
    /// The list holds every post of its scope with an id at or above this (0: since it was built).
    pub floor: i64,
    /// Ids below the bound asked for, newest first.
    pub ids: Vec<i64>,
}

struct Scripts {
    window: Script,
    push: Script,
    begin: Script,
    fill: Script,
}

/// Capped post-id lists in Redis. Cheap to clone.
#[derive(Clone)]
pub struct Lists {
    redis: Redis,
    cap: usize,
    scripts: Arc<Scripts>,
}

impl Lists {
    pub fn new(redis: Redis, cap: usize) -> Self {
        let scripts = Scripts {
            window: Script::new(include_str!("../../lua/feed_window.lua")),
            push: Script::new(include_str!("../../lua/feed_push.lua")),
            begin: Script::new(include_str!("../../lua/timeline_begin.lua")),
            fill: Script::new(include_str!("../../lua/feed_fill.lua")),
        };
        Self { redis, cap: cap.max(1), scripts: Arc::new(scripts) }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    pub async fn load_scripts(&self) -> AppResult<()> {
        let s = &self.scripts;
        kv::load_scripts(&self.redis, &[&s.window, &s.push, &s.begin, &s.fill]).await
    }

    /// Up to `count` ids below `below` (all when `None`) of every list, in one round trip;
    /// `None` for a list that does not exist. A list given a TTL has it refreshed (a timeline
    /// that is read stays; one nobody reads expires).
    pub async fn windows(
        &self,
        lists: &[(String, Option<Duration>)],
        below: Option<i64>,
        count: usize,
    ) -> AppResult<Vec<Option<Window>>> {
        let bound = below.map_or_else(|| "+inf".to_owned(), |b| b.to_string());
        let mut pipe = redis::pipe();
        for (key, ttl) in lists {
            pipe.invoke_script(
                self.scripts
                    .window
                    .key(key)
                    .arg(&bound)
                    .arg(count)
                    .arg(self.cap)
                    .arg(ttl.map_or(0, |t| t.as_millis() as u64)),
            );
        }
        let replies: Vec<Vec<Value>> = kv::query_scripts(&self.redis, &pipe, &[&self.scripts.window]).await?;
        replies.into_iter().map(parse_window).collect()
    }

    /// Adds `ids` to each list that exists (one script per list, all in one pipeline). Returns,
    /// per list, whether it existed.
    pub async fn push(&self, pushes: &[(String, &[i64])]) -> AppResult<Vec<bool>> {
        if pushes.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (key, ids) in pushes {
            pipe.invoke_script(self.scripts.push.key(key).arg(self.cap).arg(*ids));
        }
        let pushed: Vec<i64> = kv::query_scripts(&self.redis, &pipe, &[&self.scripts.push]).await?;
        Ok(pushed.into_iter().map(|p| p == 1).collect())
    }

    /// Replaces a timeline by an empty one marked `building`, which fan-out pushes land in
    /// while the rebuild reads PostgreSQL.
    pub async fn begin_rebuild(&self, key: &str, building: &str, ttl: Duration) -> AppResult<()> {
        let _: i64 = self
            .scripts
            .begin
            .key(key)
            .arg(building)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// Fills a list with `ids` and names it `sentinel`: a timeline only if it still carries
    /// `expected` (our `building` mark), a celebrity list only if it does not exist
    /// (`expected` empty). Returns whether it filled.
    pub async fn fill(
        &self,
        key: &str,
        expected: &str,
        sentinel: &str,
        ttl: Option<Duration>,
        ids: &[i64],
    ) -> AppResult<bool> {
        let filled: i64 = self
            .scripts
            .fill
            .key(key)
            .arg(expected)
            .arg(sentinel)
            .arg(self.cap)
            .arg(ttl.map_or(0, |t| t.as_millis() as u64))
            .arg(ids)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(filled == 1)
    }
}

/// `{}` → `None`; `{sentinel, floor, ids…}` → a window.
fn parse_window(reply: Vec<Value>) -> AppResult<Option<Window>> {
    let bad = || AppError::Internal("feed_window.lua answered something unexpected".into());
    let mut items = reply.into_iter().map(|v| redis::from_redis_value::<String>(v).map_err(|_| bad()));
    let Some(sentinel) = items.next().transpose()? else { return Ok(None) };
    let floor = items.next().ok_or_else(bad)??.parse::<i64>().map_err(|_| bad())?;
    let ids = items.map(|item| item?.parse::<i64>().map_err(|_| bad())).collect::<AppResult<Vec<i64>>>()?;
    Ok(Some(Window { sentinel, floor, ids }))
}
