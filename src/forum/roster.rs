//! The roster: which courses exist and who belongs to each, with what role, as the people who
//! run courses change it. One service behind the GraphQL roster mutations
//! (`graphql::roster`), `course-forum roster import` (`roster::import`) and `seed --demo`:
//! creating courses and users, adding and removing members, changing roles, administrators.
//!
//! Every function works inside the caller's transaction and commits nothing: the caller
//! commits, then tells its own instance's `Memberships` about the users whose membership
//! changed. (The trigger on `course_members` tells every instance as well, but only a moment
//! later; telling our own at once makes a change effective on the instance that made it
//! before it answers.)
//!
//! Who may change a course's roster: an administrator (a row in `administrators`, granted with
//! `course-forum admin grant`), or an instructor of that course. Only administrators create
//! courses. The command line (`Actor::Operator`) is not asked: it runs with the database's
//! credentials, which could write the rows directly anyway.
//!
//! Roster changes of one course are serialised by a `FOR NO KEY UPDATE` lock on its `courses`
//! row: two instructors demoting each other at the same moment cannot both see "there is
//! another instructor". That lock does not conflict with the `FOR KEY SHARE` locks that
//! foreign keys take, so posting in the course is never held up by it.

pub(crate) mod import;
pub(crate) mod people;

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::courses::{CourseRow, Role};
use crate::forum::users::{self, UserRow};

/// Who is changing a roster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Actor {
    /// A signed-in user of the API: an administrator may change any course, an instructor only
    /// the courses they teach.
    User(i64),
    /// The command line (`roster import`, `seed --demo`), trusted as the database's owner.
    Operator,
}

/// What allowed a change; the last-instructor rule depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Authority {
    Operator,
    Administrator,
    Instructor,
}

/// A person's place in a course after a roster change.
#[derive(Clone, Debug)]
pub(crate) struct MemberChange {
    pub course: CourseRow,
    pub user: UserRow,
    /// The role now; `None` once removed.
    pub role: Option<Role>,
    /// False when the roster was already as asked (an add of a member with that role, a role
    /// set to the one they have): nothing was written.
    pub changed: bool,
}

// ---------------------------------------------------------------------------------------------
// Validation, shared by the API and the roster file
// ---------------------------------------------------------------------------------------------

/// The longest course code and title, display name, issuer and subject the tables accept.
pub(crate) const MAX_CODE_CHARS: usize = 32;
pub(crate) const MAX_TITLE_CHARS: usize = 200;
pub(crate) const MAX_DISPLAY_NAME_CHARS: usize = 100;
pub(crate) const MAX_ISSUER_CHARS: usize = 500;
pub(crate) const MAX_SUBJECT_CHARS: usize = 255;

/// A handle is 2 to 32 of `a-z`, `0-9` and `_` (the `users.handle` CHECK), checked here so
/// that a bad one is reported as the caller's mistake, not as a failed statement.
pub(crate) fn check_handle(handle: &str) -> Result<(), String> {
    let ok = (2..=32).contains(&handle.len())
        && handle.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok { Ok(()) } else { Err(format!("handle `{}` must be 2 to 32 of a-z, 0-9 and _", shorten(handle))) }
}

/// Non-empty after trimming and at most `max` characters; returns the trimmed text.
pub(crate) fn check_text<'a>(field: &str, text: &'a str, max: usize) -> Result<&'a str, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    let chars = text.chars().count();
    if chars > max {
        return Err(format!("{field} is {chars} characters long; at most {max} are allowed"));
    }
    Ok(text)
}

fn shorten(text: &str) -> String {
    text.chars().take(40).collect()
}

// ---------------------------------------------------------------------------------------------
// Administrators
// ---------------------------------------------------------------------------------------------

#[derive(FromQueryResult)]
struct Flag {
    v: bool,
}

pub(crate) async fn is_admin(db: &impl ConnectionTrait, user_id: i64) -> AppResult<bool> {
    let row = Flag::find_by_statement(stmt(
        "SELECT EXISTS (SELECT 1 FROM administrators WHERE user_id = $1) AS v",
        [user_id.into()],
    ))
    .one(db)
    .await?;
    Ok(row.is_some_and(|r| r.v))
}

/// Makes the user an administrator; false when they were one already.
pub(crate) async fn grant_admin(db: &impl ConnectionTrait, user_id: i64) -> AppResult<bool> {
    let result = db
        .execute_raw(stmt(
            "INSERT INTO administrators (user_id) VALUES ($1) ON CONFLICT (user_id) DO NOTHING",
            [user_id.into()],
        ))
        .await?;
    Ok(result.rows_affected() == 1)
}

