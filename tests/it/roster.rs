//! The roster API: `createCourse`, `addCourseMember`, `removeCourseMember` and
//! `setCourseMemberRole`. Each works for an administrator and for the course's instructor; a
//! student, an instructor of another course and an anonymous caller are refused and nothing
//! changes; unknown ids are NOT_FOUND; a removed member keeps what they wrote and liked, and
//! their next like is refused at once.

use course_forum::testing::config::LikeMode;
use sea_orm::{DbBackend, FromQueryResult, Statement};
use serde_json::{Value as Json, json};

use crate::common::{self, TestApp, World, error_code, gid};

const CREATE: &str =
    "mutation($code: String!, $title: String!) { createCourse(code: $code, title: $title) { id code title } }";
const ADD: &str = "mutation($c: ID!, $u: ID!, $r: Role!) { addCourseMember(courseId: $c, userId: $u, role: $r) { \
                   course { id code } user { id handle } role changed } }";
const REMOVE: &str = "mutation($c: ID!, $u: ID!) { removeCourseMember(courseId: $c, userId: $u) { \
                      course { code } user { handle } role changed } }";
const SET_ROLE: &str = "mutation($c: ID!, $u: ID!, $r: Role!) { setCourseMemberRole(courseId: $c, userId: $u, role: $r) { \
                        course { code } user { handle } role changed } }";

/// One line per membership and per course: equal snapshots mean nothing changed.
async fn roster(app: &TestApp) -> String {
    #[derive(FromQueryResult)]
    struct Text {
        v: String,
    }
    let sql = "SELECT coalesce((SELECT string_agg(course_id || ':' || user_id || ':' || role, ' ' ORDER BY course_id, user_id) \
               FROM course_members), '') || ' | ' || \
               coalesce((SELECT string_agg(id || ':' || code, ' ' ORDER BY id) FROM courses), '') AS v";
    Text::find_by_statement(Statement::from_string(DbBackend::Postgres, sql))
        .one(&app.db)
        .await
        .expect("snapshot")
        .expect("one row")
        .v
}

async fn role_in(app: &TestApp, course: i64, user: i64) -> Option<String> {
    let n = app
        .scalar_i64(
            "SELECT count(*) AS v FROM course_members WHERE course_id = $1 AND user_id = $2 AND role = 'instructor'",
            [course.into(), user.into()],
        )
        .await;
    let m = app
        .scalar_i64(
            "SELECT count(*) AS v FROM course_members WHERE course_id = $1 AND user_id = $2",
            [course.into(), user.into()],
        )
        .await;
    match (m, n) {
        (0, _) => None,
        (_, 1) => Some("instructor".into()),
        _ => Some("student".into()),
    }
}

async fn make_admin(app: &TestApp, handle: &str) -> i64 {
    let id = app.create_user(handle).await;
    app.scalar_i64("INSERT INTO administrators (user_id) VALUES ($1) RETURNING user_id AS v", [id.into()]).await;
    id
}

fn vars(course: i64, user: i64, role: Option<&str>) -> Json {
    match role {
        Some(role) => json!({ "c": gid("Course", course), "u": gid("User", user), "r": role }),
        None => json!({ "c": gid("Course", course), "u": gid("User", user) }),
    }
}

