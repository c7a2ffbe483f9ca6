//! The fan-out job: new posts from the transactional outbox into timelines and celebrity lists.
//!
//! One step (`process_one_batch`), in ONE PostgreSQL transaction:
//!
//! 1. claim up to `FEED_FANOUT_BATCH` outbox rows, oldest first, `FOR UPDATE SKIP LOCKED` (two
//!    jobs never take the same rows, and neither waits for the other);
//! 2. per course: if the course has a celebrity list, or at least `FEED_FANOUT_MAX_MEMBERS`
//!    members, push the ids into that one list (built from PostgreSQL first when missing);
//!    otherwise push them into each member's timeline that exists — one `lua/feed_push.lua`
//!    per member, all in one pipeline. Users without a timeline (inactive, or never opened the
//!    feed) are skipped: their timeline is rebuilt from PostgreSQL when they read it;
//! 3. delete the claimed rows and COMMIT.
//!
//! A process that dies before COMMIT leaves the rows to the next step, which pushes again:
//! ZADD of the same id changes nothing, so a replay is harmless.
//!
//! Celebrity status is sticky: once a course has its list, its posts keep going there even if
//! members leave, so readers and writers never disagree about where a course's posts are. The
//! list has no TTL; if Redis loses it, the next post decides again by member count, and readers'
//! timelines (whose sentinel names the fanned-out courses) are rebuilt to match.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult, TransactionTrait};
use tokio::sync::watch;

use super::FeedConfig;
use super::lists::Lists;
use crate::backoff::{Backoff, pause_unless_shutdown};
use crate::db::stmt;
use crate::error::AppResult;
use crate::forum::posts;
use crate::kv::Redis;
use crate::kv::keys::Keys;
use crate::telemetry::names;

/// The sentinel of a celebrity list.
pub(crate) const CELEBRITY_SENTINEL: &str = "_";

/// What one step did.
#[derive(Clone, Debug, Default)]
pub struct FanoutReport {
    /// Outbox rows (posts) claimed and fanned out.
    pub posts: usize,
    /// Posts that went to celebrity lists instead of timelines.
    pub celebrity_posts: usize,
    /// Timelines that received posts / members skipped because they have no timeline.
    pub timelines_pushed: usize,
    pub timelines_skipped: usize,
    pub elapsed: Duration,
}

#[derive(FromQueryResult)]
struct OutboxRow {
    id: i64,
    post_id: i64,
    course_id: i64,
    /// Seconds between the post's commit and this claim.
    waited: f64,
}

#[derive(FromQueryResult)]
struct Member {
    user_id: i64,
}

/// Fans new posts out. Cheap to clone.
#[derive(Clone)]
pub struct FanoutJob {
    db: DatabaseConnection,
    lists: Lists,
    keys: Keys,
    config: FeedConfig,
}

impl FanoutJob {
    /// `redis` should be a connection of the job's own: a pipeline of thousands of pushes must
    /// not queue the API's commands behind it.
    pub fn new(db: DatabaseConnection, redis: Redis, keys: Keys, config: FeedConfig) -> Self {
        Self { lists: Lists::new(redis, config.cap), db, keys, config }
    }

