//! `course-forum check`: the invariants that must hold on a healthy system, each verified and
//! reported in one line, so an operator (or a cron job, by the exit status) learns what is
//! wrong and where to look.
//!
//! 1. Every counter equals its rows: `like_count` of posts and of comments equals their like
//!    rows; a live post's `comment_count` equals its live comments and replies; a live root
//!    comment's `reply_count` equals its live replies. Each is one statement (a consistent
//!    snapshot; rows and counters always change in one transaction). In `recount` mode targets
//!    awaiting their recount are skipped: their counter is late by design.
//! 2. No dead letters wait in `<p>:likes:dead`.
//! 3. The like lag is under the bound: the oldest unapplied like of every shard is younger
//!    than `--max-lag`, and every non-empty stream has its consumer group.
//! 4. Every loaded liked-set whose (user, course) has nothing pending holds exactly the user's
//!    like rows in the course (`super::liked_sets`; `reset-like-cache` repairs the sets).
//!
//! The check reads only; `course-forum reconcile` repairs counters.

use std::fmt;
use std::time::Duration;

use sea_orm::{DatabaseConnection, FromQueryResult};

use super::{liked_sets, streams};
use crate::db::stmt;
use crate::error::AppResult;
use crate::kv::Redis;
use crate::kv::keys::Keys;
use crate::likes::LikeTarget;

/// Disagreeing rows shown per failed counter check.
const SHOWN: i64 = 10;

/// One verified invariant.
#[derive(Clone, Debug)]
pub struct Finding {
    pub ok: bool,
    pub name: &'static str,
    pub detail: String,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.findings.iter().filter(|f| !f.ok).count()
    }

    fn push(&mut self, ok: bool, name: &'static str, detail: String) {
        self.findings.push(Finding { ok, name, detail });
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for finding in &self.findings {
            writeln!(f, "{:<4}  {}: {}", if finding.ok { "ok" } else { "FAIL" }, finding.name, finding.detail)?;
        }
        let failed = self.failed();
        if failed == 0 {
            writeln!(f, "check: all {} checks passed", self.findings.len())
        } else {
            writeln!(f, "check: {failed} of {} checks FAILED", self.findings.len())
        }
    }
}

/// Which targets awaiting a recount a counter check skips.
#[derive(Clone, Copy)]
enum Skip {
    Posts,
    Comments,
    Nothing,
}

/// A counter and the rows it counts: (name, what the rows are, what to skip, SQL). Each
/// statement takes `$1`, ids to skip, and returns the disagreeing rows (`id`, `counter`,
/// `actual`).
const COUNTERS: &[(&str, &str, Skip, &str)] = &[
    (
        "post like counters",
        "like rows",
        Skip::Posts,
        "SELECT t.id, t.like_count::bigint AS counter, count(l.user_id) AS actual \
         FROM posts t LEFT JOIN post_likes l ON l.post_id = t.id \
         WHERE t.id <> ALL($1::bigint[]) GROUP BY t.id HAVING t.like_count <> count(l.user_id)",
    ),
    (
        "comment like counters",
        "like rows",
        Skip::Comments,
        "SELECT t.id, t.like_count::bigint AS counter, count(l.user_id) AS actual \
         FROM comments t LEFT JOIN comment_likes l ON l.comment_id = t.id \
         WHERE t.id <> ALL($1::bigint[]) GROUP BY t.id HAVING t.like_count <> count(l.user_id)",
    ),
    (
        "post comment counters",
        "live comments and replies",
        Skip::Nothing,
        "SELECT t.id, t.comment_count::bigint AS counter, count(c.id) AS actual \
         FROM posts t LEFT JOIN comments c ON c.post_id = t.id AND c.deleted_at IS NULL \
         WHERE t.deleted_at IS NULL AND t.id <> ALL($1::bigint[]) \
         GROUP BY t.id HAVING t.comment_count <> count(c.id)",
    ),
    (
        "comment reply counters",
        "live replies",
        Skip::Nothing,
        "SELECT t.id, t.reply_count::bigint AS counter, count(r.id) AS actual \
         FROM comments t LEFT JOIN comments r ON r.parent_id = t.id AND r.deleted_at IS NULL \
         WHERE t.parent_id IS NULL AND t.deleted_at IS NULL AND t.id <> ALL($1::bigint[]) \
         GROUP BY t.id HAVING t.reply_count <> count(r.id)",
    ),
];

#[derive(FromQueryResult)]
struct Wrong {
    id: i64,
    counter: i64,
    actual: i64,
    total: i64,
}

