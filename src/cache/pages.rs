//! Posts in process memory: the rows of `Course.posts` pages this instance served lately, so a
//! warm course page costs no SQL statement, and single posts it read lately (access checks,
//! likes, `post(id)`), so a hot post costs no Redis round trip before its like.
//!
//! **What changes a cached page, and how it hears of it.** Every committed change that can
//! alter a page is published on the live channel (`live::LiveMessage`), and this instance hears
//! it through its relay; the writing instance also applies it here before it answers, so a
//! writer reads its own write.
//! - a post created or deleted in the course (`Activity`): the course's pages are dropped;
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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::forum::paging::{Page, PageRequest};
use sea_orm::ConnectionTrait;

use crate::error::AppResult;
use crate::forum::posts::{self, PostRow, Ranking};
use crate::like_event::{CountChange, LikeTarget};
use crate::live::{ActivityKind, LiveMessage};

/// Longest a HOT or TOP first page is served without a reload (see the module doc).
pub const RANKED_PAGE_TTL: Duration = Duration::from_millis(500);

/// Most pages kept. A server past it forgets them all and starts over (a page is one
/// statement to read again).
const MAX_PAGES: usize = 2_000;

/// Most single posts kept; past it they are all forgotten (each is one post-cache read again).
const MAX_POSTS: usize = 10_000;

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
    inner: Arc<Mutex<Pages>>,
    /// Longest a page is served without a reload (zero: nothing is cached).
    ttl: Duration,
}

/// Which page of a course: a keyset page in NEW order, or the first page of a ranked order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PageKey {
    Keyset(PageRequest),
    /// The first `limit` posts in HOT or TOP order.
    RankedFirst(Ranking, i64),
}

#[derive(Default)]
struct Pages {
    by_course: HashMap<i64, HashMap<PageKey, Cached>>,
    pages: usize,
    /// The course of every post on a cached page (a post's course never changes). May name
    /// posts no longer cached: that costs a lookup, never a wrong answer.
    course_of_post: HashMap<i64, i64>,
    /// Single posts read lately (not deleted when read).
    posts: HashMap<i64, CachedPost>,
    /// The latest changes, numbered: what a load that began at number n must catch up on.
    log: VecDeque<(u64, Change)>,
    /// Number of the latest change.
    seq: u64,
}

struct Cached {
    page: Arc<Page<PostRow>>,
    stored_at: Instant,
}

struct CachedPost {
    row: PostRow,
    stored_at: Instant,
}

/// Where the change log stood when a load began.
#[derive(Clone, Copy, Debug)]
pub struct LoadStart(u64);

impl CoursePages {
    pub fn new(ttl: Duration) -> Self {
        Self { inner: Arc::default(), ttl }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    fn lock(&self) -> MutexGuard<'_, Pages> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let pages = self.lock();
        let cached = pages.by_course.get(&course_id)?.get(key)?;
        (cached.stored_at.elapsed() < ttl).then(|| cached.page.clone())
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
        let (items, has_next) = posts::ranked_page(db, course_id, ranking, &[], limit).await?;
        Ok(self.store_key(start, course_id, key, Page { items, has_next, has_prev: false }))
    }

