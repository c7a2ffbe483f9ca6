//! DataLoaders keep a page cheap: 20 posts by 20 authors with `author` and `likedByMe` cost a
//! handful of SQL statements, not one per post.

mod common;

use common::{TestApp, World, gid};
use serde_json::json;

#[tokio::test]
async fn a_page_of_twenty_posts_costs_a_bounded_number_of_statements() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
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
    let page = "query($c: ID!) { course(id: $c) { posts(first: 20) { edges { node { \
                title likeCount commentCount likedByMe author { handle displayName } } } } } }";
    let alice = app.token(world.alice);
    let before = app.state.sql_statements.get();
    let data = app.gql_ok(Some(&alice), page, json!({ "c": gid("Course", world.course) })).await;
    let statements = app.state.sql_statements.get() - before;

    let edges = data["course"]["posts"]["edges"].as_array().expect("edges");
    assert_eq!(edges.len(), 20);
    let liked = edges.iter().filter(|e| e["node"]["likedByMe"] == true).count();
    assert_eq!(liked, 10, "likedByMe is right for every post");
    let authors: std::collections::HashSet<_> = edges.iter().map(|e| e["node"]["author"]["handle"].clone()).collect();
    assert_eq!(authors.len(), 20);
    // course lookup, memberships, the page, one author batch, one likedByMe batch.
    assert!(statements >= 3, "the counter sees the page's statements ({statements})");
    assert!(statements <= 6, "a page of 20 posts ran {statements} SQL statements");
}
