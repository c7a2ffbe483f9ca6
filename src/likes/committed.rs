//! The one step that follows every COMMIT of like counts — sync mode's statement, the recount
//! job, the like worker's batch: patch the committed counts into cached posts, then publish
//! them to every instance's subscribers. Called only after COMMIT returned, so nothing that
//! could still roll back is ever shown.

use crate::cache::PostCache;
use crate::like_event::CountChange;
use crate::live::{Publisher, now_micros};

/// Patches the post cache and publishes committed like counts. Cheap to clone.
#[derive(Clone)]
pub struct AfterCommit {
    post_cache: PostCache,
    publisher: Publisher,
}

impl AfterCommit {
    pub fn new(post_cache: PostCache, publisher: Publisher) -> Self {
        Self { post_cache, publisher }
    }

    /// Committed counts: into cached posts first (a subscriber that reloads the post sees the
    /// new count), then to every instance. The time on entry is the commit time as this
    /// process saw it (`likeCountCommittedAt` for subscribers). Best effort, like both halves: the
    /// counts are already in PostgreSQL.
    pub async fn like_counts(&self, changes: &[CountChange]) {
        if changes.is_empty() {
            return;
        }
        let committed_at_us = now_micros();
        self.post_cache.like_counts_committed(changes).await;
        self.publisher.counts(changes, committed_at_us).await;
    }
}
