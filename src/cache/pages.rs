//! Posts in process memory: the rows of `Course.posts` pages this instance served lately, so a
//! warm course page costs no SQL statement, and single posts it read lately (access checks,
//! likes, `post(id)`), so a hot post costs no Redis round trip before its like.
//!
//! **What changes a cached page, and how it hears of it.** Every committed change that can
//! alter a page is published on the live channel (`live_message::LiveMessage`), and this
//! instance hears it through its relay; the writing instance also applies it here before it
//! answers, so a writer reads its own write.
//! - a post created, deleted or updated (pinned, made public…) in the course (`Activity`): the
//!   course's pages are dropped;
//! - a comment or reply created or deleted (`Activity`, its post's `commentCount`), a post
//!   edited (`PostsChanged`) or deleted: the pages showing that post, and the post, are dropped;
//! - committed like counts (`Counts`) and view counts (`ViewCounts`): patched into the rows,
//!   newer like versions and larger view counts only, so a like storm costs no reload.
//!
//! **Loads that race a change.** A load notes the change log's position when it starts
//! (`begin`); when it stores, every change heard since is applied to what it read (patches) or
//! makes it not store at all (drops). A load therefore never puts back a row older than a
//! change already heard.
//!
//! **HOT and TOP first pages** are kept too, for `RANKED_PAGE_TTL` at most (half a second).
//! The same drops apply, so a deleted post leaves them at once. A committed like drops the
//! ranked pages of its post's course when this instance knows the course (the post is on a
//! page or among the posts kept here, as it is on the instance that took the like), and a load
//! that a like overtook is not kept. A like on a post this instance has not seen can still
//! lift it into a kept page unnoticed: the short TTL bounds that, inside the second in which a
//! like must show in HOT order.
//!
//! **How stale a page can be.** Behind the database by the relay's delay (a few milliseconds)
//! for changes published on the live channel. A change that is not published (SQL by hand,
//! `course-forum reconcile`) or a message lost while the relay was not subscribed shows at
//! most `COURSE_PAGE_CACHE_TTL` late; the relay also drops every page when it subscribes
//! again after a gap.
//!
//! **Memory.** Pages and single posts are moka caches (`cache::budget`) bounded by the
//! `course_pages` and `posts` shares of `CACHE_BUDGET_BYTES`, weighed by their rows' bytes; a
//! reader gets the page's `Arc`. A change does not touch the cached values: it moves a mark
//! (the course's, the post's, or everything's) in a small index, and an entry stored before
//! a mark that concerns it is no longer served. Counts heard since an entry was stored are
//! kept in the index and patched into a copy, made outside the lock, when it is next read.
//! The index (which post is on which page, those counts, the marks, the change log) is
//! bounded by the `course_pages_index` share: past it, what no live entry can need (older
//! than the TTL) is forgotten, and if that is not enough everything starts over.
//!
//! **Pinned posts.** The page that opens a course's list (a NEW first page, the backward page
//! that reaches the top, a HOT or TOP first page) carries the course's public pinned posts
//! ahead of its others (`forum::posts`), so they are kept with it and leave it as its other
//! rows do: a pinned post edited, commented on or deleted drops the course's pages. A pin, an
//! unpin or a private post made public changes which rows a course's pages hold, so it must be
//! applied as a change of the whole course (`Change::Course`, as a new post is): published as a
//! change of the post alone it would drop only the pages that already show that post (an unpin
//! does; a newly pinned post would show after `COURSE_PAGE_CACHE_TTL`).
//!
//! **Which pages are kept.** A NEW-order page is kept only when it is a first page (no
//! cursor) or its cursor is a boundary of a page this instance kept: the first or last post
//! of it, which is what its `startCursor` and `endCursor` name. A page asked for with any
//! other cursor (a forged one past the newest post, the middle of a page) is served and
//! forgotten: a client cannot mint keys, so a flood of cursors does not grow memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sea_orm::ConnectionTrait;

