//! The access rule in one place: load what an id names and prove the viewer belongs to its
//! course. Every entry point (queries, `node`, mutations) goes through these. Posts come from
//! the instance's course pages (`cache::pages`) or through the post cache; memberships from the
//! instance's `Memberships` (memory, or PostgreSQL when it cannot vouch for it), at most once
//! per HTTP request.

use async_graphql::{Context, ID};

use super::context::{state, viewer};
use super::ids::{self, NodeKind};
use super::types::{Course, Tag};
use crate::auth::Viewer;
use crate::cache::pages::LoadStart;
use crate::config::LikeMode;
use crate::error::{AppError, AppResult, Service};
use crate::forum::audience;
use crate::forum::comments::{self, CommentRow};
use crate::forum::courses::{self, Role};
use crate::forum::posts::PostRow;
use crate::forum::questions;
use crate::likes::Membership;
use crate::state::AppState;

/// The course `id` names and the viewer's role in it. With the viewer's memberships in memory,
/// a member costs no statement (the row loads only if a field asks for it); anyone else costs
/// one, to tell NOT_FOUND from FORBIDDEN.
pub(crate) async fn course(ctx: &Context<'_>, id: i64) -> AppResult<(Course, Role)> {
    let viewer = viewer(ctx)?;
    let db = &state(ctx)?.db;
    if let Some(memberships) = viewer.known_memberships() {
        if let Some(role) = memberships.get(&id) {
            return Ok((Course::known(id), *role));
        }
        let row = courses::find(db, id).await?.ok_or_else(|| AppError::not_found("course"))?;
        let role = crate::auth::role_in(&memberships, row.id)?;
        return Ok((Course::from_row(row), role));
    }
    // Memberships not in memory: read the course and the viewer's memberships in one
    // statement.
    let read_at = viewer.reading_starts();
    let (row, memberships) = courses::find_with_roles_of_user(db, id, viewer.user_id).await?;
    let memberships = viewer.remember_memberships(memberships, read_at);
    let row = row.ok_or_else(|| AppError::not_found("course"))?;
    let role = crate::auth::role_in(&memberships, row.id)?;
    Ok((Course::from_row(row), role))
}

/// A post from this instance's memory (`cache::pages`), else from the post cache. A post
/// deleted on another instance may be found in memory for the relay's delay (milliseconds):
/// its likes are refused when applied, like those of any post deleted meanwhile.
///
/// A post read from the post cache is kept in memory only by `keep_post`, once the caller
/// has proven the viewer's access: a non-member's reads must not fill this instance's memory.
async fn find_post(state: &AppState, viewer: &Viewer, id: i64) -> AppResult<(PostRow, Option<LoadStart>)> {
    if let Some(row) = state.course_pages.post(id) {
        return Ok((row, None));
    }
    let start = state.course_pages.begin();
    // The post cache (Redis) stores a post this request loads only for a member of its course.
    let admit = |row: &PostRow| -> futures_util::future::BoxFuture<'_, bool> {
        let course = row.course_id;
        Box::pin(async move { viewer.require_member(&state.db, course).await.is_ok() })
    };
    let row = state.post_cache.get_admitted(id, &admit).await?.ok_or_else(|| AppError::not_found("post"))?;
    Ok((row, Some(start)))
}

/// Keeps a post `find_post` read from the post cache, after the access check passed.
fn keep_post(state: &AppState, row: &PostRow, start: Option<LoadStart>) {
    if let Some(start) = start {
        state.course_pages.store_post(start, row.clone());
    }
}

/// A post the viewer may read: a member of its course, and for a private post its author or
/// staff. A private post of someone else is NOT_FOUND, as if it did not exist (FORBIDDEN
/// would tell a classmate that a private question has this id).
pub(crate) async fn post(ctx: &Context<'_>, id: i64) -> AppResult<(PostRow, Role)> {
    let viewer = viewer(ctx)?;
    let state = state(ctx)?;
    let (row, start) = find_post(state, viewer, id).await?;
    let role = viewer.require_member(&state.db, row.course_id).await?;
    keep_post(state, &row, start);
    readable(viewer.user_id, role, &row)?;
    Ok((row, role))
}

/// NOT_FOUND for a post the reader may not see (`forum::audience::may_read`).
pub(crate) fn readable(reader: i64, role: Role, row: &PostRow) -> AppResult<()> {
    if audience::may_read(reader, role, row.user_id, row.private) { Ok(()) } else { Err(AppError::not_found("post")) }
}

/// As `post`, when this instance holds the post in memory (for a member, no Redis command and
/// no statement); `None` when it does not, and the caller takes the usual way.
pub(crate) async fn post_in_memory(ctx: &Context<'_>, id: i64) -> AppResult<Option<(PostRow, Role)>> {
    let state = state(ctx)?;
    let Some(row) = state.course_pages.post(id) else { return Ok(None) };
    let viewer = viewer(ctx)?;
    let role = viewer.require_member(&state.db, row.course_id).await?;
    readable(viewer.user_id, role, &row)?;
    Ok(Some((row, role)))
}

