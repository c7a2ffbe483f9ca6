//! The authorization matrix: every query and every mutation, asked by an anonymous viewer, a
//! member student, a non-member and the course's instructor. Refused requests must say why
//! (`extensions.code`), return no data, leak nothing, and change nothing in the database.
//!
//! Every test runs in two like modes, each as a test of its own (`<test>::sync`,
//! `<test>::buffered`): sync writes a like to PostgreSQL before answering it; buffered, the
//! default users get, answers from a Redis liked-set and leaves PostgreSQL to a worker, which
//! these tests step by hand (`Fixture::apply_likes`). In buffered mode a refused like must also
//! leave the like stream and the liked-sets alone.

use std::time::Duration;

use course_forum::testing::config::LikeMode;
use course_forum::testing::worker::LikeWorker;
use serde_json::{Value as Json, json};

use crate::common::likes::{Target, rows_and_counter};
use crate::common::snapshot::{assert_no_failures, count, snapshot};
use crate::common::{self, JWT_SECRET, TestApp, World, error_code, gid, raw_id, unix_now};

// ---------------------------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------------------------

/// Marker carried by every piece of CS101 content, so a leak to a non-member is easy to spot.
const SECRET: &str = "SECRET-CS101";

/// The world plus content in CS101 written by alice (a post, a comment, a reply), likes by
/// alice on each of them, and a post by the outsider in their own course.
struct Fixture {
    app: TestApp,
    w: World,
    mode: LikeMode,
    /// Buffered mode's like worker, stepped by hand (`apply_likes`); none in sync mode.
    worker: Option<LikeWorker>,
    post: String,
    comment: String,
    reply: String,
    other_post: String,
    /// A tag of CS101, made by its instructor.
    tag: String,
}

impl Fixture {
    async fn new(mode: LikeMode) -> Fixture {
        Self::from_app(TestApp::spawn_in(mode).await).await
    }

    /// The fixture on an app spawned in sync or buffered mode (read back from its settings).
    async fn from_app(app: TestApp) -> Fixture {
        let mode = app.state.settings.like_mode;
        let worker = match mode {
            LikeMode::Sync => None,
            LikeMode::Buffered => Some(app.worker().await),
            LikeMode::Recount => panic!("these tests run in sync and buffered mode"),
        };
        let w = World::create(&app).await;
        let alice = app.token(w.alice);
        let data = app
            .gql_ok(
                Some(&alice),
                "mutation($c: ID!, $t: String!, $b: String!) { createPost(courseId: $c, title: $t, body: $b) { id } }",
                json!({ "c": gid("Course", w.course), "t": format!("{SECRET} title"), "b": format!("{SECRET} post body") }),
            )
            .await;
        let post = data["createPost"]["id"].as_str().unwrap().to_owned();
        let data = app
            .gql_ok(
                Some(&alice),
                "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }",
                json!({ "p": post, "b": format!("{SECRET} comment") }),
            )
            .await;
        let comment = data["createComment"]["id"].as_str().unwrap().to_owned();
        let data = app
            .gql_ok(
                Some(&alice),
                "mutation($c: ID!, $b: String!) { createReply(commentId: $c, body: $b) { id } }",
                json!({ "c": comment, "b": format!("{SECRET} reply") }),
            )
            .await;
        let reply = data["createReply"]["id"].as_str().unwrap().to_owned();
        app.gql_ok(
            Some(&alice),
            "mutation($p: ID!, $c: ID!, $r: ID!) { likePost(postId: $p) { id } a: likeComment(commentId: $c) { id } b: likeComment(commentId: $r) { id } }",
            json!({ "p": post, "c": comment, "r": reply }),
        )
        .await;
        let data = app
            .gql_ok(
                Some(&app.token(w.outsider)),
                "mutation($c: ID!) { createPost(courseId: $c, title: \"bio title\", body: \"bio body\") { id } }",
                json!({ "c": gid("Course", w.other_course) }),
            )
            .await;
        let other_post = data["createPost"]["id"].as_str().unwrap().to_owned();
        let data = app
            .gql_ok(
                Some(&app.token(w.instructor)),
                "mutation($c: ID!) { createTag(courseId: $c, name: \"hw1\") { id } }",
                json!({ "c": gid("Course", w.course) }),
            )
            .await;
        let tag = data["createTag"]["id"].as_str().unwrap().to_owned();
        let f = Fixture { app, w, mode, worker, post, comment, reply, other_post, tag };
        // The same world in both modes: alice's likes are rows and counters in PostgreSQL (in
        // buffered mode once the worker has applied them) and she sees them as hers.
        f.apply_likes().await;
        assert_eq!(count(&f.app, "SELECT count(*) AS v FROM post_likes").await, 1);
        assert_eq!(count(&f.app, "SELECT count(*) AS v FROM comment_likes").await, 2);
        assert_eq!(count(&f.app, "SELECT coalesce(sum(like_count), 0)::bigint AS v FROM posts").await, 1);
        assert_eq!(count(&f.app, "SELECT coalesce(sum(like_count), 0)::bigint AS v FROM comments").await, 2);
        assert_eq!(liked_by_me_as_a_member(&f, f.w.alice).await, liked_by_me(true));
        f
    }

    fn token(&self, user: i64) -> String {
        self.app.token(user)
    }

    /// Lets buffered mode's worker apply the like events waiting in the streams, as it would a
    /// moment later in production, and returns how many it applied. Sync mode writes a like
    /// before answering it, so it never has any (0).
    async fn apply_likes(&self) -> usize {
        match &self.worker {
            Some(worker) => worker.drain().await.expect("the like worker drains the streams"),
            None => 0,
        }
    }
}

/// The likedByMe of alice's post, comment and reply, as `liked_by_me_as_a_member` reads them.
fn liked_by_me(liked: bool) -> Json {
    json!({ "p": { "likedByMe": liked }, "c": { "likedByMe": liked }, "r": { "likedByMe": liked } })
}