use super::budget::{CacheBudget, CacheFigures, CacheName, DEFAULT_BUDGET_BYTES, Measured, WeighedCache};
use crate::error::AppResult;
use crate::forum::paging::{Page, PageRequest};
use crate::forum::posts::{self, PostFilter, PostRow, Ranking, Reader};
use crate::like_event::{CountChange, LikeTarget};
use crate::live_message::{ActivityKind, LiveMessage};

/// Longest a HOT or TOP first page is served without a reload (see the module doc).
pub const RANKED_PAGE_TTL: Duration = Duration::from_millis(500);

/// Changes remembered for loads in flight. A load that started more changes ago than this
/// does not store what it read.
const CHANGE_LOG: usize = 4_096;

/// One change heard on the live channel, as the page cache needs it.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Posts were added to or removed from the course.
    Course(i64),
    /// The post's row changed (edit, comment count).
    Post(i64),
    Likes(CountChange),
    Views {
        post: i64,
        views: i64,
    },
    /// Anything may have changed (the relay missed messages).
    Everything,
}

/// The rows of recently served course pages. Cheap to clone (shared).
#[derive(Clone)]
pub struct CoursePages {
    pages: WeighedCache<(i64, PageKey), CachedPage>,
    posts: WeighedCache<i64, CachedPost>,
    index: Arc<Mutex<Index>>,
    /// Longest a page is served without a reload (zero: nothing is cached).
    ttl: Duration,
    limits: IndexLimits,
}

/// Which page of a course: a keyset page in NEW order, or the first page of a ranked order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PageKey {
    Keyset(PageRequest),
    /// The first `limit` posts in HOT or TOP order.
    RankedFirst(Ranking, i64),
}

struct CachedPage {
    page: Arc<Page<PostRow>>,
    stored_at: Instant,
    /// The change log's number when it was stored: every change up to it is in the rows.
    stored_seq: u64,
}

struct CachedPost {
    row: PostRow,
    stored_at: Instant,
    stored_seq: u64,
}

/// What the cached values need to be judged, all under one lock.
#[derive(Default)]
struct Index {
    /// The latest changes, numbered: what a load that began at number n must catch up on.
    log: VecDeque<(u64, Change)>,
    /// Number of the latest change.
    seq: u64,
    /// Nothing stored before this change is served (`Change::Everything`).
    everything_at: u64,
    /// Per course, the last change that dropped its pages (or only its ranked pages), or
    /// changed a count on one of them.
    courses: HashMap<i64, CourseMarks>,
    /// Every post on a kept page or kept alone (a superset: it may name posts no longer kept).
    posts: HashMap<i64, PostInfo>,
}

#[derive(Clone, Copy)]
struct CourseMarks {
    dropped_at: u64,
    ranked_at: u64,
    counted_at: u64,
    touched: Instant,
}

struct PostInfo {
    course: i64,
    /// First or last post of a kept NEW-order page: a cursor the server handed out.
    boundary: bool,
    /// The last page kept that shows it.
    page: Option<PageKey>,
    /// The last change of its row.
    changed_at: u64,
    /// The last count heard for it, and when.
    counted_at: u64,
    likes: Option<CountChange>,
    views: i64,
    /// When a page or the post itself was last stored with it.
    stored: Instant,
}

/// How many posts and courses the index holds before it prunes (from its share).
#[derive(Clone, Copy)]
struct IndexLimits {
    posts: usize,
    courses: usize,
    bytes: u64,
}

/// Bytes of one slot of the index's maps (a hash table keeps up to twice its entries' slots).
const POST_SLOT_BYTES: usize = std::mem::size_of::<(i64, PostInfo)>() + 1;
const COURSE_SLOT_BYTES: usize = std::mem::size_of::<(i64, CourseMarks)>() + 1;
const LOG_SLOT_BYTES: usize = std::mem::size_of::<(u64, Change)>();