#[tokio::test]
async fn an_administrator_runs_every_roster_mutation() {
    let app = TestApp::spawn().await;
    let admin = app.token(make_admin(&app, "registrar").await);
    let prof = app.create_user("prof").await;
    let alice = app.create_user("alice").await;

    let data = app.gql_ok(Some(&admin), CREATE, json!({ "code": "  PHYS150 ", "title": "Physics" })).await;
    assert_eq!(data["createCourse"]["code"], "PHYS150", "the code is trimmed");
    let course = common::raw_id(data["createCourse"]["id"].as_str().expect("course id"));
    assert_eq!(
        app.scalar_i64("SELECT count(*) AS v FROM course_members WHERE course_id = $1", [course.into()]).await,
        0
    );

    // A second course with the same code is CONFLICT, and creates nothing.
    let before = roster(&app).await;
    let response = app.gql(Some(&admin), CREATE, json!({ "code": "PHYS150", "title": "Physics again" })).await;
    assert_eq!(error_code(&response).as_deref(), Some("CONFLICT"), "{response}");
    assert_eq!(roster(&app).await, before);

    let data = app.gql_ok(Some(&admin), ADD, vars(course, prof, Some("INSTRUCTOR"))).await;
    assert_eq!(data["addCourseMember"]["role"], "INSTRUCTOR");
    assert_eq!(data["addCourseMember"]["changed"], true);
    assert_eq!(data["addCourseMember"]["user"]["handle"], "prof");
    let data = app.gql_ok(Some(&admin), ADD, vars(course, alice, Some("STUDENT"))).await;
    assert_eq!(data["addCourseMember"]["changed"], true);
    assert_eq!(role_in(&app, course, alice).await.as_deref(), Some("student"));

    // Adding again with the same role is a harmless repeat; with the other role, a mistake.
    let data = app.gql_ok(Some(&admin), ADD, vars(course, alice, Some("STUDENT"))).await;
    assert_eq!(data["addCourseMember"]["changed"], false);
    let response = app.gql(Some(&admin), ADD, vars(course, alice, Some("INSTRUCTOR"))).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    assert_eq!(role_in(&app, course, alice).await.as_deref(), Some("student"));

    let data = app.gql_ok(Some(&admin), SET_ROLE, vars(course, alice, Some("INSTRUCTOR"))).await;
    assert_eq!(data["setCourseMemberRole"]["role"], "INSTRUCTOR");
    assert_eq!(data["setCourseMemberRole"]["changed"], true);
    assert_eq!(role_in(&app, course, alice).await.as_deref(), Some("instructor"));
    let data = app.gql_ok(Some(&admin), SET_ROLE, vars(course, alice, Some("INSTRUCTOR"))).await;
    assert_eq!(data["setCourseMemberRole"]["changed"], false);

    let data = app.gql_ok(Some(&admin), REMOVE, vars(course, alice, None)).await;
    assert_eq!(data["removeCourseMember"]["role"], Json::Null);
    assert_eq!(data["removeCourseMember"]["changed"], true);
    assert_eq!(role_in(&app, course, alice).await, None);

    // An administrator may take away the last instructor (they can still run the course).
    app.gql_ok(Some(&admin), SET_ROLE, vars(course, prof, Some("STUDENT"))).await;
    app.gql_ok(Some(&admin), REMOVE, vars(course, prof, None)).await;
    assert_eq!(roster(&app).await, format!(" | {course}:PHYS150"));
}

#[tokio::test]
async fn the_course_instructor_manages_their_own_course() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let prof = app.token(w.instructor);
    let newcomer = app.create_user("newcomer").await;

    let data = app.gql_ok(Some(&prof), ADD, vars(w.course, newcomer, Some("STUDENT"))).await;
    assert_eq!(data["addCourseMember"]["course"]["code"], "CS101");
    assert_eq!(role_in(&app, w.course, newcomer).await.as_deref(), Some("student"));

    // The newcomer can use the course at once (this instance was told, not just notified).
    let newcomer_token = app.token(newcomer);
    let data = app
        .gql_ok(
            Some(&newcomer_token),
            "query($c: ID!) { course(id: $c) { myRole } }",
            json!({ "c": gid("Course", w.course) }),
        )
        .await;
    assert_eq!(data["course"]["myRole"], "STUDENT");

    let data = app.gql_ok(Some(&prof), SET_ROLE, vars(w.course, newcomer, Some("INSTRUCTOR"))).await;
    assert_eq!(data["setCourseMemberRole"]["role"], "INSTRUCTOR");
    assert_eq!(role_in(&app, w.course, newcomer).await.as_deref(), Some("instructor"));
    let data = app
        .gql_ok(
            Some(&newcomer_token),
            "query($c: ID!) { course(id: $c) { myRole } }",
            json!({ "c": gid("Course", w.course) }),
        )
        .await;
    assert_eq!(data["course"]["myRole"], "INSTRUCTOR");

    let data = app.gql_ok(Some(&prof), REMOVE, vars(w.course, w.bob, None)).await;
    assert_eq!(data["removeCourseMember"]["user"]["handle"], "bob");
    assert_eq!(role_in(&app, w.course, w.bob).await, None);

    // Instructors do not create courses.
    let before = roster(&app).await;
    let response = app.gql(Some(&prof), CREATE, json!({ "code": "CS102", "title": "More programming" })).await;
    assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"), "{response}");
    assert_eq!(roster(&app).await, before);

    // Two instructors now: prof may step down as one; the last one may not leave or demote
    // themselves, which would leave the course with nobody to run it.
    app.gql_ok(Some(&prof), REMOVE, vars(w.course, newcomer, None)).await;
    let before = roster(&app).await;
    for (query, vars) in
        [(REMOVE, vars(w.course, w.instructor, None)), (SET_ROLE, vars(w.course, w.instructor, Some("STUDENT")))]
    {
        let response = app.gql(Some(&prof), query, vars).await;
        assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"), "{response}");
        let message = response["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("without an instructor"), "{message}");
    }
    assert_eq!(roster(&app).await, before);
}

