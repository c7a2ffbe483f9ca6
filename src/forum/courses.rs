//! Courses and who belongs to them.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};

/// A member's role in one course.
#[derive(Clone, Copy, Debug, PartialEq, Eq, async_graphql::Enum)]
pub enum Role {
    /// Reads and writes in the course; edits and deletes only their own posts and comments.
    Student,
    /// As a student, and may also delete anyone's posts and comments in the course and change
    /// its roster.
    Instructor,
}

impl Role {
    pub fn parse(raw: &str) -> AppResult<Self> {
        match raw {
            "student" => Ok(Role::Student),
            "instructor" => Ok(Role::Instructor),
            other => Err(AppError::Internal(format!("unknown role `{other}` in course_members"))),
        }
    }

    /// The spelling `course_members.role` stores.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Student => "student",
            Role::Instructor => "instructor",
        }
    }
}

#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct CourseRow {
    pub id: i64,
    pub code: String,
    pub title: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

const COURSE_COLUMNS: &str = "SELECT id, code, title, created_at FROM courses";

pub(crate) async fn find(db: &impl ConnectionTrait, id: i64) -> AppResult<Option<CourseRow>> {
    Ok(CourseRow::find_by_statement(stmt(&format!("{COURSE_COLUMNS} WHERE id = $1"), [id.into()])).one(db).await?)
}

pub(crate) async fn find_many(db: &impl ConnectionTrait, ids: &[i64]) -> AppResult<Vec<CourseRow>> {
    Ok(CourseRow::find_by_statement(stmt(&format!("{COURSE_COLUMNS} WHERE id = ANY($1)"), [ids.to_vec().into()]))
        .all(db)
        .await?)
}

/// The courses a user belongs to, in id order.
pub(crate) async fn of_user(db: &impl ConnectionTrait, user_id: i64) -> AppResult<Vec<CourseRow>> {
    let sql = "SELECT c.id, c.code, c.title, c.created_at FROM course_members m \
               JOIN courses c ON c.id = m.course_id WHERE m.user_id = $1 ORDER BY c.id";
    Ok(CourseRow::find_by_statement(stmt(sql, [user_id.into()])).all(db).await?)
}

#[derive(FromQueryResult)]
struct MembershipRow {
    course_id: i64,
    role: String,
}

/// The user's role in each course they belong to (served by `course_members_user_idx`).
pub async fn roles_of_user(db: &impl ConnectionTrait, user_id: i64) -> AppResult<HashMap<i64, Role>> {
    let rows = MembershipRow::find_by_statement(stmt(
        "SELECT course_id, role FROM course_members WHERE user_id = $1",
        [user_id.into()],
    ))
    .all(db)
    .await?;
    rows.into_iter().map(|row| Ok((row.course_id, Role::parse(&row.role)?))).collect()
}

#[derive(FromQueryResult)]
struct CourseAndRolesRow {
    id: Option<i64>,
    code: Option<String>,
    title: Option<String>,
    created_at: Option<chrono::DateTime<chrono::Utc>>,
    course_ids: Option<Vec<i64>>,
    roles: Option<Vec<String>>,
}

/// A course and the user's role in every course they belong to, in ONE statement (a page
/// needs both; two round trips cost more than the join). The same memberships as
/// `roles_of_user`, read from the same index.
pub(crate) async fn find_with_roles_of_user(
    db: &impl ConnectionTrait,
    id: i64,
    user_id: i64,
) -> AppResult<(Option<CourseRow>, HashMap<i64, Role>)> {
    let row = CourseAndRolesRow::find_by_statement(stmt(
        "SELECT c.id, c.code, c.title, c.created_at, m.course_ids, m.roles \
         FROM (SELECT array_agg(course_id) AS course_ids, array_agg(role) AS roles \
               FROM course_members WHERE user_id = $2) m \
         LEFT JOIN courses c ON c.id = $1",
        [id.into(), user_id.into()],
    ))
    .one(db)
    .await?
    .ok_or_else(|| AppError::Internal("an aggregate returned no row".into()))?;
    let roles = row
        .course_ids
        .unwrap_or_default()
        .into_iter()
        .zip(row.roles.unwrap_or_default())
        .map(|(course_id, role)| Ok((course_id, Role::parse(&role)?)))
        .collect::<AppResult<HashMap<i64, Role>>>()?;
    let course = match (row.id, row.code, row.title, row.created_at) {
        (Some(id), Some(code), Some(title), Some(created_at)) => Some(CourseRow { id, code, title, created_at }),
        _ => None,
    };
    Ok((course, roles))
}

#[derive(FromQueryResult)]
struct CourseCountRow {
    course_id: i64,
    n: i64,
}

/// Members of each of `course_ids` in one statement (courses without members are absent).
pub(crate) async fn member_counts(db: &impl ConnectionTrait, course_ids: &[i64]) -> AppResult<HashMap<i64, i64>> {
    let rows = CourseCountRow::find_by_statement(stmt(
        "SELECT course_id, count(*) AS n FROM course_members WHERE course_id = ANY($1) GROUP BY course_id",
        [course_ids.to_vec().into()],
    ))
    .all(db)
    .await?;
    Ok(rows.into_iter().map(|row| (row.course_id, row.n)).collect())
}
