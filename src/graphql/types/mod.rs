//! The GraphQL object types: User, Course, Post, Comment, Reply, Notification (one file each),
//! the `Node`, `AnyComment` and `Likeable` interfaces, what every object shares (`Known`,
//! connections and their cost), and the small payloads. Objects wrap rows; a row reaches a client only after
//! the resolver that produced it checked the viewer's membership of its course.

mod comment;
mod course;
mod notification;
mod post;
mod reply;
pub(crate) mod search;
mod tag;
mod user;

pub(crate) use comment::Comment;
pub(crate) use course::*;
pub(crate) use notification::Notification;
pub(crate) use post::Post;
pub(crate) use reply::Reply;
pub(crate) use tag::{Endorsable, Endorsement, Tag, pseudonym, shown_author};
pub(crate) use user::User;

use std::future::Future;

use async_graphql::connection::{Connection, Edge};
use async_graphql::{Context, ID, Interface, Object, Result, SimpleObject};
use chrono::{DateTime, Utc};

use super::context::{state, viewer};
use super::ids::{NodeKind, encode};
use super::loaders::{liked_by_me, loaders, prime_liked, user};
use crate::cursor::{CursorKeys, KeyCursor, MAX_RANKED_WALK, PostsCursor, RankCursor};
use crate::error::AppError;
use crate::forum::audience::{self, PostKind};
use crate::forum::comments::{CommentRow, Thread};
use crate::forum::courses::{CourseRow, Role};
use crate::forum::paging::{Page, PageRequest};
use crate::forum::posts::PostRow;
use crate::forum::posts::{self, Ranking};
use crate::forum::questions::TagRow;
use crate::forum::users::UserRow;
use crate::likes::LikeTarget;

/// Query cost of a connection field: its page size times what each node asks for.
pub(crate) fn page_cost(first: Option<i32>, last: Option<i32>, child_complexity: usize) -> usize {
    let n = first.or(last).unwrap_or(crate::forum::paging::DEFAULT_PAGE_SIZE).clamp(1, 100) as usize;
    1 + n * child_complexity
}

/// Turns Relay arguments into a validated page request. The cursors are opened (their tags
/// checked) here, before any SQL: a cursor this server did not issue is BAD_USER_INPUT.
fn page_request(
    ctx: &Context<'_>,
    first: Option<i32>,
    after: Option<String>,
    last: Option<i32>,
    before: Option<String>,
) -> Result<PageRequest> {
    let keys = &state(ctx)?.cursor_keys;
    let after = keys.key(after.as_deref())?;
    let before = keys.key(before.as_deref())?;
    Ok(PageRequest::new(first, after, last, before)?)
}

pub(crate) fn connection<R, N: async_graphql::OutputType>(
    keys: &CursorKeys,
    page: Page<R>,
    id_of: impl Fn(&R) -> i64,
    node: impl Fn(R) -> N,
) -> Connection<KeyCursor, N> {
    let mut conn = Connection::new(page.has_prev, page.has_next);
    conn.edges.extend(page.items.into_iter().map(|row| Edge::new(KeyCursor::new(keys, id_of(&row)), node(row))));
    conn
}

/// Anything with a global id (Relay's object identification): refetch any of them with
/// `node(id:)`.
#[derive(Interface)]
#[graphql(field(
    name = "id",
    ty = "ID",
    desc = "Opaque global id, unique across all types; pass it back as is (`node(id:)`, mutation arguments)."
))]
pub(crate) enum Node {
    User(User),
    Course(Course),
    Post(Post),
    Comment(Comment),
    Reply(Reply),
    Notification(Notification),
    Tag(Tag),
}

/// A top-level comment or a reply: what comment mutations return.
#[derive(Interface)]
// clippy reads each `field(...)`'s `ty = "bool"` as the same attribute given twice.
#[allow(clippy::duplicated_attributes)]
#[graphql(
    field(name = "id", ty = "ID", desc = "Global id: a Comment's or a Reply's, as the concrete type says."),
    field(name = "body", ty = "&String", desc = "The text as written (trimmed), at most 5,000 characters."),
    field(
        name = "author",
        ty = "Option<User>",
        desc = "Who wrote it; null when they wrote it anonymously and are hidden from you (`pseudonym` names them)."
    ),
    field(name = "anonymous", ty = "bool", desc = "Whether it was written anonymously."),
    field(
        name = "pseudonym",
        ty = "Option<String>",
        desc = "The name an anonymous writer goes by in this thread (the same for every reader); null when signed."
    ),
    field(name = "endorsement", ty = "Option<Endorsement>", desc = "Staff's endorsement; null if none."),
    field(name = "like_count", ty = "i32", desc = "How many users like it."),
    field(name = "liked_by_me", ty = "bool", desc = "Whether the signed-in user likes it."),
    field(name = "created_at", ty = "DateTime<Utc>", desc = "When it was written."),
    field(name = "edited_at", ty = "Option<DateTime<Utc>>", desc = "When its author last edited it; null if never.")
)]
pub(crate) enum AnyComment {
    Comment(Comment),
    Reply(Reply),
}