/// Takes the administrator role away; false when the user did not have it.
pub(crate) async fn revoke_admin(db: &impl ConnectionTrait, user_id: i64) -> AppResult<bool> {
    let result = db.execute_raw(stmt("DELETE FROM administrators WHERE user_id = $1", [user_id.into()])).await?;
    Ok(result.rows_affected() == 1)
}

/// Every administrator, in the order they were granted.
pub(crate) async fn admins(db: &impl ConnectionTrait) -> AppResult<Vec<UserRow>> {
    Ok(UserRow::find_by_statement(stmt(
        "SELECT u.id, u.handle, u.display_name, u.created_at FROM administrators a \
         JOIN users u ON u.id = a.user_id ORDER BY a.granted_at, u.id",
        [],
    ))
    .all(db)
    .await?)
}

// ---------------------------------------------------------------------------------------------
// Courses and users
// ---------------------------------------------------------------------------------------------

const COURSE_RETURNING: &str = "RETURNING id, code, title, created_at";

/// Creates a course. Only an administrator may; a code already taken is CONFLICT (codes are
/// what people and LMS exports name courses by, so a second `CS101` would be ambiguous).
pub(crate) async fn create_course(
    db: &impl ConnectionTrait,
    actor: Actor,
    code: &str,
    title: &str,
) -> AppResult<CourseRow> {
    let code = check_text("code", code, MAX_CODE_CHARS).map_err(AppError::BadUserInput)?;
    let title = check_text("title", title, MAX_TITLE_CHARS).map_err(AppError::BadUserInput)?;
    if let Actor::User(user_id) = actor
        && !is_admin(db, user_id).await?
    {
        return Err(AppError::Forbidden("only an administrator may create a course".into()));
    }
    // ON CONFLICT DO NOTHING rather than catching the unique violation: the violation would
    // abort the caller's transaction.
    let row = CourseRow::find_by_statement(stmt(
        &format!("INSERT INTO courses (code, title) VALUES ($1, $2) ON CONFLICT (code) DO NOTHING {COURSE_RETURNING}"),
        [code.into(), title.into()],
    ))
    .one(db)
    .await?;
    let row = row.ok_or_else(|| AppError::Conflict(format!("a course with code `{code}` exists already")))?;
    tracing::info!(?actor, course = row.id, code = %row.code, "course created");
    Ok(row)
}

/// The course with this code, created with `title` if there is none; true when created.
/// For the command line: an existing course keeps its title.
pub(crate) async fn ensure_course(db: &impl ConnectionTrait, code: &str, title: &str) -> AppResult<(CourseRow, bool)> {
    match create_course(db, Actor::Operator, code, title).await {
        Ok(row) => Ok((row, true)),
        Err(AppError::Conflict(_)) => {
            let row = CourseRow::find_by_statement(stmt(
                "SELECT id, code, title, created_at FROM courses WHERE code = $1",
                [code.trim().into()],
            ))
            .one(db)
            .await?
            .ok_or_else(|| AppError::Internal(format!("course `{code}` conflicted, then was not there")))?;
            Ok((row, false))
        }
        Err(err) => Err(err),
    }
}

/// Users by handle, each created with its display name when missing (an existing user keeps
/// the name they have). Set-wise, two statements for any number of people (the demo's mass
/// course has thousands).
pub(crate) struct EnsuredUsers {
    /// Every handle asked for, with its user id.
    pub ids: HashMap<String, i64>,
    /// The handles that were created, in the order given.
    pub created: Vec<String>,
}

#[derive(FromQueryResult)]
struct IdHandle {
    id: i64,
    handle: String,
}

pub(crate) async fn ensure_users(db: &impl ConnectionTrait, people: &[(String, String)]) -> AppResult<EnsuredUsers> {
    let mut handles = Vec::with_capacity(people.len());
    let mut names = Vec::with_capacity(people.len());
    let mut seen = std::collections::HashSet::new();
    for (handle, name) in people {
        check_handle(handle).map_err(AppError::BadUserInput)?;
        let name = check_text("display name", name, MAX_DISPLAY_NAME_CHARS).map_err(AppError::BadUserInput)?;
        if seen.insert(handle.as_str()) {
            handles.push(handle.clone());
            names.push(name.to_owned());
        }
    }
    if handles.is_empty() {
        return Ok(EnsuredUsers { ids: HashMap::new(), created: Vec::new() });
    }
    let created = IdHandle::find_by_statement(stmt(
        "INSERT INTO users (handle, display_name) \
         SELECT handle, display_name FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS p(handle, display_name, n) \
         ORDER BY n ON CONFLICT (handle) DO NOTHING RETURNING id, handle",
        [handles.clone().into(), names.into()],
    ))
    .all(db)
    .await?;
    let mut created: Vec<(i64, String)> = created.into_iter().map(|r| (r.id, r.handle)).collect();
    created.sort();
    // A second statement sees the rows a concurrent transaction committed meanwhile too.
    let all = IdHandle::find_by_statement(stmt(
        "SELECT id, handle FROM users WHERE handle = ANY($1)",
        [handles.clone().into()],
    ))
    .all(db)
    .await?;
    let ids: HashMap<String, i64> = all.into_iter().map(|r| (r.handle, r.id)).collect();
    if let Some(missing) = handles.iter().find(|h| !ids.contains_key(*h)) {
        return Err(AppError::Internal(format!("user `{missing}` was neither found nor created")));
    }
    if !created.is_empty() {
        tracing::info!(created = created.len(), "users created");
    }
    Ok(EnsuredUsers { ids, created: created.into_iter().map(|(_, handle)| handle).collect() })
}

