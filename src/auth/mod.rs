//! Authentication: bearer tokens (`tokens`: the server's own HS256 ones; `jwks` and
//! `identity`: an identity provider's, and who their subject is; `verifier`: which is which)
//! and the `Viewer`, the authenticated user of one request or websocket connection, with their
//! course memberships.

pub(crate) mod identity;
pub(crate) mod jwks;
mod tokens;
mod verifier;

pub(crate) use tokens::VerifiedToken;
pub use tokens::{DEV_AUDIENCE, DEV_ISSUER, TokenKeys};
pub(crate) use verifier::Authenticator;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sea_orm::DatabaseConnection;
use tokio::sync::OnceCell;

use crate::error::{AppError, AppResult};
use crate::forum::courses::Role;
use crate::membership::{Memberships, Roles};

/// Who is asking, for one request (or one websocket connection). Memberships come from the
/// instance's `Memberships`, which forgets a user's the moment it hears of a change (and reads
/// PostgreSQL while it cannot hear). An HTTP request reads them at most once and keeps that
/// reading for its whole execution, so one response is consistent with itself. A websocket's
/// viewer lives as long as the connection and serves every operation on it, so it keeps
/// nothing: each operation asks `Memberships` again.
pub(crate) struct Viewer {
    pub user_id: i64,
    shared: Memberships,
    memberships: OnceCell<Roles>,
    /// A connection's viewer: memberships are never kept.
    read_every_time: bool,
    /// This viewer made the first lookup of memberships the instance's warm kept
    /// (`Memberships::look_up`): as good as their first request here.
    first_use_of_warmed: AtomicBool,
}

impl Viewer {
    /// The viewer of one HTTP request.
    pub(crate) fn new(user_id: i64, shared: Memberships) -> Self {
        Self::reading(user_id, shared, false)
    }

    /// The viewer of a websocket connection, shared by all its operations.
    pub(crate) fn for_connection(user_id: i64, shared: Memberships) -> Self {
        Self::reading(user_id, shared, true)
    }

    fn reading(user_id: i64, shared: Memberships, read_every_time: bool) -> Self {
        Self {
            user_id,
            shared,
            memberships: OnceCell::new(),
            read_every_time,
            first_use_of_warmed: AtomicBool::new(false),
        }
    }

    /// The viewer's role in every course they belong to: read once per request, or every time
    /// for a connection.
    pub(crate) async fn memberships(&self, db: &DatabaseConnection) -> AppResult<Roles> {
        // Memory first through the one lookup that notes a warmed user's first use, so that
        // no path of a request takes that mark without this viewer knowing.
        if let Some(roles) = self.known_memberships() {
            return Ok(roles);
        }
        if self.read_every_time {
            return self.shared.read_and_keep(db, self.user_id).await;
        }
        self.memberships.get_or_try_init(|| self.shared.read_and_keep(db, self.user_id)).await.cloned()
    }

    /// The memberships, if this request has them without a statement: read already, or in
    /// the instance's memory.
    pub(crate) fn known_memberships(&self) -> Option<Roles> {
        if let Some(roles) = self.memberships.get() {
            return Some(roles.clone());
        }
        let (roles, first_use) = self.shared.look_up(self.user_id)?;
        if first_use {
            self.first_use_of_warmed.store(true, Ordering::Release);
        }
        if !self.read_every_time {
            let _ = self.memberships.set(roles.clone());
        }
        Some(roles)
    }

    /// Whether this viewer's memberships, though in memory, came from the warm and this viewer
    /// was the first to look them up: the instance has served the user nothing before. Asked
    /// once: a connection's viewer lives on, and only its first like is such a first touch.
    pub(crate) fn first_use_of_warmed(&self) -> bool {
        self.first_use_of_warmed.swap(false, Ordering::AcqRel)
    }

    /// The generation to pass to `remember_memberships` for a reading about to start.
    pub(crate) fn reading_starts(&self) -> u64 {
        self.shared.generation()
    }

    /// Keeps memberships this request read together with something else (one statement
    /// instead of two, e.g. `forum::courses::find_with_roles_of_user`), started at
    /// generation `read_at`: for this request, and in the instance's memory unless a change
    /// was heard meanwhile.
    pub(crate) fn remember_memberships(&self, memberships: HashMap<i64, Role>, read_at: u64) -> Roles {
        let roles = Arc::new(memberships);
        self.shared.keep(self.user_id, roles.clone(), read_at);
        if !self.read_every_time {
            let _ = self.memberships.set(roles.clone());
        }
        roles
    }

    /// The viewer's role in `course_id`, or FORBIDDEN.
    pub(crate) async fn require_member(&self, db: &DatabaseConnection, course_id: i64) -> AppResult<Role> {
        role_in(&*self.memberships(db).await?, course_id)
    }
}

/// The role in `course_id` among `memberships`, or FORBIDDEN.
pub(crate) fn role_in(memberships: &HashMap<i64, Role>, course_id: i64) -> AppResult<Role> {
    memberships
        .get(&course_id)
        .copied()
        .ok_or_else(|| AppError::Forbidden("you are not a member of this course".into()))
}
