//! DataLoaders, per request and each made on first use (their caches must not outlive the
//! request; a websocket connection's are `uncached`): authors, courses and the viewer's
//! "liked" flags each cost one query per request tick, not one per row; post views one
//! pipelined Redis round trip. A page of posts or comments asks for every "liked" flag it will
//! show up front (`prime_liked`), so a page costs one Redis command for them however its
//! resolvers happen to be scheduled.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_graphql::Context;
use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};
use futures_util::future::BoxFuture;
use sea_orm::DatabaseConnection;

use super::batch_gate::{BATCH_WINDOW, BatchGate};
use crate::cache::PostCache;
use crate::cache::pages::CoursePages;
use crate::cache::users::UserRows;
use crate::db::budget::StatementBudget;
use crate::error::{AppError, AppResult};
use crate::forum::comments::{self, CommentRow, Thread};
use crate::forum::courses::{self, CourseRow};
use crate::forum::paging::{Page, PageRequest};
use crate::forum::posts::{self, PostRow};
use crate::forum::questions::{self, TagRow};
use crate::forum::unread;
use crate::forum::users::{self, UserRow};
use crate::likes::{LikeTarget, Likes};
use crate::state::{AppState, ReadHandles};
use crate::views::{LiveViews, Views};

/// Loader errors must be `Clone`; the shared error keeps its code.
pub(crate) type LoadError = Arc<AppError>;

/// Users through the instance's memory (`cache::users`): only the ones never read cost a
/// statement.
pub(crate) struct UserLoader(DatabaseConnection, UserRows);

impl Loader<i64> for UserLoader {
    type Value = UserRow;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, UserRow>, LoadError> {
        let (mut found, missing) = self.1.get_many(keys);
        if !missing.is_empty() {
            let rows = users::find_many(&self.0, &missing).await.map_err(Arc::new)?;
            self.1.remember(rows.iter().cloned());
            found.extend(rows.into_iter().map(|u| (u.id, u)));
        }
        Ok(found)
    }
}

pub(crate) struct CourseLoader(DatabaseConnection);

impl Loader<i64> for CourseLoader {
    type Value = CourseRow;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, CourseRow>, LoadError> {
        let rows = courses::find_many(&self.0, keys).await.map_err(Arc::new)?;
        Ok(rows.into_iter().map(|c| (c.id, c)).collect())
    }
}

/// "Did the viewer like this?" for every target a request shows, in one batch.
pub(crate) struct LikedLoader {
    likes: Likes,
    user_id: i64,
}

/// Keyed by (course id, target): buffered mode asks one liked-set per course.
impl Loader<(i64, LikeTarget)> for LikedLoader {
    type Value = bool;
    type Error = LoadError;

    async fn load(&self, keys: &[(i64, LikeTarget)]) -> Result<HashMap<(i64, LikeTarget), bool>, LoadError> {
        let liked = self.likes.liked_by(self.user_id, keys).await.map_err(Arc::new)?;
        Ok(keys.iter().map(|k| (*k, liked.contains(&k.1))).collect())
    }
}

/// Member counts of every course a request shows, in one statement.
pub(crate) struct MemberCountLoader(DatabaseConnection);

impl Loader<i64> for MemberCountLoader {
    type Value = i64;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, i64>, LoadError> {
        let counts = courses::member_counts(&self.0, keys).await.map_err(Arc::new)?;
        Ok(keys.iter().map(|id| (*id, counts.get(id).copied().unwrap_or(0))).collect())
    }
}

/// Comments and replies by id (a reply's root comment), in one statement.
pub(crate) struct CommentLoader(DatabaseConnection);

impl Loader<i64> for CommentLoader {
    type Value = CommentRow;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, CommentRow>, LoadError> {
        let rows = comments::find_many(&self.0, keys).await.map_err(Arc::new)?;
        Ok(rows.into_iter().map(|c| (c.id, c)).collect())
    }
}

/// Pages of comments (or replies) of every post (or root comment) at one level of a request:
/// one statement per kind of thread and page request, however many parents the level has.
pub(crate) struct ThreadPageLoader(DatabaseConnection);

impl Loader<(Thread, PageRequest)> for ThreadPageLoader {
    type Value = Arc<Page<CommentRow>>;
    type Error = LoadError;

