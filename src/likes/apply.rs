//! Level 3, the PostgreSQL side: applying a batch of like events in ONE transaction with
//! array-parameter SQL. Events are first collapsed to the last op per (target, user, course);
//! JOINs drop (refuse) events whose target is deleted or belongs to another course than the
//! event claims (Redis cannot know that `p:3` is another course's post), and events whose user
//! is not a member of the course at apply time (the second fence behind the API's access
//! check, which is what lets the API accept likes while PostgreSQL is unreachable); counters
//! move only by the rows RETURNING reports, so replaying a batch changes nothing.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::{CountChange, LikeEvent, LikeTarget};
use crate::db::stmt;
use crate::error::AppResult;

/// Keeps only the last op of each (target, user, course), in order of last appearance.
pub(crate) fn collapse(events: impl IntoIterator<Item = LikeEvent>) -> Vec<LikeEvent> {
    let mut last: HashMap<(LikeTarget, i64, i64), (usize, LikeEvent)> = HashMap::new();
    for (position, event) in events.into_iter().enumerate() {
        last.insert((event.target, event.user_id, event.course_id), (position, event));
    }
    let mut kept: Vec<(usize, LikeEvent)> = last.into_values().collect();
    kept.sort_by_key(|(position, _)| *position);
    kept.into_iter().map(|(_, event)| event).collect()
}

/// One row of the apply statement: a changed counter, or a refused event's (user, course).
#[derive(FromQueryResult)]
struct ApplyRow {
    id: Option<i64>,
    like_count: Option<i32>,
    like_version: Option<i64>,
    refused_user: Option<i64>,
    refused_course: Option<i64>,
}

/// What a batch did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Every target whose counter changed, with its new count (visible once committed).
    pub changed: Vec<CountChange>,
    /// (user, course) of every event the fences refused: a deleted or foreign target, or a user
    /// who is not a member. Their liked-sets said something PostgreSQL did not take, so the
    /// worker drops those sets after COMMIT and they reload the truth.
    pub refused: Vec<(i64, i64)>,
    /// The id of the batch's transaction (`pg_current_xact_id()`), which the retire stamps on
    /// the load generations (`lua/load_stamp.lua`); set by the worker.
    pub xid: String,
}

/// Applies collapsed events inside the caller's transaction.
pub async fn apply(txn: &impl ConnectionTrait, events: &[LikeEvent]) -> AppResult<Applied> {
    let mut applied = Applied::default();
    for kind in [Kind::Post, Kind::Comment] {
        let of_kind: Vec<(i64, &LikeEvent)> = events
            .iter()
            .filter_map(|e| match (kind, e.target) {
                (Kind::Post, LikeTarget::Post(id)) | (Kind::Comment, LikeTarget::Comment(id)) => Some((id, e)),
                _ => None,
            })
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let mut target_ids: Vec<i64> = of_kind.iter().map(|(id, _)| *id).collect();
        let user_ids: Vec<i64> = of_kind.iter().map(|(_, e)| e.user_id).collect();
        let course_ids: Vec<i64> = of_kind.iter().map(|(_, e)| e.course_id).collect();
        let liked: Vec<bool> = of_kind.iter().map(|(_, e)| e.liked).collect();
        let values = vec![target_ids.clone().into(), user_ids.into(), course_ids.into(), liked.into()];
        // Lock the counter rows in id order first: several shard workers may touch the same
        // hot post, and a fixed lock order means they queue instead of deadlocking.
        target_ids.sort_unstable();
        target_ids.dedup();
        txn.execute_raw(stmt(kind.lock_sql(), [target_ids.into()])).await?;
        for row in ApplyRow::find_by_statement(stmt(kind.apply_sql(), values)).all(txn).await? {
            match row {
                ApplyRow { id: Some(id), like_count: Some(like_count), like_version: Some(version), .. } => {
                    applied.changed.push(CountChange { target: kind.target(id), like_count, version })
                }
                ApplyRow { refused_user: Some(user), refused_course: Some(course), .. } => {
                    applied.refused.push((user, course))
                }
                _ => {}
            }
        }
    }
    applied.refused.sort_unstable();
    applied.refused.dedup();
    Ok(applied)
}

#[derive(Clone, Copy)]
enum Kind {
    Post,
    Comment,
}

impl Kind {
    fn target(self, id: i64) -> LikeTarget {
        match self {
            Kind::Post => LikeTarget::Post(id),
            Kind::Comment => LikeTarget::Comment(id),
        }
    }