/// A post to like or unlike. As `post`, except when PostgreSQL cannot be asked about the
/// viewer's memberships and likes are buffered: the post (from the post cache) is returned with
/// `Membership::Unverified`, and the like goes ahead only on a liked-set a verified check
/// loaded; the worker checks membership again before anything is written. (Such a post is
/// not kept in memory: access was not proven.)
pub(crate) async fn post_to_like(ctx: &Context<'_>, id: i64) -> AppResult<(PostRow, Membership)> {
    let viewer = viewer(ctx)?;
    let state = state(ctx)?;
    let (row, start) = find_post(state, viewer, id).await?;
    // A first touch only while memberships are kept: otherwise every like would read its
    // liked rows again, loaded set or not. Memberships the warm kept, looked up by no request
    // before this one, say nothing of the liked-set: that like is a first touch too.
    let first =
        state.memberships.keeps_readings() && (viewer.known_memberships().is_none() || viewer.first_use_of_warmed());
    let checked = if state.likes.mode() == LikeMode::Buffered && first {
        first_touch(state, viewer, row.course_id).await
    } else {
        viewer.require_member(&state.db, row.course_id).await.map(|role| (role, Membership::Verified))
    };
    match checked {
        Ok((role, membership)) => {
            keep_post(state, &row, start);
            readable(viewer.user_id, role, &row)?;
            Ok((row, membership))
        }
        // Unverified, a private post is refused: its readers cannot be told apart.
        Err(why)
            if why.unreachable() == Some(Service::Postgres)
                && state.likes.mode() == LikeMode::Buffered
                && !row.private =>
        {
            tracing::warn!(post = id, error = %why, "memberships unreadable: a buffered like may go ahead unverified");
            Ok((row, Membership::Unverified { why }))
        }
        Err(err) => Err(err),
    }
}

/// A buffered like by a viewer whose memberships this instance does not hold (their first
/// request here, typically with their liked-set cold too): reads the memberships AND the
/// viewer's likes in the course in ONE statement (`likes::first_touch`, shared with the first
/// touches arriving beside it), so the toggle can load the set without asking PostgreSQL
/// again, in its one round trip. A non-member gets FORBIDDEN here, and nothing reaches Redis.
async fn first_touch(state: &AppState, viewer: &Viewer, course_id: i64) -> AppResult<(Role, Membership)> {
    let read_at = viewer.reading_starts();
    let read = state.likes.first_touch(viewer.user_id, course_id).await?;
    let roles =
        read.roles.into_iter().map(|(course, role)| Ok((course, Role::parse(&role)?))).collect::<AppResult<_>>()?;
    let memberships = viewer.remember_memberships(roles, read_at);
    let role = crate::auth::role_in(&memberships, course_id)?;
    Ok((role, Membership::Loaded { xmin: read.xmin, members: read.members }))
}

/// A comment (`NodeKind::Comment`) or reply (`NodeKind::Reply`); the kind must match the row.
pub(crate) async fn comment(ctx: &Context<'_>, kind: NodeKind, id: i64) -> AppResult<(CommentRow, Role)> {
    let (row, _, role) = comment_in_post(ctx, kind, id).await?;
    Ok((row, role))
}

/// As `comment`, with its post (from memory or the post cache): a comment of a private post
/// the viewer may not read is NOT_FOUND, as the post is.
pub(crate) async fn comment_in_post(
    ctx: &Context<'_>,
    kind: NodeKind,
    id: i64,
) -> AppResult<(CommentRow, PostRow, Role)> {
    let viewer = viewer(ctx)?;
    let state = state(ctx)?;
    let what = if kind == NodeKind::Reply { "reply" } else { "comment" };
    let row = comments::find(&state.db, id)
        .await?
        .filter(|row| row.parent_id.is_some() == (kind == NodeKind::Reply))
        .ok_or_else(|| AppError::not_found(what))?;
    let role = viewer.require_member(&state.db, row.course_id).await?;
    let (post, start) = find_post(state, viewer, row.post_id).await?;
    keep_post(state, &post, start);
    readable(viewer.user_id, role, &post).map_err(|_| AppError::not_found(what))?;
    Ok((row, post, role))
}

/// Decodes an id naming a comment or a reply and loads it.
pub(crate) async fn any_comment(ctx: &Context<'_>, raw: &ID) -> AppResult<(CommentRow, Role)> {
    viewer(ctx)?;
    let (kind, id) = ids::decode_as(raw, &[NodeKind::Comment, NodeKind::Reply])?;
    comment(ctx, kind, id).await
}

/// A tag of a course the viewer belongs to, with the viewer's role there.
pub(crate) async fn tag(ctx: &Context<'_>, id: i64) -> AppResult<(Tag, Role)> {
    let viewer = viewer(ctx)?;
    let db = &state(ctx)?.db;
    let row = questions::find_tag(db, id).await?.ok_or_else(|| AppError::not_found("tag"))?;
    let role = viewer.require_member(db, row.course_id).await?;
    Ok((Tag(row), role))
}

/// Authors may change their own content; instructors may also delete anything in their course.
pub(crate) fn require_author(viewer_id: i64, author_id: i64) -> AppResult<()> {
    if viewer_id == author_id { Ok(()) } else { Err(AppError::Forbidden("only the author may do this".into())) }
}

pub(crate) fn require_author_or_instructor(viewer_id: i64, author_id: i64, role: Role) -> AppResult<()> {
    if viewer_id == author_id || role == Role::Instructor {
        Ok(())
    } else {
        Err(AppError::Forbidden("only the author or an instructor of the course may do this".into()))
    }
}