// ---------------------------------------------------------------------------------------------
// Members
// ---------------------------------------------------------------------------------------------

/// Adds a member. Adding someone who already has that role changes nothing and succeeds
/// (`changed: false`), so a retried request is harmless; adding someone who is a member with
/// the other role is BAD_USER_INPUT, because "add as a student" must not quietly demote an
/// instructor: `set_role` says that on purpose.
pub(crate) async fn add_member(
    db: &impl ConnectionTrait,
    actor: Actor,
    course_id: i64,
    user_id: i64,
    role: Role,
) -> AppResult<MemberChange> {
    let (course, _) = authorize(db, actor, course_id).await?;
    let user = find_user(db, user_id).await?;
    match role_of(db, course.id, user.id).await? {
        Some(current) if current == role => Ok(MemberChange { course, user, role: Some(role), changed: false }),
        Some(current) => Err(AppError::bad_input(format!(
            "@{} is already a member of {} as {}; use setCourseMemberRole to change their role",
            user.handle,
            course.code,
            current.as_str()
        ))),
        None => {
            db.execute_raw(stmt(
                "INSERT INTO course_members (course_id, user_id, role) VALUES ($1, $2, $3)",
                [course.id.into(), user.id.into(), role.as_str().into()],
            ))
            .await?;
            tracing::info!(?actor, course = course.id, user = user.id, role = role.as_str(), "member added");
            Ok(MemberChange { course, user, role: Some(role), changed: true })
        }
    }
}

/// Changes a member's role; the role they have already changes nothing. Someone who is not a
/// member is NOT_FOUND. An instructor may not demote the course's last instructor.
pub(crate) async fn set_role(
    db: &impl ConnectionTrait,
    actor: Actor,
    course_id: i64,
    user_id: i64,
    role: Role,
) -> AppResult<MemberChange> {
    let (course, authority) = authorize(db, actor, course_id).await?;
    let user = find_user(db, user_id).await?;
    let current = role_of(db, course.id, user.id).await?.ok_or_else(|| not_a_member(&user, &course))?;
    if current == role {
        return Ok(MemberChange { course, user, role: Some(role), changed: false });
    }
    if current == Role::Instructor {
        keep_an_instructor(db, authority, &course).await?;
    }
    db.execute_raw(stmt(
        "UPDATE course_members SET role = $3 WHERE course_id = $1 AND user_id = $2",
        [course.id.into(), user.id.into(), role.as_str().into()],
    ))
    .await?;
    tracing::info!(?actor, course = course.id, user = user.id, role = role.as_str(), "member role changed");
    Ok(MemberChange { course, user, role: Some(role), changed: true })
}

/// Removes a member. Their posts, comments and likes stay (they were members when they wrote
/// them); from now on the access checks and the like worker's membership fence refuse them.
/// Someone who is not a member is NOT_FOUND. An instructor may not remove the course's last
/// instructor.
pub(crate) async fn remove_member(
    db: &impl ConnectionTrait,
    actor: Actor,
    course_id: i64,
    user_id: i64,
) -> AppResult<MemberChange> {
    let (course, authority) = authorize(db, actor, course_id).await?;
    let user = find_user(db, user_id).await?;
    let current = role_of(db, course.id, user.id).await?.ok_or_else(|| not_a_member(&user, &course))?;
    if current == Role::Instructor {
        keep_an_instructor(db, authority, &course).await?;
    }
    db.execute_raw(stmt(
        "DELETE FROM course_members WHERE course_id = $1 AND user_id = $2",
        [course.id.into(), user.id.into()],
    ))
    .await?;
    tracing::info!(?actor, course = course.id, user = user.id, "member removed");
    Ok(MemberChange { course, user, role: None, changed: true })
}