#[tokio::test]
async fn students_other_instructors_and_strangers_are_refused_and_nothing_changes() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    // An instructor, but of the other course.
    let other_prof = app.create_user("other_prof").await;
    app.enroll(w.other_course, other_prof, "instructor").await;
    let newcomer = app.create_user("newcomer").await;

    let calls: Vec<(&str, &str, Json)> = vec![
        ("createCourse", CREATE, json!({ "code": "CS999", "title": "Not yours" })),
        ("addCourseMember", ADD, vars(w.course, newcomer, Some("STUDENT"))),
        ("addCourseMember (self as instructor)", ADD, vars(w.course, w.alice, Some("INSTRUCTOR"))),
        ("removeCourseMember", REMOVE, vars(w.course, w.bob, None)),
        ("removeCourseMember (the instructor)", REMOVE, vars(w.course, w.instructor, None)),
        ("setCourseMemberRole", SET_ROLE, vars(w.course, w.alice, Some("INSTRUCTOR"))),
        ("setCourseMemberRole (the instructor)", SET_ROLE, vars(w.course, w.instructor, Some("STUDENT"))),
    ];
    let callers: Vec<(&str, Option<String>, &str)> = vec![
        ("a student of the course", Some(app.token(w.alice)), "FORBIDDEN"),
        ("an instructor of another course", Some(app.token(other_prof)), "FORBIDDEN"),
        ("a member of another course", Some(app.token(w.outsider)), "FORBIDDEN"),
        ("nobody signed in", None, "UNAUTHENTICATED"),
    ];
    let before = roster(&app).await;
    let mut failures = Vec::new();
    for (who, token, expected) in &callers {
        for (name, query, variables) in &calls {
            let response = app.gql(token.as_deref(), query, variables.clone()).await;
            let code = error_code(&response);
            if code.as_deref() != Some(*expected) {
                failures.push(format!("{name} by {who}: expected {expected}, got {response}"));
            }
            if !response["data"].is_null() {
                failures.push(format!("{name} by {who}: returned data {}", response["data"]));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(roster(&app).await, before, "a refused call changed the roster");
}

#[tokio::test]
async fn unknown_courses_users_and_memberships_are_not_found() {
    let app = TestApp::spawn().await;
    let w = World::create(&app).await;
    let admin = app.token(make_admin(&app, "registrar").await);
    let prof = app.token(w.instructor);
    let missing = 987_654_321;
    let before = roster(&app).await;
    let mut failures = Vec::new();
    for (who, token) in [("admin", &admin), ("instructor", &prof)] {
        let cases: Vec<(&str, &str, Json)> = vec![
            ("add to a missing course", ADD, vars(missing, w.alice, Some("STUDENT"))),
            ("add a missing user", ADD, vars(w.course, missing, Some("STUDENT"))),
            ("remove from a missing course", REMOVE, vars(missing, w.alice, None)),
            ("remove a missing user", REMOVE, vars(w.course, missing, None)),
            ("remove a non-member", REMOVE, vars(w.course, w.outsider, None)),
            ("set the role in a missing course", SET_ROLE, vars(missing, w.alice, Some("INSTRUCTOR"))),
            ("set the role of a missing user", SET_ROLE, vars(w.course, missing, Some("INSTRUCTOR"))),
            ("set the role of a non-member", SET_ROLE, vars(w.course, w.outsider, Some("INSTRUCTOR"))),
        ];
        for (name, query, variables) in cases {
            let response = app.gql(Some(token), query, variables).await;
            if error_code(&response).as_deref() != Some("NOT_FOUND") {
                failures.push(format!("{name} by {who}: expected NOT_FOUND, got {response}"));
            }
        }
    }
    // Ids of the wrong kind, or that do not decode, are the client's mistake.
    for variables in [
        json!({ "c": gid("User", w.alice), "u": gid("User", w.alice), "r": "STUDENT" }),
        json!({ "c": gid("Course", w.course), "u": gid("Course", w.course), "r": "STUDENT" }),
        json!({ "c": "nonsense", "u": gid("User", w.alice), "r": "STUDENT" }),
    ] {
        let response = app.gql(Some(&admin), ADD, variables).await;
        if error_code(&response).as_deref() != Some("BAD_USER_INPUT") {
            failures.push(format!("a malformed id: expected BAD_USER_INPUT, got {response}"));
        }
    }
    for (code, title) in [("", "Empty code"), ("X", "   "), (&"C".repeat(33)[..], "Long code")] {
        let response = app.gql(Some(&admin), CREATE, json!({ "code": code, "title": title })).await;
        if error_code(&response).as_deref() != Some("BAD_USER_INPUT") {
            failures.push(format!("createCourse({code:?}, {title:?}): expected BAD_USER_INPUT, got {response}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(roster(&app).await, before);
}

in_each_like_mode!(a_removed_member_keeps_posts_and_likes_but_cannot_like_again);
async fn a_removed_member_keeps_posts_and_likes_but_cannot_like_again(mode: LikeMode) {
    let app = TestApp::spawn_with(|s| s.like_mode = mode).await;
    let worker = match mode {
        LikeMode::Buffered => Some(app.worker().await),
        _ => None,
    };
    let apply = || async {
        match &worker {
            Some(worker) => worker.drain().await.expect("drain"),
            None => 0,
        }
    };
    let w = World::create(&app).await;
    let (alice, bob) = (app.token(w.alice), app.token(w.bob));
    let alices_post = app.create_post(&alice, w.course, "alice's first").await;
    let alices_second = app.create_post(&alice, w.course, "alice's second").await;
    let bobs_post = app.create_post(&bob, w.course, "bob's post").await;
    let like = "mutation($p: ID!) { likePost(postId: $p) { likeCount likedByMe } }";
    app.gql_ok(Some(&bob), like, json!({ "p": gid("Post", alices_post) })).await;
    apply().await;
    let bobs_likes = || app.scalar_i64("SELECT count(*) AS v FROM post_likes WHERE user_id = $1", [w.bob.into()]);
    assert_eq!(bobs_likes().await, 1);

    app.gql_ok(Some(&app.token(w.instructor)), REMOVE, vars(w.course, w.bob, None)).await;

    // At once, on this instance: bob's next like is refused, and nothing waits to be applied.
    let response = app.gql(Some(&bob), like, json!({ "p": gid("Post", alices_second) })).await;
    assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"), "{response}");
    assert_eq!(apply().await, 0, "a refused like reached the stream");
    assert_eq!(bobs_likes().await, 1);

    // What bob wrote and liked while a member stays.
    let data = app
        .gql_ok(
            Some(&alice),
            "query($a: ID!, $b: ID!) { a: post(id: $a) { likeCount } b: post(id: $b) { title author { handle } } }",
            json!({ "a": gid("Post", alices_post), "b": gid("Post", bobs_post) }),
        )
        .await;
    assert_eq!(data["a"]["likeCount"], 1);
    assert_eq!(data["b"]["title"], "bob's post");
    assert_eq!(data["b"]["author"]["handle"], "bob");
    assert_eq!(
        app.scalar_i64("SELECT count(*) AS v FROM posts WHERE user_id = $1 AND deleted_at IS NULL", [w.bob.into()])
            .await,
        1
    );
}
