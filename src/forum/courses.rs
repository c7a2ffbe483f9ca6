//! Courses and who belongs to them.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};

/// A member's role in one course.
#[derive(Clone, Copy, Debug, PartialEq, Eq, async_graphql::Enum)]
pub enum Role {
    Student,
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
}

#[derive(Clone, Debug, FromQueryResult)]
pub struct CourseRow {
    pub id: i64,
    pub code: String,
    pub title: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

const COURSE_COLUMNS: &str = "SELECT id, code, title, created_at FROM courses";

pub async fn find(db: &impl ConnectionTrait, id: i64) -> AppResult<Option<CourseRow>> {
    Ok(CourseRow::find_by_statement(stmt(&format!("{COURSE_COLUMNS} WHERE id = $1"), [id.into()])).one(db).await?)
}

pub async fn find_many(db: &impl ConnectionTrait, ids: &[i64]) -> AppResult<Vec<CourseRow>> {
    Ok(CourseRow::find_by_statement(stmt(&format!("{COURSE_COLUMNS} WHERE id = ANY($1)"), [ids.to_vec().into()]))
        .all(db)
        .await?)
}

/// The courses a user belongs to, in id order.
pub async fn of_user(db: &impl ConnectionTrait, user_id: i64) -> AppResult<Vec<CourseRow>> {
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
struct CountRow {
    n: i64,
}

pub async fn member_count(db: &impl ConnectionTrait, course_id: i64) -> AppResult<i64> {
    let row = CountRow::find_by_statement(stmt(
        "SELECT count(*) AS n FROM course_members WHERE course_id = $1",
        [course_id.into()],
    ))
    .one(db)
    .await?;
    Ok(row.map_or(0, |r| r.n))
}
