//! Users in process memory: the authors every page shows, read from PostgreSQL once per
//! instance. A user's row (handle, display name, creation time) never changes and users are
//! never deleted, so nothing invalidates an entry and it is never stale. (A change to that
//! rule, such as renaming a user, must drop the entry on every instance.)
//!
//! Bounded by the `users` share of `CACHE_BUDGET_BYTES` (`cache::budget`): the least used
//! users leave first.

use std::collections::HashMap;
use std::sync::Arc;

use super::budget::{CacheBudget, CacheName, DEFAULT_BUDGET_BYTES, WeighedCache, string_bytes};
use crate::forum::users::UserRow;

/// Cheap to clone (shared).
#[derive(Clone)]
pub struct UserRows {
    rows: WeighedCache<i64, UserRow>,
}

impl Default for UserRows {
    /// Under a budget of its own (tests); the server builds it with `with_budget`.
    fn default() -> Self {
        Self::with_budget(&CacheBudget::new(DEFAULT_BUDGET_BYTES))
    }
}

impl UserRows {
    pub fn with_budget(budget: &CacheBudget) -> Self {
        Self {
            rows: budget.weighed(CacheName::Users, None, |_, row: &UserRow| {
                string_bytes(&row.handle) + string_bytes(&row.display_name)
            }),
        }
    }

    /// The users of `ids` already known, and the ids still to read. Rows are copied from the
    /// `Arc`s the cache hands out, outside any lock.
    pub fn get_many(&self, ids: &[i64]) -> (HashMap<i64, UserRow>, Vec<i64>) {
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match self.rows.get(id) {
                Some(row) => {
                    found.insert(*id, UserRow::clone(&row));
                }
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    pub fn remember(&self, rows: impl IntoIterator<Item = UserRow>) {
        for row in rows {
            self.rows.insert(row.id, Arc::new(row));
        }
    }
}