    /// One step: claim, push, delete, COMMIT. Returns what it did (nothing when the outbox is
    /// empty or every row is claimed by another job).
    #[tracing::instrument(name = "feed_fanout", skip(self))]
    pub async fn process_one_batch(&self) -> AppResult<FanoutReport> {
        let started = Instant::now();
        let txn = self.db.begin().await?;
        let claimed = OutboxRow::find_by_statement(stmt(
            "SELECT id, post_id, course_id, EXTRACT(EPOCH FROM clock_timestamp() - created_at)::float8 AS waited \
             FROM feed_outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
            [(self.config.fanout_batch as i64).into()],
        ))
        .all(&txn)
        .await?;
        let mut report = FanoutReport { posts: claimed.len(), ..Default::default() };
        if claimed.is_empty() {
            txn.commit().await?;
            return Ok(report);
        }
        let mut by_course: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for row in &claimed {
            by_course.entry(row.course_id).or_default().push(row.post_id);
        }
        for (course_id, post_ids) in &by_course {
            self.fan_out_course(&txn, *course_id, post_ids, &mut report).await?;
        }
        let outbox_ids: Vec<i64> = claimed.iter().map(|r| r.id).collect();
        txn.execute_raw(stmt("DELETE FROM feed_outbox WHERE id = ANY($1)", [outbox_ids.into()])).await?;
        txn.commit().await?;
        report.elapsed = started.elapsed();
        for row in &claimed {
            metrics::histogram!(names::FEED_FANOUT_DELAY).record(row.waited.max(0.0));
        }
        metrics::histogram!(names::FEED_FANOUT_BATCH_DURATION).record(report.elapsed.as_secs_f64());
        metrics::counter!(names::FEED_FANOUT_POSTS, "path" => "celebrity").increment(report.celebrity_posts as u64);
        metrics::counter!(names::FEED_FANOUT_POSTS, "path" => "timelines")
            .increment((report.posts - report.celebrity_posts) as u64);
        metrics::counter!(names::FEED_FANOUT_PUSHES, "result" => "pushed").increment(report.timelines_pushed as u64);
        metrics::counter!(names::FEED_FANOUT_PUSHES, "result" => "skipped").increment(report.timelines_skipped as u64);
        Ok(report)
    }

    async fn fan_out_course(
        &self,
        txn: &impl ConnectionTrait,
        course_id: i64,
        post_ids: &[i64],
        report: &mut FanoutReport,
    ) -> AppResult<()> {
        let list = self.keys.celebrity_list(course_id);
        // Sticky celebrity: pushing into the course's list succeeds only if it exists.
        if self.lists.push(&[(list.clone(), post_ids)]).await?.first().copied().unwrap_or(false) {
            report.celebrity_posts += post_ids.len();
            return Ok(());
        }
        // Up to the threshold: a full answer means a celebrity, a shorter one is every member.
        let members = Member::find_by_statement(stmt(
            "SELECT user_id FROM course_members WHERE course_id = $1 ORDER BY user_id LIMIT $2",
            [course_id.into(), (self.config.max_members as i64).into()],
        ))
        .all(txn)
        .await?;
        if members.len() >= self.config.max_members {
            // It became a celebrity: its list starts from PostgreSQL's newest posts (which include
            // these, committed). Another job may create it first; pushing afterwards covers both.
            let newest = posts::newest_ids_in_courses(txn, &[course_id], self.config.cap as i64).await?;
            if self.lists.fill(&list, "", CELEBRITY_SENTINEL, None, &newest).await? {
                tracing::info!(course_id, members = members.len(), "course became a celebrity: no more fan-out");
            }
            self.lists.push(&[(list, post_ids)]).await?;
            report.celebrity_posts += post_ids.len();
            return Ok(());
        }
        let pushes: Vec<(String, &[i64])> = members.iter().map(|m| (self.keys.timeline(m.user_id), post_ids)).collect();
        let pushed = self.lists.push(&pushes).await?;
        let landed = pushed.iter().filter(|p| **p).count();
        report.timelines_pushed += landed;
        report.timelines_skipped += pushed.len() - landed;
        Ok(())
    }

    /// Steps every `FEED_FANOUT_INTERVAL` (at once again after a full batch) until `shutdown`
    /// turns true. A step in flight finishes; an abandoned one rolls back and is replayed.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        while !*shutdown.borrow() {
            let pause = match self.process_one_batch().await {
                Ok(report) if report.posts >= self.config.fanout_batch => Duration::ZERO,
                Ok(_) => {
                    backoff.reset();
                    self.config.fanout_interval
                }
                Err(err) => {
                    let pause = backoff.failed();
                    tracing::warn!(error = %err, retry_in = ?pause, "feed fan-out failed; its posts stay in the outbox");
                    pause
                }
            };
            pause_unless_shutdown(pause, &mut shutdown).await;
        }
        tracing::info!("feed fan-out stopped");
    }
}
