//! Bad input: every malformed id, page argument, text, query shape or request gets a clear
//! error with an `extensions.code`, returns no data, and changes nothing in the database.
//!
//! Every test runs in two like modes, each as a test of its own (`<test>::sync`,
//! `<test>::buffered`): sync writes a like to PostgreSQL before answering it; buffered, the
//! default users get, answers from a Redis liked-set and leaves PostgreSQL to a worker, which
//! these tests step by hand (`Fixture::apply_likes`). In buffered mode a refused like must also
//! leave the like stream and the liked-sets alone.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use course_forum::testing::config::LikeMode;
use course_forum::testing::worker::LikeWorker;
use serde_json::{Value as Json, json};

use crate::common::snapshot::{assert_no_failures, count, snapshot};
use crate::common::{self, TestApp, World, error_code, gid, raw_id};

// ---------------------------------------------------------------------------------------------
// Fixture and helpers
// ---------------------------------------------------------------------------------------------

/// The world plus alice's post, comment and reply in CS101.
struct Fixture {
    app: TestApp,
    w: World,
    /// Buffered mode's like worker, stepped by hand (`apply_likes`); none in sync mode.
    worker: Option<LikeWorker>,
    alice: String,
    post: String,
    comment: String,
    reply: String,
}

impl Fixture {
    async fn new(mode: LikeMode) -> Fixture {
        Self::from_app(TestApp::spawn_in(mode).await).await
    }

