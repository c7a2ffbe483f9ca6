//! Users in process memory: the authors every page shows, read from PostgreSQL once per
//! instance. A user's row (handle, display name, creation time) never changes and users are
//! never deleted, so nothing invalidates an entry and it is never stale. (A change to that
//! rule, such as renaming a user, must drop the entry on every instance.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::forum::users::UserRow;

/// Most users kept; past it the cache forgets them all and starts over.
const MAX_USERS: usize = 100_000;

/// Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct UserRows {
    inner: Arc<Mutex<HashMap<i64, UserRow>>>,
}

impl UserRows {
    fn lock(&self) -> MutexGuard<'_, HashMap<i64, UserRow>> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The users of `ids` already known, and the ids still to read.
    pub fn get_many(&self, ids: &[i64]) -> (HashMap<i64, UserRow>, Vec<i64>) {
        let users = self.lock();
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match users.get(id) {
                Some(row) => {
                    found.insert(*id, row.clone());
                }
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    pub fn remember(&self, rows: impl IntoIterator<Item = UserRow>) {
        let mut users = self.lock();
        for row in rows {
            if users.len() >= MAX_USERS {
                users.clear();
            }
            users.insert(row.id, row);
        }
    }
}
