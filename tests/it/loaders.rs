//! DataLoaders keep a page cheap: 20 posts by 20 authors with `author` and `likedByMe` cost a
//! handful of SQL statements, not one per post, and none once the instance holds the page.

use serde_json::json;

use crate::common::{TestApp, World, gid};

#[tokio::test]
async fn a_page_of_twenty_posts_costs_a_bounded_number_of_statements() {
    let app = TestApp::spawn().await;
    let ((statements, _), _, _) = read_a_page_of_twenty(&app).await;
    // The first read: the page and one author batch (memberships in memory; likedByMe from
    // the liked rows in sync mode, one batch).
    assert!(statements >= 2, "the counter sees the page's statements ({statements})");
    assert!(statements <= 6, "a page of 20 posts ran {statements} SQL statements");
}

/// The design's page budget (buffered likes, the default): a cold page is the page and one
/// author batch, with the viewer's memberships in memory; a warm one (page rows and authors in
/// the instance's memory) no statement; without the memberships in memory, one (the course and
/// the memberships, joined). `likedByMe` is ONE Redis command every time.
#[tokio::test]
async fn a_buffered_page_costs_one_redis_command_and_no_statement_when_warm() {
    let app = TestApp::spawn_with(|s| s.like_mode = course_forum::testing::config::LikeMode::Buffered).await;
    let (cold, warm, without_memberships) = read_a_page_of_twenty(&app).await;
    assert_eq!(cold, (2, 1), "SQL statements and Redis commands for the first read of the page");
    assert_eq!(warm, (0, 1), "the same page read again");
    assert_eq!(without_memberships, (1, 1), "the same without the memberships in memory");
}

/// 20 posts by 20 authors, every other one liked by alice; alice reads the page three times:
/// cold, warm, then with her memberships forgotten. Returns the SQL statements and Redis
/// commands each read cost.
async fn read_a_page_of_twenty(app: &TestApp) -> ((u64, u64), (u64, u64), (u64, u64)) {
    let world = World::create(app).await;
    for n in 0..20 {
        let author = app.create_user(&format!("author{n}")).await;
        app.enroll(world.course, author, "student").await;
        let token = app.token(author);
        let data = app
            .gql_ok(
                Some(&token),
                "mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: \"b\") { id } }",
                json!({ "c": gid("Course", world.course), "t": format!("post {n}") }),
            )
            .await;
        if n % 2 == 0 {
            let alice = app.token(world.alice);
            app.gql_ok(
                Some(&alice),
                "mutation($p: ID!) { likePost(postId: $p) { id } }",
                json!({ "p": data["createPost"]["id"] }),
            )
            .await;
        }
    }
    // Each post's echo drops the course's pages: a page read before the last one arrives is
    // not kept.
    app.own_echoes_heard().await;
    let page = "query($c: ID!) { course(id: $c) { posts(first: 20) { edges { node { \
                title likeCount commentCount likedByMe author { handle displayName } } } } } }";
    let alice = app.token(world.alice);
    let read = async || {
        let before = (app.state.sql_statements.get(), app.state.redis.commands_sent());
        let data = app.gql_ok(Some(&alice), page, json!({ "c": gid("Course", world.course) })).await;
        (data, (app.state.sql_statements.get() - before.0, app.state.redis.commands_sent() - before.1))
    };
    let (data, cold) = read().await;
    let (again, warm) = read().await;
    assert_eq!(again, data, "the same page from memory");
    app.state.memberships.everything_changed();
    let (again, without_memberships) = read().await;
    assert_eq!(again, data, "the same page either way");

    let edges = data["course"]["posts"]["edges"].as_array().expect("edges");
    assert_eq!(edges.len(), 20);
    let liked = edges.iter().filter(|e| e["node"]["likedByMe"] == true).count();
    assert_eq!(liked, 10, "likedByMe is right for every post");
    let authors: std::collections::HashSet<_> = edges.iter().map(|e| e["node"]["author"]["handle"].clone()).collect();
    assert_eq!(authors.len(), 20);
    (cold, warm, without_memberships)
}

/// `likedByMe` is cached for the request, so a like or unlike must write its outcome into that
/// cache: one document that likes, unlikes and likes again shows each step, not the first.
#[tokio::test]
async fn likes_and_unlikes_in_one_document_each_show_their_own_outcome() {
    for mode in [course_forum::testing::config::LikeMode::Buffered, course_forum::testing::config::LikeMode::Sync] {
        let app = TestApp::spawn_with(move |s| s.like_mode = mode).await;
        let world = World::create(&app).await;
        let alice = app.token(world.alice);
        let post = gid("Post", app.create_post(&alice, world.course, "t").await);
        let data = app
            .gql_ok(
                Some(&alice),
                "mutation($p: ID!) { \
                   a: likePost(postId: $p) { likedByMe } \
                   b: unlikePost(postId: $p) { likedByMe } \
                   c: likePost(postId: $p) { likedByMe } }",
                json!({ "p": post }),
            )
            .await;
        let steps: Vec<_> = ["a", "b", "c"].iter().map(|k| data[*k]["likedByMe"].clone()).collect();
        assert_eq!(steps, [json!(true), json!(false), json!(true)], "{mode:?}");
        let read =
            app.gql_ok(Some(&alice), "query($p: ID!) { post(id: $p) { likedByMe } }", json!({ "p": post })).await;
        assert_eq!(read["post"]["likedByMe"], true, "{mode:?}");
    }
}

/// The page asks for every flag at once whichever way the query names `likedByMe`: through
/// `nodes`, or inside a fragment.
#[tokio::test]
async fn a_page_primes_its_liked_flags_through_nodes_and_fragments() {
    let app = TestApp::spawn_with(|s| s.like_mode = course_forum::testing::config::LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    for n in 0..5 {
        let post = gid("Post", app.create_post(&alice, world.course, &format!("post {n}")).await);
        if n % 2 == 1 {
            app.gql_ok(Some(&alice), "mutation($p: ID!) { likePost(postId: $p) { id } }", json!({ "p": post })).await;
        }
    }
    for page in [
        "query($c: ID!) { course(id: $c) { posts(first: 5) { nodes { likedByMe } } } }",
        "query($c: ID!) { course(id: $c) { posts(first: 5) { ...Flags } } } \
         fragment Flags on PostConnection { nodes { ... on Post { likedByMe } } }",
    ] {
        let redis_before = app.state.redis.commands_sent();
        let data = app.gql_ok(Some(&alice), page, json!({ "c": gid("Course", world.course) })).await;
        assert_eq!(app.state.redis.commands_sent() - redis_before, 1, "{page}");
        let flags: Vec<_> = data["course"]["posts"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| n["likedByMe"].clone())
            .collect();
        // Newest first: posts 4..0, posts 3 and 1 liked.
        assert_eq!(flags, [json!(false), json!(true), json!(false), json!(true), json!(false)], "{page}");
    }
}