    /// The fixture on an app spawned in sync or buffered mode (read back from its settings).
    async fn from_app(app: TestApp) -> Fixture {
        let worker = match app.state.settings.like_mode {
            LikeMode::Sync => None,
            LikeMode::Buffered => Some(app.worker().await),
            LikeMode::Recount => panic!("these tests run in sync and buffered mode"),
        };
        let w = World::create(&app).await;
        let alice = app.token(w.alice);
        let data = app
            .gql_ok(
                Some(&alice),
                "mutation($c: ID!) { createPost(courseId: $c, title: \"first post\", body: \"hello\") { id } }",
                json!({ "c": gid("Course", w.course) }),
            )
            .await;
        let post = data["createPost"]["id"].as_str().unwrap().to_owned();
        let data = app
            .gql_ok(
                Some(&alice),
                "mutation($p: ID!) { createComment(postId: $p, body: \"a comment\") { id } }",
                json!({ "p": post }),
            )
            .await;
        let comment = data["createComment"]["id"].as_str().unwrap().to_owned();
        let data = app
            .gql_ok(
                Some(&alice),
                "mutation($c: ID!) { createReply(commentId: $c, body: \"a reply\") { id } }",
                json!({ "c": comment }),
            )
            .await;
        let reply = data["createReply"]["id"].as_str().unwrap().to_owned();
        Fixture { app, w, worker, alice, post, comment, reply }
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

    /// Alice's likedByMe on her post, comment and reply: all false after refused likes (in
    /// buffered mode a like is in her liked-set before it is in PostgreSQL; a refused one must
    /// not be there).
    async fn alice_liked(&self) -> Json {
        let data = self
            .app
            .gql_ok(
                Some(&self.alice),
                "query($id: ID!) { post(id: $id) { likedByMe comments { nodes { likedByMe \
                 replies { nodes { likedByMe } } } } } }",
                json!({ "id": self.post }),
            )
            .await;
        data["post"].clone()
    }

    /// An existing id of each kind.
    fn existing(&self, kind: &str) -> String {
        match kind {
            "User" => gid("User", self.w.alice),
            "Course" => gid("Course", self.w.course),
            "Post" => self.post.clone(),
            "Comment" => self.comment.clone(),
            "Reply" => self.reply.clone(),
            other => panic!("unknown kind {other}"),
        }
    }
}

const KINDS: [&str; 5] = ["User", "Course", "Post", "Comment", "Reply"];

/// `Fixture::alice_liked` when she likes nothing.
fn nothing_liked() -> Json {
    json!({ "likedByMe": false, "comments": { "nodes": [
        { "likedByMe": false, "replies": { "nodes": [ { "likedByMe": false } ] } }
    ] } })
}

/// Checks a refusal: the code, a message, and no data.
fn refusal_problem(response: &Json, code: &str) -> Option<String> {
    if error_code(response).as_deref() != Some(code) {
        return Some(format!("expected {code}, got {response}"));
    }
    let message = response["errors"][0]["message"].as_str().unwrap_or("");
    if message.trim().is_empty() {
        return Some(format!("error without a message: {response}"));
    }
    if !no_data(response) {
        return Some(format!("expected no data with {code}, got {response}"));
    }
    None
}

/// No data: `data` is null or absent, or (async-graphql stops null propagation at the root
/// fields) every root field is null.
fn no_data(response: &Json) -> bool {
    match &response["data"] {
        Json::Null => true,
        Json::Object(fields) => fields.values().all(Json::is_null),
        _ => false,
    }
}

/// Sends one request as alice, expects `code`, and checks the database did not change: in
/// buffered mode, also after the worker has run (a refused like must not have reached the like
/// stream either).
async fn expect_refused(f: &Fixture, name: &str, query: &str, vars: Json, code: &str, failures: &mut Vec<String>) {
    let app = &f.app;
    let before = snapshot(app).await;
    let response = app.gql(Some(&f.alice), query, vars).await;
    if let Some(problem) = refusal_problem(&response, code) {
        failures.push(format!("{name}: {problem}"));
    }
    let applied = f.apply_likes().await;
    if applied != 0 {
        failures.push(format!("{name}: the like worker applied {applied} event(s)"));
    }
    let after = snapshot(app).await;
    if after != before {
        failures.push(format!("{name}: database changed\n  before {before:?}\n  after  {after:?}"));
    }
}

fn b64(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(text)
}

/// Every field that takes an id: (name, query using `$id`, the kinds it accepts).
const ID_SLOTS: &[(&str, &str, &[&str])] = &[
    ("course", "query($id: ID!) { course(id: $id) { id } }", &["Course"]),
    ("post", "query($id: ID!) { post(id: $id) { id } }", &["Post"]),
    ("createPost", "mutation($id: ID!) { createPost(courseId: $id, title: \"t\", body: \"b\") { id } }", &["Course"]),
    ("editPost", "mutation($id: ID!) { editPost(postId: $id, title: \"changed\") { id } }", &["Post"]),
    ("deletePost", "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }", &["Post"]),
    ("createComment", "mutation($id: ID!) { createComment(postId: $id, body: \"b\") { id } }", &["Post"]),
    ("createReply", "mutation($id: ID!) { createReply(commentId: $id, body: \"b\") { id } }", &["Comment", "Reply"]),
    (
        "editComment",
        "mutation($id: ID!) { editComment(commentId: $id, body: \"changed\") { id } }",
        &["Comment", "Reply"],
    ),
    ("deleteComment", "mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }", &["Comment", "Reply"]),
    ("likePost", "mutation($id: ID!) { likePost(postId: $id) { id } }", &["Post"]),
    ("unlikePost", "mutation($id: ID!) { unlikePost(postId: $id) { id } }", &["Post"]),
    ("likeComment", "mutation($id: ID!) { likeComment(commentId: $id) { id } }", &["Comment", "Reply"]),
    ("unlikeComment", "mutation($id: ID!) { unlikeComment(commentId: $id) { id } }", &["Comment", "Reply"]),
    (
        "addCourseMember",
        "mutation($id: ID!) { addCourseMember(courseId: $id, userId: \"VXNlcjox\", role: STUDENT) { changed } }",
        &["Course"],
    ),
    (
        "removeCourseMember",
        "mutation($id: ID!) { removeCourseMember(courseId: $id, userId: \"VXNlcjox\") { changed } }",
        &["Course"],
    ),
    (
        "setCourseMemberRole",
        "mutation($id: ID!) { setCourseMemberRole(courseId: $id, userId: \"VXNlcjox\", role: STUDENT) { changed } }",
        &["Course"],
    ),
    ("acceptAnswer", "mutation($id: ID!) { acceptAnswer(postId: $id, commentId: null) { id } }", &["Post"]),
    ("markResolved", "mutation($id: ID!) { markResolved(postId: $id, resolved: true) { id } }", &["Post"]),
    ("endorse", "mutation($id: ID!) { endorse(id: $id, endorsed: true) { id } }", &["Post", "Comment", "Reply"]),
    ("pinPost", "mutation($id: ID!) { pinPost(postId: $id, pinned: true) { id } }", &["Post"]),
    ("makePostPublic", "mutation($id: ID!) { makePostPublic(postId: $id) { id } }", &["Post"]),
    ("createTag", "mutation($id: ID!) { createTag(courseId: $id, name: \"t\") { id } }", &["Course"]),
    (
        "setCourseAnonymity",
        "mutation($id: ID!) { setCourseAnonymity(courseId: $id, anonymity: EVERYONE) { id } }",
        &["Course"],
    ),
    ("node", "query($id: ID!) { node(id: $id) { id } }", &KINDS),
];

// ---------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------

in_each_like_mode!(an_id_of_the_wrong_kind_is_bad_user_input);
async fn an_id_of_the_wrong_kind_is_bad_user_input(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut failures = Vec::new();
    for (slot, query, accepted) in ID_SLOTS {
        for kind in KINDS.iter().filter(|k| !accepted.contains(k)) {
            expect_refused(
                &f,
                &format!("{slot} given a {kind} id"),
                query,
                json!({ "id": f.existing(kind) }),
                "BAD_USER_INPUT",
                &mut failures,
            )
            .await;
        }
    }
    assert_no_failures(failures);
    assert_eq!(f.alice_liked().await, nothing_liked());
}

/// Malformed ids, each aimed at `kind` where the text names one: (name, id).
fn garbage_ids(kind: &str) -> Vec<(String, String)> {
    let mut ids = vec![
        ("xyz".to_owned(), "xyz".to_owned()),
        ("empty".to_owned(), String::new()),
        ("whitespace".to_owned(), "   ".to_owned()),
        (format!("unencoded {kind}:1"), format!("{kind}:1")),
        ("Banana:1".to_owned(), b64("Banana:1")),
        ("not utf-8".to_owned(), URL_SAFE_NO_PAD.encode([0xff, 0xfe, b':', b'1'])),
        ("10k characters".to_owned(), "A".repeat(10_000)),
    ];
    for text in ["abc", "-1", "0", "", "1.5", " 1", "1:2", "0x10", "99999999999999999999"] {
        let raw = format!("{kind}:{text}");
        ids.push((raw.clone(), b64(&raw)));
    }
    ids.push((format!("{}:1", kind.to_lowercase()), b64(&format!("{}:1", kind.to_lowercase()))));
    ids.push((format!("{kind}1 (no colon)"), b64(&format!("{kind}1"))));
    ids
}

in_each_like_mode!(garbage_ids_are_bad_user_input);
async fn garbage_ids_are_bad_user_input(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut failures = Vec::new();
    for (slot, query, accepted) in ID_SLOTS {
        for (name, id) in garbage_ids(accepted[0]) {
            expect_refused(
                &f,
                &format!("{slot} given `{name}`"),
                query,
                json!({ "id": id }),
                "BAD_USER_INPUT",
                &mut failures,
            )
            .await;
        }
    }
    // The error quotes a long id only in part.
    let response = f
        .app
        .gql(Some(&f.alice), "query($id: ID!) { post(id: $id) { id } }", json!({ "id": "A".repeat(10_000) }))
        .await;
    let message = response["errors"][0]["message"].as_str().unwrap_or("");
    assert!(!message.is_empty() && message.len() < 500, "message: {message}");
    assert_no_failures(failures);
    assert_eq!(f.alice_liked().await, nothing_liked());
}

in_each_like_mode!(non_canonical_ids_are_bad_user_input);
async fn non_canonical_ids_are_bad_user_input(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut failures = Vec::new();
    for (slot, query, accepted) in ID_SLOTS {
        let kind = accepted[0];
        let number = raw_id(&f.existing(kind));
        for text in [format!("+{number}"), format!("0{number}"), format!("00{number}")] {
            expect_refused(
                &f,
                &format!("{slot} given `{kind}:{text}`"),
                query,
                json!({ "id": b64(&format!("{kind}:{text}")) }),
                "BAD_USER_INPUT",
                &mut failures,
            )
            .await;
        }
    }
    assert_no_failures(failures);
    assert_eq!(f.alice_liked().await, nothing_liked());
}

in_each_like_mode!(well_formed_ids_of_nothing_are_not_found);
async fn well_formed_ids_of_nothing_are_not_found(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut failures = Vec::new();
    let missing = |kind: &str| gid(kind, 987_654_321);
    for (slot, query, accepted) in ID_SLOTS {
        for kind in accepted.iter() {
            expect_refused(
                &f,
                &format!("{slot} given a missing {kind}"),
                query,
                json!({ "id": missing(kind) }),
                "NOT_FOUND",
                &mut failures,
            )
            .await;
        }
    }
    // The number exists but names the other kind of comment.
    let comment_as_reply = gid("Reply", raw_id(&f.comment));
    let reply_as_comment = gid("Comment", raw_id(&f.reply));
    for (slot, query, accepted) in ID_SLOTS {
        if !accepted.contains(&"Reply") {
            continue;
        }
        for (name, id) in [
            ("a comment's number as a Reply id", &comment_as_reply),
            ("a reply's number as a Comment id", &reply_as_comment),
        ] {
            expect_refused(&f, &format!("{slot} given {name}"), query, json!({ "id": id }), "NOT_FOUND", &mut failures)
                .await;
        }
    }
    assert_no_failures(failures);
    assert_eq!(f.alice_liked().await, nothing_liked());
}

in_each_like_mode!(deleted_content_is_not_found_everywhere);
async fn deleted_content_is_not_found_everywhere(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    f.app
        .gql_ok(Some(&f.alice), "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }", json!({ "id": f.post }))
        .await;
    let mut failures = Vec::new();
    for (slot, query, accepted) in ID_SLOTS {
        for kind in accepted.iter().filter(|k| ["Post", "Comment", "Reply"].contains(k)) {
            expect_refused(
                &f,
                &format!("{slot} given a {kind} of a deleted post"),
                query,
                json!({ "id": f.existing(kind) }),
                "NOT_FOUND",
                &mut failures,
            )
            .await;
        }
    }
    assert_no_failures(failures);
}

// ---------------------------------------------------------------------------------------------
// Pagination arguments
// ---------------------------------------------------------------------------------------------

in_each_like_mode!(bad_page_arguments_are_bad_user_input);
async fn bad_page_arguments_are_bad_user_input(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    // A real cursor of each connection, to mix with bad partners.
    let data = f
        .app
        .gql_ok(
            Some(&f.alice),
            "query($c: ID!) { course(id: $c) { posts(first: 1) { edges { cursor node { \
             comments(first: 1) { edges { cursor node { replies(first: 1) { edges { cursor } } } } } } } } } }",
            json!({ "c": gid("Course", f.w.course) }),
        )
        .await;
    let post_edge = &data["course"]["posts"]["edges"][0];
    let post_cursor = post_edge["cursor"].as_str().unwrap().to_owned();
    let comment_edge = &post_edge["node"]["comments"]["edges"][0];
    let comment_cursor = comment_edge["cursor"].as_str().unwrap().to_owned();
    let reply_cursor = comment_edge["node"]["replies"]["edges"][0]["cursor"].as_str().unwrap().to_owned();

    let connections = [
        (
            "course.posts",
            "query($id: ID!, $first: Int, $last: Int, $after: String, $before: String) { course(id: $id) { \
             posts(first: $first, last: $last, after: $after, before: $before) { edges { cursor } } } }",
            gid("Course", f.w.course),
            post_cursor,
        ),
        (
            "post.comments",
            "query($id: ID!, $first: Int, $last: Int, $after: String, $before: String) { post(id: $id) { \
             comments(first: $first, last: $last, after: $after, before: $before) { edges { cursor } } } }",
            f.post.clone(),
            comment_cursor,
        ),
        (
            "comment.replies",
            "query($id: ID!, $first: Int, $last: Int, $after: String, $before: String) { node(id: $id) { \
             ... on Comment { replies(first: $first, last: $last, after: $after, before: $before) { edges { cursor } } } } }",
            f.comment.clone(),
            reply_cursor,
        ),
    ];
    let mut failures = Vec::new();
    for (name, query, id, cursor) in &connections {
        let bad_args = vec![
            ("first: -1", json!({ "first": -1 })),
            ("first: 0", json!({ "first": 0 })),
            ("first: 101", json!({ "first": 101 })),
            ("first: 1000000", json!({ "first": 1_000_000 })),
            ("first: 2^31 (not an Int)", json!({ "first": 2_147_483_648i64 })),
            ("first: \"10\"", json!({ "first": "10" })),
            ("first: 1.5", json!({ "first": 1.5 })),
            ("last: -1", json!({ "last": -1 })),
            ("last: 0", json!({ "last": 0 })),
            ("last: 101", json!({ "last": 101 })),
            ("first and last", json!({ "first": 5, "last": 5 })),
            ("after garbage", json!({ "after": "xyz" })),
            ("after empty", json!({ "after": "" })),
            ("after k:abc", json!({ "after": b64("k:abc") })),
            ("after k:-5", json!({ "after": b64("k:-5") })),
            ("after k:0", json!({ "after": b64("k:0") })),
            ("after a global id", json!({ "after": f.post })),
            ("before garbage", json!({ "before": "%%%" })),
            ("after and before", json!({ "after": cursor, "before": cursor })),
            ("first with before", json!({ "first": 5, "before": cursor })),
            ("last with after", json!({ "last": 5, "after": cursor })),
        ];
        for (arg, mut vars) in bad_args {
            vars["id"] = json!(id);
            expect_refused(&f, &format!("{name}({arg})"), query, vars, "BAD_USER_INPUT", &mut failures).await;
        }
        // Controls: the edges of the range, and a real cursor, are fine.
        for vars in [
            json!({ "first": 1 }),
            json!({ "first": 100 }),
            json!({ "last": 100 }),
            json!({ "first": 5, "after": cursor }),
            json!({ "last": 5, "before": cursor }),
        ] {
            let mut vars = vars;
            vars["id"] = json!(id);
            let response = f.app.gql(Some(&f.alice), query, vars.clone()).await;
            if response.get("errors").is_some() {
                failures.push(format!("{name} with {vars}: unexpected {response}"));
            }
        }
    }
    assert_no_failures(failures);
}

// ---------------------------------------------------------------------------------------------
// Text
// ---------------------------------------------------------------------------------------------

in_each_like_mode!(empty_blank_and_oversized_text_is_bad_user_input);
async fn empty_blank_and_oversized_text_is_bad_user_input(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let course = gid("Course", f.w.course);
    let blank = " \t\n\r \u{a0}\u{3000} ";
    let create_post = "mutation($id: ID!, $title: String!, $body: String!) { createPost(courseId: $id, title: $title, body: $body) { id } }";
    let edit_post = "mutation($id: ID!, $title: String, $body: String) { editPost(postId: $id, title: $title, body: $body) { id } }";
    let create_comment = "mutation($id: ID!, $body: String!) { createComment(postId: $id, body: $body) { id } }";
    let create_reply = "mutation($id: ID!, $body: String!) { createReply(commentId: $id, body: $body) { id } }";
    let edit_comment = "mutation($id: ID!, $body: String!) { editComment(commentId: $id, body: $body) { id } }";
    let cases: Vec<(String, &str, Json)> = vec![
        ("createPost empty title".into(), create_post, json!({ "id": course, "title": "", "body": "b" })),
        ("createPost blank title".into(), create_post, json!({ "id": course, "title": blank, "body": "b" })),
        (
            "createPost 201-char title".into(),
            create_post,
            json!({ "id": course, "title": "t".repeat(201), "body": "b" }),
        ),
        (
            "createPost 201 two-byte chars".into(),
            create_post,
            json!({ "id": course, "title": "é".repeat(201), "body": "b" }),
        ),
        ("createPost empty body".into(), create_post, json!({ "id": course, "title": "t", "body": "" })),
        ("createPost blank body".into(), create_post, json!({ "id": course, "title": "t", "body": blank })),
        (
            "createPost 20001-char body".into(),
            create_post,
            json!({ "id": course, "title": "t", "body": "b".repeat(20_001) }),
        ),
        ("createPost null title".into(), create_post, json!({ "id": course, "title": null, "body": "b" })),
        ("createPost title missing".into(), create_post, json!({ "id": course, "body": "b" })),
        ("editPost neither title nor body".into(), edit_post, json!({ "id": f.post })),
        ("editPost empty title".into(), edit_post, json!({ "id": f.post, "title": "" })),
        ("editPost blank body".into(), edit_post, json!({ "id": f.post, "body": blank })),
        ("editPost 201-char title".into(), edit_post, json!({ "id": f.post, "title": "t".repeat(201) })),
        ("editPost 20001-char body".into(), edit_post, json!({ "id": f.post, "body": "b".repeat(20_001) })),
        ("editPost good title, empty body".into(), edit_post, json!({ "id": f.post, "title": "fine", "body": "" })),
    ];
    let mut cases = cases;
    for (name, query, target) in [
        ("createComment", create_comment, &f.post),
        ("createReply(comment)", create_reply, &f.comment),
        ("createReply(reply)", create_reply, &f.reply),
        ("editComment(comment)", edit_comment, &f.comment),
        ("editComment(reply)", edit_comment, &f.reply),
    ] {
        cases.push((format!("{name} empty"), query, json!({ "id": target, "body": "" })));
        cases.push((format!("{name} blank"), query, json!({ "id": target, "body": blank })));
        cases.push((format!("{name} 5001 chars"), query, json!({ "id": target, "body": "c".repeat(5_001) })));
    }
    let mut failures = Vec::new();
    for (name, query, vars) in cases {
        expect_refused(&f, &name, query, vars, "BAD_USER_INPUT", &mut failures).await;
    }
    assert_no_failures(failures);
    // Nothing was edited either.
    let data = f
        .app
        .gql_ok(
            Some(&f.alice),
            "query($id: ID!) { post(id: $id) { title body editedAt comments { nodes { body editedAt replies { nodes { body editedAt } } } } } }",
            json!({ "id": f.post }),
        )
        .await;
    assert_eq!(
        data["post"],
        json!({ "title": "first post", "body": "hello", "editedAt": null, "comments": { "nodes": [
            { "body": "a comment", "editedAt": null, "replies": { "nodes": [ { "body": "a reply", "editedAt": null } ] } }
        ] } })
    );
}

in_each_like_mode!(text_at_the_limits_is_accepted_and_trimmed);
async fn text_at_the_limits_is_accepted_and_trimmed(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let data = f
        .app
        .gql_ok(
            Some(&f.alice),
            "mutation($id: ID!, $title: String!, $body: String!) { createPost(courseId: $id, title: $title, body: $body) { id title body } }",
            json!({ "id": gid("Course", f.w.course), "title": format!("  {}  ", "é".repeat(200)), "body": "b".repeat(20_000) }),
        )
        .await;
    assert_eq!(data["createPost"]["title"], "é".repeat(200));
    assert_eq!(data["createPost"]["body"].as_str().unwrap().len(), 20_000);
    let data = f
        .app
        .gql_ok(
            Some(&f.alice),
            "mutation($id: ID!, $body: String!) { createComment(postId: $id, body: $body) { body } }",
            json!({ "id": f.post, "body": format!("\n{}\n", "c".repeat(5_000)) }),
        )
        .await;
    assert_eq!(data["createComment"]["body"], "c".repeat(5_000));
}

in_each_like_mode!(a_nul_character_in_text_is_bad_user_input_not_internal);
async fn a_nul_character_in_text_is_bad_user_input_not_internal(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut failures = Vec::new();
    expect_refused(
        &f,
        "createPost title with NUL",
        "mutation($id: ID!, $title: String!) { createPost(courseId: $id, title: $title, body: \"b\") { id } }",
        json!({ "id": gid("Course", f.w.course), "title": "bad\u{0}title" }),
        "BAD_USER_INPUT",
        &mut failures,
    )
    .await;
    expect_refused(
        &f,
        "createComment body with NUL",
        "mutation($id: ID!, $body: String!) { createComment(postId: $id, body: $body) { id } }",
        json!({ "id": f.post, "body": "bad\u{0}body" }),
        "BAD_USER_INPUT",
        &mut failures,
    )
    .await;
    assert_no_failures(failures);
}

// ---------------------------------------------------------------------------------------------
// Query shape: depth, complexity, syntax
// ---------------------------------------------------------------------------------------------

/// A selection exactly `depth` fields deep: course(id) { posts { edges { node { course { … } } } } }.
fn nested_query(depth: usize) -> String {
    let cycle = ["posts(first: 1)", "edges", "node", "course"];
    let mut fields = vec!["course(id: $id)"];
    fields.extend(cycle.iter().cycle().take(depth - 2));
    let leaf = match fields.last().unwrap() {
        f if f.starts_with("course") || *f == "node" => "id",
        &"edges" => "cursor",
        _ => "pageInfo",
    };
    assert_ne!(leaf, "pageInfo", "choose a depth that ends on an object with a scalar");
    let mut query = String::from("query($id: ID!) { ");
    for field in &fields {
        query.push_str(field);
        query.push_str(" { ");
    }
    query.push_str(leaf);
    for _ in &fields {
        query.push_str(" }");
    }
    query.push_str(" }");
    query
}

in_each_like_mode!(a_too_deep_query_is_refused_before_it_runs);
async fn a_too_deep_query_is_refused_before_it_runs(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let course = json!({ "id": gid("Course", f.w.course) });
    // 16 deep is the limit and passes; 17 does not.
    let response = f.app.gql(Some(&f.alice), &nested_query(16), course.clone()).await;
    assert!(response.get("errors").is_none(), "depth 16: {response}");
    assert!(response["data"]["course"]["posts"].is_object(), "{response}");
    for depth in [17, 41] {
        let response = f.app.gql(Some(&f.alice), &nested_query(depth), course.clone()).await;
        assert_eq!(refusal_problem(&response, "BAD_USER_INPUT"), None, "depth {depth}");
    }
    // The brief's shape: post { course { posts { edges { node { course { … } } } } } }.
    let mut deep = String::from("query($id: ID!) { post(id: $id) { ");
    for _ in 0..6 {
        deep.push_str("course { posts { edges { node { ");
    }
    deep.push_str("id");
    deep.push_str(&" } } } }".repeat(6));
    deep.push_str(" } }");
    let response = f.app.gql(Some(&f.alice), &deep, json!({ "id": f.post })).await;
    assert_eq!(refusal_problem(&response, "BAD_USER_INPUT"), None, "{deep}");

    // A mutation whose selection is too deep must not run at all.
    let mut failures = Vec::new();
    let mut mutation =
        String::from("mutation($id: ID!) { createPost(courseId: $id, title: \"deep\", body: \"deep\") { ");
    for _ in 0..6 {
        mutation.push_str("course { posts { edges { node { ");
    }
    mutation.push_str("id");
    mutation.push_str(&" } } } }".repeat(6));
    mutation.push_str(" } }");
    expect_refused(&f, "too-deep createPost", &mutation, course.clone(), "BAD_USER_INPUT", &mut failures).await;
    assert_no_failures(failures);
}

in_each_like_mode!(a_too_complex_query_is_refused_before_it_runs);
async fn a_too_complex_query_is_refused_before_it_runs(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let course = json!({ "id": gid("Course", f.w.course) });
    let complex = "query($id: ID!) { course(id: $id) { posts(first: 100) { edges { node { \
        comments(first: 100) { edges { node { replies(first: 100) { edges { node { id body } } } } } } } } } } }";
    let response = f.app.gql(Some(&f.alice), complex, course.clone()).await;
    assert_eq!(refusal_problem(&response, "COST_LIMIT_EXCEEDED"), None);
    // The computed cost and the limit come with the refusal.
    let extensions = &response["errors"][0]["extensions"];
    assert!(extensions["cost"].as_u64().is_some_and(|cost| cost > 20_000), "{response}");
    assert_eq!(extensions["limit"], 20_000, "{response}");
    // Out-of-range sizes are not a way around the cost: they are clamped when costed.
    let huge = complex.replace("100", "1000000");
    let response = f.app.gql(Some(&f.alice), &huge, course.clone()).await;
    assert_eq!(refusal_problem(&response, "COST_LIMIT_EXCEEDED"), None, "{response}");
    // Many aliases of a cheap connection add up as well.
    let aliased = format!(
        "query($id: ID!) {{ course(id: $id) {{ {} }} }}",
        (0..50)
            .map(|i| format!("a{i}: posts(first: 100) {{ nodes {{ id title body likeCount }} }}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let response = f.app.gql(Some(&f.alice), &aliased, course.clone()).await;
    assert!(
        refusal_problem(&response, "COST_LIMIT_EXCEEDED").is_none()
            || refusal_problem(&response, "BAD_USER_INPUT").is_none(),
        "refused by the cost or the alias cap: {response}"
    );

    // A mutation with a too-costly selection must not run.
    let mut failures = Vec::new();
    expect_refused(
        &f,
        "too-complex createPost",
        "mutation($id: ID!) { createPost(courseId: $id, title: \"costly\", body: \"costly\") { course { \
         posts(first: 100) { edges { node { comments(first: 100) { edges { node { replies(first: 100) { \
         edges { node { id } } } } } } } } } } } }",
        course.clone(),
        "COST_LIMIT_EXCEEDED",
        &mut failures,
    )
    .await;
    assert_no_failures(failures);

    // Control: a realistic page (posts, their comments, their replies) is within budget.
    let response = f
        .app
        .gql(
            Some(&f.alice),
            "query($id: ID!) { course(id: $id) { posts(first: 10) { nodes { title author { handle } \
             comments(first: 10) { nodes { body author { handle } replies(first: 10) { nodes { body author { handle } } } } } } } } }",
            course,
        )
        .await;
    assert!(response.get("errors").is_none(), "{response}");
}

in_each_like_mode!(broken_queries_are_bad_user_input_and_change_nothing);
async fn broken_queries_are_bad_user_input_and_change_nothing(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let course = gid("Course", f.w.course);
    let cases: Vec<(&str, String, Json)> = vec![
        ("unclosed brace", "{ me { id ".into(), json!({})),
        ("garbage", "this is not graphql".into(), json!({})),
        ("empty document", "".into(), json!({})),
        ("unknown field", "{ me { password } }".into(), json!({})),
        ("unknown root field", "{ users { id } }".into(), json!({})),
        ("scalar with selection", "{ me { id { x } } }".into(), json!({})),
        ("object without selection", "{ me }".into(), json!({})),
        (
            "broken mutation",
            format!("mutation {{ createPost(courseId: \"{course}\", title: \"t\", body: \"b\") {{ id "),
            json!({}),
        ),
        (
            "unknown argument",
            format!(
                "mutation {{ createPost(courseId: \"{course}\", title: \"t\", body: \"b\", pinned: true) {{ id }} }}"
            ),
            json!({}),
        ),
        (
            "missing required argument",
            format!("mutation {{ createPost(courseId: \"{course}\", title: \"t\") {{ id }} }}"),
            json!({}),
        ),
        (
            "wrong literal type",
            format!("mutation {{ createPost(courseId: \"{course}\", title: 5, body: \"b\") {{ id }} }}"),
            json!({}),
        ),
        (
            "undefined variable",
            "mutation { createPost(courseId: $c, title: \"t\", body: \"b\") { id } }".into(),
            json!({ "c": course }),
        ),
        (
            "variable missing",
            "mutation($c: ID!) { createPost(courseId: $c, title: \"t\", body: \"b\") { id } }".into(),
            json!({}),
        ),
        (
            "variable of the wrong type",
            "mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: \"b\") { id } }".into(),
            json!({ "c": course, "t": ["not", "a", "string"] }),
        ),
        (
            "two anonymous operations",
            format!(
                "mutation {{ createPost(courseId: \"{course}\", title: \"t\", body: \"b\") {{ id }} }} {{ me {{ id }} }}"
            ),
            json!({}),
        ),
        ("a subscription", "subscription { me { id } }".into(), json!({})),
    ];
    let mut failures = Vec::new();
    for (name, query, vars) in cases {
        expect_refused(&f, name, &query, vars, "BAD_USER_INPUT", &mut failures).await;
    }
    assert_no_failures(failures);
}

in_each_like_mode!(a_request_that_is_not_graphql_json_is_a_client_error);
async fn a_request_that_is_not_graphql_json_is_a_client_error(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let before = snapshot(&f.app).await;
    let course = gid("Course", f.w.course);
    let bodies = [
        "not json at all".to_owned(),
        format!(
            "{{\"query\": \"mutation {{ createPost(courseId: \\\"{course}\\\", title: \\\"t\\\", body: \\\"b\\\") {{ id }} }}\""
        ),
        "{\"query\": 5}".to_owned(),
        "[]".to_owned(),
    ];
    for body in bodies {
        let response = f
            .app
            .http
            .post(f.app.url("/graphql"))
            .header("Authorization", format!("Bearer {}", f.alice))
            .header("Content-Type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let json_error =
            serde_json::from_str::<Json>(&text).ok().filter(|j| j.get("errors").is_some() && j["data"].is_null());
        assert!(status.is_client_error() || json_error.is_some(), "{body}: {status} {text}");
    }
    assert_eq!(snapshot(&f.app).await, before);
}

// ---------------------------------------------------------------------------------------------
// Request size
// ---------------------------------------------------------------------------------------------

/// A valid createPost request padded (with a GraphQL comment) to about `size` bytes.
fn padded_create_post(course: &str, title: &str, size: usize) -> String {
    let query =
        format!("mutation {{ createPost(courseId: \"{course}\", title: \"{title}\", body: \"padded\") {{ id }} }}\n#");
    let pad = size.saturating_sub(query.len() + 32);
    let document = format!("{query}{}", "x".repeat(pad));
    json!({ "query": document }).to_string()
}

in_each_like_mode!(a_body_over_64_kib_is_refused_and_changes_nothing);
async fn a_body_over_64_kib_is_refused_and_changes_nothing(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let course = gid("Course", f.w.course);
    let send = |body: String| {
        f.app
            .http
            .post(f.app.url("/graphql"))
            .header("Authorization", format!("Bearer {}", f.alice))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };
    let posts = "SELECT count(*) AS v FROM posts";
    let before = count(&f.app, posts).await;

    // Control: just under the limit is served.
    let body = padded_create_post(&course, "just under", 60 * 1024);
    assert!(body.len() < 64 * 1024);
    let response = send(body).await.unwrap();
    assert_eq!(response.status(), 200);
    let json: Json = response.json().await.unwrap();
    assert!(json.get("errors").is_none(), "{json}");
    assert_eq!(count(&f.app, posts).await, before + 1);

    for size in [64 * 1024 + 1024, 1024 * 1024] {
        let snap = snapshot(&f.app).await;
        let body = padded_create_post(&course, "too big", size);
        assert!(body.len() > 64 * 1024);
        match send(body).await {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                assert_eq!(status, 413, "{size} bytes: expected 413, got {status} {text}");
            }
            // The server may close the connection while the client is still sending.
            Err(err) => eprintln!("{size} bytes: connection error {err}"),
        }
        assert_eq!(snapshot(&f.app).await, snap, "{size} bytes changed the database");
    }
    assert_eq!(app_scalar_title_count(&f.app, "too big").await, 0, "an oversized request created a post");
}

async fn app_scalar_title_count(app: &TestApp, title: &str) -> i64 {
    app.scalar_i64("SELECT count(*) AS v FROM posts WHERE title = $1", [title.into()]).await
}

// ---------------------------------------------------------------------------------------------
// Rate limit
// ---------------------------------------------------------------------------------------------

in_each_like_mode!(the_sixth_like_toggle_in_a_minute_is_rate_limited_and_changes_nothing);
async fn the_sixth_like_toggle_in_a_minute_is_rate_limited_and_changes_nothing(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| {
        s.like_mode = mode;
        s.like_rate_per_minute = 5;
    })
    .await;
    let f = Fixture::from_app(app).await;
    let app = &f.app;
    let like = "mutation($id: ID!) { likePost(postId: $id) { likeCount likedByMe } }";
    let unlike = "mutation($id: ID!) { unlikePost(postId: $id) { likeCount likedByMe } }";
    // Five toggles: like, unlike, like, unlike, like.
    for (i, query) in [like, unlike, like, unlike, like].into_iter().enumerate() {
        let response = app.gql(Some(&f.alice), query, json!({ "id": f.post })).await;
        assert!(response.get("errors").is_none(), "toggle {}: {response}", i + 1);
    }
    // Sync has written each toggle as it answered; buffered's worker writes them now.
    f.apply_likes().await;
    let likes_sql = "SELECT count(*) AS v FROM post_likes";
    let count_sql = "SELECT like_count::bigint AS v FROM posts";
    assert_eq!(count(app, likes_sql).await, 1);
    assert_eq!(count(app, count_sql).await, 1);

    // The sixth is refused, with a hint when to come back, and changes nothing.
    let before = snapshot(app).await;
    let response = app.gql(Some(&f.alice), unlike, json!({ "id": f.post })).await;
    assert_eq!(refusal_problem(&response, "RATE_LIMITED"), None, "{response}");
    let retry = response["errors"][0]["extensions"]["retryAfterMs"].as_u64();
    assert!(matches!(retry, Some(ms) if ms > 0 && ms <= 60_000), "retryAfterMs: {response}");
    assert_eq!(f.apply_likes().await, 0, "the refused unlike reached the like stream");
    assert_eq!(snapshot(app).await, before);
    assert_eq!(count(app, likes_sql).await, 1);
    assert_eq!(count(app, count_sql).await, 1);

    // The budget is per user and shared by all likes: comments are limited too…
    let response = app
        .gql(
            Some(&f.alice),
            "mutation($id: ID!) { likeComment(commentId: $id) { likeCount } }",
            json!({ "id": f.comment }),
        )
        .await;
    assert_eq!(refusal_problem(&response, "RATE_LIMITED"), None, "{response}");
    assert_eq!(f.apply_likes().await, 0, "the refused comment like reached the like stream");
    assert_eq!(snapshot(app).await, before);
    // Alice still likes the post (the fifth toggle) and not the comment: neither refusal counts.
    let mut still = nothing_liked();
    still["likedByMe"] = json!(true);
    assert_eq!(f.alice_liked().await, still);

    // …while other writes and other users are not.
    app.gql_ok(
        Some(&f.alice),
        "mutation($id: ID!) { createComment(postId: $id, body: \"still here\") { id } }",
        json!({ "id": f.post }),
    )
    .await;
    let data = app
        .gql_ok(Some(&app.token(f.w.bob)), unlike.replace("unlikePost", "likePost").as_str(), json!({ "id": f.post }))
        .await;
    assert_eq!(data["likePost"], json!({ "likeCount": 2, "likedByMe": true }));
    f.apply_likes().await;
    assert_eq!(count(app, likes_sql).await, 2);
    assert_eq!(count(app, count_sql).await, 2);
}

// ---------------------------------------------------------------------------------------------
// Bombs: aliases, batches, directives, oversized websocket messages
// ---------------------------------------------------------------------------------------------

fn repeated(n: usize, item: impl Fn(usize) -> String) -> String {
    (0..n).map(item).collect::<Vec<_>>().join(" ")
}

in_each_like_mode!(an_alias_bomb_is_refused_before_any_resolver_runs);
async fn an_alias_bomb_is_refused_before_any_resolver_runs(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let vars = json!({ "id": f.post });
    // At the limit, 30 aliases run: each one resolver call (here one SQL statement each).
    let at_limit = format!("query($id: ID!) {{ {} }}", repeated(30, |i| format!("a{i}: post(id: $id) {{ id }}")));
    let response = f.app.gql(Some(&f.alice), &at_limit, vars.clone()).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(response["data"].as_object().map(|d| d.len()), Some(30));

    let bombs = [
        ("31 aliases", format!("query($id: ID!) {{ {} }}", repeated(31, |i| format!("a{i}: post(id: $id) {{ id }}")))),
        (
            "1,000 aliases",
            format!("query($id: ID!) {{ {} }}", repeated(1000, |i| format!("a{i}: post(id: $id) {{ id }}"))),
        ),
        // 2,000 fit in 64 KiB, but are past a member's tokens: refused before they are parsed.
        (
            "2,000 aliases, which fit in 64 KiB",
            format!("query($id: ID!) {{ {} }}", repeated(2000, |i| format!("a{i}: post(id: $id) {{ id }}"))),
        ),
        (
            "nested aliases",
            format!("query($id: ID!) {{ post(id: $id) {{ {} }} }}", repeated(31, |i| format!("t{i}: title"))),
        ),
        (
            "aliases in a fragment",
            format!(
                "query($id: ID!) {{ ...F }} fragment F on Query {{ {} }}",
                repeated(31, |i| format!("a{i}: post(id: $id) {{ id }}"))
            ),
        ),
        (
            "aliased mutations",
            format!("mutation($id: ID!) {{ {} }}", repeated(31, |i| format!("a{i}: likePost(postId: $id) {{ id }}"))),
        ),
    ];
    let mut failures = Vec::new();
    for (name, query) in bombs {
        let before = snapshot(&f.app).await;
        let statements = f.app.state.sql_statements.get();
        let started = std::time::Instant::now();
        let response = f.app.gql(Some(&f.alice), &query, vars.clone()).await;
        let took = started.elapsed();
        let (code, why) = if name.starts_with("2,000") {
            ("DOCUMENT_LIMIT_EXCEEDED", "tokens")
        } else {
            ("BAD_USER_INPUT", "aliases")
        };
        if let Some(problem) = refusal_problem(&response, code) {
            failures.push(format!("{name}: {problem}"));
        } else if !response["errors"][0]["message"].as_str().unwrap_or_default().contains(why) {
            failures.push(format!("{name}: the message does not say why: {response}"));
        }
        if f.app.state.sql_statements.get() != statements {
            failures.push(format!("{name}: ran SQL before refusing"));
        }
        if took > std::time::Duration::from_secs(2) {
            failures.push(format!("{name}: took {took:?} to refuse"));
        }
        let applied = f.apply_likes().await;
        if applied != 0 {
            failures.push(format!("{name}: the like worker applied {applied} event(s)"));
        }
        if snapshot(&f.app).await != before {
            failures.push(format!("{name}: database changed"));
        }
    }
    assert_no_failures(failures);
    assert_eq!(f.alice_liked().await, nothing_liked());
}

in_each_like_mode!(a_batch_bomb_is_refused_whole_and_runs_nothing);
async fn a_batch_bomb_is_refused_whole_and_runs_nothing(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let course = gid("Course", f.w.course);
    let one = json!({
        "query": "mutation($c: ID!) { createPost(courseId: $c, title: \"batched\", body: \"b\") { id } }",
        "variables": { "c": course },
    });
    let before = snapshot(&f.app).await;
    let statements = f.app.state.sql_statements.get();
    // Under the body limit (300 operations), and far over it (5,000).
    for n in [2, 300, 5_000] {
        let body = Json::Array(vec![one.clone(); n]).to_string();
        let response = f
            .app
            .http
            .post(f.app.url("/graphql"))
            .header("Authorization", format!("Bearer {}", f.alice))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await;
        match response {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                let refused_in_json = serde_json::from_str::<Json>(&text)
                    .is_ok_and(|j| error_code(&j).as_deref() == Some("BAD_USER_INPUT") && no_data(&j));
                assert!(status.is_client_error() || refused_in_json, "a batch of {n}: {status} {text}");
            }
            // Over the limit the server may close while the client still sends.
            Err(err) => assert!(n > 1000, "a batch of {n}: {err}"),
        }
    }
    assert_eq!(f.app.state.sql_statements.get(), statements, "a batch ran SQL");
    assert_eq!(snapshot(&f.app).await, before);
    assert_eq!(count(&f.app, "SELECT count(*) AS v FROM posts WHERE title = 'batched'").await, 0);
}

in_each_like_mode!(a_directive_bomb_is_bad_user_input);
async fn a_directive_bomb_is_bad_user_input(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let query = format!("{{ me {{ id {} }} }}", repeated(9, |_| "@skip(if: false)".to_owned()));
    let response = f.app.gql(Some(&f.alice), &query, json!({})).await;
    assert_eq!(refusal_problem(&response, "BAD_USER_INPUT"), None, "{response}");
}

in_each_like_mode!(an_oversized_websocket_message_closes_only_that_socket);
async fn an_oversized_websocket_message_closes_only_that_socket(mode: LikeMode) {
    let f = Fixture::new(mode).await;
    let mut socket = common::ws::GqlSocket::connect(f.app.addr, Some(&f.alice)).await.expect("connect");
    let huge = json!({
        "id": "1",
        "type": "subscribe",
        "payload": { "query": format!("subscription {{ likeCounts(ids: [\"{}\"]) {{ id }} }} #{}", f.post, "x".repeat(70 * 1024)) },
    });
    socket.send_raw(huge.to_string()).await;
    let closed = socket.close_frame(std::time::Duration::from_secs(5)).await;
    assert!(
        matches!(closed, Some(None) | Some(Some((1009 | 1002, _)))),
        "the socket is closed (message too big), got {closed:?}"
    );
    // Everyone else is served as before.
    let mut other = common::ws::GqlSocket::connect(f.app.addr, Some(&f.alice)).await.expect("connect again");
    other
        .subscribe(
            "2",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }",
            json!({ "ids": [f.post] }),
        )
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    f.app
        .gql_ok(
            Some(&f.app.token(f.w.bob)),
            "mutation($p: ID!) { likePost(postId: $p) { id } }",
            json!({ "p": f.post }),
        )
        .await;
    // Buffered mode publishes the new count when the worker has committed the like.
    f.apply_likes().await;
    let update = other.next_data(std::time::Duration::from_secs(5)).await.expect("an update");
    assert_eq!(update["likeCounts"]["likeCount"], 1);
}
