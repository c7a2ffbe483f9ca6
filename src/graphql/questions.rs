//! The mutations of questions and staff: accepting an answer, marking a question resolved,
//! endorsing, pinning, making a private question public, a course's tags and its anonymity.
//!
//! Each follows the order of every mutation (`mutation`): the viewer, the ids and arguments
//! checked without I/O, the write limit (`WriteKind::Edit`), then access (`access`: a private
//! post is NOT_FOUND to other students) and the role: a student trying a staff action is
//! FORBIDDEN, saying what only staff may do. A committed change drops the post's cached
//! copies (the post cache, the course pages on every instance) and is published on
//! `courseActivity` (POST_UPDATED, COMMENT_UPDATED, REPLY_UPDATED). Each answers with the
//! object in its new state, so a normalized client cache updates without a refetch.

use async_graphql::{Context, ID, Object, Result};

use super::access;
use super::context::{state, viewer};
use super::errors::nullable;
use super::ids::{self, NodeKind, encode};
use super::mutation::{publish, require_staff, within_limit};
use super::types::{Comment, Course, DeletePayload, Endorsable, Post, Reply, Tag};
use crate::error::AppError;
use crate::forum::audience::{Anonymity, PostKind};
use crate::forum::comments;
use crate::forum::courses::Role;
use crate::forum::posts::{PostRow, validate_text};
use crate::forum::questions::{self, MAX_TAG_CHARS};
use crate::kv::ratelimit::WriteKind;
use crate::live::ActivityKind;

#[derive(Default)]
pub(crate) struct QuestionMutations;

