//! `seed --demo`: a small, believable forum (a few courses, one mass course with thousands of
//! members, students and an instructor, posts, comments, replies, likes), written in one
//! transaction and only once: a second run finds it and changes nothing.

use std::collections::HashMap;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, FromQueryResult, TransactionTrait};
use serde::Serialize;

use crate::auth::TokenKeys;
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::audience::{Anonymity, PostKind};
use crate::forum::courses::Role;
use crate::forum::posts::NewPost;
use crate::forum::questions;
use crate::forum::{comments, posts, roster};
use crate::graphql::ids::{NodeKind, encode};
use crate::likes::{LikeTarget, sync};
use crate::notifications;

/// Members of the mass course beyond the named demo users.
pub(crate) const MASS_COURSE_EXTRA_MEMBERS: i64 = 2_500;

const COURSES: &[(&str, &str)] = &[
    ("CS101", "Introduction to Programming"),
    ("MATH201", "Linear Algebra"),
    ("HIST110", "World History"),
    ("WRIT100", "Academic Writing (all first-years)"),
];

/// (handle, display name, role, course codes)
const PEOPLE: &[(&str, &str, Role, &[&str])] = &[
    ("dr_tran", "Dr. Minh Tran", Role::Instructor, &["CS101", "MATH201", "WRIT100"]),
    ("alice", "Alice Nguyen", Role::Student, &["CS101", "MATH201", "WRIT100"]),
    ("bob", "Bob Le", Role::Student, &["CS101", "HIST110", "WRIT100"]),
    ("carol", "Carol Pham", Role::Student, &["MATH201", "HIST110", "WRIT100"]),
    ("dave", "Dave Hoang", Role::Student, &["HIST110"]),
];

#[derive(Serialize)]
pub(crate) struct DemoCourse {
    pub id: String,
    pub title: String,
}

#[derive(Serialize)]
pub(crate) struct DemoUser {
    pub id: String,
    pub handle: String,
    pub token: String,
    pub courses: Vec<String>,
}

/// What `seed --demo` prints: everything a newcomer needs to start clicking.
#[derive(Serialize)]
pub(crate) struct DemoSummary {
    pub graphql: String,
    pub courses: Vec<DemoCourse>,
    pub users: Vec<DemoUser>,
}

#[derive(FromQueryResult)]
struct IdRow {
    id: i64,
}

#[derive(FromQueryResult)]
struct CourseIdTitle {
    id: i64,
    title: String,
}

pub(crate) async fn seed_demo(
    db: &DatabaseConnection,
    tokens: &TokenKeys,
    graphql_url: String,
) -> AppResult<DemoSummary> {
    let txn = db.begin().await?;
    // Serialise concurrent seeders: the second waits, then finds the data.
    txn.execute_unprepared("SELECT pg_advisory_xact_lock(4242001)").await?;
    // Courses, people and memberships through the roster service, as an operator would: it
    // creates what is missing and leaves what exists as it is.
    let mut course_ids = HashMap::new();
    for (code, title) in COURSES {
        let (course, _) = roster::ensure_course(&txn, code, title).await?;
        course_ids.insert(*code, course.id);
    }
    // The named people first (they get the low ids docs/api.md's examples show), then the mass
    // course's thousands of students, all in one set-wise call.
    let mut people: Vec<(String, String)> =
        PEOPLE.iter().map(|(handle, name, _, _)| (handle.to_string(), name.to_string())).collect();
    people.extend((1..=MASS_COURSE_EXTRA_MEMBERS).map(|n| (format!("student{n:04}"), format!("Student {n}"))));
    let users = roster::ensure_users(&txn, &people).await?;
    let id_of = |handle: &str| {
        users.ids.get(handle).copied().ok_or_else(|| AppError::Internal(format!("demo user {handle} missing")))
    };
    let mut members: HashMap<&str, Vec<(i64, Role)>> = HashMap::new();
    for (handle, _, role, codes) in PEOPLE {
        for code in *codes {
            members.entry(code).or_default().push((id_of(handle)?, *role));
        }
    }
    for (handle, _) in &people[PEOPLE.len()..] {
        members.entry("WRIT100").or_default().push((id_of(handle)?, Role::Student));
    }
    for (code, _) in COURSES {
        let course_id = course_ids[code];
        roster::enroll(&txn, course_id, members.get(code).map_or(&[][..], Vec::as_slice)).await?;
    }

    let has_posts = IdRow::find_by_statement(stmt("SELECT id FROM posts LIMIT 1", [])).one(&txn).await?.is_some();
    if !has_posts {
        write_content(&txn).await?;
    }
    txn.commit().await?;
    summary(db, tokens, graphql_url).await
}

async fn user_id(db: &impl ConnectionTrait, handle: &str) -> AppResult<i64> {
    let row = IdRow::find_by_statement(stmt("SELECT id FROM users WHERE handle = $1", [handle.into()])).one(db).await?;
    row.map(|r| r.id).ok_or_else(|| AppError::Internal(format!("demo user {handle} missing")))
}