/// Adds whoever of `members` is not yet in the course, leaving existing members as they are;
/// returns the user ids added. Set-wise, for the command line (the demo seed).
pub(crate) async fn enroll(db: &impl ConnectionTrait, course_id: i64, members: &[(i64, Role)]) -> AppResult<Vec<i64>> {
    if members.is_empty() {
        return Ok(Vec::new());
    }
    let user_ids: Vec<i64> = members.iter().map(|(id, _)| *id).collect();
    let roles: Vec<String> = members.iter().map(|(_, role)| role.as_str().to_owned()).collect();
    let added = IdRow::find_by_statement(stmt(
        "INSERT INTO course_members (course_id, user_id, role) \
         SELECT $1, user_id, role FROM unnest($2::bigint[], $3::text[]) AS m(user_id, role) \
         ON CONFLICT (course_id, user_id) DO NOTHING RETURNING user_id AS id",
        [course_id.into(), user_ids.into(), roles.into()],
    ))
    .all(db)
    .await?;
    Ok(added.into_iter().map(|r| r.id).collect())
}

#[derive(FromQueryResult)]
struct IdRow {
    id: i64,
}

#[derive(FromQueryResult)]
struct RoleRow {
    role: String,
}

/// Locks the course's roster (see the module doc) and says what lets the actor change it:
/// NOT_FOUND for no such course, FORBIDDEN for someone who is neither an administrator nor
/// one of its instructors. The course is looked up first, as everywhere in the API: a course
/// id is no secret, and "no such course" is the more useful answer.
async fn authorize(db: &impl ConnectionTrait, actor: Actor, course_id: i64) -> AppResult<(CourseRow, Authority)> {
    let course = CourseRow::find_by_statement(stmt(
        "SELECT id, code, title, created_at FROM courses WHERE id = $1 FOR NO KEY UPDATE",
        [course_id.into()],
    ))
    .one(db)
    .await?
    .ok_or_else(|| AppError::not_found("course"))?;
    let Actor::User(user_id) = actor else { return Ok((course, Authority::Operator)) };
    if is_admin(db, user_id).await? {
        return Ok((course, Authority::Administrator));
    }
    match role_of(db, course.id, user_id).await? {
        Some(Role::Instructor) => Ok((course, Authority::Instructor)),
        _ => Err(AppError::Forbidden(
            "only an administrator or an instructor of this course may change its roster".into(),
        )),
    }
}

async fn find_user(db: &impl ConnectionTrait, user_id: i64) -> AppResult<UserRow> {
    users::find(db, user_id).await?.ok_or_else(|| AppError::not_found("user"))
}

async fn role_of(db: &impl ConnectionTrait, course_id: i64, user_id: i64) -> AppResult<Option<Role>> {
    let row = RoleRow::find_by_statement(stmt(
        "SELECT role FROM course_members WHERE course_id = $1 AND user_id = $2",
        [course_id.into(), user_id.into()],
    ))
    .one(db)
    .await?;
    row.map(|r| Role::parse(&r.role)).transpose()
}

fn not_a_member(user: &UserRow, course: &CourseRow) -> AppError {
    AppError::NotFound(format!("@{} is not a member of {}", user.handle, course.code))
}

/// An instructor may not take away the course's last instructor (in practice: themselves),
/// which would leave it with nobody to run it but an administrator. Administrators and the
/// command line may: they can still manage the course, and an LMS roster is the authority.
async fn keep_an_instructor(db: &impl ConnectionTrait, authority: Authority, course: &CourseRow) -> AppResult<()> {
    if authority != Authority::Instructor {
        return Ok(());
    }
    #[derive(FromQueryResult)]
    struct Count {
        n: i64,
    }
    let count = Count::find_by_statement(stmt(
        "SELECT count(*) AS n FROM course_members WHERE course_id = $1 AND role = 'instructor'",
        [course.id.into()],
    ))
    .one(db)
    .await?
    .map_or(0, |r| r.n);
    if count <= 1 {
        return Err(AppError::Forbidden(format!(
            "{} would be left without an instructor: add another instructor first, or ask an administrator",
            course.code
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_follow_the_table_check() {
        for good in ["ab", "alice", "student_0001", &"a".repeat(32)] {
            assert!(check_handle(good).is_ok(), "{good}");
        }
        for bad in ["a", "", "Alice", "bob!", "bob smith", &"a".repeat(33), "émile"] {
            assert!(check_handle(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_is_trimmed_and_bounded() {
        assert_eq!(check_text("title", "  Linear Algebra ", 200), Ok("Linear Algebra"));
        assert!(check_text("title", "   ", 200).is_err());
        assert!(check_text("code", &"x".repeat(33), 32).is_err());
    }
}