    async fn load(
        &self,
        keys: &[(Thread, PageRequest)],
    ) -> Result<HashMap<(Thread, PageRequest), Arc<Page<CommentRow>>>, LoadError> {
        // One statement per (kind, page): a level asks the same page of all its parents.
        let mut groups: HashMap<(bool, PageRequest), Vec<Thread>> = HashMap::new();
        for (thread, page) in keys {
            groups.entry((matches!(thread, Thread::Post { .. }), *page)).or_default().push(*thread);
        }
        let mut pages = HashMap::new();
        for ((_, page), threads) in groups {
            let found = comments::pages_of_threads(&self.0, &threads, &page).await.map_err(Arc::new)?;
            pages.extend(found.into_iter().map(|(thread, rows)| ((thread, page), Arc::new(rows))));
        }
        Ok(pages)
    }
}

/// Pages of posts of every course at one level of a request (courses reached through a list:
/// `myCourses`, or each post's `course`): the pages the instance holds (`cache::pages`), the
/// others in one statement per page request.
pub(crate) struct CoursePageLoader(DatabaseConnection, CoursePages);

impl Loader<(i64, PageRequest)> for CoursePageLoader {
    type Value = Arc<Page<PostRow>>;
    type Error = LoadError;

    async fn load(
        &self,
        keys: &[(i64, PageRequest)],
    ) -> Result<HashMap<(i64, PageRequest), Arc<Page<PostRow>>>, LoadError> {
        let mut pages = HashMap::new();
        let mut groups: HashMap<PageRequest, Vec<i64>> = HashMap::new();
        for (course_id, page) in keys {
            match self.1.get(*course_id, page) {
                Some(cached) => {
                    pages.insert((*course_id, *page), cached);
                }
                None => groups.entry(*page).or_default().push(*course_id),
            }
        }
        for (page, course_ids) in groups {
            let start = self.1.begin();
            let found = posts::pages_in_courses(&self.0, &course_ids, &page).await.map_err(Arc::new)?;
            pages.extend(
                found
                    .into_iter()
                    .map(|(course_id, rows)| ((course_id, page), self.1.store(start, course_id, page, rows))),
            );
        }
        Ok(pages)
    }
}

/// Posts by id through the post cache (one pipelined read, the misses in one statement).
pub(crate) struct PostLoader(PostCache);

impl Loader<i64> for PostLoader {
    type Value = PostRow;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, PostRow>, LoadError> {
        self.0.get_many(keys).await.map_err(Arc::new)
    }
}

/// Unflushed views and unique viewers of every post a request shows, in one Redis round trip.
pub(crate) struct ViewLoader(Views);

impl Loader<i64> for ViewLoader {
    type Value = LiveViews;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, LiveViews>, LoadError> {
        self.0.live_views(keys).await.map_err(Arc::new)
    }
}

/// The tags of every post a request shows, in one statement.
pub(crate) struct PostTagsLoader(DatabaseConnection);

impl Loader<i64> for PostTagsLoader {
    type Value = Vec<TagRow>;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, Vec<TagRow>>, LoadError> {
        let mut tags = questions::tags_of_posts(&self.0, keys).await.map_err(Arc::new)?;
        Ok(keys.iter().map(|id| (*id, tags.remove(id).unwrap_or_default())).collect())
    }
}

/// Whether each post a request shows has a comment or reply by someone but its author.
pub(crate) struct AnsweredLoader(DatabaseConnection);

impl Loader<i64> for AnsweredLoader {
    type Value = bool;
    type Error = LoadError;

    async fn load(&self, keys: &[i64]) -> Result<HashMap<i64, bool>, LoadError> {
        let answered = questions::answered(&self.0, keys).await.map_err(Arc::new)?;
        Ok(keys.iter().map(|id| (*id, answered.contains(id))).collect())
    }
}

/// What the unread loader answers about: a post's unread state, or a course's unread post
/// count (`staff`: the viewer's role there, so private posts are counted for staff only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum UnreadKey {
    Post(i64),
    Course { course_id: i64, staff: bool },
}

/// The answer for one `UnreadKey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnreadValue {
    Post(unread::PostUnread),
    /// Unread posts, saturating at `unread::UNREAD_COUNT_CAP`.
    Course(i64),
}

/// The viewer's unread state of every post and course a request shows, in ONE statement
/// (`forum::unread::load`): the watermarks, the page's exceptions, the unread comment counts
/// and the course counts together.
pub(crate) struct UnreadLoader {
    db: DatabaseConnection,
    user_id: i64,
}