async fn course_id(db: &impl ConnectionTrait, code: &str) -> AppResult<i64> {
    let row = IdRow::find_by_statement(stmt("SELECT id FROM courses WHERE code = $1", [code.into()])).one(db).await?;
    row.map(|r| r.id).ok_or_else(|| AppError::Internal(format!("demo course {code} missing")))
}

async fn write_content<C: ConnectionTrait + TransactionTrait>(txn: &C) -> AppResult<()> {
    let (tran, alice, bob, carol, dave) = (
        user_id(txn, "dr_tran").await?,
        user_id(txn, "alice").await?,
        user_id(txn, "bob").await?,
        user_id(txn, "carol").await?,
        user_id(txn, "dave").await?,
    );
    let cs = course_id(txn, "CS101").await?;
    let math = course_id(txn, "MATH201").await?;
    let hist = course_id(txn, "HIST110").await?;
    let writ = course_id(txn, "WRIT100").await?;

    // CS101: a dozen posts so paging shows, one real discussion.
    for week in 1..=12 {
        let (author, title) = if week % 3 == 0 { (tran, "Lab notes") } else { (alice, "Question about the exercises") };
        posts::create(
            txn,
            &NewPost::discussion(
                cs,
                author,
                &format!("Week {week}: {title}"),
                &format!("Notes and questions for week {week}."),
            ),
        )
        .await?;
    }
    let recursion = posts::create(
        txn,
        &NewPost {
            kind: PostKind::Question,
            ..NewPost::discussion(
                cs,
                bob,
                "Why does my recursive fib take forever for n = 45?",
                "fib(40) is fine, fib(45) never seems to finish. Is my laptop broken?",
            )
        },
    )
    .await?;
    let c1 = comments::create_comment(
        txn,
        recursion.id,
        cs,
        alice,
        "It recomputes the same values exponentially often. Try memoising.",
        None,
    )
    .await?;
    notify(txn, &c1, bob).await?;
    let r1 = comments::create_reply(txn, &c1, bob, "Memoising with a HashMap made it instant, thanks!", None).await?;
    notify(txn, &r1, alice).await?;
    let r2 = comments::create_reply(
        txn,
        &r1,
        tran,
        "Good. Next step: can you do it with O(1) memory? @alice, you too.",
        None,
    )
    .await?;
    notify(txn, &r2, bob).await?;
    let c2 = comments::create_comment(txn, recursion.id, cs, tran, "See lecture 7, slide 12, on the call tree.", None)
        .await?;
    notify(txn, &c2, bob).await?;
    // The question's states: alice's answer accepted by the asker and endorsed by staff,
    // tagged; every other state on a post of its own.
    write_question_states(txn, cs, (tran, alice, bob), recursion.id, &c1).await?;
    for (user, target) in [
        (alice, LikeTarget::Post(recursion.id)),
        (tran, LikeTarget::Post(recursion.id)),
        (bob, LikeTarget::Comment(c1.id)),
        (tran, LikeTarget::Comment(c1.id)),
        (alice, LikeTarget::Comment(c2.id)),
    ] {
        sync::set(txn, user, target, true).await?;
    }

    // MATH201 and HIST110: a little life each.
    let eigen = posts::create(
        txn,
        &NewPost::discussion(
            math,
            carol,
            "Intuition for eigenvectors?",
            "Directions a matrix only stretches: is that the whole story?",
        ),
    )
    .await?;
    let c3 = comments::create_comment(
        txn,
        eigen.id,
        math,
        tran,
        "Mostly, yes. Try the 3Blue1Brown-style picture with a shear.",
        None,
    )
    .await?;
    notify(txn, &c3, carol).await?;
    let r3 = comments::create_reply(txn, &c3, alice, "The shear example finally made it click for me.", None).await?;
    notify(txn, &r3, tran).await?;
    sync::set(txn, alice, LikeTarget::Post(eigen.id), true).await?;
    let essay = posts::create(
        txn,
        &NewPost::discussion(hist, dave, "Essay topics for the midterm", "Has anyone picked the Silk Road topic?"),
    )
    .await?;
    let c4 = comments::create_comment(txn, essay.id, hist, carol, "I did! Happy to share sources.", None).await?;
    notify(txn, &c4, dave).await?;
    sync::set(txn, bob, LikeTarget::Post(essay.id), true).await?;

    // WRIT100, the mass course: an announcement that half the course likes (a hot post).
    let announcement = posts::create(
        txn,
        &NewPost {
            kind: PostKind::Announcement,
            ..NewPost::discussion(
                writ,
                tran,
                "Announcement: essay deadline moved to Friday",
                "The deadline for essay 1 is now Friday 23:59. Office hours Thursday.",
            )
        },
    )
    .await?;
    notifications::announcements::announce(txn, writ, announcement.id, tran).await?;
    txn.execute_raw(stmt(
        "WITH ins AS (INSERT INTO post_likes (post_id, user_id, course_id) \
             SELECT $1, u.id, (SELECT course_id FROM posts WHERE id = $1) FROM users u WHERE u.handle LIKE 'student%' AND (right(u.handle, 4)::int % 2) = 0 \
             ON CONFLICT DO NOTHING RETURNING 1) \
         UPDATE posts SET like_count = like_count + (SELECT count(*) FROM ins) WHERE id = $1",
        [announcement.id.into()],
    ))
    .await?;
    let c5 = comments::create_comment(
        txn,
        announcement.id,
        writ,
        carol,
        "Thank you! Does this apply to the outline too?",
        None,
    )
    .await?;
    notify(txn, &c5, tran).await?;
    Ok(())
}