    /// The page from memory, or read from the database (and kept).
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
        let page = posts::page_in_course(db, course_id, &request).await?;
        Ok(self.store(start, course_id, request, page))
    }

    /// A post shown on a page kept here, as current as the page: what access checks and likes
    /// read before asking the post cache (a hot post is on its course's first page).
    pub fn post(&self, post_id: i64) -> Option<PostRow> {
        if !self.enabled() {
            return None;
        }
        let pages = self.lock();
        if let Some(cached) = pages.posts.get(&post_id).filter(|cached| cached.stored_at.elapsed() < self.ttl) {
            return Some(cached.row.clone());
        }
        let course = pages.course_of_post.get(&post_id)?;
        pages
            .by_course
            .get(course)?
            .values()
            .filter(|cached| cached.stored_at.elapsed() < self.ttl)
            .find_map(|cached| cached.page.items.iter().find(|row| row.id == post_id))
            .cloned()
    }

    /// Call before reading a page from the database; hand the result to `store`.
    pub fn begin(&self) -> LoadStart {
        LoadStart(self.lock().seq)
    }

    /// Keeps a post read (from the post cache) since `start`, brought up to date with the
    /// changes heard meanwhile; not kept if one of them changed or deleted it.
    pub fn store_post(&self, start: LoadStart, mut row: PostRow) {
        if !self.enabled() {
            return;
        }
        let mut pages = self.lock();
        if pages.catch_up(start, None, false, std::slice::from_mut(&mut row)) {
            if pages.posts.len() >= MAX_POSTS {
                pages.posts.clear();
            }
            pages.posts.insert(row.id, CachedPost { row, stored_at: Instant::now() });
        }
    }

    /// Keeps a page read from the database since `start`, brought up to date with the changes
    /// heard meanwhile; not kept if one of them may have changed which rows it holds.
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
        let mut pages = self.lock();
        let ranked = matches!(key, PageKey::RankedFirst(..));
        let caught_up = pages.catch_up(start, Some(course_id), ranked, &mut page.items);
        let page = Arc::new(page);
        if caught_up {
            if pages.pages >= MAX_PAGES {
                pages.by_course.clear();
                pages.course_of_post.clear();
                pages.pages = 0;
            }
            for row in &page.items {
                pages.course_of_post.insert(row.id, course_id);
            }
            let cached = Cached { page: page.clone(), stored_at: Instant::now() };
            if pages.by_course.entry(course_id).or_default().insert(key, cached).is_none() {
                pages.pages += 1;
            }
        }
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
                | ActivityKind::ReplyDeleted => vec![Change::Post(activity.post_id)],
            },
            LiveMessage::PostsChanged { posts } => posts.iter().map(|id| Change::Post(*id)).collect(),
            LiveMessage::ViewCounts { counts } => {
                counts.iter().map(|(post, views)| Change::Views { post: *post, views: *views }).collect()
            }
            LiveMessage::Notifications { .. } => return,
        };
        let mut pages = self.lock();
        for change in changes {
            pages.record(change);
        }
    }

    /// Forgets every page: the relay may have missed changes.
    pub fn clear(&self) {
        self.lock().record(Change::Everything);
    }

    /// How many pages are kept (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().pages
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Pages {
    fn record(&mut self, change: Change) {
        self.seq += 1;
        if self.log.len() == CHANGE_LOG {
            self.log.pop_front();
        }
        self.log.push_back((self.seq, change));
        match change {
            Change::Course(course) => self.drop_course(course),
            Change::Post(post) => {
                self.posts.remove(&post);
                if let Some(course) = self.course_of_post.get(&post).copied() {
                    self.drop_course(course);
                }
            }
            Change::Likes(_) | Change::Views { .. } => {
                let post = change_post(&change);
                if let Some(cached) = post.and_then(|p| self.posts.get_mut(&p)) {
                    patch(std::slice::from_mut(&mut cached.row), &change);
                }
                let known_course = post.and_then(|p| {
                    self.course_of_post.get(&p).copied().or_else(|| self.posts.get(&p).map(|c| c.row.course_id))
                });
                let Some(course) = known_course else { return };
                if matches!(change, Change::Likes(_)) {
                    // A like may reorder HOT and TOP: patching counts is not enough there.
                    self.drop_ranked(course);
                }
                for cached in self.by_course.get_mut(&course).into_iter().flat_map(|pages| pages.values_mut()) {
                    if cached.page.items.iter().any(|row| Some(row.id) == post) {
                        patch(&mut Arc::make_mut(&mut cached.page).items, &change);
                    }
                }
            }
            Change::Everything => {
                self.by_course.clear();
                self.course_of_post.clear();
                self.posts.clear();
                self.pages = 0;
            }
        }
    }

    fn drop_ranked(&mut self, course: i64) {
        if let Some(pages) = self.by_course.get_mut(&course) {
            let before = pages.len();
            pages.retain(|key, _| matches!(key, PageKey::Keyset(_)));
            self.pages -= before - pages.len();
        }
    }

    fn drop_course(&mut self, course: i64) {
        if let Some(dropped) = self.by_course.remove(&course) {
            self.pages -= dropped.len();
        }
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