impl Loader<UnreadKey> for UnreadLoader {
    type Value = UnreadValue;
    type Error = LoadError;

    async fn load(&self, keys: &[UnreadKey]) -> Result<HashMap<UnreadKey, UnreadValue>, LoadError> {
        let (mut posts, mut courses, mut staff_in) = (Vec::new(), Vec::new(), Vec::new());
        for key in keys {
            match *key {
                UnreadKey::Post(id) => posts.push(id),
                UnreadKey::Course { course_id, staff } => {
                    courses.push(course_id);
                    if staff {
                        staff_in.push(course_id);
                    }
                }
            }
        }
        let (by_post, by_course) =
            unread::load(&self.db, self.user_id, &posts, &courses, &staff_in).await.map_err(Arc::new)?;
        Ok(keys
            .iter()
            .filter_map(|key| match *key {
                UnreadKey::Post(id) => by_post.get(&id).map(|v| (*key, UnreadValue::Post(*v))),
                UnreadKey::Course { course_id, .. } => {
                    Some((*key, UnreadValue::Course(by_course.get(&course_id).copied().unwrap_or(0))))
                }
            })
            .collect())
    }
}

/// How a DataLoader starts a batch task.
type Spawner = Box<dyn Fn(BoxFuture<'static, ()>) -> tokio::task::JoinHandle<()> + Send + Sync>;

/// The loaders of one request, each made on first use: a request reads through a few of
/// them (`{ __typename }` through none), and making all thirteen up front cost every request
/// their allocations and handles.
pub(crate) struct Loaders {
    users: OnceLock<Box<DataLoader<UserLoader>>>,
    courses: OnceLock<Box<DataLoader<CourseLoader>>>,
    /// Only for an authenticated viewer. Cached for the request: a page primes it
    /// (`prime_liked`), and a like or unlike records its outcome in it (`record_liked`).
    liked: OnceLock<Box<DataLoader<LikedLoader, HashMapCache>>>,
    views: OnceLock<Box<DataLoader<ViewLoader>>>,
    member_counts: OnceLock<Box<DataLoader<MemberCountLoader>>>,
    comments: OnceLock<Box<DataLoader<CommentLoader>>>,
    thread_pages: OnceLock<Box<DataLoader<ThreadPageLoader>>>,
    course_pages: OnceLock<Box<DataLoader<CoursePageLoader>>>,
    posts: OnceLock<Box<DataLoader<PostLoader>>>,
    post_tags: OnceLock<Box<DataLoader<PostTagsLoader>>>,
    answered: OnceLock<Box<DataLoader<AnsweredLoader>>>,
    /// Only for an authenticated viewer; never cached (a read mark changes it within a
    /// request).
    unread: OnceLock<Box<DataLoader<UnreadLoader>>>,
    /// What the loaders are made of.
    sources: Arc<ReadHandles>,
    viewer: Option<i64>,
    /// Charged with the batches' statements, when given.
    budget: Option<Arc<StatementBudget>>,
    /// Each batch starts only once the request is parked, when given.
    gate: Option<Arc<BatchGate>>,
    /// False for loaders that outlive a request (a websocket connection's): nothing is cached.
    liked_cached: bool,
}

impl Loaders {
    /// The loaders of one request. With a `budget`, their batches' statements are charged to
    /// it; with a `gate`, each batch starts only once the request is parked
    /// (`batch_gate`), so a level's keys are never split by a slow pass.
    pub(crate) fn new(
        app: &AppState,
        viewer: Option<i64>,
        budget: Option<&Arc<StatementBudget>>,
        gate: Option<&Arc<BatchGate>>,
    ) -> Self {
        Self {
            users: OnceLock::new(),
            courses: OnceLock::new(),
            liked: OnceLock::new(),
            views: OnceLock::new(),
            member_counts: OnceLock::new(),
            comments: OnceLock::new(),
            thread_pages: OnceLock::new(),
            course_pages: OnceLock::new(),
            posts: OnceLock::new(),
            post_tags: OnceLock::new(),
            answered: OnceLock::new(),
            unread: OnceLock::new(),
            sources: app.read_handles.clone(),
            viewer,
            budget: budget.cloned(),
            gate: gate.cloned(),
            liked_cached: true,
        }
    }

    /// Loaders for a websocket connection, which serves many operations over a long time: a
    /// cached "liked" flag would outlive the likes that change it, so nothing is cached.
    pub(crate) fn uncached(mut self) -> Self {
        self.liked_cached = false;
        self
    }

    /// How a loader of this request starts a batch: behind the gate, charged to the budget.
    fn spawner(&self) -> Spawner {
        let (budget, gate) = (self.budget.clone(), self.gate.clone());
        Box::new(move |batch| {
            let batch = match &gate {
                Some(gate) => gate.hold(batch),
                None => batch,
            };
            match &budget {
                Some(budget) => budget.spawn(batch),
                None => tokio::spawn(batch),
            }
        })
    }

    /// The loaders' batching delay: the gate waits out the batching window itself, so the
    /// loader's own delay would add a second wait after the request parked.
    fn delay(&self) -> Duration {
        if self.gate.is_some() { Duration::ZERO } else { BATCH_WINDOW }
    }

    /// The loader in `cell`, made from the request's sources on first use. Boxed: a cell holds
    /// a pointer until then, so the thirteen cost a request (and a websocket connection, which
    /// keeps its own) about a hundred bytes, not kilobytes.
    fn cell<'a, T: Send + Sync + 'static>(
        &'a self,
        cell: &'a OnceLock<Box<DataLoader<T>>>,
        loader: impl FnOnce(&ReadHandles) -> T,
    ) -> &'a DataLoader<T> {
        cell.get_or_init(|| Box::new(DataLoader::new(loader(&self.sources), self.spawner()).delay(self.delay())))
    }

    pub(crate) fn users(&self) -> &DataLoader<UserLoader> {
        self.cell(&self.users, |s| UserLoader(s.db.clone(), s.users.clone()))
    }

    pub(crate) fn courses(&self) -> &DataLoader<CourseLoader> {
        self.cell(&self.courses, |s| CourseLoader(s.db.clone()))
    }

    /// The viewer's "liked" flags; None for an anonymous viewer. The one loader with a cache
    /// of its own kind, so made here rather than by `cell`.
    pub(crate) fn liked(&self) -> Option<&DataLoader<LikedLoader, HashMapCache>> {
        let user_id = self.viewer?;
        Some(self.liked.get_or_init(|| {
            let loader = LikedLoader { likes: self.sources.likes.clone(), user_id };
            let loader = DataLoader::with_cache(loader, self.spawner(), HashMapCache::default()).delay(self.delay());
            if !self.liked_cached {
                loader.enable_all_cache(false);
            }
            Box::new(loader)
        }))
    }

    pub(crate) fn views(&self) -> &DataLoader<ViewLoader> {
        self.cell(&self.views, |s| ViewLoader(s.views.clone()))
    }

    pub(crate) fn member_counts(&self) -> &DataLoader<MemberCountLoader> {
        self.cell(&self.member_counts, |s| MemberCountLoader(s.db.clone()))
    }

    pub(crate) fn comments(&self) -> &DataLoader<CommentLoader> {
        self.cell(&self.comments, |s| CommentLoader(s.db.clone()))
    }

    pub(crate) fn thread_pages(&self) -> &DataLoader<ThreadPageLoader> {
        self.cell(&self.thread_pages, |s| ThreadPageLoader(s.db.clone()))
    }

    pub(crate) fn course_pages(&self) -> &DataLoader<CoursePageLoader> {
        self.cell(&self.course_pages, |s| CoursePageLoader(s.db.clone(), s.course_pages.clone()))
    }

    pub(crate) fn posts(&self) -> &DataLoader<PostLoader> {
        self.cell(&self.posts, |s| PostLoader(s.post_cache.clone()))
    }

    pub(crate) fn post_tags(&self) -> &DataLoader<PostTagsLoader> {
        self.cell(&self.post_tags, |s| PostTagsLoader(s.db.clone()))
    }

    pub(crate) fn answered(&self) -> &DataLoader<AnsweredLoader> {
        self.cell(&self.answered, |s| AnsweredLoader(s.db.clone()))
    }

    /// The viewer's unread state; None for an anonymous viewer.
    pub(crate) fn unread(&self) -> Option<&DataLoader<UnreadLoader>> {
        let user_id = self.viewer?;
        Some(self.cell(&self.unread, |s| UnreadLoader { db: s.db.clone(), user_id }))
    }
}

