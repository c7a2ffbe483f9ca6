//! Subscription roots: live like counts for what a client shows, and new activity in a
//! course. Both check access at subscribe time, stream from the process's `live::Hub`, and end
//! with FORBIDDEN when the viewer loses access (`revocation`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_graphql::{Context, ID, Object, Subscription};
use futures_util::Stream;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

use super::access;
use super::context::{state, viewer};
use super::ids::{self, NodeKind, encode};
use super::revocation::{AccessScope, until_access_lost};
use super::shared_live::SharedDelivery;
use super::types::{Comment, Likeable, LiveLikes, Post, Reply};
use super::unread::UnreadUpdate;
use crate::error::AppError;
use crate::forum::audience;
use crate::forum::comments;
use crate::likes::LikeTarget;
use crate::live::hub::{CountWatch, VersionedCount};
use crate::live::{Activity, ActivityKind};
use crate::state::AppState;

/// Most targets one `likeCounts` subscription may watch.
pub(crate) const MAX_WATCHED_TARGETS: usize = 100;

/// Per-connection cap on open subscriptions (connection data of a websocket).
#[derive(Clone)]
pub(crate) struct SubscriptionBudget {
    open: Arc<AtomicUsize>,
    max: usize,
}

impl SubscriptionBudget {
    pub(crate) fn new(max: usize) -> Self {
        Self { open: Arc::new(AtomicUsize::new(0)), max }
    }

    fn take(&self) -> Result<BudgetPermit, AppError> {
        let previous = self.open.fetch_add(1, Ordering::SeqCst);
        if previous >= self.max {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return Err(AppError::RateLimited {
                what: format!("too many subscriptions on this connection: at most {}", self.max),
                retry_after_ms: 0,
            });
        }
        Ok(BudgetPermit(self.open.clone()))
    }
}

/// Returned to the budget when the subscription's stream is dropped.
pub(crate) struct BudgetPermit(Arc<AtomicUsize>);

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn permit(ctx: &Context<'_>) -> Result<Option<BudgetPermit>, AppError> {
    ctx.data_opt::<SubscriptionBudget>().map(|b| b.take()).transpose()
}

#[derive(Default)]
pub struct Subscription;

