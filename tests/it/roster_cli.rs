//! `course-forum roster import` and `course-forum admin` as an operator meets them: an import
//! applies adds, removes and role changes and a second run changes nothing; `--dry-run` prints
//! the difference and writes nothing; a file with bad lines names every one and applies
//! nothing; administrators granted and revoked from the command line.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sea_orm::{DbBackend, FromQueryResult, Statement};
use serde_json::json;

use crate::common::procs::stderr;
use crate::common::{self, TestApp, error_code, gid};

fn course_forum(app: &TestApp, args: &[&str]) -> Output {
    let url = common::database_url(&app.database);
    let mut command = Command::new(env!("CARGO_BIN_EXE_course-forum"));
    command.args(args);
    for var in ["DATABASE_URL", "JWT_SECRET", "BIND", "LIKE_MODE", "REDIS_URL", "CONNECT_TIMEOUT", "RUST_LOG"] {
        command.env_remove(var);
    }
    command.env("DATABASE_URL", url).env("RUST_LOG", "warn");
    command.output().expect("run course-forum")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Writes a roster file into the test's own temporary directory.
fn roster_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cf-roster-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write roster file");
    path
}

/// Courses, users, memberships and identities as one string: equal means nothing changed.
async fn everything(app: &TestApp) -> String {
    #[derive(FromQueryResult)]
    struct Text {
        v: String,
    }
    let sql = "SELECT concat_ws(' | ', \
        (SELECT string_agg(id || ':' || code || ':' || title, ' ' ORDER BY id) FROM courses), \
        (SELECT string_agg(id || ':' || handle || ':' || display_name, ' ' ORDER BY id) FROM users), \
        (SELECT string_agg(c.code || ':' || u.handle || ':' || m.role, ' ' ORDER BY c.code, u.handle) \
           FROM course_members m JOIN courses c ON c.id = m.course_id JOIN users u ON u.id = m.user_id), \
        (SELECT string_agg(i.issuer || ':' || i.subject || ':' || u.handle, ' ' ORDER BY i.subject) \
           FROM user_identities i JOIN users u ON u.id = i.user_id)) AS v";
    Text::find_by_statement(Statement::from_string(DbBackend::Postgres, sql))
        .one(&app.db)
        .await
        .expect("snapshot")
        .expect("one row")
        .v
}

/// CS101 with prof (instructor), alice and zed (students); BIO200, which no file names, with
/// its own member.
async fn world(app: &TestApp) -> (i64, i64) {
    let cs = app.create_course("CS101").await;
    let bio = app.create_course("BIO200").await;
    let prof = app.create_user("prof").await;
    let alice = app.create_user("alice").await;
    let zed = app.create_user("zed").await;
    let outsider = app.create_user("outsider").await;
    app.enroll(cs, prof, "instructor").await;
    app.enroll(cs, alice, "student").await;
    app.enroll(cs, zed, "student").await;
    app.enroll(bio, outsider, "student").await;
    (cs, zed)
}

/// prof stays, alice becomes an instructor, zed is dropped, bob (new) joins; a new course
/// NEW200 with carol (new), linked to her identity at an OIDC issuer.
const FILE: &str = "course_code,course_title,handle,display_name,role,issuer,subject\n\
                    CS101,CS101 title,prof,prof,instructor,,\n\
                    CS101,CS101 title,alice,alice,Instructor,,\n\
                    CS101,CS101 title,bob,Bob Le,student,,\n\
                    \"NEW200\",\"Ethics, an introduction\",carol,Carol Pham,student,https://idp.example.edu,c-42\n\
                    \"NEW200\",\"Ethics, an introduction\",alice,alice,student,,\n";

const NOTHING: &str = "courses created: 0, users created: 0, members added: 0, members removed: 0, role changes: 0, \
                       identities linked: 0, lines skipped: 0";