    fn lock_sql(self) -> &'static str {
        match self {
            Kind::Post => "SELECT id FROM posts WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            Kind::Comment => "SELECT id FROM comments WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        }
    }

    /// $1 target ids, $2 user ids, $3 course ids, $4 liked flags (parallel arrays; one event per
    /// (target, user) after `collapse`). Rows: the changed counters, then the refused events.
    fn apply_sql(self) -> &'static str {
        match self {
            Kind::Post => {
                "WITH input AS ( \
                   SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bool[]) \
                     AS i(target_id, user_id, course_id, liked)), \
                 valid AS ( \
                   SELECT i.* FROM input i \
                   JOIN posts p ON p.id = i.target_id AND p.course_id = i.course_id AND p.deleted_at IS NULL \
                   JOIN course_members m ON m.course_id = i.course_id AND m.user_id = i.user_id), \
                 inserted AS ( \
                   INSERT INTO post_likes (post_id, user_id, course_id) \
                   SELECT target_id, user_id, course_id FROM valid WHERE liked \
                   ON CONFLICT DO NOTHING RETURNING post_id AS target_id), \
                 deleted AS ( \
                   DELETE FROM post_likes l USING valid v \
                   WHERE NOT v.liked AND l.post_id = v.target_id AND l.user_id = v.user_id \
                   RETURNING l.post_id AS target_id), \
                 delta AS ( \
                   SELECT target_id, sum(d)::int AS d FROM ( \
                     SELECT target_id, 1 AS d FROM inserted UNION ALL SELECT target_id, -1 FROM deleted) x \
                   GROUP BY target_id), \
                 updated AS ( \
                   UPDATE posts p SET like_count = p.like_count + delta.d, like_version = p.like_version + 1 \
                   FROM delta WHERE p.id = delta.target_id AND delta.d <> 0 \
                   RETURNING p.id, p.like_count, p.like_version) \
                 SELECT id, like_count, like_version, NULL::bigint AS refused_user, NULL::bigint AS refused_course \
                 FROM updated \
                 UNION ALL \
                 SELECT NULL, NULL, NULL, i.user_id, i.course_id FROM input i \
                 WHERE NOT EXISTS (SELECT 1 FROM valid v WHERE v.target_id = i.target_id AND v.user_id = i.user_id)"
            }
            Kind::Comment => {
                "WITH input AS ( \
                   SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bool[]) \
                     AS i(target_id, user_id, course_id, liked)), \
                 valid AS ( \
                   SELECT i.* FROM input i \
                   JOIN comments c ON c.id = i.target_id AND c.deleted_at IS NULL \
                   JOIN posts p ON p.id = c.post_id AND p.course_id = i.course_id AND p.deleted_at IS NULL \
                   JOIN course_members m ON m.course_id = i.course_id AND m.user_id = i.user_id), \
                 inserted AS ( \
                   INSERT INTO comment_likes (comment_id, user_id, course_id) \
                   SELECT target_id, user_id, course_id FROM valid WHERE liked \
                   ON CONFLICT DO NOTHING RETURNING comment_id AS target_id), \
                 deleted AS ( \
                   DELETE FROM comment_likes l USING valid v \
                   WHERE NOT v.liked AND l.comment_id = v.target_id AND l.user_id = v.user_id \
                   RETURNING l.comment_id AS target_id), \
                 delta AS ( \
                   SELECT target_id, sum(d)::int AS d FROM ( \
                     SELECT target_id, 1 AS d FROM inserted UNION ALL SELECT target_id, -1 FROM deleted) x \
                   GROUP BY target_id), \
                 updated AS ( \
                   UPDATE comments c SET like_count = c.like_count + delta.d, like_version = c.like_version + 1 \
                   FROM delta WHERE c.id = delta.target_id AND delta.d <> 0 \
                   RETURNING c.id, c.like_count, c.like_version) \
                 SELECT id, like_count, like_version, NULL::bigint AS refused_user, NULL::bigint AS refused_course \
                 FROM updated \
                 UNION ALL \
                 SELECT NULL, NULL, NULL, i.user_id, i.course_id FROM input i \
                 WHERE NOT EXISTS (SELECT 1 FROM valid v WHERE v.target_id = i.target_id AND v.user_id = i.user_id)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(target: LikeTarget, user_id: i64, liked: bool) -> LikeEvent {
        LikeEvent { target, user_id, course_id: 1, liked }
    }

    #[test]
    fn collapse_keeps_the_last_op_per_pair() {
        let events = vec![
            event(LikeTarget::Post(1), 7, true),
            event(LikeTarget::Post(1), 8, true),
            event(LikeTarget::Post(1), 7, false),
            event(LikeTarget::Comment(1), 7, true),
        ];
        let collapsed = collapse(events);
        assert_eq!(
            collapsed,
            vec![
                event(LikeTarget::Post(1), 8, true),
                event(LikeTarget::Post(1), 7, false),
                event(LikeTarget::Comment(1), 7, true)
            ]
        );
    }
}