/// Runs every check. Errors only when PostgreSQL or Redis cannot be read.
pub async fn run(db: &DatabaseConnection, redis: &Redis, keys: &Keys, max_lag: Duration) -> AppResult<Report> {
    let mut report = Report::default();
    let (skip_posts, skip_comments) = awaiting_recount(redis, keys).await?;
    for (name, rows, skip, sql) in COUNTERS {
        let skip = match skip {
            Skip::Posts => skip_posts.clone(),
            Skip::Comments => skip_comments.clone(),
            Skip::Nothing => Vec::new(),
        };
        let wrong = Wrong::find_by_statement(stmt(
            &format!(
                "WITH wrong AS ({sql}) SELECT id, counter, actual, count(*) OVER () AS total \
                 FROM wrong ORDER BY id LIMIT {SHOWN}"
            ),
            [skip.into()],
        ))
        .all(db)
        .await?;
        match wrong.first().map(|w| w.total) {
            None => report.push(true, name, format!("every counter equals its {rows}")),
            Some(total) => {
                let shown: Vec<String> =
                    wrong.iter().map(|w| format!("id {} counts {} but has {}", w.id, w.counter, w.actual)).collect();
                report.push(
                    false,
                    name,
                    format!(
                        "{total} disagree with their {rows} ({}{}); `course-forum reconcile` repairs like counters",
                        shown.join(", "),
                        if total > SHOWN { ", …" } else { "" }
                    ),
                );
            }
        }
    }
    if !skip_posts.is_empty() || !skip_comments.is_empty() {
        report.push(
            true,
            "recount",
            format!("{} target(s) await their recount and were skipped", skip_posts.len() + skip_comments.len()),
        );
    }

    let status = streams::status(redis, keys).await?;
    if status.dead_letters == 0 {
        report.push(true, "dead letters", "none waiting".into());
    } else {
        report.push(
            false,
            "dead letters",
            format!(
                "{} waiting in {} (XRANGE {} - + COUNT 10 shows them with their error)",
                status.dead_letters,
                keys.dead_letters(),
                keys.dead_letters()
            ),
        );
    }
    let mut late = Vec::new();
    for shard in &status.shards {
        if shard.entries > 0 && !shard.group {
            late.push(format!(
                "shard {} has {} likes and no consumer group (no worker ever ran)",
                shard.shard, shard.entries
            ));
        } else if shard.oldest_age() > max_lag {
            late.push(format!(
                "shard {}: oldest unapplied like is {:.1} s old, {} waiting ({} pending), lease {}",
                shard.shard,
                shard.oldest_age().as_secs_f64(),
                shard.entries,
                shard.pending,
                shard.lease_holder.as_deref().unwrap_or("held by nobody")
            ));
        }
    }
    let waiting: u64 = status.shards.iter().map(|s| s.entries).sum();
    let oldest = status.shards.iter().map(|s| s.oldest_age()).max().unwrap_or_default();
    if late.is_empty() {
        report.push(
            true,
            "like lag",
            format!(
                "{waiting} unapplied like(s) in {} shard(s), oldest {:.1} s (bound {:.0} s)",
                status.shards.len(),
                oldest.as_secs_f64(),
                max_lag.as_secs_f64()
            ),
        );
    } else {
        report.push(false, "like lag", format!("over {:.0} s: {}", max_lag.as_secs_f64(), late.join("; ")));
    }
    let audit = liked_sets::audit(db, redis, keys).await?;
    if !audit.orphans.is_empty() {
        let shown: Vec<String> = audit
            .orphans
            .iter()
            .take(SHOWN as usize)
            .map(|(user, course, member)| format!("user {user} course {course} {member}"))
            .collect();
        report.push(
            false,
            "pending records",
            format!(
                "{} record(s) of events no longer in their stream ({}); `course-forum reset-like-cache` removes them",
                audit.orphans.len(),
                shown.join(", ")
            ),
        );
    }
    if audit.wrong.is_empty() {
        report.push(
            true,
            "liked-sets",
            format!(
                "{} loaded set(s) agree with PostgreSQL; {} with pending events skipped{}",
                audit.compared,
                audit.pending,
                if audit.compared + audit.pending >= liked_sets::AUDITED_AT_MOST { " (a sample)" } else { "" }
            ),
        );
    } else {
        let shown: Vec<String> = audit
            .wrong
            .iter()
            .take(SHOWN as usize)
            .map(|(user, course, set, rows)| {
                let extra: Vec<&String> = set.difference(rows).collect();
                let missing: Vec<&String> = rows.difference(set).collect();
                format!("user {user} course {course}: set has {extra:?} not in PostgreSQL, lacks {missing:?}")
            })
            .collect();
        report.push(
            false,
            "liked-sets",
            format!(
                "{} set(s) disagree with PostgreSQL with nothing pending ({}); `course-forum reset-like-cache` drops them",
                audit.wrong.len(),
                shown.join("; ")
            ),
        );
    }
    Ok(report)
}

/// Posts and comments marked dirty for the recount job (level 2).
async fn awaiting_recount(redis: &Redis, keys: &Keys) -> AppResult<(Vec<i64>, Vec<i64>)> {
    let mut conn = redis.clone();
    let marked: Vec<String> =
        redis::cmd("ZRANGE").arg(keys.recount_dirty()).arg(0).arg(-1).query_async(&mut conn).await?;
    let mut posts = Vec::new();
    let mut comments = Vec::new();
    for target in marked.iter().filter_map(|m| LikeTarget::parse_member(m)) {
        match target {
            LikeTarget::Post(id) => posts.push(id),
            LikeTarget::Comment(id) => comments.push(id),
        }
    }
    Ok((posts, comments))
}
