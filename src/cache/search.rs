//! Search candidates kept in memory: a first page of a course search ranks the newest
//! `CANDIDATES` matches of each kind (`forum::search`), and finding them in windows of ids is
//! most of a search's cost. Each process keeps, per (course, query, filter, `Readers`), the
//! candidates it found, scored, and the xmin of the snapshot it found them in
//! (`forum::search::Candidates`); a later first page of the same search reads only the rows of
//! the course stamped since that xmin (`search_xid`, migration 0022) and a student's own
//! private posts, checks and scores those as they are now, and takes the rest as kept
//! (`forum::search::search_from_candidates`): one statement.
//!
//! - **Never stale.** The answer is the one a search without the cache gives: a row written by
//!   a transaction that had not ended when the candidates were found carries a stamp at or
//!   after their xmin and is read again; a candidate deleted, hidden or edited away is dropped
//!   by the re-read, and when that leaves a full set short (an older match would take its
//!   place) the candidates are found again. A kept score stands only while its row carries no
//!   newer stamp, and endorsements, resolutions and edits restamp it.
//! - **Bounded.** Entries share the `search_candidates` part of `CACHE_BUDGET_BYTES` (3 %),
//!   weighed in bytes (about 3.5 KB for 100 + 100 scored candidates and the query); each lives at most
//!   `SEARCH_CACHE_TTL` (60 s), after which it is found again, so the rows re-read as changed
//!   stay few; past `MAX_CHANGED` changed rows of a kind it is found again at once.
//! - **Only for members.** Callers reach it after the membership check, so a stranger's
//!   searches build nothing; what is kept is shared by every member of the same `Readers`.
//! - **No stampede.** Concurrent first pages of one search that find no entry wait for the
//!   one that finds the candidates, then use what it kept.
//! - **No futile tries.** Candidates stale as soon as they were found (a transaction held open
//!   somewhere keeps every snapshot's xmin back while more than `MAX_CHANGED` rows are
//!   written) are not found again: the page is searched without them, and so is every first
//!   page for `STALE_AT_ONCE_BYPASS` (5 s), instead of paying the windows twice per search.
//! - **Headlines made once.** `ts_headline` over a page's 20 hits was half of a first page's
//!   statement. The headlines a page made are kept per (query, row), with the row's
//!   `search_xid` (which every change of its title, body or configuration moves); a later first
//!   page of the query passes the ones its best-scored candidates have, and its statement makes
//!   a headline only for a row without one at its current stamp. They share the
//!   `search_headlines` part of `CACHE_BUDGET_BYTES` (2 %, about 400 bytes each), for
//!   `SEARCH_CACHE_TTL`. A headline is the row's own text; it reaches only a page the row is
//!   on, which the statement has checked the reader may read.
//! - **Fresh searches are limited per user.** Each search that looks for matches afresh (a
//!   first page without kept candidates, and every search the cache does not serve) is
//!   counted against its user's `SEARCH_RATE_PER_MINUTE` (`FreshSearches`) before it looks:
//!   a first sight costs some 10 ms of the search pool, and a query of many common words up
//!   to 350 ms, so one account sending new queries could hold the pool. A page from kept
//!   candidates is not counted, and no request is counted twice.
//! - **Where it is not used:** later pages (they rank below the first page's floor), searches
//!   over several courses (`Query.search`), an author filter (whose rows depend on who may see
//!   which author), and every search while `SEARCH_CACHE_TTL` is 0.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::ConnectionTrait;

use super::budget::{CacheBudget, CacheName, WeighedCache, string_bytes};
use crate::error::{AppError, AppResult};
use crate::forum::courses::Role;
use crate::forum::search::{
    self, Candidates, HitPage, KnownHeadlines, OnePass, OnePassLimits, Readers, Scope, SearchFilter,
};
use crate::forum::search_stats::SearchStatsCache;
use crate::kv::keys::Keys;
use crate::kv::ratelimit::RateLimiter;
use crate::telemetry::names;

/// Which search a set of candidates serves.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CandidateKey {
    course: i64,
    readers: Readers,
    query: String,
    filter: String,
}

/// Whose headline a kept one is: a query's, for one post (`comment` false) or comment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HeadlineKey {
    query: String,
    comment: bool,
    id: i64,
}

/// A kept headline, and the row's `search_xid` it was made at.
struct KeptHeadline {
    xid: String,
    headline: Arc<str>,
}

