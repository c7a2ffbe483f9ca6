//! The in-process title index behind `Course.similarPosts` (`cache::titles`), against real
//! PostgreSQL and Redis: it follows every write made after it was built, on any instance,
//! whatever order their transactions commit in; under racing writes and lookups it answers as
//! an index built afresh does; and a course too big for its share of the cache budget is
//! served by SQL while memory stays within the share.

use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use serde_json::{Value as Json, json};

use crate::common::{TestApp, World, gid, raw_id};

const SIMILAR: &str = "query($c: ID!, $t: String!, $n: Int) { course(id: $c) { \
    similarPosts(text: $t, first: $n) { similarity post { id title resolved } } } }";

async fn create_post(
    app: &TestApp,
    addr: std::net::SocketAddr,
    user: i64,
    course: i64,
    title: &str,
    extra: Json,
) -> i64 {
    let mut vars = json!({ "c": gid("Course", course), "t": title, "k": "DISCUSSION", "pr": false });
    if let (Some(vars), Some(extra)) = (vars.as_object_mut(), extra.as_object()) {
        vars.extend(extra.clone());
    }
    let data = app
        .gql_at(
            addr,
            Some(&app.token(user)),
            "mutation($c: ID!, $t: String!, $k: PostKind!, $pr: Boolean!) { \
             createPost(courseId: $c, title: $t, body: \"body\", kind: $k, anonymous: false, private: $pr) { id } }",
            vars,
        )
        .await;
    assert!(data.get("errors").is_none(), "{data}");
    raw_id(data["data"]["createPost"]["id"].as_str().expect("post id"))
}

/// The ids `similarPosts` suggests to `user` on the instance at `addr`, in order.
async fn suggested_at(app: &TestApp, addr: std::net::SocketAddr, user: i64, course: i64, text: &str) -> Vec<i64> {
    let data = app
        .gql_at(addr, Some(&app.token(user)), SIMILAR, json!({ "c": gid("Course", course), "t": text, "n": 10 }))
        .await;
    assert!(data.get("errors").is_none(), "{text}: {data}");
    data["data"]["course"]["similarPosts"]
        .as_array()
        .expect("list")
        .iter()
        .map(|p| raw_id(p["post"]["id"].as_str().expect("id")))
        .collect()
}

async fn suggested(app: &TestApp, user: i64, course: i64, text: &str) -> Vec<i64> {
    suggested_at(app, app.addr, user, course, text).await
}

async fn mutate(app: &TestApp, user: i64, query: &str, vars: Json) {
    app.gql_ok(Some(&app.token(user)), query, vars).await;
}

const EDIT: &str = "mutation($p: ID!, $t: String!) { editPost(postId: $p, title: $t) { id } }";
const DELETE: &str = "mutation($p: ID!) { deletePost(postId: $p) { deletedId } }";
const RESOLVE: &str = "mutation($p: ID!) { markResolved(postId: $p, resolved: true) { resolved } }";

/// Once a course's index is built (by a first lookup), every later write shows in the next
/// lookup: a post written on another instance, an edited title, a deletion, a resolution, and
/// a private question (for its author and staff only).
#[tokio::test]
async fn the_index_follows_every_write_made_after_it_was_built() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let peer = app.spawn_peer(|_| {}).await;
    let first = create_post(&app, app.addr, w.alice, w.course, "Walrus migration patterns", json!({})).await;
    assert_eq!(suggested(&app, w.bob, w.course, "walrus migration").await, vec![first], "built");

    let elsewhere = create_post(&app, peer.addr, w.bob, w.course, "Walrus migration routes", json!({})).await;
    let found = suggested(&app, w.bob, w.course, "walrus migration").await;
    assert_eq!(found.len(), 2, "the other instance's post: {found:?}");
    assert!(found.contains(&elsewhere));

    mutate(&app, w.alice, EDIT, json!({ "p": gid("Post", first), "t": "Narwhal tusk lengths" })).await;
    assert_eq!(suggested(&app, w.bob, w.course, "walrus migration").await, vec![elsewhere], "the old title");
    assert_eq!(suggested(&app, w.bob, w.course, "narwhal tusks").await, vec![first], "the new title");

    mutate(&app, w.bob, DELETE, json!({ "p": gid("Post", elsewhere) })).await;
    assert!(suggested(&app, w.bob, w.course, "walrus migration").await.is_empty(), "deleted");

    let open = create_post(&app, app.addr, w.alice, w.course, "Narwhal tusk lengths", json!({ "k": "QUESTION" })).await;
    assert_eq!(suggested(&app, w.bob, w.course, "narwhal tusk lengths").await, vec![open, first], "newest first");
    mutate(&app, w.instructor, RESOLVE, json!({ "p": gid("Post", open) })).await;
    let resolved =
        create_post(&app, peer.addr, w.alice, w.course, "Narwhal tusk lengths", json!({ "k": "QUESTION" })).await;
    mutate(&app, w.instructor, RESOLVE, json!({ "p": gid("Post", resolved) })).await;
    assert_eq!(
        suggested(&app, w.bob, w.course, "narwhal tusk lengths").await,
        vec![resolved, open, first],
        "resolved questions first"
    );

    let private =
        create_post(&app, peer.addr, w.alice, w.course, "Walrus diet question", json!({ "pr": true, "k": "QUESTION" }))
            .await;
    assert!(suggested(&app, w.bob, w.course, "walrus diet").await.is_empty(), "a classmate's private question");
    assert_eq!(suggested(&app, w.alice, w.course, "walrus diet").await, vec![private], "its author");
    assert_eq!(suggested(&app, w.instructor, w.course, "walrus diet").await, vec![private], "staff");
    assert!(suggested(&app, w.outsider, w.other_course, "walrus diet").await.is_empty(), "another course");
}