pub(crate) fn loaders<'a>(ctx: &Context<'a>) -> AppResult<&'a Loaders> {
    ctx.data::<Loaders>().map_err(|_| AppError::Internal("Loaders missing from request data".into()))
}

/// Loads one user; a missing row is an internal inconsistency (authors are never deleted).
pub(crate) async fn user(ctx: &Context<'_>, id: i64) -> async_graphql::Result<UserRow> {
    loaders(ctx)?
        .users()
        .load_one(id)
        .await?
        .ok_or_else(|| AppError::Internal(format!("user {id} referenced but missing")).into())
}

/// Whether the viewer likes `target` of `course_id` (false for anonymous viewers).
pub(crate) async fn liked_by_me(ctx: &Context<'_>, course_id: i64, target: LikeTarget) -> async_graphql::Result<bool> {
    match loaders(ctx)?.liked() {
        Some(loader) => Ok(loader.load_one((course_id, target)).await?.unwrap_or(false)),
        None => Ok(false),
    }
}

/// Loads the "liked" flags of a whole page at once when the query asks for `likedByMe` on its
/// nodes (through `edges { node }` or `nodes`). Without this, each node's resolver asks the
/// DataLoader itself, and a page whose resolvers are scheduled more than the loader's 1 ms
/// apart (a busy server) splits into two commands. Call it from the resolver that returns
/// the connection; a query that names no `likedByMe` costs nothing.
pub(crate) async fn prime_liked(
    ctx: &Context<'_>,
    keys: impl IntoIterator<Item = (i64, LikeTarget)>,
) -> async_graphql::Result<()> {
    let loaders = loaders(ctx)?;
    let Some(loader) = loaders.liked().filter(|_| loaders.liked_cached) else { return Ok(()) };
    let wanted = ctx.look_ahead();
    if wanted.field("edges").field("node").field("likedByMe").exists()
        || wanted.field("nodes").field("likedByMe").exists()
    {
        loader.load_many(keys).await?;
    }
    Ok(())
}