/// Live updates, over the websocket at `/graphql/ws` (`graphql-transport-ws`; the token goes
/// in the `connection_init` payload). Access is checked when subscribing, as in `Query`; a
/// stream ends with FORBIDDEN when the user loses access to what it watches. One connection
/// holding too many subscriptions is refused with RATE_LIMITED.
#[Subscription]
impl Subscription {
    /// Committed like counts of up to 100 posts, comments or replies, as they change: each
    /// update is the liked `Post`, `Comment` or `Reply` itself, so a normalized cache applies it
    /// in place. A burst arrives as its latest values: at most one update per target per
    /// coalescing interval, in `likeVersion` order. `id`, `likeCount`, `likeVersion` and
    /// `likeCountCommittedAt` come with the update; any other field selected is read per
    /// update.
    async fn like_counts(
        &self,
        ctx: &Context<'_>,
        #[graphql(
            desc = "1 to 100 global ids of posts, comments or replies (else BAD_USER_INPUT), each in a course the user belongs to."
        )]
        ids: Vec<ID>,
    ) -> async_graphql::Result<BoxStream<'static, async_graphql::Result<Likeable>>> {
        // The budget first: a connection at its cap costs no access lookup.
        let permit = permit(ctx)?;
        let viewer = viewer(ctx)?;
        // Watching before the access checks: a change during them is not missed.
        let access_watch = state(ctx)?.memberships.watch(viewer.user_id);
        if ids.is_empty() || ids.len() > MAX_WATCHED_TARGETS {
            return Err(AppError::bad_input(format!("watch between 1 and {MAX_WATCHED_TARGETS} ids")).into());
        }
        // Boxed: async-graphql keeps this resolver's future inside the subscription's stream
        // for the subscription's life, so the access checks' large states must not be inline.
        let WatchedTargets { targets, courses, staff_in } =
            Box::pin(watched_targets(ctx, &ids, viewer.user_id)).await?;
        let state = state(ctx)?;
        let mut scope = access_scope(state, viewer.user_id, courses);
        scope.staff_in = staff_in;
        let interval = state.settings.live_coalesce;
        // A selection every reader sees alike, on a websocket: rendered once per value for all
        // of its subscribers (`shared_live`), not executed here per subscriber.
        if let Some(shared) = SharedDelivery::of(ctx) {
            return Ok(shared.start(ctx, &state.live, targets, interval, (access_watch, scope), permit));
        }
        let list: Vec<LikeTarget> = targets.keys().copied().collect();
        let watch = state.live.watch_counts(&list);
        let updates = coalesced(watch, interval, permit).map(move |(target, value)| {
            let likes = LiveLikes::of(&value);
            match (target, targets.get(&target)) {
                (LikeTarget::Post(id), _) => Likeable::Post(Post::live(id, likes)),
                (LikeTarget::Comment(id), Some(NodeKind::Reply)) => Likeable::Reply(Reply::live(id, likes)),
                (LikeTarget::Comment(id), _) => Likeable::Comment(Comment::live(id, likes)),
            }
        });
        Ok(until_access_lost(updates, access_watch, scope).boxed())
    }

    /// Your notifications as they commit, on every instance: each new one (announcements of
    /// your courses included), and your unread count whenever it moves (notifications withdrawn
    /// because their cause was deleted, marked read elsewhere, or your courses changed). A
    /// notification from a course you have left is not delivered.
    async fn notifications(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<impl Stream<Item = super::notifications::NotificationUpdate> + use<>> {
        let permit = permit(ctx)?;
        let viewer = viewer(ctx)?;
        Ok(super::notifications::updates(state(ctx)?, viewer.user_id, permit).await?)
    }

    /// New posts, comments and replies in a course as they commit, their changes of state
    /// (answers accepted, endorsements, pins…) and deletions.
    async fn course_activity(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of a course the user belongs to (`Course.id`).")] course_id: ID,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<CourseActivity>> + use<>> {
        // The budget first: a connection at its cap costs no access lookup.
        let permit = permit(ctx)?;
        let viewer = viewer(ctx)?;
        let state = state(ctx)?;
        // Watching before the access check: a change during it is not missed.
        let access_watch = state.memberships.watch(viewer.user_id);
        let (course, _) = access::course(ctx, ids::decode_one(&course_id, NodeKind::Course)?).await?;
        let (receiver, guard) = state.live.watch_activity(course.course_id);
        let held = Arc::new((guard, permit));
        let (reader, course_id) = (viewer.user_id, course.course_id);
        let (memberships, db) = (state.memberships.clone(), state.db.clone());
        let activity = BroadcastStream::new(receiver).filter_map(move |item| {
            let _held = held.clone();
            let (memberships, db) = (memberships.clone(), db.clone());
            async move {
                // A subscriber too far behind skips what it missed rather than stalling the channel.
                let activity = item.ok()?;
                // A private post's events reach only its author and staff, by the reader's role
                // now (from memory; a statement only when memory cannot vouch): someone demoted
                // while subscribed stops receiving them. Public events cost nothing here.
                if let Some(author) = activity.private_to
                    && author != reader
                {
                    let roles = memberships.roles_of_user(&db, reader).await.ok()?;
                    let role = roles.get(&course_id).copied()?;
                    audience::may_read(reader, role, author, true).then_some(())?;
                }
                Some(CourseActivity(activity))
            }
        });
        Ok(until_access_lost(activity, access_watch, access_scope(state, viewer.user_id, vec![course.course_id])))
    }

    /// Your unread state of one course as it changes: an update when someone else writes a
    /// post, comment or reply you may read there, when one you may read is deleted or changes
    /// state (a question made public), and when your own read marks move (`markPostRead`, `markCourseRead`, in any tab or device). Ask
    /// the update for `course { unreadPostCount }` and `post { isUnread unreadCommentCount }`.
    /// Nothing is sent for what you may not read (another student's private question). Ends
    /// with FORBIDDEN when you leave the course.
    async fn unread_counts(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of a course the user belongs to (`Course.id`).")] course_id: ID,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<UnreadUpdate>> + use<>> {
        let permit = permit(ctx)?;
        let viewer = viewer(ctx)?;
        let state = state(ctx)?;
        // Watching before the access check: a change during it is not missed.
        let access_watch = state.memberships.watch(viewer.user_id);
        let (course, _) = access::course(ctx, ids::decode_one(&course_id, NodeKind::Course)?).await?;
        let (reader, course_id) = (viewer.user_id, course.course_id);
        let (activity, activity_guard) = state.live.watch_activity(course_id);
        let (marks, marks_guard) = state.live.watch_read_marks(reader);
        let held = Arc::new((activity_guard, marks_guard, permit));
        let (memberships, db) = (state.memberships.clone(), state.db.clone());
        let others = BroadcastStream::new(activity).filter_map(move |item| {
            let (memberships, db) = (memberships.clone(), db.clone());
            async move {
                let activity = item.ok()?;
                let update = UnreadUpdate::of_activity(&activity, reader)?;
                // As `courseActivity`: a private post's events reach only its author and staff,
                // by the reader's role now. Nothing at all for the others: even an empty
                // update would tell them, by its timing, that something private was written.
                if let Some(author) = activity.private_to
                    && author != reader
                {
                    let roles = memberships.roles_of_user(&db, reader).await.ok()?;
                    let role = roles.get(&course_id).copied()?;
                    audience::may_read(reader, role, author, true).then_some(())?;
                }
                Some(update)
            }
        });
        let own = BroadcastStream::new(marks).filter_map(move |item| async move {
            let (course, post) = item.ok()?;
            (course == course_id).then(|| UnreadUpdate::new(course, post))
        });
        let updates = futures_util::stream::select(others, own).map(move |update| {
            let _held = held.clone();
            update
        });
        Ok(until_access_lost(updates, access_watch, access_scope(state, reader, vec![course_id])))
    }
}

