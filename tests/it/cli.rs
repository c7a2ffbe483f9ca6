//! The binary as an operator meets it: bad settings stop it with one clear sentence (fast),
//! `migrate` and `seed --demo` are idempotent, `token` mints what the server accepts.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::procs::stderr;
use crate::common::{self, TestApp};

fn course_forum(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_course-forum"));
    command.args(args);
    for var in ["DATABASE_URL", "JWT_SECRET", "BIND", "LIKE_MODE", "REDIS_URL", "CONNECT_TIMEOUT"] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("run course-forum")
}

#[test]
fn missing_database_url_is_one_clear_sentence() {
    let output = course_forum(&["serve"], &[("JWT_SECRET", "0123456789abcdef0123")]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(err.contains("DATABASE_URL is not set"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one sentence, not a panic: {err}");
}

#[test]
fn malformed_settings_are_refused_by_name() {
    let db = ("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[db, ("JWT_SECRET", "short")], "JWT_SECRET must be at least 16 bytes"),
        (&[db, ("JWT_SECRET", "0123456789abcdef0123"), ("BIND", "nonsense")], "--bind"),
        (&[db, ("JWT_SECRET", "0123456789abcdef0123"), ("LIKE_MODE", "psychic")], "--like-mode"),
        (&[db, ("JWT_SECRET", "0123456789abcdef0123"), ("CONNECT_TIMEOUT", "soon")], "not a duration"),
        (&[("DATABASE_URL", "mysql://x"), ("JWT_SECRET", "0123456789abcdef0123")], "postgres:// URL"),
    ];
    for (env, expected) in cases {
        let output = course_forum(&["serve"], env);
        assert!(!output.status.success(), "{env:?} should fail");
        let err = stderr(&output);
        assert!(err.contains(expected), "{env:?}: expected `{expected}` in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn unreachable_database_fails_fast_not_after_thirty_seconds() {
    let started = Instant::now();
    let output = course_forum(
        &["migrate"],
        &[("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nowhere"), ("CONNECT_TIMEOUT", "2s")],
    );
    assert!(!output.status.success());
    assert!(stderr(&output).contains("cannot reach PostgreSQL"), "{}", stderr(&output));
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

#[test]
fn export_schema_prints_the_committed_sdl() {
    let output = course_forum(&["export-schema"], &[]);
    assert!(output.status.success());
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql")).expect("schema");
    assert_eq!(String::from_utf8_lossy(&output.stdout), committed);
}

#[tokio::test]
async fn migrate_and_seed_twice_change_nothing_the_second_time() {
    let app = TestApp::spawn().await;
    let url =
        common::admin_database_url().rsplit_once('/').map(|(base, _)| format!("{base}/{}", app.database)).expect("url");
    let env = [("DATABASE_URL", url.as_str()), ("JWT_SECRET", common::JWT_SECRET), ("BIND", "127.0.0.1:8123")];

    assert!(course_forum(&["migrate"], &env).status.success(), "migrate on a migrated database");
    let first = course_forum(&["seed", "--demo"], &env);
    assert!(first.status.success(), "{}", stderr(&first));
    let counts = || async {
        (
            app.scalar_i64("SELECT count(*) AS v FROM users", []).await,
            app.scalar_i64("SELECT count(*) AS v FROM posts", []).await,
            app.scalar_i64("SELECT count(*) AS v FROM comments", []).await,
            app.scalar_i64("SELECT count(*) AS v FROM post_likes", []).await,
            app.scalar_i64("SELECT count(*) AS v FROM course_members", []).await,
        )
    };
    let after_first = counts().await;
    let second = course_forum(&["seed", "--demo"], &env);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(counts().await, after_first, "the second seed duplicated data");
    assert!(after_first.0 > 1000, "the mass course has thousands of members");

    let summary: serde_json::Value = serde_json::from_slice(&first.stdout).expect("seed prints one JSON document");
    assert_eq!(summary["graphql"], "http://127.0.0.1:8123/graphql");
    let users = summary["users"].as_array().expect("users");
    assert!(users.len() >= 4);
    // The printed ids and tokens are the API's own: the token works and `me` is that user.
    for user in users {
        let token = user["token"].as_str().expect("token");
        let data = app.gql_ok(Some(token), "{ me { id handle } myCourses { id } }", serde_json::json!({})).await;
        assert_eq!(data["me"]["id"], user["id"]);
        assert_eq!(data["me"]["handle"], user["handle"]);
        let courses: Vec<_> = data["myCourses"].as_array().expect("courses").iter().map(|c| c["id"].clone()).collect();
        assert_eq!(serde_json::Value::Array(courses), user["courses"]);
    }
    // Counters of the seeded data are consistent with their rows.
    let wrong = app
        .scalar_i64(
            "SELECT count(*) AS v FROM posts p WHERE like_count <> (SELECT count(*) FROM post_likes WHERE post_id = p.id) \
             OR comment_count <> (SELECT count(*) FROM comments WHERE post_id = p.id AND deleted_at IS NULL)",
            [],
        )
        .await;
    assert_eq!(wrong, 0);
}

#[tokio::test]
async fn token_subcommand_mints_a_token_the_server_accepts() {
    let app = TestApp::spawn().await;
    let user = app.create_user("tokenuser").await;
    let output = course_forum(&["token", "--user", &user.to_string()], &[("JWT_SECRET", common::JWT_SECRET)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let token = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let data = app.gql_ok(Some(&token), "{ me { handle } }", serde_json::json!({})).await;
    assert_eq!(data["me"]["handle"], "tokenuser");
    // The global id works as well as the number.
    let by_global =
        course_forum(&["token", "--user", &common::gid("User", user)], &[("JWT_SECRET", common::JWT_SECRET)]);
    assert!(by_global.status.success());
}
