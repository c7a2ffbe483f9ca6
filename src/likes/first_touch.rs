//! First touches read together: the users whose first buffered like on this instance arrives
//! while another first touch is being read share the next statement.
//!
//! A first touch (`graphql::access`) needs the user's memberships and their likes in one
//! course, read in one statement with the `xmin` of its snapshot (`buffered::FirstTouch`).
//! Alone, that statement costs PostgreSQL about as much to start (its executor's set-up, the
//! round trip) as to run; a storm of new users pays the start once per like. Here at most
//! `MAX_IN_FLIGHT` such statements run at once; a first touch that finds them all busy waits
//! for the next, which reads every waiting (user, course) pair, up to `MAX_BATCH`, in ONE
//! statement. Nobody waits while fewer are in flight: a lone first touch runs at once, as
//! before, and batches form only when first touches arrive faster than PostgreSQL answers.
//!
//! What a batched read returns is what each user's own statement would have: one snapshot
//! for all of them, so one `xmin` (it bounds the applies the rows may predate, for every set
//! loaded from them). A statement that fails fails every waiter with the same error (so an
//! unreachable database is still UNAVAILABLE, or an unverified buffered like, for each).
//! Each waiter is charged one statement of its request's budget, as before.
//!
//! A batch runs in a task of its own: a waiter whose request is abandoned (deadline, client
//! gone) stops waiting, and the others still get their answers. The statements run on a pool
//! of their own, with generic plans (`db::connect_first_touch` says why).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use sea_orm::{DatabaseConnection, DbErr, FromQueryResult};
use tokio::sync::oneshot;

use super::buffered::FirstTouch;
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::hooks::Gate;

/// First-touch statements running at once; a first touch arriving when all are busy waits
/// for the next batch.
pub(crate) const MAX_IN_FLIGHT: usize = 2;
/// Most (user, course) pairs one statement reads.
pub(crate) const MAX_BATCH: usize = 64;

/// Memberships of the users in `$1`, and each (user `$1[i]`, course `$2[i]`) pair's likes in
/// that course, with the snapshot's `xmin` in a row of its own. `part`: 0 the xmin (in
/// `text`), 1 a membership (`text` the role), 2 a liked post, 3 a liked comment or reply (`id`
/// the target, `course_id` the pair's course). The likes are read per pair, from the
/// (user_id, course_id, target) indexes of the like tables alone (migration 0021: no post or
/// comment row is visited; `OFFSET 0` keeps each lookup a nested one, whatever the arrays'
/// sizes).
const BATCH_SQL: &str = "\
    SELECT 0::int8 AS user_id, 0::int8 AS course_id, 0 AS part, NULL::int8 AS id, \
           pg_snapshot_xmin(pg_current_snapshot())::text AS text \
    UNION ALL \
    SELECT m.user_id, m.course_id, 1, NULL, m.role FROM course_members m WHERE m.user_id = ANY($1) \
    UNION ALL \
    SELECT r.u, r.c, 2, x.post_id, NULL FROM unnest($1::int8[], $2::int8[]) r(u, c) CROSS JOIN LATERAL \
      (SELECT l.post_id FROM post_likes l WHERE l.user_id = r.u AND l.course_id = r.c OFFSET 0) x \
    UNION ALL \
    SELECT r.u, r.c, 3, x.comment_id, NULL FROM unnest($1::int8[], $2::int8[]) r(u, c) CROSS JOIN LATERAL \
      (SELECT l.comment_id FROM comment_likes l WHERE l.user_id = r.u AND l.course_id = r.c OFFSET 0) x";

/// One waiting first touch.
struct Waiter {
    user_id: i64,
    course_id: i64,
    answer: oneshot::Sender<Result<FirstTouch, DbErr>>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
    in_flight: usize,
}

/// The first-touch reads of one process (`likes::Likes::first_touch`).
pub struct FirstTouches {
    db: DatabaseConnection,
    queue: Mutex<Queue>,
    /// Test hook: passed by every batch before its statement (its `reached` counts them).
    pub before_statement: Arc<Gate>,
}

impl FirstTouches {
    pub(crate) fn new(db: DatabaseConnection) -> Arc<Self> {
        Arc::new(Self { db, queue: Mutex::default(), before_statement: Arc::new(Gate::default()) })
    }

