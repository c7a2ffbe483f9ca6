//! Users: the people who post, comment and like.

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::AppResult;

#[derive(Clone, Debug, FromQueryResult)]
pub struct UserRow {
    pub id: i64,
    pub handle: String,
    pub display_name: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

pub(crate) async fn find(db: &impl ConnectionTrait, id: i64) -> AppResult<Option<UserRow>> {
    Ok(UserRow::find_by_statement(stmt(
        "SELECT id, handle, display_name, created_at FROM users WHERE id = $1",
        [id.into()],
    ))
    .one(db)
    .await?)
}

pub(crate) async fn find_many(db: &impl ConnectionTrait, ids: &[i64]) -> AppResult<Vec<UserRow>> {
    Ok(UserRow::find_by_statement(stmt(
        "SELECT id, handle, display_name, created_at FROM users WHERE id = ANY($1)",
        [ids.to_vec().into()],
    ))
    .all(db)
    .await?)
}

pub(crate) async fn find_by_handle(db: &impl ConnectionTrait, handle: &str) -> AppResult<Option<UserRow>> {
    Ok(UserRow::find_by_statement(stmt(
        "SELECT id, handle, display_name, created_at FROM users WHERE handle = $1",
        [handle.into()],
    ))
    .one(db)
    .await?)
}