/// A post whose transaction took its id before another's, and commits after it, is not
/// skipped: the index catches up from its last snapshot's oldest running transaction, not
/// from the newest change it saw.
#[tokio::test]
async fn a_post_committed_after_a_newer_one_is_not_missed() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let seen = create_post(&app, app.addr, w.alice, w.course, "Zeppelin hangar doors", json!({})).await;
    assert_eq!(suggested(&app, w.bob, w.course, "zeppelin hangar").await, vec![seen]);

    // The slow transaction takes its id first, the quick one commits a post after that.
    let slow = app.db.begin().await.expect("begin");
    slow.execute_raw(Statement::from_string(DbBackend::Postgres, "SELECT pg_current_xact_id()"))
        .await
        .expect("take a transaction id");
    let quick = create_post(&app, app.addr, w.bob, w.course, "Zeppelin hangar floors", json!({})).await;
    let found = suggested(&app, w.bob, w.course, "zeppelin hangar").await;
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.contains(&quick) && found.contains(&seen));

    // Then the slow one writes its post, stamped with its older id, and commits.
    slow.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO posts (course_id, user_id, title, body) VALUES ($1, $2, 'Zeppelin hangar roofs', 'late')",
        [w.course.into(), w.alice.into()],
    ))
    .await
    .expect("insert in the slow transaction");
    slow.commit().await.expect("commit");
    let late = app.scalar_i64("SELECT id AS v FROM posts WHERE title = 'Zeppelin hangar roofs'", []).await;
    let found = suggested(&app, w.bob, w.course, "zeppelin hangar").await;
    assert_eq!(found.len(), 3, "the late commit: {found:?}");
    assert!(found.contains(&late));
}

/// Two writes of one post, the later one by the transaction that took its id first: the
/// index keeps the later write (its row lock orders them), not the younger transaction's.
#[tokio::test]
async fn the_later_write_of_a_post_wins_whatever_its_transaction_id() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let question = create_post(&app, app.addr, w.alice, w.course, "Walrus tusk care", json!({ "k": "QUESTION" })).await;
    assert_eq!(suggested(&app, w.bob, w.course, "walrus tusk").await, vec![question], "built");

    let older = app.db.begin().await.expect("begin");
    older
        .execute_raw(Statement::from_string(DbBackend::Postgres, "SELECT pg_current_xact_id()"))
        .await
        .expect("take a transaction id");
    // A younger transaction writes the post first (resolves it) and commits; a lookup reads it.
    mutate(&app, w.instructor, RESOLVE, json!({ "p": gid("Post", question) })).await;
    assert_eq!(suggested(&app, w.bob, w.course, "walrus tusk").await, vec![question]);
    // Then the older one renames it and commits.
    older
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "UPDATE posts SET title = 'Narwhal horn care' WHERE id = $1",
            [question.into()],
        ))
        .await
        .expect("rename in the older transaction");
    older.commit().await.expect("commit");

    assert_eq!(suggested(&app, w.bob, w.course, "narwhal horn").await, vec![question], "the rename");
    assert!(suggested(&app, w.bob, w.course, "walrus tusk").await.is_empty(), "the old title");
    // And it stays so once the index has moved past both transactions.
    create_post(&app, app.addr, w.bob, w.course, "Unrelated zebra", json!({})).await;
    suggested(&app, w.bob, w.course, "zebra").await;
    assert_eq!(suggested(&app, w.bob, w.course, "narwhal horn").await, vec![question]);
}