/// What `user` sees as likedByMe on alice's post, comment and reply, as a member of CS101
/// (enrolled as a student first if they are not one). In buffered mode a like is in the user's
/// liked-set before it is in PostgreSQL: a refused one must not be waiting there for the day
/// the user joins.
async fn liked_by_me_as_a_member(f: &Fixture, user: i64) -> Json {
    f.app
        .scalar_i64(
            "WITH joined AS (INSERT INTO course_members (course_id, user_id, role) VALUES ($1, $2, 'student') \
             ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) AS v FROM joined",
            [f.w.course.into(), user.into()],
        )
        .await;
    f.app.memberships_settled().await;
    f.app
        .gql_ok(
            Some(&f.token(user)),
            "query($p: ID!, $c: ID!, $r: ID!) { p: node(id: $p) { ... on Post { likedByMe } } \
             c: node(id: $c) { ... on Comment { likedByMe } } r: node(id: $r) { ... on Reply { likedByMe } } }",
            json!({ "p": f.post, "c": f.comment, "r": f.reply }),
        )
        .await
}

/// Posts a GraphQL request with a raw `Authorization` header value.
async fn gql_with_header(app: &TestApp, authorization: &str, query: &str, variables: Json) -> Json {
    app.http
        .post(app.url("/graphql"))
        .header("Authorization", authorization)
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await
        .expect("send GraphQL request")
        .json::<Json>()
        .await
        .expect("GraphQL response is JSON")
}

