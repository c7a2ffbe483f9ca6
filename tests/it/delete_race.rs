//! Racing deletes. Each round builds a fresh thread (post, root comment, replies) and fires the
//! competing operations at once — separate HTTP requests (so separate server tasks and
//! transactions) or, for the like worker's batch, a transaction of its own — with no sleeps
//! anywhere. Then it checks that nothing failed except with NOT_FOUND for a target another
//! operation had already removed, that everything meant to be deleted is deleted, and that the
//! counters the writes maintain (`posts.comment_count`, `comments.reply_count`, `like_count`)
//! equal the live rows they count.
//!
//! Regression: a reply deleted together with its root used to deadlock (SQLSTATE 40P01), the
//! reply's delete holding the reply and waiting for the root (its `reply_count`), the root's
//! delete holding the root and waiting for the reply (deleted with it); and a comment's delete
//! (comments, then the post's counter) deadlocked with a like batch (the post, then comments).
//! The loser answered INTERNAL; every test here failed within its first three rounds. Every
//! writer now locks the post first, then comment rows in id order.

use course_forum::testing::like_event::LikeEvent;
use course_forum::testing::likes::LikeTarget;
use course_forum::testing::likes::apply::apply;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, join_all};
use sea_orm::TransactionTrait;
use serde_json::{Value as Json, json};

use crate::common::{TestApp, World, error_code, gid};

/// Rounds per test: on the old lock order the first deadlock came within a few rounds.
const ROUNDS: usize = 40;
/// Replies under each racing root.
const REPLIES: usize = 3;

const CREATE_REPLY: &str = "mutation($c: ID!) { createReply(commentId: $c, body: \"racing\") { id } }";
const DELETE_COMMENT: &str = "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId } }";
const DELETE_POST: &str = "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }";

/// One racing operation: what it was, and its whole response.
type Race<'a> = BoxFuture<'a, (String, Json)>;

fn delete_comment<'a>(app: &'a TestApp, token: &'a str, target: String) -> Race<'a> {
    async move {
        let response = app.gql(Some(token), DELETE_COMMENT, json!({ "c": target })).await;
        (format!("deleteComment({target})"), response)
    }
    .boxed()
}

fn delete_post<'a>(app: &'a TestApp, token: &'a str, post: i64) -> Race<'a> {
    async move {
        let response = app.gql(Some(token), DELETE_POST, json!({ "p": gid("Post", post) })).await;
        (format!("deletePost({post})"), response)
    }
    .boxed()
}

fn reply_to<'a>(app: &'a TestApp, token: &'a str, target: String) -> Race<'a> {
    async move {
        let response = app.gql(Some(token), CREATE_REPLY, json!({ "c": target })).await;
        (format!("createReply({target})"), response)
    }
    .boxed()
}