impl AnyComment {
    pub(crate) fn from_row(row: CommentRow) -> Self {
        if row.parent_id.is_some() { AnyComment::Reply(row.into()) } else { AnyComment::Comment(row.into()) }
    }
}

/// What can be liked: what `likeCounts` delivers. Its concrete type and `id` are the object's
/// own, so a normalized client cache (keyed by `__typename` and `id`) writes a live count
/// straight into the `Post`, `Comment` or `Reply` it already holds.
#[derive(Interface)]
#[graphql(
    field(name = "id", ty = "ID", desc = "Global id of the post, comment or reply."),
    field(name = "like_count", ty = "i32", desc = "How many users like it."),
    field(
        name = "like_version",
        ty = "i64",
        desc = "Orders its like counts: it moves with every committed change of `likeCount`, so of two values the one with the higher `likeVersion` is the newer."
    ),
    field(
        name = "like_count_committed_at",
        ty = "Option<DateTime<Utc>>",
        desc = "When the transaction that set `likeCount` committed, by the publishing server's clock: on a `likeCounts` update; null when read by a query."
    )
)]
pub(crate) enum Likeable {
    Post(Post),
    Comment(Comment),
    Reply(Reply),
}

/// A committed like count, as a live update carries it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveLikes {
    pub like_count: i32,
    pub like_version: i64,
    pub committed_at: Option<DateTime<Utc>>,
}

impl LiveLikes {
    /// The count a live update carries, as the schema shows it.
    pub(crate) fn of(value: &crate::live::hub::VersionedCount) -> Self {
        Self {
            like_count: value.like_count,
            like_version: value.version,
            committed_at: (value.committed_at_us > 0)
                .then(|| DateTime::from_timestamp_micros(value.committed_at_us))
                .flatten(),
        }
    }
}

/// What a `Post`, `Comment` or `Reply` knows of its row: all of it (read by the resolver that
/// checked access), or, for an object a `likeCounts` update built, only its id and committed
/// like count, with the row read through the request's loaders on first ask. So a subscriber
/// that selects `id`, `likeCount` and `likeVersion` costs no read per update; one that selects
/// more pays one read per object (access was checked when it subscribed, and is watched since).
pub(crate) struct Known<R> {
    id: i64,
    row: tokio::sync::OnceCell<R>,
    live: Option<LiveLikes>,
}

impl<R> Known<R> {
    fn row(id: i64, row: R) -> Self {
        Self { id, row: tokio::sync::OnceCell::new_with(Some(row)), live: None }
    }

    fn live(id: i64, likes: LiveLikes) -> Self {
        Self { id, row: tokio::sync::OnceCell::new(), live: Some(likes) }
    }

    /// The row, loading it with `load` the first time (NOT_FOUND, naming `what`, once deleted).
    async fn get(&self, load: impl Future<Output = Result<Option<R>>>, what: &'static str) -> Result<&R> {
        self.row.get_or_try_init(|| async { load.await?.ok_or_else(|| AppError::not_found(what).into()) }).await
    }

    /// A like field: from the live update when this object is one, else from the row.
    async fn like_field<'a, T>(
        &'a self,
        row: impl Future<Output = Result<&'a R>>,
        from_live: impl Fn(&LiveLikes) -> T,
        from_row: impl Fn(&R) -> T,
    ) -> Result<T> {
        match &self.live {
            Some(live) => Ok(from_live(live)),
            None => Ok(from_row(row.await?)),
        }
    }

    fn committed_at(&self) -> Option<DateTime<Utc>> {
        self.live.and_then(|live| live.committed_at)
    }
}

/// A started view: complete it with `completePostView` after `minDwellMs`.
#[derive(SimpleObject)]
pub(crate) struct ViewTicket {
    /// Opaque; single use; valid for the caller only.
    pub ticket: String,
    /// How long, in milliseconds from the start as the server measured it, the view must last
    /// before completing it counts.
    pub min_dwell_ms: i64,
}

/// Whether a completed view counted.
#[derive(SimpleObject)]
pub(crate) struct ViewResult {
    /// True when this view was counted (it shows in `Post.viewCount` and `uniqueViewers`).
    pub counted: bool,
    /// Why not, when `counted` is false.
    pub reason: Option<crate::views::ViewRefusal>,
}

/// What a delete mutation returns.
#[derive(SimpleObject)]
pub(crate) struct DeletePayload {
    /// The global id of what was deleted (evict it from client caches).
    pub deleted_id: ID,
    /// The post a deleted comment or reply was on, read after the delete: its `commentCount` is
    /// the new one, so a normalized cache updates it without a refetch. Null when the deleted
    /// object was a post.
    pub post: Option<Post>,
    /// The comment a deleted reply was under, read after the delete, with its new
    /// `replyCount`. Null unless the deleted object was a reply.
    pub comment: Option<Comment>,
}