/// Candidates past the page's own whose kept headlines a first page passes: the page is the
/// best-scored kept candidates unless rows changed since outscore them.
const HEADLINE_MARGIN: usize = 8;

/// Tries of a first page from kept candidates before it is searched without them (each stale
/// set is found again once).
const TRIES: usize = 2;

/// How long first pages are searched without kept candidates after a set found by this
/// process was stale as soon as it was read (`SearchCandidates::search`).
const STALE_AT_ONCE_BYPASS: Duration = Duration::from_secs(5);

/// Where the candidates a first page reads came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Kept (by an earlier search, or by a concurrent one this one waited for).
    Kept,
    /// Found by this search, and kept.
    FoundHere,
}

impl Source {
    /// The `outcome` of `search_candidates_total` for a page served from them.
    fn outcome(self) -> &'static str {
        match self {
            Source::Kept => "hit",
            Source::FoundHere => "miss",
        }
    }
}

/// One search request's admission to its user's limit of searches that look for matches
/// afresh (`SEARCH_RATE_PER_MINUTE`): `admit` runs before each step that would look, and
/// counts the request once, however many such steps it takes (a stale set found again, then
/// a search without the cache). Over the limit it is RATE_LIMITED, and nothing was looked for.
/// The counter's key is named only when a step would look: a page from kept candidates
/// builds nothing for the limit.
pub(crate) struct FreshSearches<'a> {
    limiter: &'a RateLimiter,
    keys: &'a Keys,
    user_id: i64,
    counted: AtomicBool,
}

impl<'a> FreshSearches<'a> {
    pub(crate) fn new(limiter: &'a RateLimiter, keys: &'a Keys, user_id: i64) -> Self {
        Self { limiter, keys, user_id, counted: AtomicBool::new(false) }
    }

    /// Counts the request against the limit, the first time only, or refuses it.
    pub(crate) async fn admit(&self) -> AppResult<()> {
        if self.counted.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let outcome = self.limiter.check(&self.keys.search_rate(self.user_id)).await;
        if let Err(AppError::RateLimited { .. }) = &outcome {
            metrics::counter!(names::SEARCH_CANDIDATES, "outcome" => "limited").increment(1);
        }
        outcome
    }
}

/// The per-process cache of search candidates (one per `AppState`). Cheap to clone (shared).
#[derive(Clone)]
pub struct SearchCandidates {
    entries: Option<WeighedCache<CandidateKey, Candidates>>,
    /// Headlines of the hits of recent first pages (none when `entries` is).
    headlines: Option<WeighedCache<HeadlineKey, KeptHeadline>>,
    /// The searches whose candidates are being found now, each with the lock its other first
    /// pages wait on.
    finding: Arc<Mutex<HashMap<CandidateKey, Arc<tokio::sync::Mutex<()>>>>>,
    /// Until when first pages skip the kept candidates: candidates stale as soon as they are
    /// found mean that something outside any one search holds them stale (a transaction held
    /// open somewhere keeps the snapshots' xmin back while more than `MAX_CHANGED` rows are
    /// written, or a row left a course since that xmin), and each try would cost a search's
    /// windows twice over for nothing.
    bypass_until: Arc<Mutex<Option<Instant>>>,
    /// How many matches of each kind a search that looks afresh may be expected to have and
    /// still look them up in one pass (`SEARCH_ONE_PASS_*`), and the statistics it estimates
    /// them from.
    one_pass_limits: OnePassLimits,
    stats: SearchStatsCache,
}

impl SearchCandidates {
    /// Entries living `ttl` in the budget's share (no cache at all for a zero `ttl`).
    pub(crate) fn with_budget(ttl: Duration, budget: &CacheBudget, one_pass_limits: OnePassLimits) -> Self {
        let entries = (!ttl.is_zero()).then(|| {
            budget.weighed(CacheName::SearchCandidates, Some(ttl), |key: &CandidateKey, value: &Candidates| {
                string_bytes(&key.query) + string_bytes(&key.filter) + value.heap_bytes()
            })
        });
        let headlines = (!ttl.is_zero()).then(|| {
            budget.weighed(CacheName::SearchHeadlines, Some(ttl), |key: &HeadlineKey, value: &KeptHeadline| {
                string_bytes(&key.query) + string_bytes(&value.xid) + value.headline.len() as u64
            })
        });
        Self {
            entries,
            headlines,
            finding: Arc::default(),
            bypass_until: Arc::default(),
            one_pass_limits,
            stats: SearchStatsCache::default(),
        }
    }

