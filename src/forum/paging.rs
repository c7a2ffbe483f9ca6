//! Keyset pagination (never OFFSET). A page is "up to `limit` rows past `cursor` in the
//! connection's order"; one extra row is fetched so `has_next`/`has_prev` are exact.

use crate::error::{AppError, AppResult};

/// Default and maximum page sizes (Relay `first`/`last`).
pub(crate) const DEFAULT_PAGE_SIZE: i32 = 20;
pub(crate) const MAX_PAGE_SIZE: i32 = 100;

/// A keyset cursor above every row in NEW order (`id < ABOVE_EVERY_POST` holds for all): where
/// a pinned post that leads a course's first page stands: the page after it starts at the
/// newest unpinned post (without the pins again), the page before it holds the pins alone.
pub(crate) const ABOVE_EVERY_POST: i64 = i64::MAX;

/// The order a connection presents its items in.
#[derive(Clone, Copy, Debug)]
pub enum Order {
    /// Posts: highest id first.
    NewestFirst,
    /// Comments and replies: lowest id first.
    OldestFirst,
}

/// A validated page request: `first/after` walks forward, `last/before` walks backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageRequest {
    pub limit: i64,
    pub cursor: Option<i64>,
    pub backward: bool,
}

impl PageRequest {
    /// Validates Relay arguments (cursors already decoded to ids).
    pub fn new(first: Option<i32>, after: Option<i64>, last: Option<i32>, before: Option<i64>) -> AppResult<Self> {
        let check = |name: &str, n: i32| {
            if !(1..=MAX_PAGE_SIZE).contains(&n) {
                Err(AppError::bad_input(format!("`{name}` must be between 1 and {MAX_PAGE_SIZE}, got {n}")))
            } else {
                Ok(n as i64)
            }
        };
        if first.is_some() && last.is_some() {
            return Err(AppError::bad_input("pass either `first` or `last`, not both"));
        }
        if after.is_some() && before.is_some() {
            return Err(AppError::bad_input("pass either `after` or `before`, not both"));
        }
        if (first.is_some() && before.is_some()) || (last.is_some() && after.is_some()) {
            return Err(AppError::bad_input("`after` goes with `first`, and `before` with `last`"));
        }
        if last.is_some() || before.is_some() {
            let limit = check("last", last.unwrap_or(DEFAULT_PAGE_SIZE))?;
            Ok(Self { limit, cursor: before, backward: true })
        } else {
            let limit = check("first", first.unwrap_or(DEFAULT_PAGE_SIZE))?;
            Ok(Self { limit, cursor: after, backward: false })
        }
    }

    /// The keyset condition on `id` and the ORDER BY for this walk, with the cursor bound as
    /// parameter `$param`. Returns (condition, order by); the condition is `TRUE` without a cursor.
    pub fn keyset_sql(&self, order: Order, param: usize) -> (String, &'static str) {
        // Walking backward is walking the opposite order, then reversing the rows.
        let descending = matches!(order, Order::NewestFirst) != self.backward;
        let (cmp, order_by) = if descending { ("<", "id DESC") } else { (">", "id ASC") };
        let condition = match self.cursor {
            Some(_) => format!("id {cmp} ${param}"),
            None => "TRUE".to_owned(),
        };
        (condition, order_by)
    }

    /// Parameter values to bind after the scope's own, matching `keyset_sql`.
    pub fn values(&self) -> Vec<sea_orm::Value> {
        let mut values: Vec<sea_orm::Value> = Vec::new();
        if let Some(cursor) = self.cursor {
            values.push(cursor.into());
        }
        values.push((self.limit + 1).into());
        values
    }

    /// Position of the LIMIT parameter given the scope's parameter count.
    pub fn limit_param(&self, scope_params: usize) -> usize {
        scope_params + 1 + usize::from(self.cursor.is_some())
    }

    /// Turns the `limit + 1` rows the query returned into a page in presentation order.
    pub fn finish<T>(&self, mut rows: Vec<T>) -> Page<T> {
        let more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        if self.backward {
            rows.reverse();
            Page { items: rows, has_prev: more, has_next: self.cursor.is_some() }
        } else {
            Page { items: rows, has_next: more, has_prev: self.cursor.is_some() }
        }
    }
}

/// One page of rows in presentation order.
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_next: bool,
    pub has_prev: bool,
}

/// Builds `SELECT … WHERE <scope> AND <keyset> ORDER BY … LIMIT …` for a keyset page.
/// `scope` is a condition using `$1..$scope_params`.
pub(crate) fn page_sql(select: &str, scope: &str, scope_params: usize, page: &PageRequest, order: Order) -> String {
    let (keyset, order_by) = page.keyset_sql(order, scope_params + 1);
    format!("{select} WHERE {scope} AND {keyset} ORDER BY {order_by} LIMIT ${}", page.limit_param(scope_params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes_and_mixed_directions() {
        assert!(PageRequest::new(Some(0), None, None, None).is_err());
        assert!(PageRequest::new(Some(-1), None, None, None).is_err());
        assert!(PageRequest::new(Some(101), None, None, None).is_err());
        assert!(PageRequest::new(Some(5), None, Some(5), None).is_err());
        assert!(PageRequest::new(None, Some(3), Some(5), None).is_err());
        assert_eq!(PageRequest::new(None, None, None, None).unwrap().limit, 20);
        assert!(PageRequest::new(None, None, Some(3), Some(9)).unwrap().backward);
    }

    #[test]
    fn backward_walks_reverse_order_and_reverses_rows() {
        let page = PageRequest::new(None, None, Some(2), Some(10)).unwrap();
        assert_eq!(page.keyset_sql(Order::NewestFirst, 2), ("id > $2".to_owned(), "id ASC"));
        let finished = page.finish(vec![11, 12, 13]);
        assert_eq!(finished.items, vec![12, 11]);
        assert!(finished.has_prev);
        assert!(finished.has_next);
    }
}