/// CS101's questions, answers and staff: the course allows anonymity to classmates and has
/// three tags; the fib question (`question`, answered by `answer`) is tagged, accepted and
/// endorsed; an instructor's announcement is pinned; an anonymous question waits unanswered;
/// a private question is seen by its author and staff only.
async fn write_question_states<C: ConnectionTrait + TransactionTrait>(
    txn: &C,
    cs: i64,
    (tran, alice, bob): (i64, i64, i64),
    question: i64,
    answer: &comments::CommentRow,
) -> AppResult<()> {
    questions::set_anonymity(txn, cs, Anonymity::Classmates).await?;
    let mut tags = HashMap::new();
    for name in ["Homework", "Lectures", "Exams"] {
        tags.insert(name, questions::create_tag(txn, cs, name).await?.id);
    }
    questions::set_tags(txn, question, cs, &[tags["Homework"], tags["Lectures"]]).await?;
    questions::accept_answer(txn, question, Some(answer.id)).await?;
    questions::endorse_comment(txn, answer, Some(tran)).await?;

    let exam = posts::create(
        txn,
        &NewPost {
            kind: PostKind::Announcement,
            ..NewPost::discussion(
                cs,
                tran,
                "Midterm: Thursday 9:00, room B2",
                "Bring your student card. Closed book; one page of notes allowed.",
            )
        },
    )
    .await?;
    notifications::announcements::announce(txn, cs, exam.id, tran).await?;
    questions::set_tags(txn, exam.id, cs, &[tags["Exams"]]).await?;
    questions::pin(txn, &exam, true).await?;

    let shy = posts::create(
        txn,
        &NewPost {
            kind: PostKind::Question,
            anonymous_to: Some(Anonymity::Classmates.anonymous_to()?),
            ..NewPost::discussion(
                cs,
                bob,
                "Is it fine to ask for help on the homework in office hours?",
                "I am not sure what counts as getting too much help.",
            )
        },
    )
    .await?;
    questions::set_tags(txn, shy.id, cs, &[tags["Homework"]]).await?;

    posts::create(
        txn,
        &NewPost {
            kind: PostKind::Question,
            private: true,
            ..NewPost::discussion(
                cs,
                alice,
                "Extension for lab 4?",
                "I was ill this week (note attached by email). Could I hand lab 4 in on Monday?",
            )
        },
    )
    .await?;
    Ok(())
}

/// The notifications a demo comment or reply causes, as the API would write them (the like
/// milestones of the announcement come from the trigger).
async fn notify<C: ConnectionTrait>(txn: &C, row: &comments::CommentRow, answers: i64) -> AppResult<()> {
    let mentioned = notifications::mentions(&row.body);
    notifications::record(txn, notifications::Cause::comment(row, answers), &mentioned, DEMO_NOTIFICATIONS_KEPT)
        .await?;
    Ok(())
}

/// Far above what the demo writes: the server's own NOTIFICATIONS_PER_USER trims later writes.
const DEMO_NOTIFICATIONS_KEPT: i64 = 500;

async fn summary(db: &DatabaseConnection, tokens: &TokenKeys, graphql_url: String) -> AppResult<DemoSummary> {
    let courses = CourseIdTitle::find_by_statement(stmt(
        "SELECT id, title FROM courses WHERE code = ANY($1) ORDER BY id",
        [COURSES.iter().map(|(code, _)| code.to_string()).collect::<Vec<_>>().into()],
    ))
    .all(db)
    .await?;
    let mut users = Vec::new();
    for (handle, _, _, _) in PEOPLE {
        let id = user_id(db, handle).await?;
        let member_of = IdRow::find_by_statement(stmt(
            "SELECT course_id AS id FROM course_members WHERE user_id = $1 ORDER BY course_id",
            [id.into()],
        ))
        .all(db)
        .await?;
        users.push(DemoUser {
            id: encode(NodeKind::User, id).0,
            handle: handle.to_string(),
            token: tokens.mint(id, Duration::from_secs(30 * 24 * 3600))?,
            courses: member_of.into_iter().map(|c| encode(NodeKind::Course, c.id).0).collect(),
        });
    }
    Ok(DemoSummary {
        graphql: graphql_url,
        courses: courses
            .into_iter()
            .map(|c| DemoCourse { id: encode(NodeKind::Course, c.id).0, title: c.title })
            .collect(),
        users,
    })
}