    /// What decides which kinds a search that looks afresh looks up in one pass: the limits
    /// and this process's copy of the statistics (read on `db` when it has none, or an old one).
    pub(crate) async fn one_pass(&self, db: &impl ConnectionTrait) -> AppResult<OnePass> {
        Ok(OnePass { limits: self.one_pass_limits, stats: self.stats.get(db).await? })
    }

    /// Entries held now (tests).
    pub fn entry_count(&self) -> usize {
        self.entries.as_ref().map(|e| e.iter().count()).unwrap_or(0)
    }

    /// Applies the cache's pending bookkeeping (tests: the figures are exact after it).
    pub fn settle(&self) {
        if let Some(entries) = &self.entries {
            entries.settle();
        }
    }

    /// A page of hits of `query` in one course, for a member of it with `role` (the caller
    /// has checked the membership): from kept candidates when this is a first page without an
    /// author filter, else as `forum::search::search` finds it. Candidates are found, and
    /// other pages searched, on `db` (planned per query); a page from kept candidates is read
    /// on `kept_db` (one generic plan, `db::connect_search_kept`).
    // Each argument is one part of the search, as the resolver has it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn search(
        &self,
        db: &impl ConnectionTrait,
        kept_db: &impl ConnectionTrait,
        viewer: i64,
        (course, role): (i64, Role),
        query: &str,
        filter: &SearchFilter,
        after: Option<search::Position>,
        limit: i64,
        fresh: &FreshSearches<'_>,
    ) -> AppResult<HitPage> {
        let courses = [(course, role)];
        let scope = Scope { viewer, courses: &courses };
        let Some(entries) = self.entries.as_ref().filter(|_| after.is_none() && filter.author_id.is_none()) else {
            fresh.admit().await?;
            metrics::counter!(names::SEARCH_CANDIDATES, "outcome" => "uncached").increment(1);
            return search::search(db, &scope, query, filter, after, limit, &self.one_pass(db).await?).await;
        };
        if self.bypassed() {
            fresh.admit().await?;
            metrics::counter!(names::SEARCH_CANDIDATES, "outcome" => "bypassed").increment(1);
            return search::search(db, &scope, query, filter, None, limit, &self.one_pass(db).await?).await;
        }
        let key = CandidateKey { course, readers: Readers::of(role), query: query.to_owned(), filter: filter.key() };
        for _ in 0..TRIES {
            let (candidates, source) = match entries.get(&key) {
                Some(kept) => (kept, Source::Kept),
                None => match self.find(entries, db, &key, filter, fresh).await? {
                    Some(found) => found,
                    // Nothing can match (a query that excludes itself, no such course).
                    None => return Ok(HitPage { hits: Vec::new(), has_next: false }),
                },
            };
            let known = self.known_headlines(query, &candidates, limit);
            match search::search_from_candidates(
                kept_db,
                viewer,
                (course, role),
                query,
                filter,
                limit,
                &candidates,
                &known,
            )
            .await?
            {
                Some(page) => {
                    self.keep_headlines(query, &page);
                    metrics::counter!(names::SEARCH_CANDIDATES, "outcome" => source.outcome()).increment(1);
                    return Ok(page);
                }
                None => {
                    metrics::counter!(names::SEARCH_CANDIDATES, "outcome" => "stale").increment(1);
                    // Dropped only if no one has kept newer candidates meanwhile.
                    if entries.get(&key).is_some_and(|now| Arc::ptr_eq(&now, &candidates)) {
                        entries.invalidate(&key);
                    }
                    if source == Source::FoundHere {
                        // Found by this call and stale already: finding them again would be.
                        self.bypass_for(STALE_AT_ONCE_BYPASS);
                        break;
                    }
                }
            }
        }
        fresh.admit().await?;
        metrics::counter!(names::SEARCH_CANDIDATES, "outcome" => "uncached").increment(1);
        search::search(db, &scope, query, filter, None, limit, &self.one_pass(db).await?).await
    }

    /// The kept headlines of `query` for its best-scored `limit + 1 + HEADLINE_MARGIN`
    /// candidates (the page, unless rows changed since outscore them).
    fn known_headlines(&self, query: &str, candidates: &Candidates, limit: i64) -> KnownHeadlines {
        let mut known = KnownHeadlines::default();
        let Some(headlines) = &self.headlines else {
            return known;
        };
        let posts = candidates.post_ids.iter().zip(&candidates.post_scores).map(|(id, score)| (*score, false, *id));
        let comments =
            candidates.comment_ids.iter().zip(&candidates.comment_scores).map(|(id, score)| (*score, true, *id));
        let mut best: Vec<(f64, bool, i64)> = posts.chain(comments).collect();
        best.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        best.truncate(usize::try_from(limit).unwrap_or(0) + 1 + HEADLINE_MARGIN);
        // One key, its row changed per lookup: the query is copied once, not per candidate.
        let mut key = HeadlineKey { query: query.to_owned(), comment: false, id: 0 };
        for (_, comment, id) in best {
            (key.comment, key.id) = (comment, id);
            if let Some(kept) = headlines.get(&key) {
                let list = if comment { &mut known.comments } else { &mut known.posts };
                list.push((id, kept.xid.clone(), kept.headline.clone()));
            }
        }
        known
    }

    /// Keeps the headlines `page` made.
    fn keep_headlines(&self, query: &str, page: &HitPage) {
        let Some(headlines) = &self.headlines else {
            return;
        };
        let made = page.hits.iter().filter(|hit| hit.headline_computed).count();
        metrics::counter!(names::SEARCH_HEADLINES, "outcome" => "made").increment(made as u64);
        metrics::counter!(names::SEARCH_HEADLINES, "outcome" => "kept").increment((page.hits.len() - made) as u64);
        for hit in page.hits.iter().filter(|hit| hit.headline_computed) {
            let comment = hit.comment.is_some();
            let id = hit.comment.as_ref().map(|c| c.id).unwrap_or(hit.post.id);
            let kept = KeptHeadline { xid: hit.xid.clone(), headline: hit.headline.clone() };
            headlines.insert(HeadlineKey { query: query.to_owned(), comment, id }, Arc::new(kept));
        }
    }

    /// Whether first pages skip the kept candidates now (`bypass_until`).
    fn bypassed(&self) -> bool {
        let until = self.bypass_until.lock().unwrap_or_else(|p| p.into_inner());
        until.is_some_and(|until| Instant::now() < until)
    }

    fn bypass_for(&self, span: Duration) {
        *self.bypass_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + span);
    }

    /// The candidates of `key`, found by this call (and kept) or by a concurrent one it waited
    /// for; with where they came from. `None` when nothing can match.
    async fn find(
        &self,
        entries: &WeighedCache<CandidateKey, Candidates>,
        db: &impl ConnectionTrait,
        key: &CandidateKey,
        filter: &SearchFilter,
        fresh: &FreshSearches<'_>,
    ) -> AppResult<Option<(Arc<Candidates>, Source)>> {
        let lock = {
            let mut finding = self.finding.lock().unwrap_or_else(|p| p.into_inner());
            finding.entry(key.clone()).or_default().clone()
        };
        let finding = Finding { map: &self.finding, key, lock };
        let _turn = finding.lock.lock().await;
        if let Some(kept) = entries.get(key) {
            return Ok(Some((kept, Source::Kept)));
        }
        fresh.admit().await?;
        let one_pass = self.one_pass(db).await?;
        let found = search::candidates(db, key.course, key.readers, &key.query, filter, &one_pass).await?;
        Ok(found.map(|found| {
            let found = Arc::new(found);
            entries.insert(key.clone(), found.clone());
            (found, Source::FoundHere)
        }))
    }
}

/// One caller's part in finding a search's candidates: the last one to leave, however it
/// leaves (done, failed, or dropped with its request), takes the search out of `finding`.
struct Finding<'a> {
    map: &'a Mutex<HashMap<CandidateKey, Arc<tokio::sync::Mutex<()>>>>,
    key: &'a CandidateKey,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Finding<'_> {
    fn drop(&mut self) {
        let mut finding = self.map.lock().unwrap_or_else(|p| p.into_inner());
        // The map's reference and this one: nobody else waits.
        if finding.get(self.key).is_some_and(|held| Arc::ptr_eq(held, &self.lock) && Arc::strong_count(held) <= 2) {
            finding.remove(self.key);
        }
    }
}