fn access_scope(state: &AppState, user_id: i64, courses: Vec<i64>) -> AccessScope {
    AccessScope {
        memberships: state.memberships.clone(),
        db: state.db.clone(),
        user_id,
        courses,
        staff_in: Vec::new(),
        home: tokio::runtime::Handle::current(),
    }
}

struct Coalescer {
    watch: CountWatch,
    interval: Duration,
    last_emit: HashMap<LikeTarget, Instant>,
    /// The `seq` of the last value this subscriber received (or found at subscribe time).
    seen: HashMap<LikeTarget, u64>,
    pending: HashSet<LikeTarget>,
    ready: VecDeque<(LikeTarget, VersionedCount)>,
    _permit: Option<BudgetPermit>,
}

/// Turns per-target latest values into a stream with at most one update per target per
/// `interval`; the last value always arrives (it stays pending until its slot comes).
fn coalesced(
    watch: CountWatch,
    interval: Duration,
    permit: Option<BudgetPermit>,
) -> impl Stream<Item = (LikeTarget, VersionedCount)> + Send + 'static {
    let seen = watch.receivers.iter().map(|(target, receiver)| (*target, receiver.borrow().seq)).collect();
    let state = Coalescer {
        watch,
        interval,
        last_emit: HashMap::new(),
        seen,
        pending: HashSet::new(),
        ready: VecDeque::new(),
        _permit: permit,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(update) = st.ready.pop_front() {
                return Some((update, st));
            }
            for (target, receiver) in &st.watch.receivers {
                match receiver.has_changed() {
                    Ok(true) => {
                        st.pending.insert(*target);
                    }
                    Ok(false) => {}
                    Err(_) => return None,
                }
            }
            let now = Instant::now();
            let mut next_due: Option<Instant> = None;
            for (target, receiver) in &mut st.watch.receivers {
                if !st.pending.contains(target) {
                    continue;
                }
                let due = st.last_emit.get(target).map(|t| *t + st.interval).unwrap_or(now);
                if due <= now {
                    let latest = *receiver.borrow_and_update();
                    st.pending.remove(target);
                    if latest.version != i64::MIN {
                        let seen = st.seen.insert(*target, latest.seq).unwrap_or(0);
                        let skipped = latest.seq.saturating_sub(seen + 1);
                        st.watch.guard.delivered(skipped);
                        if let Some(trace) = latest.trace {
                            // The hand-off to this subscriber, in the trace of the batch that
                            // committed the count (`telemetry::otel`).
                            let span = tracing::info_span!(
                                "live.deliver",
                                target = %target.member(),
                                like_version = latest.version,
                                coalesced = skipped
                            );
                            trace.adopt(&span);
                            drop(span.enter());
                        }
                        st.last_emit.insert(*target, now);
                        st.ready.push_back((*target, latest));
                    }
                } else {
                    next_due = Some(next_due.map_or(due, |d: Instant| d.min(due)));
                }
            }
            if !st.ready.is_empty() {
                continue;
            }
            if let Some(due) = next_due {
                tokio::time::sleep_until(due).await;
                continue;
            }
            // Nothing pending: wait for any target to change. `changed()` marks the value
            // seen, so the woken target is remembered as pending explicitly.
            let waits = st.watch.receivers.iter_mut().map(|(_, r)| Box::pin(r.changed()));
            let (result, index, _) = futures_util::future::select_all(waits).await;
            if result.is_err() {
                return None;
            }
            let target = st.watch.receivers[index].0;
            st.pending.insert(target);
        }
    })
}