    /// First touches waiting for a statement (all in flight are busy).
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The user's memberships (every course) and their likes in `course_id`, read in a
    /// statement shared with the first touches waiting beside it.
    pub(crate) async fn read(self: &Arc<Self>, user_id: i64, course_id: i64) -> AppResult<FirstTouch> {
        let (answer, answered) = oneshot::channel();
        let batch = {
            let mut queue = self.lock();
            queue.waiting.push(Waiter { user_id, course_id, answer });
            if queue.in_flight < MAX_IN_FLIGHT {
                queue.in_flight += 1;
                Some(take_batch(&mut queue.waiting))
            } else {
                None
            }
        };
        if let Some(batch) = batch {
            tokio::spawn(self.clone().run(batch));
        }
        crate::db::budget::charge_current();
        match answered.await {
            Ok(read) => read.map_err(AppError::from),
            Err(_) => Err(AppError::Internal("a first-touch read ended without an answer".into())),
        }
    }

    /// Reads `batch`, answers it, then the batches that queued meanwhile, until none waits.
    async fn run(self: Arc<Self>, mut batch: Vec<Waiter>) {
        let mut slot = Slot { touches: &self, released: false };
        loop {
            self.before_statement.pass().await;
            answer(batch, &self.db).await;
            let mut queue = self.lock();
            if queue.waiting.is_empty() {
                // Under the same lock as the check: a first touch queued after it finds the slot free.
                queue.in_flight -= 1;
                slot.released = true;
                return;
            }
            batch = take_batch(&mut queue.waiting);
        }
    }
}

/// A statement slot held by a running batch. Given back by the batch when nothing waits;
/// given back here if the batch ended otherwise (a panic), so the slot is not lost: the next
/// first touch then serves whoever waited.
struct Slot<'a> {
    touches: &'a FirstTouches,
    released: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.released {
            self.touches.lock().in_flight -= 1;
        }
    }
}

/// The oldest `MAX_BATCH` waiters (all of them, usually).
fn take_batch(waiting: &mut Vec<Waiter>) -> Vec<Waiter> {
    let n = waiting.len().min(MAX_BATCH);
    waiting.drain(..n).collect()
}

/// Runs one statement for `batch` and answers every waiter (a waiter gone is skipped).
async fn answer(batch: Vec<Waiter>, db: &DatabaseConnection) {
    let pairs: BTreeSet<(i64, i64)> = batch.iter().map(|w| (w.user_id, w.course_id)).collect();
    match read_pairs(db, &pairs).await {
        Ok(read) => {
            for waiter in batch {
                let roles = read.roles.get(&waiter.user_id).cloned().unwrap_or_default();
                let members = read.members.get(&(waiter.user_id, waiter.course_id)).cloned().unwrap_or_default();
                let _ = waiter.answer.send(Ok(FirstTouch { roles, members, xmin: read.xmin.clone() }));
            }
        }
        Err(err) => {
            for waiter in batch {
                let _ = waiter.answer.send(Err(err.clone()));
            }
        }
    }
}

/// What one statement read for its pairs.
struct PairsRead {
    roles: BTreeMap<i64, Vec<(i64, String)>>,
    members: BTreeMap<(i64, i64), Vec<String>>,
    xmin: String,
}

async fn read_pairs(db: &DatabaseConnection, pairs: &BTreeSet<(i64, i64)>) -> Result<PairsRead, DbErr> {
    #[derive(FromQueryResult)]
    struct Row {
        user_id: i64,
        course_id: i64,
        part: i32,
        id: Option<i64>,
        text: Option<String>,
    }
    let users: Vec<i64> = pairs.iter().map(|(user, _)| *user).collect();
    let courses: Vec<i64> = pairs.iter().map(|(_, course)| *course).collect();
    let rows = Row::find_by_statement(stmt(BATCH_SQL, [users.into(), courses.into()])).all(db).await?;
    let mut read = PairsRead { roles: BTreeMap::new(), members: BTreeMap::new(), xmin: String::new() };
    for row in rows {
        let member = match (row.part, row.id, row.text) {
            (0, _, Some(xmin)) => {
                read.xmin = xmin;
                continue;
            }
            (1, _, Some(role)) => {
                // `ANY($1)` matches each row once, however often its user is named.
                read.roles.entry(row.user_id).or_default().push((row.course_id, role));
                continue;
            }
            (2, Some(post), _) => format!("p:{post}"),
            (3, Some(comment), _) => format!("c:{comment}"),
            (part, ..) => return Err(DbErr::Custom(format!("unexpected first-touch row (part {part})"))),
        };
        read.members.entry((row.user_id, row.course_id)).or_default().push(member);
    }
    if read.xmin.is_empty() {
        return Err(DbErr::Custom("the first-touch statement returned no xmin".into()));
    }
    Ok(read)
}