/// Checks a refusal: the code, no data, and no CS101 content anywhere in the response.
fn refusal_problem(response: &Json, code: &str) -> Option<String> {
    if error_code(response).as_deref() != Some(code) {
        return Some(format!("expected {code}, got {response}"));
    }
    if !response["data"].is_null() {
        return Some(format!("expected no data with {code}, got {response}"));
    }
    if response.to_string().contains(SECRET) {
        return Some(format!("refused response leaks course content: {response}"));
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------------

const NODE_QUERY: &str = "query($id: ID!) { node(id: $id) { id \
    ... on User { handle } ... on Course { code } ... on Post { title } \
    ... on Comment { body } ... on Reply { body } } }";

/// (name, query, variables, JSON pointer into `data`, value expected there when allowed).
fn read_table(f: &Fixture, viewer_handle: &str, viewer_courses: Json) -> Vec<(String, String, Json, String, Json)> {
    let w = &f.w;
    let mut rows = vec![
        ("me".to_owned(), "{ me { handle } }".to_owned(), json!({}), "/me/handle".to_owned(), json!(viewer_handle)),
        ("myCourses".to_owned(), "{ myCourses { id } }".to_owned(), json!({}), "/myCourses".to_owned(), viewer_courses),
        (
            "course".to_owned(),
            "query($id: ID!) { course(id: $id) { code } }".to_owned(),
            json!({ "id": gid("Course", w.course) }),
            "/course/code".to_owned(),
            json!("CS101"),
        ),
        (
            "post".to_owned(),
            "query($id: ID!) { post(id: $id) { title } }".to_owned(),
            json!({ "id": f.post }),
            "/post/title".to_owned(),
            json!(format!("{SECRET} title")),
        ),
    ];
    let nodes = [
        ("User", gid("User", w.alice), "/node/handle", json!("alice")),
        ("Course", gid("Course", w.course), "/node/code", json!("CS101")),
        ("Post", f.post.clone(), "/node/title", json!(format!("{SECRET} title"))),
        ("Comment", f.comment.clone(), "/node/body", json!(format!("{SECRET} comment"))),
        ("Reply", f.reply.clone(), "/node/body", json!(format!("{SECRET} reply"))),
    ];
    for (kind, id, pointer, value) in nodes {
        rows.push((format!("node({kind})"), NODE_QUERY.to_owned(), json!({ "id": id }), pointer.to_owned(), value));
    }
    rows
}

in_each_like_mode!(anonymous_viewer_is_unauthenticated_for_every_query);
async fn anonymous_viewer_is_unauthenticated_for_every_query(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let before = snapshot(&f.app).await;
    let mut failures = Vec::new();
    for (name, query, vars, _, _) in read_table(&f, "", json!(null)) {
        let response = f.app.gql(None, &query, vars).await;
        if let Some(problem) = refusal_problem(&response, "UNAUTHENTICATED") {
            failures.push(format!("anonymous {name}: {problem}"));
        }
    }
    assert_no_failures(failures);
    assert_eq!(snapshot(&f.app).await, before);
}

in_each_like_mode!(member_and_instructor_read_everything_in_their_course);
async fn member_and_instructor_read_everything_in_their_course(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let course = json!([{ "id": gid("Course", f.w.course) }]);
    let mut failures = Vec::new();
    for (who, user) in [("prof", f.w.instructor), ("bob", f.w.bob), ("alice", f.w.alice)] {
        let token = f.token(user);
        for (name, query, vars, pointer, expected) in read_table(&f, who, course.clone()) {
            let response = f.app.gql(Some(&token), &query, vars).await;
            if response.get("errors").is_some() {
                failures.push(format!("{who} {name}: unexpected errors {response}"));
            } else if response["data"].pointer(&pointer) != Some(&expected) {
                failures.push(format!("{who} {name}: expected {pointer} = {expected}, got {response}"));
            }
        }
    }
    assert_no_failures(failures);
}

in_each_like_mode!(non_member_is_forbidden_from_every_read_of_the_course);
async fn non_member_is_forbidden_from_every_read_of_the_course(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let token = f.token(f.w.outsider);
    let own = json!([{ "id": gid("Course", f.w.other_course) }]);
    let before = snapshot(&f.app).await;
    let mut failures = Vec::new();
    for (name, query, vars, pointer, expected) in read_table(&f, "outsider", own) {
        let response = f.app.gql(Some(&token), &query, vars).await;
        // Users are not course content; their own identity and course list are theirs.
        let allowed = matches!(name.as_str(), "me" | "myCourses" | "node(User)");
        if allowed {
            if response.get("errors").is_some() || response["data"].pointer(&pointer) != Some(&expected) {
                failures.push(format!("outsider {name}: expected {pointer} = {expected}, got {response}"));
            }
        } else if let Some(problem) = refusal_problem(&response, "FORBIDDEN") {
            failures.push(format!("outsider {name}: {problem}"));
        }
    }
    assert_no_failures(failures);
    assert_eq!(snapshot(&f.app).await, before);
}

in_each_like_mode!(non_member_cannot_reach_course_content_through_nested_fields);
async fn non_member_cannot_reach_course_content_through_nested_fields(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let token = f.token(f.w.outsider);
    let nested = [
        (
            "node(Reply) → comment/post/course/posts",
            "query($id: ID!) { node(id: $id) { ... on Reply { body comment { body post { title } } \
             post { title body course { code posts(first: 3) { edges { node { title comments(first: 3) { edges { node { body \
             replies(first: 3) { edges { node { body } } } } } } } } } } } } } }",
            json!({ "id": f.reply }),
        ),
        (
            "node(Comment) → post → comments",
            "query($id: ID!) { node(id: $id) { ... on Comment { post { title comments { nodes { body } } } \
             replies { nodes { body author { handle } } } } } }",
            json!({ "id": f.comment }),
        ),
        (
            "post → course → posts",
            "query($id: ID!) { post(id: $id) { course { posts { nodes { title body } } } } }",
            json!({ "id": f.post }),
        ),
        (
            "course → posts → comments → replies",
            "query($id: ID!) { course(id: $id) { posts { nodes { comments { nodes { body replies { nodes { body } } } } } } } }",
            json!({ "id": gid("Course", f.w.course) }),
        ),
    ];
    let mut failures = Vec::new();
    for (name, query, vars) in nested {
        let response = f.app.gql(Some(&token), query, vars).await;
        if let Some(problem) = refusal_problem(&response, "FORBIDDEN") {
            failures.push(format!("outsider {name}: {problem}"));
        }
    }
    // Through their own courses the outsider sees only their own course's posts.
    let data = f
        .app
        .gql_ok(
            Some(&token),
            "{ myCourses { code posts { nodes { id title comments { nodes { body } } } } } }",
            json!({}),
        )
        .await;
    assert!(!data.to_string().contains(SECRET), "leak via myCourses: {data}");
    assert_eq!(
        data["myCourses"],
        json!([{ "code": "BIO200", "posts": { "nodes": [
            { "id": f.other_post, "title": "bio title", "comments": { "nodes": [] } }
        ] } }])
    );
    // A cursor is only a position: one a member of CS101 was given does not open CS101 from
    // the outsider's course. (Cursors are signed, so a made-up one is refused outright.)
    let comments = "query($id: ID!, $after: String) { node(id: $id) { ... on Post { comments(first: 1, after: $after) { edges { cursor } nodes { body } } } } }";
    let alice = f.app.token(f.w.alice);
    let given = f.app.gql_ok(Some(&alice), comments, json!({ "id": f.post, "after": null })).await;
    let cursor = given["node"]["comments"]["edges"][0]["cursor"].as_str().map(str::to_owned);
    let data = f.app.gql_ok(Some(&token), comments, json!({ "id": f.other_post, "after": cursor })).await;
    assert!(!data.to_string().contains(SECRET), "leak via cursor: {data}");
    assert_no_failures(failures);
}

// ---------------------------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------------------------

/// A mutation to try: (name, query, variables).
type Mutation = (&'static str, &'static str, Json);

/// Every mutation, each aimed at alice's CS101 content.
fn mutation_table(f: &Fixture) -> Vec<Mutation> {
    let course = gid("Course", f.w.course);
    vec![
        (
            "createPost",
            "mutation($id: ID!) { createPost(courseId: $id, title: \"intruder\", body: \"intruder\") { id title } }",
            json!({ "id": course }),
        ),
        (
            "editPost",
            "mutation($id: ID!) { editPost(postId: $id, title: \"hacked\", body: \"hacked\") { id title } }",
            json!({ "id": f.post }),
        ),
        ("deletePost", "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }", json!({ "id": f.post })),
        (
            "createComment",
            "mutation($id: ID!) { createComment(postId: $id, body: \"intruder\") { id post { title } } }",
            json!({ "id": f.post }),
        ),
        (
            "createReply(comment)",
            "mutation($id: ID!) { createReply(commentId: $id, body: \"intruder\") { id comment { body } } }",
            json!({ "id": f.comment }),
        ),
        (
            "createReply(reply)",
            "mutation($id: ID!) { createReply(commentId: $id, body: \"intruder\") { id comment { body } } }",
            json!({ "id": f.reply }),
        ),
        (
            "editComment(comment)",
            "mutation($id: ID!) { editComment(commentId: $id, body: \"hacked\") { id body } }",
            json!({ "id": f.comment }),
        ),
        (
            "editComment(reply)",
            "mutation($id: ID!) { editComment(commentId: $id, body: \"hacked\") { id body } }",
            json!({ "id": f.reply }),
        ),
        (
            "deleteComment(reply)",
            "mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }",
            json!({ "id": f.reply }),
        ),
        (
            "deleteComment(comment)",
            "mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }",
            json!({ "id": f.comment }),
        ),
        ("likePost", "mutation($id: ID!) { likePost(postId: $id) { id likeCount title } }", json!({ "id": f.post })),
        (
            "unlikePost",
            "mutation($id: ID!) { unlikePost(postId: $id) { id likeCount title } }",
            json!({ "id": f.post }),
        ),
        (
            "likeComment(comment)",
            "mutation($id: ID!) { likeComment(commentId: $id) { id likeCount body } }",
            json!({ "id": f.comment }),
        ),
        (
            "likeComment(reply)",
            "mutation($id: ID!) { likeComment(commentId: $id) { id likeCount body } }",
            json!({ "id": f.reply }),
        ),
        (
            "unlikeComment(comment)",
            "mutation($id: ID!) { unlikeComment(commentId: $id) { id likeCount body } }",
            json!({ "id": f.comment }),
        ),
        (
            "unlikeComment(reply)",
            "mutation($id: ID!) { unlikeComment(commentId: $id) { id likeCount body } }",
            json!({ "id": f.reply }),
        ),
        ("startPostView", "mutation($id: ID!) { startPostView(postId: $id) { ticket } }", json!({ "id": f.post })),
        (
            "acceptAnswer",
            "mutation($id: ID!, $c: ID) { acceptAnswer(postId: $id, commentId: $c) { id resolved } }",
            json!({ "id": f.post, "c": f.comment }),
        ),
        (
            "markResolved",
            "mutation($id: ID!) { markResolved(postId: $id, resolved: true) { id resolved } }",
            json!({ "id": f.post }),
        ),
        (
            "endorse(post)",
            "mutation($id: ID!) { endorse(id: $id, endorsed: true) { id endorsement { at } } }",
            json!({ "id": f.post }),
        ),
        (
            "endorse(comment)",
            "mutation($id: ID!) { endorse(id: $id, endorsed: true) { id endorsement { at } } }",
            json!({ "id": f.comment }),
        ),
        (
            "endorse(reply)",
            "mutation($id: ID!) { endorse(id: $id, endorsed: true) { id endorsement { at } } }",
            json!({ "id": f.reply }),
        ),
        ("pinPost", "mutation($id: ID!) { pinPost(postId: $id, pinned: true) { id pinned } }", json!({ "id": f.post })),
        ("makePostPublic", "mutation($id: ID!) { makePostPublic(postId: $id) { id title } }", json!({ "id": f.post })),
        (
            "tagPost (editPost(tagIds))",
            "mutation($id: ID!, $t: ID!) { editPost(postId: $id, tagIds: [$t]) { id tags { name } } }",
            json!({ "id": f.post, "t": f.tag }),
        ),
        (
            "createTag",
            "mutation($id: ID!) { createTag(courseId: $id, name: \"intruder\") { id name } }",
            json!({ "id": course }),
        ),
        (
            "renameTag",
            "mutation($id: ID!) { renameTag(tagId: $id, name: \"intruder\") { id name } }",
            json!({ "id": f.tag }),
        ),
        ("deleteTag", "mutation($id: ID!) { deleteTag(tagId: $id) { deletedId } }", json!({ "id": f.tag })),
        (
            "setCourseAnonymity",
            "mutation($id: ID!) { setCourseAnonymity(courseId: $id, anonymity: EVERYONE) { id anonymity } }",
            json!({ "id": course }),
        ),
    ]
}

/// Runs every mutation as one viewer, expecting `code` and an unchanged database after each:
/// in buffered mode, also after the worker has run (a refused like must not have reached the
/// like stream either).
async fn expect_every_mutation_refused(f: &Fixture, who: &str, token: Option<&str>, code: &str) {
    let mut failures = Vec::new();
    for (name, query, vars) in mutation_table(f) {
        let before = snapshot(&f.app).await;
        let response = f.app.gql(token, query, vars).await;
        if let Some(problem) = refusal_problem(&response, code) {
            failures.push(format!("{who} {name}: {problem}"));
        }
        let applied = f.apply_likes().await;
        if applied != 0 {
            failures.push(format!("{who} {name}: the like worker applied {applied} event(s)"));
        }
        let after = snapshot(&f.app).await;
        if after != before {
            failures.push(format!("{who} {name}: database changed\n  before {before:?}\n  after  {after:?}"));
        }
    }
    assert_no_failures(failures);
}

in_each_like_mode!(anonymous_viewer_is_unauthenticated_for_every_mutation);
async fn anonymous_viewer_is_unauthenticated_for_every_mutation(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    expect_every_mutation_refused(&f, "anonymous", None, "UNAUTHENTICATED").await;
}

in_each_like_mode!(non_member_is_forbidden_from_every_mutation_and_changes_nothing);
async fn non_member_is_forbidden_from_every_mutation_and_changes_nothing(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let token = f.token(f.w.outsider);
    expect_every_mutation_refused(&f, "outsider", Some(&token), "FORBIDDEN").await;
    // The same token works in the outsider's own course: the refusal is about membership.
    let data = f
        .app
        .gql_ok(
            Some(&token),
            "mutation($id: ID!) { likePost(postId: $id) { likeCount likedByMe } }",
            json!({ "id": f.other_post }),
        )
        .await;
    assert_eq!(data["likePost"], json!({ "likeCount": 1, "likedByMe": true }));
    f.apply_likes().await;
    let written = rows_and_counter(&f.app, Target::Post(raw_id(&f.other_post))).await;
    assert_eq!(written, (1, 1), "the outsider's like in their own course is written");
    // None of the refused likes waits in a liked-set for the day the outsider joins CS101.
    assert_eq!(liked_by_me_as_a_member(&f, f.w.outsider).await, liked_by_me(false));
}

in_each_like_mode!(an_instructor_of_another_course_has_no_power_here);
async fn an_instructor_of_another_course_has_no_power_here(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let other_prof = f.app.create_user("otherprof").await;
    f.app.enroll(f.w.other_course, other_prof, "instructor").await;
    let token = f.token(other_prof);
    expect_every_mutation_refused(&f, "otherprof", Some(&token), "FORBIDDEN").await;
    // And CS101's instructor cannot moderate BIO200.
    let before = snapshot(&f.app).await;
    let response = f
        .app
        .gql(
            Some(&f.token(f.w.instructor)),
            "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }",
            json!({ "id": f.other_post }),
        )
        .await;
    assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"), "{response}");
    assert_eq!(snapshot(&f.app).await, before);
    // None of otherprof's refused likes waits in a liked-set for the day they join CS101.
    assert_eq!(liked_by_me_as_a_member(&f, other_prof).await, liked_by_me(false));
}

in_each_like_mode!(member_may_create_and_like_in_their_course);
async fn member_may_create_and_like_in_their_course(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let bob = f.token(f.w.bob);
    let app = &f.app;

    let posts = count(app, "SELECT count(*) AS v FROM posts").await;
    let data = app
        .gql_ok(
            Some(&bob),
            "mutation($id: ID!) { createPost(courseId: $id, title: \"bob's\", body: \"question\") { id title author { handle } course { code } } }",
            json!({ "id": gid("Course", f.w.course) }),
        )
        .await;
    assert_eq!(data["createPost"]["author"]["handle"], "bob");
    assert_eq!(data["createPost"]["course"]["code"], "CS101");
    assert_eq!(count(app, "SELECT count(*) AS v FROM posts").await, posts + 1);

    let data = app
        .gql_ok(
            Some(&bob),
            "mutation($id: ID!) { createComment(postId: $id, body: \"bob comments\") { id author { handle } } }",
            json!({ "id": f.post }),
        )
        .await;
    assert_eq!(data["createComment"]["author"]["handle"], "bob");
    for target in [&f.comment, &f.reply] {
        let data = app
            .gql_ok(
                Some(&bob),
                "mutation($id: ID!) { createReply(commentId: $id, body: \"bob replies\") { replyTo { handle } comment { id } } }",
                json!({ "id": target }),
            )
            .await;
        assert_eq!(data["createReply"]["replyTo"]["handle"], "alice");
        assert_eq!(data["createReply"]["comment"]["id"], f.comment.as_str());
    }
    let bob_comments = app.scalar_i64("SELECT count(*) AS v FROM comments WHERE user_id = $1", [f.w.bob.into()]).await;
    assert_eq!(bob_comments, 3);

    // Likes: alice already likes each target, so bob's like makes 2 and his unlike 1 again.
    // Both modes answer the same counts: sync from the row it has just written; buffered from
    // the committed count (the worker applies each toggle before the next) plus this toggle.
    // What differs is when PostgreSQL has bob's row: when sync answers, but in buffered mode
    // only once the worker has run.
    let buffered = f.mode == LikeMode::Buffered;
    let bob_rows = || {
        app.scalar_i64(
            "SELECT (SELECT count(*) FROM post_likes WHERE user_id = $1) + (SELECT count(*) FROM comment_likes WHERE user_id = $1) AS v",
            [f.w.bob.into()],
        )
    };
    let post = raw_id(&f.post);
    let data = app
        .gql_ok(
            Some(&bob),
            "mutation($id: ID!) { likePost(postId: $id) { likeCount likedByMe } }",
            json!({ "id": f.post }),
        )
        .await;
    assert_eq!(data["likePost"], json!({ "likeCount": 2, "likedByMe": true }));
    assert_eq!(bob_rows().await, if buffered { 0 } else { 1 }, "bob's post like before the worker runs");
    f.apply_likes().await;
    assert_eq!(rows_and_counter(app, Target::Post(post)).await, (2, 2));
    let data = app
        .gql_ok(
            Some(&bob),
            "mutation($id: ID!) { unlikePost(postId: $id) { likeCount likedByMe } }",
            json!({ "id": f.post }),
        )
        .await;
    assert_eq!(data["unlikePost"], json!({ "likeCount": 1, "likedByMe": false }));
    assert_eq!(bob_rows().await, if buffered { 1 } else { 0 }, "bob's post unlike before the worker runs");
    f.apply_likes().await;
    assert_eq!(rows_and_counter(app, Target::Post(post)).await, (1, 1));
    for target in [&f.comment, &f.reply] {
        let data = app
            .gql_ok(
                Some(&bob),
                "mutation($id: ID!) { likeComment(commentId: $id) { likeCount likedByMe } }",
                json!({ "id": target }),
            )
            .await;
        assert_eq!(data["likeComment"], json!({ "likeCount": 2, "likedByMe": true }));
        assert_eq!(bob_rows().await, if buffered { 0 } else { 1 }, "bob's like of {target} before the worker runs");
        f.apply_likes().await;
        assert_eq!(
            app.scalar_i64("SELECT count(*) AS v FROM comment_likes WHERE user_id = $1", [f.w.bob.into()]).await,
            1
        );
        assert_eq!(rows_and_counter(app, Target::Comment(raw_id(target))).await, (2, 2));
        let data = app
            .gql_ok(
                Some(&bob),
                "mutation($id: ID!) { unlikeComment(commentId: $id) { likeCount likedByMe } }",
                json!({ "id": target }),
            )
            .await;
        assert_eq!(data["unlikeComment"], json!({ "likeCount": 1, "likedByMe": false }));
        assert_eq!(bob_rows().await, if buffered { 1 } else { 0 }, "bob's unlike of {target} before the worker runs");
        f.apply_likes().await;
        assert_eq!(rows_and_counter(app, Target::Comment(raw_id(target))).await, (1, 1));
    }
    assert_eq!(bob_rows().await, 0);
    assert_eq!(liked_by_me_as_a_member(&f, f.w.bob).await, liked_by_me(false));
    assert_eq!(liked_by_me_as_a_member(&f, f.w.alice).await, liked_by_me(true));
}

/// The mutations that change or remove alice's content: (edits, deletes).
fn edit_and_delete_table(f: &Fixture) -> (Vec<Mutation>, Vec<Mutation>) {
    let edits = mutation_table(f).into_iter().filter(|(name, _, _)| name.starts_with("edit")).collect();
    // Reply, then comment, then post: deleting a parent first would take the child with it.
    let deletes = ["deleteComment(reply)", "deleteComment(comment)", "deletePost"]
        .into_iter()
        .map(|wanted| {
            mutation_table(f).into_iter().find(|(name, _, _)| *name == wanted).expect("delete mutation in the table")
        })
        .collect();
    (edits, deletes)
}

in_each_like_mode!(a_student_may_neither_edit_nor_delete_someone_elses_content);
async fn a_student_may_neither_edit_nor_delete_someone_elses_content(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let bob = f.token(f.w.bob);
    let (edits, deletes) = edit_and_delete_table(&f);
    let mut failures = Vec::new();
    for (name, query, vars) in edits.into_iter().chain(deletes) {
        let before = snapshot(&f.app).await;
        let response = f.app.gql(Some(&bob), query, vars).await;
        if let Some(problem) = refusal_problem(&response, "FORBIDDEN") {
            failures.push(format!("bob {name}: {problem}"));
        }
        if snapshot(&f.app).await != before {
            failures.push(format!("bob {name}: database changed"));
        }
    }
    assert_no_failures(failures);
    let title =
        f.app.gql_ok(Some(&bob), "query($id: ID!) { post(id: $id) { title editedAt } }", json!({ "id": f.post })).await;
    assert_eq!(title["post"], json!({ "title": format!("{SECRET} title"), "editedAt": null }));
}

in_each_like_mode!(the_instructor_may_delete_but_not_edit_a_students_content);
async fn the_instructor_may_delete_but_not_edit_a_students_content(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let prof = f.token(f.w.instructor);
    let (edits, deletes) = edit_and_delete_table(&f);
    let mut failures = Vec::new();
    for (name, query, vars) in edits {
        let before = snapshot(&f.app).await;
        let response = f.app.gql(Some(&prof), query, vars).await;
        if let Some(problem) = refusal_problem(&response, "FORBIDDEN") {
            failures.push(format!("prof {name}: {problem}"));
        }
        if snapshot(&f.app).await != before {
            failures.push(format!("prof {name}: database changed"));
        }
    }
    assert_no_failures(failures);

    let live_comments = "SELECT count(*) AS v FROM comments WHERE deleted_at IS NULL";
    let live_posts = "SELECT count(*) AS v FROM posts WHERE deleted_at IS NULL";
    let (comments, posts) = (count(&f.app, live_comments).await, count(&f.app, live_posts).await);
    let mut expected = [
        (f.reply.as_str(), comments - 1, posts),
        (f.comment.as_str(), comments - 2, posts),
        (f.post.as_str(), comments - 2, posts - 1),
    ]
    .into_iter();
    for (name, query, vars) in deletes {
        let data = f.app.gql_ok(Some(&prof), query, vars).await;
        let (id, want_comments, want_posts) = expected.next().unwrap();
        let deleted = data.as_object().unwrap().values().next().unwrap()["deletedId"].clone();
        assert_eq!(deleted, id, "{name}");
        assert_eq!(count(&f.app, live_comments).await, want_comments, "{name}");
        assert_eq!(count(&f.app, live_posts).await, want_posts, "{name}");
    }
    // Gone for everyone now.
    let response =
        f.app.gql(Some(&f.token(f.w.alice)), "query($id: ID!) { post(id: $id) { id } }", json!({ "id": f.post })).await;
    assert_eq!(error_code(&response).as_deref(), Some("NOT_FOUND"), "{response}");
}

in_each_like_mode!(the_author_may_edit_and_delete_their_own_content);
async fn the_author_may_edit_and_delete_their_own_content(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let alice = f.token(f.w.alice);
    let data = f
        .app
        .gql_ok(
            Some(&alice),
            "mutation($p: ID!, $c: ID!, $r: ID!) { editPost(postId: $p, title: \"new title\") { title body editedAt } \
             c: editComment(commentId: $c, body: \"new comment\") { __typename body editedAt } \
             r: editComment(commentId: $r, body: \"new reply\") { __typename body editedAt } }",
            json!({ "p": f.post, "c": f.comment, "r": f.reply }),
        )
        .await;
    assert_eq!(data["editPost"]["title"], "new title");
    assert_eq!(data["editPost"]["body"], format!("{SECRET} post body"));
    assert!(data["editPost"]["editedAt"].is_string());
    assert_eq!(data["c"]["__typename"], "Comment");
    assert_eq!(data["c"]["body"], "new comment");
    assert_eq!(data["r"]["__typename"], "Reply");
    assert_eq!(data["r"]["body"], "new reply");
    assert_eq!(count(&f.app, "SELECT count(*) AS v FROM comments WHERE edited_at IS NOT NULL").await, 2);

    let data = f
        .app
        .gql_ok(
            Some(&alice),
            "mutation($p: ID!, $r: ID!) { r: deleteComment(commentId: $r) { deletedId } p: deletePost(postId: $p) { deletedId } }",
            json!({ "p": f.post, "r": f.reply }),
        )
        .await;
    assert_eq!(data["r"]["deletedId"], f.reply.as_str());
    assert_eq!(data["p"]["deletedId"], f.post.as_str());
    assert_eq!(count(&f.app, "SELECT count(*) AS v FROM posts WHERE deleted_at IS NOT NULL").await, 1);
}

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

fn sign(claims: Json, secret: &str, algorithm: jsonwebtoken::Algorithm) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(algorithm),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// `Authorization` header values that must not authenticate anyone (alice is `user`).
fn bad_headers(user: i64) -> Vec<(&'static str, String)> {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let hs256 = jsonwebtoken::Algorithm::HS256;
    let valid_claims = json!({ "sub": user.to_string(), "iat": unix_now(), "exp": unix_now() + 3600 });
    let other_secret = course_forum::testing::auth::TokenKeys::new("a-completely-different-secret-0000")
        .unwrap()
        .mint(user, Duration::from_secs(3600))
        .unwrap();
    let good = sign(valid_claims.clone(), JWT_SECRET, hs256);
    let mut tampered = good.clone();
    // Flip the last signature character.
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    vec![
        ("signed with another secret", format!("Bearer {other_secret}")),
        (
            "expired an hour ago",
            format!(
                "Bearer {}",
                sign(
                    json!({ "sub": user.to_string(), "iat": unix_now() - 7200, "exp": unix_now() - 3600 }),
                    JWT_SECRET,
                    hs256
                )
            ),
        ),
        (
            "without exp",
            format!("Bearer {}", sign(json!({ "sub": user.to_string(), "iat": unix_now() }), JWT_SECRET, hs256)),
        ),
        (
            "without sub",
            format!("Bearer {}", sign(json!({ "iat": unix_now(), "exp": unix_now() + 3600 }), JWT_SECRET, hs256)),
        ),
        (
            "sub is not a user id",
            format!(
                "Bearer {}",
                sign(json!({ "sub": "alice", "iat": unix_now(), "exp": unix_now() + 3600 }), JWT_SECRET, hs256)
            ),
        ),
        (
            "HS512 instead of HS256",
            format!("Bearer {}", sign(valid_claims.clone(), JWT_SECRET, jsonwebtoken::Algorithm::HS512)),
        ),
        ("alg none", format!("Bearer {}.{}.", b64(r#"{"alg":"none","typ":"JWT"}"#), b64(&valid_claims.to_string()))),
        ("tampered signature", format!("Bearer {tampered}")),
        ("garbage token", "Bearer garbage".to_owned()),
        ("three garbage parts", "Bearer a.b.c".to_owned()),
        ("empty bearer", "Bearer ".to_owned()),
        ("no scheme", good.clone()),
        ("basic scheme", format!("Basic {}", b64("alice:password"))),
    ]
}

in_each_like_mode!(invalid_tokens_are_unauthenticated_and_change_nothing);
async fn invalid_tokens_are_unauthenticated_and_change_nothing(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut failures = Vec::new();
    let create = "mutation($id: ID!) { createPost(courseId: $id, title: \"forged\", body: \"forged\") { id } }";
    for (name, header) in bad_headers(f.w.alice) {
        let response = gql_with_header(&f.app, &header, "{ me { handle } }", json!({})).await;
        if let Some(problem) = refusal_problem(&response, "UNAUTHENTICATED") {
            failures.push(format!("{name}: me: {problem}"));
        }
        let before = snapshot(&f.app).await;
        let response = gql_with_header(&f.app, &header, create, json!({ "id": gid("Course", f.w.course) })).await;
        if let Some(problem) = refusal_problem(&response, "UNAUTHENTICATED") {
            failures.push(format!("{name}: createPost: {problem}"));
        }
        let response = gql_with_header(&f.app, &header, NODE_QUERY, json!({ "id": f.post })).await;
        if let Some(problem) = refusal_problem(&response, "UNAUTHENTICATED") {
            failures.push(format!("{name}: node(Post): {problem}"));
        }
        if snapshot(&f.app).await != before {
            failures.push(format!("{name}: database changed"));
        }
    }
    assert_no_failures(failures);
    // Control: a well-formed header with the test secret does authenticate.
    let good = format!("Bearer {}", f.token(f.w.alice));
    let response = gql_with_header(&f.app, &good, "{ me { handle } }", json!({})).await;
    assert_eq!(response["data"]["me"]["handle"], "alice", "{response}");
}

in_each_like_mode!(a_token_for_a_user_that_does_not_exist_is_unauthenticated);
async fn a_token_for_a_user_that_does_not_exist_is_unauthenticated(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let ghost = count(&f.app, "SELECT coalesce(max(id), 0) + 1000 AS v FROM users").await;
    let token = f.token(ghost);
    let response = f.app.gql(Some(&token), "{ me { id handle } }", json!({})).await;
    assert_eq!(error_code(&response).as_deref(), Some("UNAUTHENTICATED"), "{response}");
    assert!(response["data"].is_null(), "{response}");
    // The ghost belongs nowhere, so it can neither read nor write course content.
    let response = f.app.gql(Some(&token), "{ myCourses { id } }", json!({})).await;
    assert!(response["data"]["myCourses"] == json!([]) || response["data"].is_null(), "{response}");
    let before = snapshot(&f.app).await;
    for (name, query, vars) in mutation_table(&f) {
        let response = f.app.gql(Some(&token), query, vars).await;
        let code = error_code(&response);
        assert!(matches!(code.as_deref(), Some("UNAUTHENTICATED" | "FORBIDDEN")), "ghost {name}: {response}");
        assert!(!response.to_string().contains(SECRET), "ghost {name}: {response}");
    }
    assert_eq!(f.apply_likes().await, 0, "a ghost's like reached the like stream");
    assert_eq!(snapshot(&f.app).await, before);
    // Should the id come to exist and join CS101, none of the ghost's likes waits for it.
    f.app
        .scalar_i64(
            "INSERT INTO users (id, handle, display_name) OVERRIDING SYSTEM VALUE VALUES ($1, 'ghost', 'ghost') \
             RETURNING id AS v",
            [ghost.into()],
        )
        .await;
    assert_eq!(liked_by_me_as_a_member(&f, ghost).await, liked_by_me(false));
}

in_each_like_mode!(a_member_removed_from_the_course_loses_access_at_once);
async fn a_member_removed_from_the_course_loses_access_at_once(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let bob = f.token(f.w.bob);
    // likedByMe loads bob's liked-set (buffered mode), which must then take none of his likes.
    let query = "query($id: ID!) { post(id: $id) { title likedByMe } }";
    let data = f.app.gql_ok(Some(&bob), query, json!({ "id": f.post })).await;
    assert_eq!(data["post"]["title"], format!("{SECRET} title"));
    assert_eq!(data["post"]["likedByMe"], false);
    f.app
        .scalar_i64(
            "WITH gone AS (DELETE FROM course_members WHERE course_id = $1 AND user_id = $2 RETURNING 1) \
             SELECT count(*) AS v FROM gone",
            [f.w.course.into(), f.w.bob.into()],
        )
        .await;
    f.app.memberships_settled().await;
    // The same, still valid, token.
    let response = f.app.gql(Some(&bob), query, json!({ "id": f.post })).await;
    assert_eq!(refusal_problem(&response, "FORBIDDEN"), None);
    expect_every_mutation_refused(&f, "removed bob", Some(&bob), "FORBIDDEN").await;
    // Back in the course, bob has none of the likes he was refused.
    assert_eq!(liked_by_me_as_a_member(&f, f.w.bob).await, liked_by_me(false));
}

// ---------------------------------------------------------------------------------------------
// Websockets: tokens at connection_init, and every subscription
// ---------------------------------------------------------------------------------------------

in_each_like_mode!(invalid_tokens_are_refused_at_websocket_connection_init);
async fn invalid_tokens_are_refused_at_websocket_connection_init(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut failures = Vec::new();
    for (name, header) in bad_headers(f.w.alice) {
        match common::ws::GqlSocket::connect_with_payload(
            f.app.addr,
            json!({ "authorization": header }),
            "graphql-transport-ws",
        )
        .await
        {
            Ok(_) => failures.push(format!("{name}: the connection was acknowledged")),
            Err(refused) if refused.code != 4403 => failures.push(format!("{name}: closed with {refused:?}")),
            Err(_) => {}
        }
    }
    // A payload that is not even a header, and a token in the wrong place.
    for (name, payload) in [
        ("number", json!({ "authorization": 42 })),
        ("list", json!({ "authorization": ["Bearer", f.token(f.w.alice)] })),
        ("token without key", json!({ "token": f.token(f.w.alice) })),
    ] {
        match common::ws::GqlSocket::connect_with_payload(f.app.addr, payload, "graphql-transport-ws").await {
            Err(refused) if refused.code == 4403 => {}
            other => failures.push(format!("{name}: {:?}", other.err())),
        }
    }
    assert_no_failures(failures);
    // Control: the same path with a valid token is acknowledged.
    let good = json!({ "authorization": format!("Bearer {}", f.token(f.w.alice)) });
    assert!(common::ws::GqlSocket::connect_with_payload(f.app.addr, good, "graphql-transport-ws").await.is_ok());
}

/// The code of a refused subscription: an `error` message or a `next` with errors and no data.
fn subscription_refusal(message: &Json) -> Option<String> {
    match message["type"].as_str()? {
        "error" => message["payload"][0]["extensions"]["code"].as_str().map(str::to_owned),
        "next" if message["payload"]["data"].is_null() => {
            message["payload"]["errors"][0]["extensions"]["code"].as_str().map(str::to_owned)
        }
        _ => None,
    }
}

in_each_like_mode!(non_member_is_forbidden_from_every_subscription_and_hears_nothing);
async fn non_member_is_forbidden_from_every_subscription_and_hears_nothing(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut socket = common::ws::GqlSocket::connect(f.app.addr, Some(&f.token(f.w.outsider))).await.expect("connect");
    let like_counts = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }";
    let cases = [
        ("likeCounts(post)", like_counts, json!({ "ids": [f.post] })),
        ("likeCounts(comment)", like_counts, json!({ "ids": [f.comment] })),
        ("likeCounts(reply)", like_counts, json!({ "ids": [f.reply] })),
        // One foreign id among the outsider's own refuses the whole subscription.
        ("likeCounts(own and foreign)", like_counts, json!({ "ids": [f.other_post, f.post] })),
        (
            "courseActivity",
            "subscription($c: ID!) { courseActivity(courseId: $c) { kind post { title } comment { body } } }",
            json!({ "c": gid("Course", f.w.course) }),
        ),
    ];
    let mut failures = Vec::new();
    for (n, (name, query, vars)) in cases.iter().enumerate() {
        let id = format!("s{n}");
        socket.subscribe(&id, query, vars.clone()).await;
        let message = loop {
            let message = socket.next_message(Duration::from_secs(5)).await.expect("an answer");
            if message["id"] == id.as_str() && message["type"] != "complete" {
                break message;
            }
        };
        if subscription_refusal(&message).as_deref() != Some("FORBIDDEN") {
            failures.push(format!("outsider {name}: {message}"));
        }
        if message.to_string().contains(SECRET) {
            failures.push(format!("outsider {name} leaks: {message}"));
        }
    }
    assert_no_failures(failures);
    // Activity and likes in CS101 reach nobody on the outsider's socket. Control: a member's
    // socket hears the new like count, so the outsider's silence is not just a quiet server.
    let alice = f.token(f.w.alice);
    let mut member = common::ws::GqlSocket::connect(f.app.addr, Some(&alice)).await.expect("connect the member");
    member.subscribe("m", like_counts, json!({ "ids": [f.post] })).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    f.app
        .gql_ok(
            Some(&alice),
            "mutation($p: ID!) { createComment(postId: $p, body: \"SECRET-CS101 later\") { id } unlikePost(postId: $p) { id } }",
            json!({ "p": f.post }),
        )
        .await;
    // Buffered mode publishes the new count only when the worker has committed the unlike:
    // apply it, or the quiet second below would prove nothing about likes.
    f.apply_likes().await;
    assert_eq!(rows_and_counter(&f.app, Target::Post(raw_id(&f.post))).await, (0, 0), "alice's unlike applied");
    let heard = member.next_data(Duration::from_secs(5)).await.expect("the member hears the new count");
    assert_eq!(heard["likeCounts"], json!({ "id": f.post, "likeCount": 0 }));
    let quiet_until = std::time::Instant::now() + Duration::from_secs(1);
    while let Some(left) = quiet_until.checked_duration_since(std::time::Instant::now()) {
        match socket.next_message(left).await {
            Some(message) if message["type"] == "complete" => continue,
            Some(message) => panic!("the outsider heard: {message}"),
            None => break,
        }
    }
}
