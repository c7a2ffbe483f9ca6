//! `Tag`: one of a course's folders, and `Endorsement`: staff vouching for a post or comment
//! (`Endorsable`: what can carry one).

use super::*;

pub(crate) struct Tag(pub TagRow);

/// One of a course's folders (staff define them, `createTag`). A post carries 0 to 3. Posts
/// refer to a tag by id: a rename shows on every post at once; a deleted tag leaves them.
#[Object]
impl Tag {
    /// Global id of this tag (what `createPost(tagIds:)` and `PostFilter.tagId` take).
    pub(super) async fn id(&self) -> ID {
        encode(NodeKind::Tag, self.0.id)
    }
    /// Its name, 1 to 40 characters, unique in its course (case aside).
    pub(super) async fn name(&self) -> &String {
        &self.0.name
    }
}

/// Staff vouching for a post, comment or reply: who and when.
pub(crate) struct Endorsement {
    pub by: i64,
    pub at: DateTime<Utc>,
}

impl Endorsement {
    pub(crate) fn of(by: Option<i64>, at: Option<DateTime<Utc>>) -> Option<Self> {
        Some(Self { by: by?, at: at? })
    }
}

/// What staff can endorse (`endorse` returns it): its concrete type and `id` are the object's
/// own, so a normalized client cache writes the endorsement into the `Post`, `Comment` or
/// `Reply` it already holds.
#[derive(Interface)]
#[graphql(
    field(name = "id", ty = "ID", desc = "Global id of the post, comment or reply."),
    field(name = "endorsement", ty = "Option<Endorsement>", desc = "Staff's endorsement; null if none.")
)]
pub(crate) enum Endorsable {
    Post(Post),
    Comment(Comment),
    Reply(Reply),
}

/// Staff vouching for a post, comment or reply.
#[Object]
impl Endorsement {
    /// The staff member who endorsed it (staff never endorse anonymously).
    pub(super) async fn by(&self, ctx: &Context<'_>) -> Result<User> {
        Ok(User(user(ctx, self.by).await?))
    }
    /// When.
    pub(super) async fn at(&self) -> DateTime<Utc> {
        self.at
    }
}

/// Who wrote something, as the reader may see it: the author, or `None` when they wrote it
/// anonymously and are hidden from this reader (`forum::audience::author_visible`). The one
/// place every author field (posts, comments, replies, `replyTo`, notification actors) asks.
pub(crate) async fn shown_author(
    ctx: &Context<'_>,
    course_id: i64,
    author: i64,
    anonymous_to: Option<&str>,
) -> Result<Option<User>> {
    if anonymous_to.is_some() {
        let viewer = viewer(ctx)?;
        let role = viewer.require_member(&state(ctx)?.db, course_id).await?;
        if !audience::author_visible(viewer.user_id, role, author, anonymous_to) {
            return Ok(None);
        }
    }
    Ok(Some(User(user(ctx, author).await?)))
}

/// The pseudonym of an anonymous writer in the thread of `post_id` (the same for every
/// reader), or `None` when signed.
pub(crate) async fn pseudonym(
    ctx: &Context<'_>,
    post_id: i64,
    author: i64,
    anonymous_to: Option<&str>,
) -> Result<Option<String>> {
    if anonymous_to.is_none() {
        return Ok(None);
    }
    let state = state(ctx)?;
    Ok(Some(state.pseudonyms.name(&state.db, post_id, author).await?))
}
