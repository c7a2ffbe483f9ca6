//! The harness itself: an app comes up on its own database and answers as the viewer.

use serde_json::json;

use crate::common::{TestApp, World, gid, sample};

#[tokio::test]
async fn me_and_my_courses_answer_for_the_token_holder() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let data = app.gql_ok(Some(&token), "{ me { id handle } myCourses { id code myRole } }", json!({})).await;
    assert_eq!(data["me"]["handle"], "alice");
    assert_eq!(data["me"]["id"], gid("User", world.alice));
    assert_eq!(data["myCourses"], json!([{ "id": gid("Course", world.course), "code": "CS101", "myRole": "STUDENT" }]));
}

#[tokio::test]
async fn metrics_count_the_sql_statements_and_redis_commands_a_request_sends() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let app = TestApp::spawn_with(|s| s.like_mode = course_forum::testing::config::LikeMode::Buffered).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let post = app
        .gql_ok(
            Some(&token),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"t\", body: \"b\") { id } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await["createPost"]["id"]
        .clone();
    // The one job that ran: the membership warm at start (`membership::warm`).
    let at_start = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    let warm_statements = sample(&at_start, "sql_statements_total{role=\"background\"}");
    assert!(warm_statements >= 1.0, "{at_start}");
    let (sql_before, redis_before) = (app.state.sql_statements.get(), app.state.redis.commands_sent());
    app.gql_ok(Some(&token), "query($p: ID!) { post(id: $p) { likedByMe } }", json!({ "p": post })).await;
    // The post from PostgreSQL (the viewer's memberships are in memory since createPost);
    // likedByMe warms the cold liked-set (one SQL read). Redis: the post cache misses (HMGET), takes the post's lock with its
    // generation and entry (SET NX, GET, HMGET), stores and releases (two scripts); likedByMe
    // sends SMISMEMBER, reads the set's load generation (HGET, before the rows), runs the warm
    // script, and SMISMEMBER again.
    assert_eq!(app.state.sql_statements.get() - sql_before, 2);
    assert_eq!(app.state.redis.commands_sent() - redis_before, 10);
    // Warm: the post and the memberships from the instance's memory, one SMISMEMBER.
    let (sql_before, redis_before) = (app.state.sql_statements.get(), app.state.redis.commands_sent());
    app.gql_ok(Some(&token), "query($p: ID!) { post(id: $p) { likedByMe } }", json!({ "p": post })).await;
    assert_eq!(app.state.sql_statements.get() - sql_before, 0);
    assert_eq!(app.state.redis.commands_sent() - redis_before, 1);

    let text = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    assert!(text.contains("sql_statements_total{role=\"api\"}"), "{text}");
    // No other job ran in this test: every other statement was a request's.
    assert_eq!(sample(&text, "sql_statements_total{role=\"background\"}"), warm_statements, "{text}");
    assert!(text.contains("redis_commands_total{role=\"api\"}"), "{text}");
    // A scrape reads Redis for its gauges under its own label, so the requests' figure between
    // two scrapes is the requests' alone (here: none).
    let again = app.http.get(app.url("/metrics")).send().await.expect("GET /metrics").text().await.expect("text");
    let api_commands = |text: &str| sample(text, "redis_commands_total{role=\"api\"}");
    assert_eq!(api_commands(&again), api_commands(&text), "a scrape counted as the API's");
    assert!(sample(&again, "redis_commands_total{role=\"scrape\"}") > 0.0, "{again}");
}