#[Object]
impl QuestionMutations {
    /// Accepts a top-level comment as the answer of a QUESTION (the asker or staff; FORBIDDEN
    /// for anyone else), replacing any accepted before; `commentId: null` clears it. The
    /// question is then `resolved`. BAD_USER_INPUT on a post that is not a QUESTION; NOT_FOUND
    /// when the comment is not a live top-level comment of this question.
    async fn accept_answer(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The question's global id (`Post.id`).")] post_id: ID,
        #[graphql(desc = "The global id of one of its top-level comments (`Comment.id`); null clears the answer.")]
        comment_id: Option<ID>,
    ) -> Result<Option<Post>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let post_id = ids::decode_one(&post_id, NodeKind::Post)?;
            let comment_id = comment_id.map(|id| ids::decode_one(&id, NodeKind::Comment)).transpose()?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let (post, role) = access::post(ctx, post_id).await?;
            require_question(&post, "has an accepted answer")?;
            if post.user_id != viewer.user_id && role != Role::Instructor {
                return Err(AppError::Forbidden(
                    "only the asker or staff (the course's instructors) may accept an answer".into(),
                )
                .into());
            }
            let row = questions::accept_answer(&state(ctx)?.db, post.id, comment_id).await?;
            post_updated(ctx, &row).await?;
            Ok(Post::from(row))
        })
        .await
    }

    /// Staff mark a QUESTION resolved, or take the mark back (BAD_USER_INPUT on other kinds).
    /// A question with an accepted answer stays `resolved` without the mark: clear the answer
    /// (`acceptAnswer(commentId: null)`) to reopen it.
    async fn mark_resolved(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The question's global id (`Post.id`).")] post_id: ID,
        #[graphql(desc = "True to mark it resolved, false to take the mark back.")] resolved: bool,
    ) -> Result<Option<Post>> {
        nullable(async {
            let post = staff_post(ctx, &post_id, "mark a question resolved").await?;
            require_question(&post, "is resolved")?;
            let row = questions::mark_resolved(&state(ctx)?.db, post.id, resolved).await?;
            post_updated(ctx, &row).await?;
            Ok(Post::from(row))
        })
        .await
    }

    /// Staff endorse a post, comment or reply (`endorsement` then says who and when), or
    /// withdraw the endorsement. Endorsing again keeps the first endorsement.
    async fn endorse(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The global id of a Post, a Comment or a Reply.")] id: ID,
        #[graphql(desc = "True to endorse, false to withdraw the endorsement.")] endorsed: bool,
    ) -> Result<Option<Endorsable>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let (kind, id) = ids::decode_as(&id, &[NodeKind::Post, NodeKind::Comment, NodeKind::Reply])?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let by = endorsed.then_some(viewer.user_id);
            let db = &state(ctx)?.db;
            if kind == NodeKind::Post {
                let (post, role) = access::post(ctx, id).await?;
                require_staff(role, "endorse a post")?;
                let row = questions::endorse_post(db, post.id, by).await?;
                post_updated(ctx, &row).await?;
                return Ok(Endorsable::Post(Post::from(row)));
            }
            let (comment, post, role) = access::comment_in_post(ctx, kind, id).await?;
            let (what, activity) = if kind == NodeKind::Reply {
                ("reply", ActivityKind::ReplyUpdated)
            } else {
                ("comment", ActivityKind::CommentUpdated)
            };
            require_staff(role, &format!("endorse a {what}"))?;
            questions::endorse_comment(db, &comment, by).await?;
            let row = comments::find(db, comment.id).await?.ok_or_else(|| AppError::not_found(what))?;
            changed(ctx, &post, activity, row.id).await?;
            Ok(if kind == NodeKind::Reply {
                Endorsable::Reply(Reply::from(row))
            } else {
                Endorsable::Comment(Comment::from(row))
            })
        })
        .await
    }

    /// Staff pin a post (it leads the course's first page in every order) or unpin it. A
    /// course pins at most 5 posts at once: one more is BAD_USER_INPUT. A private question is
    /// pinned only once it is public (BAD_USER_INPUT).
    async fn pin_post(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The post's global id (`Post.id`).")] post_id: ID,
        #[graphql(desc = "True to pin, false to unpin.")] pinned: bool,
    ) -> Result<Option<Post>> {
        nullable(async {
            let post = staff_post(ctx, &post_id, "pin a post").await?;
            if pinned && post.private {
                return Err(AppError::bad_input("a private question cannot be pinned: make it public first").into());
            }
            let row = questions::pin(&state(ctx)?.db, &post, pinned).await?;
            post_updated(ctx, &row).await?;
            Ok(Post::from(row))
        })
        .await
    }

    /// Staff make a private question public: every member reads it from then on (it joins the
    /// course's pages and timelines); an anonymous asker stays anonymous. A public post is
    /// returned as it is.
    async fn make_post_public(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The question's global id (`Post.id`).")] post_id: ID,
    ) -> Result<Option<Post>> {
        nullable(async {
            let post = staff_post(ctx, &post_id, "make a post public").await?;
            let row = questions::make_public(&state(ctx)?.db, post.id).await?;
            if post.private {
                post_updated(ctx, &row).await?;
            }
            Ok(Post::from(row))
        })
        .await
    }

    /// Staff add a tag (a folder) to a course; posts then carry it (`createPost`, `editPost`).
    /// CONFLICT when the course has a tag of that name (case aside); a course has at most 50.
    async fn create_tag(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id`).")] course_id: ID,
        #[graphql(desc = "1 to 40 characters after trimming; no control characters.")] name: String,
    ) -> Result<Option<Tag>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let course_id = ids::decode_one(&course_id, NodeKind::Course)?;
            let name = validate_text("name", &name, MAX_TAG_CHARS)?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let (course, role) = access::course(ctx, course_id).await?;
            require_staff(role, "create a tag")?;
            let row = questions::create_tag(&state(ctx)?.db, course.course_id, &name).await?;
            Ok(Tag(row))
        })
        .await
    }

    /// Staff rename a tag; every post carrying it shows the new name at once. CONFLICT when
    /// another tag of the course has that name (case aside).
    async fn rename_tag(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The tag's global id (`Tag.id`).")] tag_id: ID,
        #[graphql(desc = "The new name: 1 to 40 characters after trimming; no control characters.")] name: String,
    ) -> Result<Option<Tag>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let tag_id = ids::decode_one(&tag_id, NodeKind::Tag)?;
            let name = validate_text("name", &name, MAX_TAG_CHARS)?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let (tag, role) = access::tag(ctx, tag_id).await?;
            require_staff(role, "rename a tag")?;
            let row = questions::rename_tag(&state(ctx)?.db, &tag.0, &name).await?;
            Ok(Tag(row))
        })
        .await
    }

    /// Staff delete a tag: the posts that carried it no longer do.
    async fn delete_tag(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The tag's global id (`Tag.id`).")] tag_id: ID,
    ) -> Result<Option<DeletePayload>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let tag_id = ids::decode_one(&tag_id, NodeKind::Tag)?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let (tag, role) = access::tag(ctx, tag_id).await?;
            require_staff(role, "delete a tag")?;
            let state = state(ctx)?;
            let carried =
                questions::delete_tag(&state.db, tag.0.id).await?.ok_or_else(|| AppError::not_found("tag"))?;
            // The rows of those posts are unchanged; the pages listing them by this tag are not.
            state.publisher.posts_changed(&carried).await;
            Ok(DeletePayload { deleted_id: encode(NodeKind::Tag, tag.0.id), post: None, comment: None })
        })
        .await
    }

    /// Staff set whom the course's members may hide from when they write anonymously from now
    /// on (OFF: nobody writes anonymously). What was written before keeps how it was written.
    async fn set_course_anonymity(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id`).")] course_id: ID,
        #[graphql(desc = "OFF, CLASSMATES (staff see the writer) or EVERYONE (staff see the pseudonym too).")]
        anonymity: Anonymity,
    ) -> Result<Option<Course>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let course_id = ids::decode_one(&course_id, NodeKind::Course)?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let (course, role) = access::course(ctx, course_id).await?;
            require_staff(role, "set the course's anonymity")?;
            questions::set_anonymity(&state(ctx)?.db, course.course_id, anonymity).await?;
            // Read again when asked: the course as it is now.
            Ok(Course::known(course.course_id))
        })
        .await
    }
}