/// The viewer's unread state of a post (nothing unread without a signed-in viewer).
pub(crate) async fn unread_of_post(ctx: &Context<'_>, post_id: i64) -> async_graphql::Result<unread::PostUnread> {
    let Some(loader) = loaders(ctx)?.unread() else { return Ok(Default::default()) };
    match loader.load_one(UnreadKey::Post(post_id)).await? {
        Some(UnreadValue::Post(state)) => Ok(state),
        // A post deleted since it was read has nothing unread.
        _ => Ok(Default::default()),
    }
}

/// The viewer's unread post count of a course, `staff` their role there (0 without a
/// signed-in viewer).
pub(crate) async fn unread_in_course(ctx: &Context<'_>, course_id: i64, staff: bool) -> async_graphql::Result<i64> {
    let Some(loader) = loaders(ctx)?.unread() else { return Ok(0) };
    match loader.load_one(UnreadKey::Course { course_id, staff }).await? {
        Some(UnreadValue::Course(count)) => Ok(count),
        _ => Ok(0),
    }
}

/// The pages of posts one `Course` object is reading in this request. `Course.unreadPostCount`
/// waits for them, so that its count joins the batch of the page's posts' unread states (one
/// statement for both) instead of going alone while the page is being read.
#[derive(Clone, Debug)]
pub(crate) struct PagesPending(Arc<tokio::sync::watch::Sender<usize>>);

impl Default for PagesPending {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::channel(0).0))
    }
}

impl PagesPending {
    /// A page starts being read; it is done when the guard drops (the resolver returned).
    pub(crate) fn begin(&self) -> PageInFlight {
        self.0.send_modify(|n| *n += 1);
        PageInFlight(self.0.clone())
    }

    /// Returns once no page of this object is being read. It first lets the sibling fields
    /// start (one yield: they are polled in the same pass), so a page asked after this field
    /// is waited for too.
    pub(crate) async fn settled(&self) {
        tokio::task::yield_now().await;
        let mut pending = self.0.subscribe();
        let _ = pending.wait_for(|n| *n == 0).await;
    }
}

/// One page being read (`PagesPending::begin`).
pub(crate) struct PageInFlight(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for PageInFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Records what a like or unlike just made true, so that `likedByMe` later in the same request
/// (a mutation's answer, or a second mutation of the document) shows it, not a flag cached before.
pub(crate) async fn record_liked(ctx: &Context<'_>, course_id: i64, target: LikeTarget, liked: bool) -> AppResult<()> {
    let loaders = loaders(ctx)?;
    if let Some(loader) = loaders.liked().filter(|_| loaders.liked_cached) {
        loader.feed_one((course_id, target), liked).await;
    }
    Ok(())
}