/// Racing creates, edits, deletions and resolutions with lookups in between (a fixed seed),
/// on two instances: afterwards each instance's index, kept up by what every lookup read,
/// answers every text exactly as a third instance whose index is built afresh.
#[tokio::test]
async fn under_racing_writes_the_index_answers_as_one_built_afresh() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let peer = app.spawn_peer(|_| {}).await;
    let words = ["graph", "trees", "python", "exam", "recursion", "stack", "heap", "walrus", "zebra"];
    let mut rng = StdRng::seed_from_u64(0x5349_4d49);
    let title =
        |rng: &mut StdRng| (0..3).map(|_| words[rng.random_range(0..words.len())]).collect::<Vec<_>>().join(" ");
    let authors = [w.alice, w.bob];
    let addrs = [app.addr, peer.addr];
    let mut ids = Vec::new();
    for n in 0..12 {
        let (kind, t) = (if n % 3 == 0 { "QUESTION" } else { "DISCUSSION" }, title(&mut rng));
        ids.push(create_post(&app, addrs[n % 2], authors[n % 2], w.course, &t, json!({ "k": kind })).await);
    }
    // Both instances build their index now, before the storm.
    for addr in addrs {
        suggested_at(&app, addr, w.bob, w.course, "graph trees").await;
    }

    let texts: Vec<String> = (0..6).map(|_| title(&mut rng)).collect();
    for round in 0..4 {
        let mut steps = Vec::new();
        for n in 0..12 {
            let step = rng.random_range(0..5);
            let (id, author, addr, t) = (ids[n], authors[n % 2], addrs[rng.random_range(0..2)], title(&mut rng));
            let text = texts[rng.random_range(0..texts.len())].clone();
            let app = &app;
            steps.push(async move {
                match step {
                    0 => {
                        let vars = json!({ "p": gid("Post", id), "t": t });
                        app.gql_at(addr, Some(&app.token(author)), EDIT, vars).await;
                    }
                    1 => {
                        app.gql_at(addr, Some(&app.token(w.instructor)), RESOLVE, json!({ "p": gid("Post", id) }))
                            .await;
                    }
                    2 if round == 3 => {
                        app.gql_at(addr, Some(&app.token(author)), DELETE, json!({ "p": gid("Post", id) })).await;
                    }
                    _ => {
                        suggested_at(app, addr, w.bob, w.course, &text).await;
                    }
                }
            });
        }
        // New posts race the changes too.
        let t = title(&mut rng);
        let addr = addrs[round % 2];
        let (app_ref, course, alice) = (&app, w.course, w.alice);
        let created = async move { create_post(app_ref, addr, alice, course, &t, json!({})).await };
        let (_, new_id) = futures_util::join!(join_all(steps), created);
        ids.push(new_id);
    }

    let fresh = app.spawn_peer(|_| {}).await;
    for text in &texts {
        let expected = suggested_at(&app, fresh.addr, w.bob, w.course, text).await;
        for addr in addrs {
            assert_eq!(suggested_at(&app, addr, w.bob, w.course, text).await, expected, "{text:?} at {addr}");
        }
    }
    // The live titles are what the fresh index read: some posts were suggested at all.
    let live = app.scalar_i64("SELECT count(*) AS v FROM posts WHERE deleted_at IS NULL", []).await;
    assert!(live > 0);
}

/// A course whose index would exceed its share of `CACHE_BUDGET_BYTES` is served by SQL,
/// with the same answers, while a small course beside it is indexed; what the indexes hold
/// stays within the share (the figures `/metrics` shows).
#[tokio::test]
async fn a_course_too_big_for_its_share_is_served_by_sql_within_the_budget() {
    let app = TestApp::spawn_with(|s| s.cache_budget_bytes = 1 << 20).await;
    let w = World::create(&app).await;
    // About 1,500 long titles: several times the 100 KiB share of a 1 MiB budget.
    app.db
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO posts (course_id, user_id, title, body) \
             SELECT $1, $2, 'Filler title number ' || n || ' ' || repeat(md5(n::text), 2), 'filler' \
             FROM generate_series(1, 1500) n",
            [w.course.into(), w.alice.into()],
        ))
        .await
        .expect("filler posts");
    let big = create_post(&app, app.addr, w.alice, w.course, "Walrus migration patterns", json!({})).await;
    app.enroll(w.other_course, w.bob, "student").await;
    let small = create_post(&app, app.addr, w.bob, w.other_course, "Walrus migration patterns", json!({})).await;

    for _ in 0..2 {
        assert_eq!(suggested(&app, w.bob, w.course, "walrus migraton").await, vec![big], "by SQL");
        assert_eq!(suggested(&app, w.bob, w.other_course, "walrus migraton").await, vec![small], "indexed");
    }
    let figures = app.state.cache_budget.figures();
    let (_, titles) =
        figures.iter().find(|(name, _)| name.label() == "course_titles").expect("course_titles registered");
    assert_eq!(titles.entries, 1, "the small course alone");
    assert!(titles.used_bytes > 0);
    assert!(titles.used_bytes <= titles.capacity_bytes, "{titles:?}");
}