impl IndexLimits {
    fn from_share(bytes: u64) -> Self {
        let room = bytes.saturating_sub((CHANGE_LOG * LOG_SLOT_BYTES) as u64) as usize;
        Self {
            posts: (room * 3 / 4 / (2 * POST_SLOT_BYTES)).max(256),
            courses: (room / 4 / (2 * COURSE_SLOT_BYTES)).max(64),
            bytes,
        }
    }
}

/// The index's figures for `/metrics` (`cache="course_pages_index"`).
struct IndexFigures(Arc<Mutex<Index>>, u64);

impl Measured for IndexFigures {
    fn figures(&self) -> CacheFigures {
        let index = lock(&self.0);
        let used = index.posts.capacity() * POST_SLOT_BYTES
            + index.courses.capacity() * COURSE_SLOT_BYTES
            + index.log.capacity() * LOG_SLOT_BYTES;
        CacheFigures {
            used_bytes: used as u64,
            entries: (index.posts.len() + index.courses.len()) as u64,
            capacity_bytes: self.1,
        }
    }
}

/// Where the change log stood when a load began.
#[derive(Clone, Copy, Debug)]
pub struct LoadStart(u64);

/// The heap a post row owns.
fn row_bytes(row: &PostRow) -> u64 {
    (row.title.len() + row.body.len()) as u64
}

