//! No statement per parent: `memberCount`, `Post.comments`, `Comment.replies`, `Reply.comment`
//! and the `post` of nested comments and replies load once per level of a request, however
//! many parents the level has. The same nested query over 2 posts and over 6 runs the same
//! number of SQL statements, and returns each parent its own children.

use serde_json::{Value, json};

use crate::common::{self, TestApp, World, gid};

const NESTED: &str = "query($c: ID!, $n: Int!) { course(id: $c) { posts(first: $n) { nodes { id \
    course { memberCount } \
    comments(first: 10) { pageInfo { hasNextPage } nodes { id body post { id } \
      replies(first: 10) { nodes { id body comment { id } post { id course { memberCount } } } } } } } } } }";

/// Runs the nested query over the newest `n` posts; returns the data and its SQL statements.
async fn nested(app: &TestApp, world: &World, n: usize) -> (Value, u64) {
    let before = app.state.sql_statements.get();
    let data =
        app.gql_ok(Some(&app.token(world.bob)), NESTED, json!({ "c": gid("Course", world.course), "n": n })).await;
    (data, app.state.sql_statements.get() - before)
}

#[tokio::test]
async fn nested_lists_cost_one_statement_per_level_not_per_parent() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    common::threads(&app, &world, 6).await;

    // The viewer's memberships, the post cache and both course pages (`cache::pages`) warm.
    nested(&app, &world, 6).await;
    nested(&app, &world, 2).await;
    let (few, few_statements) = nested(&app, &world, 2).await;
    let (many, many_statements) = nested(&app, &world, 6).await;
    // Per level (the posts page itself is in memory): the courses and their member counts, the comments of
    // every post, the replies of every comment, their roots. One per parent would be 6 for the
    // comments and 18 for the replies alone. A level's batch starts only once the request is
    // parked (`batch_gate`), so a busy machine does not split it.
    assert!(many_statements <= 8, "{many_statements} statements for 6 posts × 3 comments × 2 replies");
    assert_eq!(
        many_statements, few_statements,
        "statements grew with the parents: {few_statements} for 2 posts, {many_statements} for 6"
    );

    // Every parent got its own children, in order.
    let posts = many["course"]["posts"]["nodes"].as_array().expect("posts");
    assert_eq!(posts.len(), 6);
    for post in posts {
        let p = post["id"].clone();
        assert_eq!(post["course"]["memberCount"], 3, "{post}");
        let comments = post["comments"]["nodes"].as_array().expect("comments");
        assert_eq!(comments.len(), 3);
        assert_eq!(post["comments"]["pageInfo"]["hasNextPage"], false);
        let title_number = comments[0]["body"].as_str().expect("body").split(' ').next().expect("p<n>").to_owned();
        for (c, comment) in comments.iter().enumerate() {
            assert_eq!(comment["post"]["id"], p);
            assert_eq!(comment["body"], format!("{title_number} c{c}"));
            let replies = comment["replies"]["nodes"].as_array().expect("replies");
            let bodies: Vec<&str> = replies.iter().map(|r| r["body"].as_str().expect("body")).collect();
            assert_eq!(bodies, [format!("{title_number} c{c} r0"), format!("{title_number} c{c} r1")]);
            for reply in replies {
                assert_eq!(reply["comment"]["id"], comment["id"]);
                assert_eq!(reply["post"]["id"], p);
            }
        }
    }
    assert_eq!(few["course"]["posts"]["nodes"].as_array().expect("posts").len(), 2);
}

/// A page size smaller than a thread pages each parent on its own: `first: 2` of 3 comments
/// says `hasNextPage` for every post.
#[tokio::test]
async fn each_parent_gets_its_own_page_of_a_batched_level() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    common::threads(&app, &world, 3).await;
    let query = "query($c: ID!) { course(id: $c) { posts(first: 3) { nodes { \
                 comments(first: 2) { pageInfo { hasNextPage } nodes { body } } } } } }";
    let data = app.gql_ok(Some(&app.token(world.bob)), query, json!({ "c": gid("Course", world.course) })).await;
    for post in data["course"]["posts"]["nodes"].as_array().expect("posts") {
        assert_eq!(post["comments"]["pageInfo"]["hasNextPage"], true, "{post}");
        let bodies: Vec<&str> = post["comments"]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| n["body"].as_str().expect("body"))
            .collect();
        assert_eq!(bodies.len(), 2);
        assert!(bodies[0].ends_with("c0") && bodies[1].ends_with("c1"), "{bodies:?}");
        assert_eq!(bodies[0].split(' ').next(), bodies[1].split(' ').next(), "one post's comments only");
    }
}

/// Courses reached through a list (`myCourses`, each post's `course`) load their pages of
/// posts together: a user in 1 course and a user in 4 run the same statements, and every
/// course gets its own newest posts.
#[tokio::test]
async fn courses_in_a_list_page_their_posts_in_one_statement() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let mut courses = vec![world.course];
    for code in ["MATH1", "PHYS1", "CHEM1"] {
        let course = app.create_course(code).await;
        app.enroll(course, world.alice, "student").await;
        courses.push(course);
    }
    app.enroll(courses[1], world.bob, "student").await; // bob: 2 courses, alice: 4
    app.memberships_settled().await;
    let alice = app.token(world.alice);
    for course in &courses {
        for p in 0..3 {
            app.create_post(&alice, *course, &format!("c{course} p{p}")).await;
        }
    }
    let query = "{ myCourses { id posts(first: 2) { pageInfo { hasNextPage } nodes { title \
                 course { id posts(first: 1) { nodes { title } } } } } } }";
    let run = |token: String| {
        let app = &app;
        async move {
            app.gql_ok(Some(&token), query, json!({})).await; // memberships and caches warm
            let before = app.state.sql_statements.get();
            let data = app.gql_ok(Some(&token), query, json!({})).await;
            (data, app.state.sql_statements.get() - before)
        }
    };
    let (two, two_statements) = run(app.token(world.bob)).await;
    let (four, four_statements) = run(alice).await;
    assert_eq!(two["myCourses"].as_array().expect("courses").len(), 2);
    assert_eq!(
        four_statements, two_statements,
        "statements grew with the courses: {two_statements} for 2, {four_statements} for 4"
    );
    // myCourses, its posts, the posts' courses, their posts: one statement each.
    assert!(four_statements <= 4, "{four_statements} statements");

    let listed = four["myCourses"].as_array().expect("courses");
    assert_eq!(listed.len(), 4);
    for course in listed {
        let id = course["id"].as_str().expect("id");
        let number: i64 = common::raw_id(id);
        let posts = course["posts"]["nodes"].as_array().expect("posts");
        let titles: Vec<&str> = posts.iter().map(|p| p["title"].as_str().expect("title")).collect();
        assert_eq!(titles, [format!("c{number} p2"), format!("c{number} p1")], "{course}");
        assert_eq!(course["posts"]["pageInfo"]["hasNextPage"], true);
        for post in posts {
            assert_eq!(post["course"]["id"], course["id"]);
            assert_eq!(post["course"]["posts"]["nodes"][0]["title"], format!("c{number} p2"));
        }
    }
}