/// One event of `courseActivity`; the node is loaded when the client asks for it (null when
/// it was deleted since, or for deletions).
pub(crate) struct CourseActivity(Activity);

/// One event in a course: what happened, to what, and (for creations and updates) the object
/// as it is now.
#[Object]
impl CourseActivity {
    /// What happened.
    async fn kind(&self) -> ActivityKind {
        self.0.kind
    }

    /// The global id of the post, comment or reply the event is about.
    async fn node_id(&self) -> ID {
        let kind = match self.0.kind {
            ActivityKind::PostCreated | ActivityKind::PostDeleted | ActivityKind::PostUpdated => NodeKind::Post,
            ActivityKind::CommentCreated | ActivityKind::CommentDeleted | ActivityKind::CommentUpdated => {
                NodeKind::Comment
            }
            ActivityKind::ReplyCreated | ActivityKind::ReplyDeleted | ActivityKind::ReplyUpdated => NodeKind::Reply,
        };
        encode(kind, self.0.node_id)
    }

    /// The global id of the post the event is in: the post itself, or the post of the comment
    /// or reply.
    async fn post_id(&self) -> ID {
        encode(NodeKind::Post, self.0.post_id)
    }

    /// The post for POST_CREATED and POST_UPDATED, as it is now; null for other kinds, or when
    /// it was deleted since.
    async fn post(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Post>> {
        if !matches!(self.0.kind, ActivityKind::PostCreated | ActivityKind::PostUpdated) {
            return Ok(None);
        }
        Ok(state(ctx)?.post_cache.get(self.0.node_id).await?.map(Post::from))
    }

    /// The comment for COMMENT_CREATED and COMMENT_UPDATED, as it is now; null for other kinds,
    /// or when it (or its post) was deleted since.
    async fn comment(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Comment>> {
        if !matches!(self.0.kind, ActivityKind::CommentCreated | ActivityKind::CommentUpdated) {
            return Ok(None);
        }
        Ok(comments::find(&state(ctx)?.db, self.0.node_id).await?.map(Comment::from))
    }

    /// The reply for REPLY_CREATED and REPLY_UPDATED, as it is now; null for other kinds, or
    /// when it (or its post) was deleted since.
    async fn reply(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Reply>> {
        if !matches!(self.0.kind, ActivityKind::ReplyCreated | ActivityKind::ReplyUpdated) {
            return Ok(None);
        }
        Ok(comments::find(&state(ctx)?.db, self.0.node_id).await?.filter(|c| c.parent_id.is_some()).map(Reply::from))
    }
}

/// The targets a `likeCounts` subscription watches, each checked readable by the viewer: the
/// kind of each, the courses they are in, and the courses where the viewer reads someone
/// else's private post (only while staff there).
struct WatchedTargets {
    targets: HashMap<LikeTarget, NodeKind>,
    courses: Vec<i64>,
    staff_in: Vec<i64>,
}

async fn watched_targets(ctx: &Context<'_>, ids: &[ID], viewer: i64) -> async_graphql::Result<WatchedTargets> {
    let mut watched = WatchedTargets { targets: HashMap::new(), courses: Vec::new(), staff_in: Vec::new() };
    for id in ids {
        let (kind, raw) = ids::decode_as(id, &[NodeKind::Post, NodeKind::Comment, NodeKind::Reply])?;
        let (target, post) = match kind {
            NodeKind::Post => (LikeTarget::Post(raw), access::post(ctx, raw).await?.0),
            _ => (LikeTarget::Comment(raw), access::comment_in_post(ctx, kind, raw).await?.1),
        };
        watched.targets.insert(target, kind);
        if !watched.courses.contains(&post.course_id) {
            watched.courses.push(post.course_id);
        }
        // Someone else's private post: readable only while the viewer stays staff.
        if post.private && post.user_id != viewer && !watched.staff_in.contains(&post.course_id) {
            watched.staff_in.push(post.course_id);
        }
    }
    Ok(watched)
}