fn lock(index: &Mutex<Index>) -> MutexGuard<'_, Index> {
    index.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CoursePages {
    /// Under a budget of its own (tests); the server uses `with_budget`.
    pub fn new(ttl: Duration) -> Self {
        Self::with_budget(ttl, &CacheBudget::new(DEFAULT_BUDGET_BYTES))
    }

    /// Pages and posts bounded by their shares of `budget` (`cache::budget`).
    pub fn with_budget(ttl: Duration, budget: &CacheBudget) -> Self {
        let keep = Some(ttl);
        let pages = budget.weighed(CacheName::CoursePages, keep, |_, cached: &CachedPage| {
            let rows = &cached.page.items;
            (rows.capacity() * std::mem::size_of::<PostRow>()) as u64 + rows.iter().map(row_bytes).sum::<u64>()
        });
        let posts = budget.weighed(CacheName::Posts, keep, |_, cached: &CachedPost| row_bytes(&cached.row));
        let limits = IndexLimits::from_share(budget.share(CacheName::CoursePagesIndex));
        let index = Arc::new(Mutex::new(Index::default()));
        budget.register(CacheName::CoursePagesIndex, Arc::new(IndexFigures(index.clone(), limits.bytes)));
        Self { pages, posts, index, ttl, limits }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        lock(&self.index)
    }

    /// A page served lately, unless older than the TTL.
    pub fn get(&self, course_id: i64, request: &PageRequest) -> Option<Arc<Page<PostRow>>> {
        self.get_key(course_id, &PageKey::Keyset(*request))
    }

    fn get_key(&self, course_id: i64, key: &PageKey) -> Option<Arc<Page<PostRow>>> {
        if !self.enabled() {
            return None;
        }
        let ttl = match key {
            PageKey::Keyset(_) => self.ttl,
            PageKey::RankedFirst(..) => self.ttl.min(RANKED_PAGE_TTL),
        };
        let cached = self.pages.get(&(course_id, *key))?;
        if cached.stored_at.elapsed() >= ttl {
            return None;
        }
        let ranked = matches!(key, PageKey::RankedFirst(..));
        let (counts, seq) = {
            let index = self.lock();
            if !index.page_valid(course_id, ranked, cached.stored_seq) {
                return None;
            }
            (index.counts_since(Some(course_id), cached.stored_seq, &cached.page.items), index.seq)
        };
        let Some(counts) = counts else { return Some(cached.page.clone()) };
        // Counts heard since it was stored: patched into a copy made outside the lock, kept
        // as of the number the marks were read at.
        let page = if counts.is_empty() {
            cached.page.clone()
        } else {
            let mut page = Page::clone(&cached.page);
            for change in &counts {
                patch(&mut page.items, change);
            }
            Arc::new(page)
        };
        let again = CachedPage { page: page.clone(), stored_at: cached.stored_at, stored_seq: seq };
        self.pages.insert((course_id, *key), Arc::new(again));
        Some(page)
    }

    /// The first `limit` posts of a course in HOT or TOP order, from memory (at most
    /// `RANKED_PAGE_TTL` old) or read from the database (and kept).
    pub async fn ranked_first_page(
        &self,
        db: &impl ConnectionTrait,
        course_id: i64,
        ranking: Ranking,
        limit: i64,
    ) -> AppResult<Arc<Page<PostRow>>> {
        let key = PageKey::RankedFirst(ranking, limit);
        if let Some(page) = self.get_key(course_id, &key) {
            return Ok(page);
        }
        let start = self.begin();
        let (items, has_next) =
            posts::ranked_page(db, course_id, Reader::Shared, &PostFilter::default(), ranking, &[], limit).await?;
        Ok(self.store_key(start, course_id, key, Page { items, has_next, has_prev: false }))
    }

    /// The page from memory, or read from the database (and kept when its cursor is one this
    /// instance handed out; see the module doc).
    pub async fn get_or_read(
        &self,
        db: &impl ConnectionTrait,
        course_id: i64,
        request: PageRequest,
    ) -> AppResult<Arc<Page<PostRow>>> {
        if let Some(page) = self.get(course_id, &request) {
            return Ok(page);
        }
        let start = self.begin();
        let page = posts::page_in_course(db, course_id, Reader::Shared, &PostFilter::default(), &request).await?;
        Ok(self.store(start, course_id, request, page))
    }

    /// A post shown on a page kept here, or kept alone, as current as that: what access
    /// checks and likes read before asking the post cache (a hot post is on its course's
    /// first page).
    pub fn post(&self, post_id: i64) -> Option<PostRow> {
        if !self.enabled() {
            return None;
        }
        if let Some(cached) = self.posts.get(&post_id)
            && cached.stored_at.elapsed() < self.ttl
        {
            let judged = {
                let index = self.lock();
                index.post_valid(post_id, cached.stored_seq).then(|| {
                    let row = std::slice::from_ref(&cached.row);
                    (index.counts_since(None, cached.stored_seq, row), index.seq)
                })
            };
            if let Some((counts, seq)) = judged {
                let mut row = cached.row.clone();
                if let Some(counts) = counts {
                    for change in &counts {
                        patch(std::slice::from_mut(&mut row), change);
                    }
                    let again = CachedPost { row: row.clone(), stored_at: cached.stored_at, stored_seq: seq };
                    self.posts.insert(post_id, Arc::new(again));
                }
                return Some(row);
            }
        }
        let (course, key) = {
            let index = self.lock();
            let info = index.posts.get(&post_id)?;
            (info.course, info.page?)
        };
        self.get_key(course, &key)?.items.iter().find(|row| row.id == post_id).cloned()
    }

    /// Call before reading a page from the database; hand the result to `store`.
    pub fn begin(&self) -> LoadStart {
        LoadStart(self.lock().seq)
    }

    /// Keeps a post read (from the post cache) since `start`, brought up to date with the
    /// changes heard meanwhile; not kept if one of them changed or deleted it. Call it only
    /// once the reader's access to the post was proven: a caller who may not see a post must
    /// not make this instance hold it.
    pub fn store_post(&self, start: LoadStart, mut row: PostRow) {
        if !self.enabled() {
            return;
        }
        let now = Instant::now();
        let seq = {
            let mut index = self.lock();
            index.make_room(1, self.ttl, self.limits);
            if !index.catch_up(start, None, false, std::slice::from_mut(&mut row)) {
                return;
            }
            index.remember(row.id, row.course_id, now);
            index.seq
        };
        self.posts.insert(row.id, Arc::new(CachedPost { row, stored_at: now, stored_seq: seq }));
    }

    /// Keeps a page read from the database since `start`, brought up to date with the changes
    /// heard meanwhile; not kept if one of them may have changed which rows it holds, or if its
    /// cursor is not a boundary of a page kept here.
    pub fn store(
        &self,
        start: LoadStart,
        course_id: i64,
        request: PageRequest,
        page: Page<PostRow>,
    ) -> Arc<Page<PostRow>> {
        self.store_key(start, course_id, PageKey::Keyset(request), page)
    }

    fn store_key(&self, start: LoadStart, course_id: i64, key: PageKey, mut page: Page<PostRow>) -> Arc<Page<PostRow>> {
        if !self.enabled() {
            return Arc::new(page);
        }
        let now = Instant::now();
        let seq = {
            let mut index = self.lock();
            if let PageKey::Keyset(PageRequest { cursor: Some(cursor), .. }) = key
                && !index.posts.get(&cursor).is_some_and(|info| info.boundary && info.course == course_id)
            {
                // Not a cursor this instance handed out for a page it holds: served, not kept.
                return Arc::new(page);
            }
            index.make_room(page.items.len(), self.ttl, self.limits);
            let ranked = matches!(key, PageKey::RankedFirst(..));
            if !index.catch_up(start, Some(course_id), ranked, &mut page.items) {
                return Arc::new(page);
            }
            // The boundaries are the first and last unpinned posts: a pinned post that leads a
            // NEW page has a cursor of its own (above every unpinned post), never its id.
            let unpinned = || page.items.iter().filter(|row| row.pinned_at.is_none()).map(|row| row.id);
            let boundaries = [unpinned().next(), unpinned().next_back()];
            for row in &page.items {
                let info = index.remember(row.id, course_id, now);
                info.page = Some(key);
                if !ranked && boundaries.contains(&Some(row.id)) {
                    info.boundary = true;
                }
            }
            index.seq
        };
        let page = Arc::new(page);
        self.pages
            .insert((course_id, key), Arc::new(CachedPage { page: page.clone(), stored_at: now, stored_seq: seq }));
        page
    }

    /// Applies one message heard on the live channel (or published by this instance).
    pub fn apply(&self, message: &LiveMessage) {
        if !self.enabled() {
            return;
        }
        let changes: Vec<Change> = match message {
            LiveMessage::Counts { counts, .. } => LiveMessage::count_changes(counts)
                .into_iter()
                .filter(|c| matches!(c.target, LikeTarget::Post(_)))
                .map(Change::Likes)
                .collect(),
            LiveMessage::Activity { activity } => match activity.kind {
                ActivityKind::PostCreated => vec![Change::Course(activity.course_id)],
                ActivityKind::PostDeleted => vec![Change::Course(activity.course_id), Change::Post(activity.post_id)],
                ActivityKind::CommentCreated
                | ActivityKind::ReplyCreated
                | ActivityKind::CommentDeleted
                | ActivityKind::ReplyDeleted
                | ActivityKind::CommentUpdated
                | ActivityKind::ReplyUpdated => vec![Change::Post(activity.post_id)],
                // A post's state moved: its row, and which pages show it (a pin leads the first
                // page, a post made public joins the course's pages).
                ActivityKind::PostUpdated => vec![Change::Course(activity.course_id), Change::Post(activity.post_id)],
            },
            LiveMessage::PostsChanged { posts } => posts.iter().map(|id| Change::Post(*id)).collect(),
            LiveMessage::ViewCounts { counts } => {
                counts.iter().map(|(post, views)| Change::Views { post: *post, views: *views }).collect()
            }
            LiveMessage::Notifications { .. }
            | LiveMessage::CourseNotifications { .. }
            | LiveMessage::ReadMarks { .. } => return,
        };
        let mut index = self.lock();
        for change in changes {
            index.record(change);
        }
    }

    /// Forgets every page: the relay may have missed changes.
    pub fn clear(&self) {
        self.lock().record(Change::Everything);
        self.pages.invalidate_all();
        self.posts.invalidate_all();
    }

    /// How many pages are kept and still served (for tests; O(pages)).
    pub fn len(&self) -> usize {
        if !self.enabled() {
            return 0;
        }
        let held: Vec<_> = self.pages.iter().collect();
        let index = self.lock();
        held.iter()
            .filter(|(entry_key, cached)| {
                let (course, key) = entry_key.as_ref();
                let ttl = match key {
                    PageKey::Keyset(_) => self.ttl,
                    PageKey::RankedFirst(..) => self.ttl.min(RANKED_PAGE_TTL),
                };
                cached.stored_at.elapsed() < ttl
                    && index.page_valid(*course, matches!(key, PageKey::RankedFirst(..)), cached.stored_seq)
            })
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a post is kept alone (not only on a page), for tests.
    pub fn holds_post(&self, post_id: i64) -> bool {
        self.posts.get(&post_id).is_some()
    }

    /// The figures of the pages and the single posts (bytes, entries, capacity).
    pub fn figures(&self) -> (CacheFigures, CacheFigures) {
        (self.pages.figures(), self.posts.figures())
    }
}

impl Index {
    fn record(&mut self, change: Change) {
        self.seq += 1;
        let seq = self.seq;
        if self.log.len() == CHANGE_LOG {
            self.log.pop_front();
        }
        self.log.push_back((seq, change));
        let now = Instant::now();
        match change {
            Change::Course(course) => self.mark(course, now).dropped_at = seq,
            Change::Post(post) => {
                if let Some(info) = self.posts.get_mut(&post) {
                    info.changed_at = seq;
                    let course = info.course;
                    self.mark(course, now).dropped_at = seq;
                }
            }
            Change::Likes(_) | Change::Views { .. } => {
                let Some(info) = change_post(&change).and_then(|post| self.posts.get_mut(&post)) else { return };
                match change {
                    Change::Likes(likes) if info.likes.is_none_or(|l| likes.version > l.version) => {
                        info.likes = Some(likes)
                    }
                    Change::Views { views, .. } => info.views = info.views.max(views),
                    _ => {}
                }
                info.counted_at = seq;
                let course = info.course;
                let marks = self.mark(course, now);
                marks.counted_at = seq;
                if matches!(change, Change::Likes(_)) {
                    // A like may reorder HOT and TOP: patching counts is not enough there.
                    marks.ranked_at = seq;
                }
            }
            Change::Everything => {
                self.everything_at = seq;
                self.posts.clear();
                self.courses.clear();
            }
        }
    }

    fn mark(&mut self, course: i64, now: Instant) -> &mut CourseMarks {
        let marks = self.courses.entry(course).or_insert(CourseMarks {
            dropped_at: 0,
            ranked_at: 0,
            counted_at: 0,
            touched: now,
        });
        marks.touched = now;
        marks
    }

    /// The post's entry in the index, created if new, noted as stored now.
    fn remember(&mut self, post: i64, course: i64, now: Instant) -> &mut PostInfo {
        let info = self.posts.entry(post).or_insert(PostInfo {
            course,
            boundary: false,
            page: None,
            changed_at: 0,
            counted_at: 0,
            likes: None,
            views: 0,
            stored: now,
        });
        info.stored = now;
        info
    }

    /// Keeps the index within its limits before `incoming` more posts: first forgets what no
    /// live entry can need (stored longer ago than the TTL, which every entry outlives no
    /// more), and if that is not enough, everything.
    fn make_room(&mut self, incoming: usize, ttl: Duration, limits: IndexLimits) {
        if self.posts.len() + incoming >= limits.posts {
            self.posts.retain(|_, info| info.stored.elapsed() < ttl);
            if self.posts.len() + incoming >= limits.posts * 3 / 4 {
                self.record(Change::Everything);
            }
            self.posts.shrink_to(limits.posts);
        }
        if self.courses.len() >= limits.courses {
            self.courses.retain(|_, marks| marks.touched.elapsed() < ttl);
            if self.courses.len() >= limits.courses * 3 / 4 {
                self.record(Change::Everything);
            }
            self.courses.shrink_to(limits.courses);
        }
    }

    /// Whether a page of `course` stored at `stored_seq` may still be served.
    fn page_valid(&self, course: i64, ranked: bool, stored_seq: u64) -> bool {
        stored_seq >= self.everything_at
            && self
                .courses
                .get(&course)
                .is_none_or(|marks| stored_seq >= marks.dropped_at && (!ranked || stored_seq >= marks.ranked_at))
    }

    /// Whether a post kept alone since `stored_seq` may still be served.
    fn post_valid(&self, post: i64, stored_seq: u64) -> bool {
        stored_seq >= self.everything_at && self.posts.get(&post).is_some_and(|info| stored_seq >= info.changed_at)
    }

    /// The counts heard since `stored_seq` for `rows` (of `course`, when a page), as changes
    /// to patch in; `None` when none can have been.
    fn counts_since(&self, course: Option<i64>, stored_seq: u64, rows: &[PostRow]) -> Option<Vec<Change>> {
        if let Some(course) = course
            && self.courses.get(&course).is_none_or(|marks| marks.counted_at <= stored_seq)
        {
            return None;
        }
        let mut changes = Vec::new();
        for row in rows {
            let Some(info) = self.posts.get(&row.id).filter(|info| info.counted_at > stored_seq) else { continue };
            if let Some(likes) = info.likes {
                changes.push(Change::Likes(likes));
            }
            if info.views > 0 {
                changes.push(Change::Views { post: row.id, views: info.views });
            }
        }
        if course.is_none() && changes.is_empty() { None } else { Some(changes) }
    }

    /// Applies to `rows` (read since `start`: a page of `course`, or one post) the changes heard
    /// since. False when one of them may have changed which rows they are, or changed one
    /// beyond a patch, or the log no longer reaches back to `start`; for a `ranked` page, also
    /// when any like was committed meanwhile (it may have reordered the course).
    fn catch_up(&self, start: LoadStart, course: Option<i64>, ranked: bool, rows: &mut [PostRow]) -> bool {
        if self.seq == start.0 {
            return true;
        }
        if self.log.front().is_none_or(|(first, _)| *first > start.0 + 1) {
            return false;
        }
        for (_, change) in self.log.iter().filter(|(n, _)| *n > start.0) {
            match change {
                Change::Everything => return false,
                Change::Course(c) if Some(*c) == course => return false,
                Change::Post(p) if rows.iter().any(|row| row.id == *p) => return false,
                Change::Likes(_) if ranked => return false,
                Change::Likes(_) | Change::Views { .. } => patch(rows, change),
                Change::Course(_) | Change::Post(_) => {}
            }
        }
        true
    }
}

fn change_post(change: &Change) -> Option<i64> {
    match change {
        Change::Likes(CountChange { target: LikeTarget::Post(id), .. }) => Some(*id),
        Change::Views { post, .. } => Some(*post),
        _ => None,
    }
}

/// Patches a committed like count (if newer) or view count (if larger) into the post's row.
fn patch(rows: &mut [PostRow], change: &Change) {
    let Some(post) = change_post(change) else { return };
    let Some(row) = rows.iter_mut().find(|row| row.id == post) else { return };
    match change {
        Change::Likes(likes) if likes.version > row.like_version => {
            row.like_count = likes.like_count;
            row.like_version = likes.version;
        }
        Change::Views { views, .. } => row.view_count = row.view_count.max(*views),
        _ => {}
    }
}
