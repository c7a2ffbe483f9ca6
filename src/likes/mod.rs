//! Likes on posts and comments: idempotent like/unlike and the viewer's "liked" flags.
//!
//! The caller (the GraphQL mutation) has already checked the trust boundary: the target is
//! live, in the course, and the user is a member. This module rate-limits and writes through
//! the configured level (DESIGN §2). The database's primary key on (target, user) is the last
//! line against double likes whatever the level.

pub mod sync;

use std::collections::HashSet;

use sea_orm::{DatabaseConnection, FromQueryResult};

use crate::config::LikeMode;
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::kv::keys::Keys;
use crate::kv::ratelimit::RateLimiter;

/// What can be liked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LikeTarget {
    Post(i64),
    /// A top-level comment or a reply.
    Comment(i64),
}

/// Writes likes and answers "did this user like these?".
#[derive(Clone)]
pub struct Likes {
    db: DatabaseConnection,
    mode: LikeMode,
    limiter: RateLimiter,
    keys: Keys,
}

impl Likes {
    pub fn new(db: DatabaseConnection, mode: LikeMode, limiter: RateLimiter, keys: Keys) -> Self {
        Self {
            db,
            mode,
            limiter,
            keys,
        }
    }

    /// Likes (`liked = true`) or unlikes `target` for `user_id`; repeating either is a no-op.
    /// Returns the target's like count after the change.
    #[tracing::instrument(skip(self), fields(mode = ?self.mode))]
    pub async fn set(&self, user_id: i64, target: LikeTarget, liked: bool) -> AppResult<i32> {
        self.limiter.check(&self.keys.like_rate(user_id)).await?;
        match self.mode {
            LikeMode::Sync => sync::set(&self.db, user_id, target, liked)
                .await?
                .ok_or_else(|| AppError::not_found(target.kind_name())),
        }
    }

    /// The subset of `targets` that `user_id` likes, in one SQL statement.
    pub async fn liked_by(
        &self,
        user_id: i64,
        targets: &[LikeTarget],
    ) -> AppResult<HashSet<LikeTarget>> {
        let (posts, comments): (Vec<i64>, Vec<i64>) =
            targets.iter().fold((vec![], vec![]), |(mut p, mut c), t| {
                match t {
                    LikeTarget::Post(id) => p.push(*id),
                    LikeTarget::Comment(id) => c.push(*id),
                }
                (p, c)
            });
        #[derive(FromQueryResult)]
        struct LikedRow {
            is_post: bool,
            target_id: i64,
        }
        let rows = LikedRow::find_by_statement(stmt(
            "SELECT true AS is_post, post_id AS target_id FROM post_likes WHERE user_id = $1 AND post_id = ANY($2) \
             UNION ALL \
             SELECT false, comment_id FROM comment_likes WHERE user_id = $1 AND comment_id = ANY($3)",
            [user_id.into(), posts.into(), comments.into()],
        ))
        .all(&self.db)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                if r.is_post {
                    LikeTarget::Post(r.target_id)
                } else {
                    LikeTarget::Comment(r.target_id)
                }
            })
            .collect())
    }
}

impl LikeTarget {
    pub fn kind_name(&self) -> &'static str {
        match self {
            LikeTarget::Post(_) => "post",
            LikeTarget::Comment(_) => "comment",
        }
    }
}
