//! The one step that follows every COMMIT of like counts — sync mode's statement, the recount
//! job, the like worker's batch: patch the committed counts into cached posts, publish them
//! to every instance's subscribers, and deliver the like milestones the commit reached (the
//! rows were written by migration 0009's trigger inside that same transaction). Called only
//! after COMMIT returned, so nothing that could still roll back is ever shown.

use sea_orm::{DatabaseConnection, FromQueryResult};

use crate::cache::PostCache;
use crate::db::stmt;
use crate::like_event::{CountChange, LikeTarget};
use crate::live::{Publisher, now_micros};
use crate::notifications::Notified;

/// The like counts that notify (migration 0009's trigger writes them).
const MILESTONES: [i32; 3] = [10, 100, 1000];

/// Patches the post cache and publishes committed like counts. Cheap to clone.
#[derive(Clone)]
pub struct AfterCommit {
    post_cache: PostCache,
    publisher: Publisher,
    db: DatabaseConnection,
}

impl AfterCommit {
    pub fn new(post_cache: PostCache, publisher: Publisher, db: DatabaseConnection) -> Self {
        Self { post_cache, publisher, db }
    }

    /// Committed counts: into cached posts first (a subscriber that reloads the post sees the
    /// new count), then to every instance, then the milestones they reached. The time on entry
    /// is the commit time as this process saw it (`likeCountCommittedAt` for subscribers). Best
    /// effort, like every part: the counts are already in PostgreSQL.
    pub async fn like_counts(&self, changes: &[CountChange]) {
        if changes.is_empty() {
            return;
        }
        self.show(changes).await;
        let reached: Vec<&CountChange> = changes.iter().filter(|c| c.like_count >= MILESTONES[0]).collect();
        self.deliver_milestones(&reached).await;
    }

    /// One committed like or unlike (sync mode): the count moved by exactly one, so it reached
    /// a milestone only if it now equals one, and every other like costs no statement here.
    pub async fn one_like(&self, change: CountChange) {
        self.show(&[change]).await;
        if MILESTONES.contains(&change.like_count) {
            self.deliver_milestones(&[&change]).await;
        }
    }

    /// Into cached posts, then to every instance's subscribers.
    async fn show(&self, changes: &[CountChange]) {
        let committed_at_us = now_micros();
        self.post_cache.like_counts_committed(changes).await;
        self.publisher.counts(changes, committed_at_us).await;
    }

    /// The milestone notifications these committed changes wrote, found by the `like_version`
    /// each was written at, to their recipients' subscriptions. Callers pass only changes that
    /// can have reached one, so most commits cost no statement.
    async fn deliver_milestones(&self, reached: &[&CountChange]) {
        if reached.is_empty() {
            return;
        }
        let ids: Vec<i64> = reached.iter().map(|c| c.target.id()).collect();
        let is_post: Vec<bool> = reached.iter().map(|c| matches!(c.target, LikeTarget::Post(_))).collect();
        let versions: Vec<i64> = reached.iter().map(|c| c.version).collect();
        let found = Notified::find_by_statement(stmt(
            "SELECT n.id, n.recipient_id \
             FROM unnest($1::bigint[], $2::bool[], $3::bigint[]) AS c(id, is_post, version) \
             JOIN notifications n ON n.kind = 'milestone' AND n.cause_version = c.version \
              AND ((c.is_post AND n.post_id = c.id AND n.comment_id IS NULL) OR (NOT c.is_post AND n.comment_id = c.id)) \
             ORDER BY n.id",
            [ids.into(), is_post.into(), versions.into()],
        ))
        .all(&self.db)
        .await;
        match found {
            Ok(found) => {
                self.publisher.notifications(found.iter().map(|n| (n.recipient_id, Some(n.id))).collect()).await
            }
            // Best effort like the rest: the notifications are committed and listed; only the
            // live push is lost.
            Err(err) => tracing::warn!(error = %err, "could not read the like milestones of a commit"),
        }
    }
}