/// Fires every operation at once; returns the responses, checking each either succeeded or, if
/// `may_miss` allows it, was NOT_FOUND (its target removed first). Anything else — INTERNAL
/// above all, what a deadlock looks like to a user — fails the test with the round.
/// The operations start in a different order each round (`join_all` sends them in order), so
/// no one of them always has the head start. The answer is in the order given.
async fn race(round: usize, mut ops: Vec<(bool, Race<'_>)>) -> Vec<bool> {
    let shift = round % ops.len();
    ops.rotate_left(shift);
    let (may_miss, futures): (Vec<bool>, Vec<Race<'_>>) = ops.into_iter().unzip();
    let outcomes = join_all(futures).await;
    let mut succeeded: Vec<bool> = outcomes
        .into_iter()
        .zip(may_miss)
        .map(|((what, response), may_miss)| {
            if response.get("errors").is_none() {
                return true;
            }
            let code = error_code(&response);
            assert!(
                may_miss && code.as_deref() == Some("NOT_FOUND"),
                "round {round}: {what} failed with {code:?}: {response}"
            );
            false
        })
        .collect();
    succeeded.rotate_right(shift);
    succeeded
}

async fn is_deleted(app: &TestApp, table: &str, id: i64) -> bool {
    app.scalar_i64(
        &format!("SELECT (deleted_at IS NOT NULL)::int::bigint AS v FROM {table} WHERE id = $1"),
        [id.into()],
    )
    .await
        == 1
}

/// The counters equal the rows, for every post and comment in the database: a post's
/// `comment_count` is its live comments and replies (also on a deleted post, whose rows stay),
/// a live root's `reply_count` its live replies, a `like_count` its like rows; no live reply
/// hangs under a deleted root.
async fn assert_counters_match_rows(app: &TestApp, round: usize) {
    let checks = [
        (
            "posts whose comment_count is not their live comments",
            "SELECT count(*) AS v FROM posts p WHERE p.comment_count <> \
               (SELECT count(*) FROM comments c WHERE c.post_id = p.id AND c.deleted_at IS NULL)",
        ),
        (
            "live roots whose reply_count is not their live replies",
            "SELECT count(*) AS v FROM comments r WHERE r.parent_id IS NULL AND r.deleted_at IS NULL \
               AND r.reply_count <> (SELECT count(*) FROM comments c WHERE c.parent_id = r.id AND c.deleted_at IS NULL)",
        ),
        (
            "live replies under a deleted root",
            "SELECT count(*) AS v FROM comments c JOIN comments r ON r.id = c.parent_id \
             WHERE c.deleted_at IS NULL AND r.deleted_at IS NOT NULL",
        ),
        (
            "posts whose like_count is not their like rows",
            "SELECT count(*) AS v FROM posts p \
             WHERE p.like_count <> (SELECT count(*) FROM post_likes l WHERE l.post_id = p.id)",
        ),
        (
            "comments whose like_count is not their like rows",
            "SELECT count(*) AS v FROM comments c \
             WHERE c.like_count <> (SELECT count(*) FROM comment_likes l WHERE l.comment_id = c.id)",
        ),
    ];
    for (what, sql) in checks {
        assert_eq!(app.scalar_i64(sql, []).await, 0, "round {round}: {what}");
    }
}

/// A root comment with `REPLIES` replies (alternating authors, the later ones answering the
/// reply before them, so some are replies to replies). Returns (root, replies).
async fn thread(app: &TestApp, tokens: [&str; 2], post: i64) -> (i64, Vec<i64>) {
    let root = app.create_comment(tokens[0], post, "root").await;
    let mut replies = Vec::new();
    for i in 0..REPLIES {
        let target = match replies.last() {
            Some(&last) if i % 2 == 1 => gid("Reply", last),
            _ => gid("Comment", root),
        };
        replies.push(app.create_reply(tokens[(i + 1) % 2], &target, "reply").await);
    }
    (root, replies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_replies_and_their_root_at_once_never_deadlocks() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let (alice, bob, prof) = (app.token(world.alice), app.token(world.bob), app.token(world.instructor));
    let mut reply_deletes_won = 0;
    for round in 0..ROUNDS {
        let post = app.create_post(&alice, world.course, "race").await;
        // A sibling thread nobody deletes, so the counters have something left to agree on.
        let (kept_root, kept_replies) = thread(&app, [&bob, &alice], post).await;
        let (root, replies) = thread(&app, [&bob, &alice], post).await;

        // The root's delete (by the instructor) against each reply's delete (by its author).
        let mut ops = vec![(false, delete_comment(&app, &prof, gid("Comment", root)))];
        for (i, &reply) in replies.iter().enumerate() {
            let author = if i % 2 == 0 { &alice } else { &bob };
            // NOT_FOUND is right when the root's delete took the reply first.
            ops.push((true, delete_comment(&app, author, gid("Reply", reply))));
        }
        let won = race(round, ops).await;
        reply_deletes_won += won[1..].iter().filter(|w| **w).count();

        for id in std::iter::once(root).chain(replies) {
            assert!(is_deleted(&app, "comments", id).await, "round {round}: comment {id} survived");
        }
        for id in std::iter::once(kept_root).chain(kept_replies.iter().copied()) {
            assert!(!is_deleted(&app, "comments", id).await, "round {round}: comment {id} was not to be deleted");
        }
        let count = app.scalar_i64("SELECT comment_count::bigint AS v FROM posts WHERE id = $1", [post.into()]).await;
        assert_eq!(count, 1 + REPLIES as i64, "round {round}: only the kept thread is left");
        assert_counters_match_rows(&app, round).await;
    }
    // Not asserted (it is up to the scheduler), but shown: how often a reply's delete came first.
    eprintln!("reply deletes that won against their root's delete: {reply_deletes_won}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_post_while_its_comments_and_replies_are_deleted_never_deadlocks() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let (alice, bob, prof) = (app.token(world.alice), app.token(world.bob), app.token(world.instructor));
    for round in 0..ROUNDS {
        let post = app.create_post(&alice, world.course, "race").await;
        let (root, replies) = thread(&app, [&bob, &alice], post).await;
        let other_root = app.create_comment(&alice, post, "root").await;

        // The post's delete (by its author) against the root's (instructor), every reply's and
        // the other root's. Once the post is gone its comments are NOT_FOUND.
        let mut ops = vec![
            (false, delete_post(&app, &alice, post)),
            (true, delete_comment(&app, &prof, gid("Comment", root))),
            (true, delete_comment(&app, &alice, gid("Comment", other_root))),
        ];
        for &reply in &replies {
            ops.push((true, delete_comment(&app, &prof, gid("Reply", reply))));
        }
        race(round, ops).await;

        assert!(is_deleted(&app, "posts", post).await, "round {round}: the post survived");
        let response =
            app.gql(Some(&alice), "query($id: ID!) { post(id: $id) { id } }", json!({ "id": gid("Post", post) })).await;
        assert!(response["data"]["post"].is_null(), "round {round}: the deleted post is still served: {response}");
        assert_counters_match_rows(&app, round).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replies_created_while_their_root_and_siblings_are_deleted_never_deadlock() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let (alice, bob, prof) = (app.token(world.alice), app.token(world.bob), app.token(world.instructor));
    for round in 0..ROUNDS {
        let post = app.create_post(&alice, world.course, "race").await;
        let (root, replies) = thread(&app, [&bob, &alice], post).await;

        // New replies (to the root and to a reply) race the root's and the replies' deletes:
        // each new reply lands before the root's delete (and goes with it) or is NOT_FOUND.
        let mut ops = vec![
            (false, delete_comment(&app, &prof, gid("Comment", root))),
            (true, reply_to(&app, &alice, gid("Comment", root))),
            (true, reply_to(&app, &bob, gid("Reply", replies[0]))),
            (true, reply_to(&app, &alice, gid("Comment", root))),
        ];
        for &reply in &replies {
            ops.push((true, delete_comment(&app, &prof, gid("Reply", reply))));
        }
        race(round, ops).await;

        let live = app
            .scalar_i64("SELECT count(*) AS v FROM comments WHERE post_id = $1 AND deleted_at IS NULL", [post.into()])
            .await;
        assert_eq!(live, 0, "round {round}: every comment of the thread went with its root");
        assert_counters_match_rows(&app, round).await;
    }
}

/// The like worker's batch (`likes::apply`) locks posts, then comments, each in id order; a
/// root's delete racing a batch that likes the post, the root and its replies must queue
/// behind it or ahead of it, never deadlock with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_like_batch_racing_comment_deletes_never_deadlocks() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let (alice, bob, prof) = (app.token(world.alice), app.token(world.bob), app.token(world.instructor));
    for round in 0..ROUNDS {
        let post = app.create_post(&alice, world.course, "race").await;
        let (root, replies) = thread(&app, [&bob, &alice], post).await;

        let mut events = Vec::new();
        for user_id in [world.alice, world.bob] {
            let targets = [LikeTarget::Post(post), LikeTarget::Comment(root)]
                .into_iter()
                .chain(replies.iter().map(|&r| LikeTarget::Comment(r)));
            events.extend(targets.map(|target| LikeEvent { target, user_id, course_id: world.course, liked: true }));
        }
        let db = app.db.clone();
        let batch: Race<'static> = async move {
            let result = async {
                let txn = db.begin().await?;
                apply(&txn, &events).await?;
                txn.commit().await?;
                Ok::<_, course_forum::testing::error::AppError>(())
            }
            .await;
            let response = match result {
                Ok(()) => json!({ "data": "applied" }),
                Err(e) => json!({ "errors": [{ "message": e.to_string(), "sqlstate": e.sqlstate() }] }),
            };
            ("like batch".to_owned(), response)
        }
        .boxed();
        let mut ops = vec![(false, batch), (false, delete_comment(&app, &prof, gid("Comment", root)))];
        // And the last reply deleted by its own author at the same time.
        ops.push((true, delete_comment(&app, &alice, gid("Reply", *replies.last().expect("replies")))));
        race(round, ops).await;

        for id in std::iter::once(root).chain(replies) {
            assert!(is_deleted(&app, "comments", id).await, "round {round}: comment {id} survived");
        }
        let post_likes = app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE post_id = $1", [post.into()]).await;
        assert_eq!(post_likes, 2, "round {round}: both likes of the live post landed");
        assert_counters_match_rows(&app, round).await;
    }
}
