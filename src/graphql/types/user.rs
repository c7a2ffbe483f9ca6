//! `User`: a person, as other members see them.

use super::*;

pub(crate) struct User(pub UserRow);

/// A person with an account. Anyone signed in may read any user (through `node(id:)`, or as an
/// author).
#[Object]
impl User {
    /// Global id of this user.
    pub(super) async fn id(&self) -> ID {
        encode(NodeKind::User, self.0.id)
    }
    /// Unique, lowercase handle (`@handle`).
    pub(super) async fn handle(&self) -> &String {
        &self.0.handle
    }
    /// The name to show; not unique.
    pub(super) async fn display_name(&self) -> &String {
        &self.0.display_name
    }
    /// When the account was created.
    pub(super) async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}