#[tokio::test]
async fn an_import_applies_the_difference_and_a_second_run_changes_nothing() {
    let app = TestApp::spawn().await;
    let (cs, zed) = world(&app).await;
    let path = roster_file("roster.csv", FILE);
    let untouched = app
        .scalar_i64(
            "SELECT count(*) AS v FROM course_members m JOIN courses c ON c.id = m.course_id WHERE c.code = 'BIO200'",
            [],
        )
        .await;

    // zed is signed in on the running server and reads the course: the server keeps zed's
    // memberships in memory from here on.
    let zed_token = app.token(zed);
    let course = "query($c: ID!) { course(id: $c) { code } }";
    app.gql_ok(Some(&zed_token), course, json!({ "c": gid("Course", cs) })).await;

    let first = course_forum(&app, &["roster", "import", path.to_str().expect("utf-8 path")]);
    assert!(first.status.success(), "{}", stderr(&first));
    let out = stdout(&first);
    assert!(
        out.contains("roster import: courses created: 1, users created: 2, members added: 3, members removed: 1, role changes: 1, identities linked: 1"),
        "{out}"
    );
    for line in [
        "+ course NEW200",
        "+ user @bob",
        "+ CS101 @bob student",
        "- CS101 @zed (was student)",
        "~ CS101 @alice student -> instructor",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    let after_first = everything(&app).await;
    for expected in [
        "CS101:alice:instructor",
        "CS101:bob:student",
        "CS101:prof:instructor",
        "NEW200:alice:student",
        "NEW200:carol:student",
        "BIO200:outsider:student",
        "Ethics, an introduction",
        "https://idp.example.edu:c-42:carol",
        "Carol Pham",
    ] {
        assert!(after_first.contains(expected), "missing `{expected}` in {after_first}");
    }
    assert!(!after_first.contains("CS101:zed"), "{after_first}");
    let still = app
        .scalar_i64(
            "SELECT count(*) AS v FROM course_members m JOIN courses c ON c.id = m.course_id WHERE c.code = 'BIO200'",
            [],
        )
        .await;
    assert_eq!(still, untouched, "a course the file does not name was changed");

    // The running server hears of the change (the trigger's notification) and refuses zed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = app.gql(Some(&zed_token), course, json!({ "c": gid("Course", cs) })).await;
        if error_code(&response).as_deref() == Some("FORBIDDEN") {
            break;
        }
        assert!(Instant::now() < deadline, "zed still reads CS101 after the import: {response}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let second = course_forum(&app, &["roster", "import", path.to_str().expect("utf-8 path")]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(stdout(&second).trim(), format!("roster import: {NOTHING}"));
    assert_eq!(everything(&app).await, after_first, "the second run changed something");
}

#[tokio::test]
async fn dry_run_prints_the_difference_and_changes_nothing() {
    let app = TestApp::spawn().await;
    world(&app).await;
    let path = roster_file("roster.csv", FILE);
    let before = everything(&app).await;
    let output = course_forum(&app, &["roster", "import", "--dry-run", path.to_str().expect("utf-8 path")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    for line in [
        "+ course NEW200 \"Ethics, an introduction\"",
        "+ user @bob \"Bob Le\"",
        "+ user @carol \"Carol Pham\"",
        "+ CS101 @bob student",
        "+ NEW200 @alice student",
        "- CS101 @zed (was student)",
        "~ CS101 @alice student -> instructor",
        "+ identity @carol = https://idp.example.edu c-42",
        "roster import --dry-run: nothing was written; courses created: 1, users created: 2, members added: 3, members removed: 1, role changes: 1, identities linked: 1",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    assert_eq!(everything(&app).await, before, "--dry-run wrote something");
}

#[tokio::test]
async fn a_file_with_bad_lines_reports_every_one_and_applies_nothing() {
    let app = TestApp::spawn().await;
    world(&app).await;
    let before = everything(&app).await;
    let text = "course_code,course_title,handle,display_name,role\n\
                CS101,CS101 title,bob,Bob,student\n\
                CS101,CS101 title,Bad Handle,Someone,student\n\
                CS101,CS101 title,carol,Carol,student\n\
                CS101,CS101 title,dave,Dave,teacher\n\
                CS101,Another title,erin,Erin,student\n\
                CS101,CS101 title,frank,Frank\n\
                CS101,CS101 title,carol,Carol,instructor\n\
                ,CS101 title,gina,Gina,student\n";
    let path = roster_file("bad.csv", text);
    for args in [&["roster", "import"][..], &["roster", "import", "--dry-run"][..]] {
        let mut args = args.to_vec();
        args.push(path.to_str().expect("utf-8 path"));
        let output = course_forum(&app, &args);
        assert!(!output.status.success(), "a bad file was accepted: {}", stdout(&output));
        let err = stderr(&output);
        assert!(err.contains("nothing was applied"), "{err}");
        for line in [3, 5, 6, 7, 8, 9] {
            assert!(err.contains(&format!("line {line}: ")), "line {line} not reported:\n{err}");
        }
        for line in [1, 2, 4] {
            assert!(!err.contains(&format!("line {line}: ")), "good line {line} reported:\n{err}");
        }
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(everything(&app).await, before, "a bad file changed something");
    }

    // A line whose identity belongs to a user another line names already is skipped, with its
    // reason; the rest of the file applies.
    app.scalar_i64(
        "INSERT INTO user_identities (issuer, subject, user_id) SELECT 'https://idp', 's1', id FROM users \
         WHERE handle = 'prof' RETURNING user_id AS v",
        [],
    )
    .await;
    let before = everything(&app).await;
    let path = roster_file(
        "identity.csv",
        "course_code,course_title,handle,display_name,role,issuer,subject\n\
         CS101,CS101 title,prof,prof,instructor,,\n\
         CS101,CS101 title,alice,alice,student,https://idp,s1\n",
    );
    let output = course_forum(&app, &["roster", "import", path.to_str().expect("utf-8 path")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("! line 3: skipped: @alice is @prof, whom line 2 names already"), "{out}");
    assert!(out.contains("- CS101 @alice (was student)") && out.contains("lines skipped: 1"), "{out}");
    let after = everything(&app).await;
    assert!(after.contains("https://idp:s1:prof") && after.contains("CS101:prof:instructor"), "{after}");
    assert_ne!(after, before);

    // A missing file is one clear sentence.
    let output = course_forum(&app, &["roster", "import", "/nonexistent/roster.csv"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("cannot open the roster file"), "{}", stderr(&output));
}

#[tokio::test]
async fn administrators_are_granted_listed_and_revoked_from_the_command_line() {
    let app = TestApp::spawn().await;
    let boss = app.create_user("boss").await;
    let token = app.token(boss);
    let create = "mutation($code: String!) { createCourse(code: $code, title: \"Made by an admin\") { code } }";
    let response = app.gql(Some(&token), create, json!({ "code": "ADM100" })).await;
    assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"), "{response}");

    let output = course_forum(&app, &["admin", "grant", "--user", "boss"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("@boss") && stdout(&output).contains("is now an administrator"),
        "{}",
        stdout(&output)
    );
    let again = course_forum(&app, &["admin", "grant", "--user", "@boss"]);
    assert!(stdout(&again).contains("was an administrator already; nothing changed"), "{}", stdout(&again));
    let list = course_forum(&app, &["admin", "list"]);
    assert!(stdout(&list).contains("@boss") && stdout(&list).contains("1 administrator(s)"), "{}", stdout(&list));

    let data = app.gql_ok(Some(&token), create, json!({ "code": "ADM100" })).await;
    assert_eq!(data["createCourse"]["code"], "ADM100");

    let output = course_forum(&app, &["admin", "revoke", "--user", &gid("User", boss)]);
    assert!(stdout(&output).contains("is no longer an administrator"), "{}", stdout(&output));
    let output = course_forum(&app, &["admin", "revoke", "--user", &boss.to_string()]);
    assert!(stdout(&output).contains("was not an administrator; nothing changed"), "{}", stdout(&output));
    let response = app.gql(Some(&token), create, json!({ "code": "ADM200" })).await;
    assert_eq!(error_code(&response).as_deref(), Some("FORBIDDEN"), "{response}");

    let output = course_forum(&app, &["admin", "grant", "--user", "nobody_here"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("no such user"), "{}", stderr(&output));
}