/// BAD_USER_INPUT unless the post is a QUESTION (only a question `what`).
fn require_question(post: &PostRow, what: &str) -> Result<()> {
    if post.kind()? == PostKind::Question {
        Ok(())
    } else {
        Err(AppError::bad_input(format!("only a QUESTION {what}")).into())
    }
}

/// After a committed change of a post's state: `changed`, as POST_UPDATED of the post.
async fn post_updated(ctx: &Context<'_>, row: &PostRow) -> Result<()> {
    changed(ctx, row, ActivityKind::PostUpdated, row.id).await
}

/// After a committed change in `post` (of the post itself, or of its comment or reply
/// `node_id`): drops the post's cached copies (the post cache, the course pages showing it on
/// every instance), then publishes `kind` on `courseActivity`.
async fn changed(ctx: &Context<'_>, post: &PostRow, kind: ActivityKind, node_id: i64) -> Result<()> {
    let state = state(ctx)?;
    state.post_cache.invalidate(post.id).await;
    state.publisher.posts_changed(&[post.id]).await;
    publish(ctx, post, kind, node_id).await
}

/// A staff action's post: the viewer, the id decoded, the write limit, access (a private post
/// is NOT_FOUND to other students), then the role (FORBIDDEN for a student, naming `what`).
async fn staff_post(ctx: &Context<'_>, post_id: &ID, what: &str) -> Result<PostRow> {
    let viewer = viewer(ctx)?;
    let post_id = ids::decode_one(post_id, NodeKind::Post)?;
    within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
    let (post, role) = access::post(ctx, post_id).await?;
    require_staff(role, what)?;
    Ok(post)
}
