//! Query roots: the viewer, their courses, their home feed, and entry points by id.

use async_graphql::connection::Connection;
use async_graphql::{Context, ID, Object, Result};

use super::access;
use super::context::{state, viewer};
use super::errors::nullable;
use super::ids::{self, NodeKind};
use super::loaders::prime_liked;
use super::types::{Course, Node, Notification, Post, User, page_cost, post_connection};
use crate::cursor::{KeyCursor, PostsCursor};
use crate::error::AppError;
use crate::forum::paging::PageRequest;
use crate::forum::{courses, users};
use crate::likes::LikeTarget;

#[derive(Default)]
pub struct Query;

/// What can be read. Every field needs a signed-in user (`Authorization: Bearer <token>`),
/// else UNAUTHENTICATED. An id that does not decode, or names the wrong type, is
/// BAD_USER_INPUT; something that does not exist or was deleted is NOT_FOUND; something in a
/// course the user does not belong to is FORBIDDEN.
#[Object]
impl Query {
    /// The signed-in user.
    async fn me(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let row = users::find(&state(ctx)?.db, viewer.user_id).await?;
            row.map(User).ok_or_else(|| AppError::Unauthenticated("the token's user does not exist".into()).into())
        })
        .await
    }

    /// The courses the signed-in user belongs to.
    async fn my_courses(&self, ctx: &Context<'_>) -> Result<Option<Vec<Course>>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let rows = courses::of_user(&state(ctx)?.db, viewer.user_id).await?;
            Ok(rows.into_iter().map(|row| Course::from_row(row).in_list()).collect())
        })
        .await
    }

    /// Your notifications, newest first: replies to your posts and comments, and mentions of
    /// your `@handle`, from the courses you belong to now. Pages forward with `first` (1 to
    /// 100, default 20) and `after`; `unreadCount` counts every unread one, not only this page.
    #[graphql(complexity = "page_cost(first, None, child_complexity)")]
    async fn notifications(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "How many notifications to return: 1 to 100, 20 when not given.")] first: Option<i32>,
        #[graphql(
            desc = "Return the notifications after this cursor (an edge's `cursor`, or `pageInfo.endCursor`). A cursor this API did not issue (made up, altered, or signed with a retired key) is BAD_USER_INPUT."
        )]
        after: Option<String>,
    ) -> Result<Option<Connection<KeyCursor, Notification, super::notifications::NotificationTotals>>> {
        nullable(super::notifications::page(ctx, first, after)).await
    }

    /// Posts from all the signed-in user's courses, newest first: the home feed. Pages forward
    /// with `first` (1 to 100, default 20) and `after`; never shows deleted posts or posts of
    /// courses the user has left.
    #[graphql(complexity = "page_cost(first, None, child_complexity)")]
    async fn home_feed(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "How many posts to return: 1 to 100, 20 when not given.")] first: Option<i32>,
        #[graphql(
            desc = "Return the posts after this cursor (an edge's `cursor`, or `pageInfo.endCursor`). A cursor this API did not issue (made up, altered, or signed with a retired key) is BAD_USER_INPUT."
        )]
        after: Option<String>,
    ) -> Result<Option<Connection<PostsCursor, Post>>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let state = state(ctx)?;
            let page = PageRequest::new(first, state.cursor_keys.key(after.as_deref())?, None, None)?;
            let courses: Vec<i64> = viewer.memberships(&state.db).await?.keys().copied().collect();
            let rows = state.feed.page(viewer.user_id, &courses, &page).await?;
            prime_liked(ctx, rows.items.iter().map(|r| (r.course_id, LikeTarget::Post(r.id)))).await?;
            Ok(post_connection(&state.cursor_keys, rows))
        })
        .await
    }

    /// A course by its global id: NOT_FOUND if there is none, FORBIDDEN if the signed-in user
    /// is not a member.
    async fn course(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id`).")] id: ID,
    ) -> Result<Option<Course>> {
        nullable(async {
            viewer(ctx)?;
            let (course, _) = access::course(ctx, ids::decode_one(&id, NodeKind::Course)?).await?;
            Ok(course)
        })
        .await
    }

    /// A post by its global id: NOT_FOUND if there is none or it was deleted, FORBIDDEN if the
    /// signed-in user is not a member of its course.
    async fn post(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] id: ID,
    ) -> Result<Option<Post>> {
        nullable(async {
            viewer(ctx)?;
            let (row, _) = access::post(ctx, ids::decode_one(&id, NodeKind::Post)?).await?;
            Ok(Post::from(row))
        })
        .await
    }

    /// Any object by its global id, with the same access checks as the typed entry points
    /// (any user may be read).
    async fn node(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "A global id of any type (`Node.id`).")] id: ID,
    ) -> Result<Option<Node>> {
        nullable(async {
            viewer(ctx)?;
            node_by_id(ctx, &id).await
        })
        .await
    }

    /// Several objects by global id, in the order given, with the same access checks as
    /// `node`. Each item is the object, or null with its own error at `["nodes", i]`
    /// (NOT_FOUND, FORBIDDEN, or BAD_USER_INPUT for a malformed id): one failing id never
    /// nulls the others. 1 to 100 ids.
    #[graphql(complexity = "ids.len().max(1) * child_complexity")]
    async fn nodes(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "Global ids of any types (`Node.id`), 1 to 100; repeats allowed.")] ids: Vec<ID>,
    ) -> Result<Vec<Option<Result<Node>>>> {
        viewer(ctx)?;
        if ids.is_empty() || ids.len() > MAX_NODES {
            return Err(AppError::bad_input(format!("`ids` holds {}; give 1 to {MAX_NODES}", ids.len())).into());
        }
        let lookups = ids.iter().map(|id| node_by_id(ctx, id));
        Ok(futures_util::future::join_all(lookups).await.into_iter().map(Some).collect())
    }

    /// Posts, comments and replies matching `query` in every course you belong to, best first:
    /// `Course.search` across your courses (each course's search language, staff rights and
    /// anonymity as there). Pages forward with `first` (1 to 50, default 10) and `after`.
    #[graphql(complexity = "page_cost(first, None, child_complexity)")]
    async fn search(
        &self,
        ctx: &Context<'_>,
        #[graphql(
            desc = "What to look for: words, \"a phrase\", `-word` to leave out, `or` between alternatives. 1 to 200 characters."
        )]
        query: String,
        #[graphql(desc = "How many hits to return: 1 to 50, 10 when not given.")] first: Option<i32>,
        #[graphql(
            desc = "Return the hits after this cursor (an edge's `cursor`, or `pageInfo.endCursor`). A cursor this API did not issue, or one of another query or filter, is BAD_USER_INPUT."
        )]
        after: Option<String>,
        #[graphql(desc = "Only the hits that match every field given.")] filter: Option<
            super::types::search::SearchFilterInput,
        >,
    ) -> Result<Option<Connection<super::types::search::SearchCursor, super::types::search::SearchHit>>> {
        nullable(super::types::search::search_everywhere(ctx, query, first, after, filter)).await
    }
}

/// Most ids one `nodes` request may name (a page's worth).
const MAX_NODES: usize = 100;

/// One object by global id, through the access check of its type.
async fn node_by_id(ctx: &Context<'_>, id: &ID) -> Result<Node> {
    let (kind, raw_id) = ids::decode(id)?;
    Ok(match kind {
        NodeKind::User => {
            let row = users::find(&state(ctx)?.db, raw_id).await?;
            Node::User(User(row.ok_or_else(|| AppError::not_found("user"))?))
        }
        NodeKind::Course => Node::Course(access::course(ctx, raw_id).await?.0),
        NodeKind::Post => Node::Post(access::post(ctx, raw_id).await?.0.into()),
        NodeKind::Comment => Node::Comment(access::comment(ctx, kind, raw_id).await?.0.into()),
        NodeKind::Reply => Node::Reply(access::comment(ctx, kind, raw_id).await?.0.into()),
        NodeKind::Notification => Node::Notification(super::notifications::by_id(ctx, raw_id).await?),
        NodeKind::Tag => Node::Tag(access::tag(ctx, raw_id).await?.0),
    })
}
