//! Limits on a request's shape that depth and complexity do not catch.
//!
//! Aliases: each alias makes its resolver run once more. `a1: post(id: $p) { id } … a2000:
//! post(id: $p) { id }` fits in a 64 KiB body, costs little complexity (each alias costs its
//! own small selection), and runs one SQL statement per alias: measured, 1,000 such aliases
//! took 0.27 s and 1,000 statements on one request. So a document may hold at most
//! `MAX_ALIASES` aliases, counted everywhere in it (operations and fragments, a fragment's at
//! every spread), by the linear pre-pass (`document_limits`). Fields without aliases cannot
//! multiply: the same response key is resolved once.
//!
//! Directives: at most `MAX_DIRECTIVES` on one field (async-graphql's own check).
//!
//! Cost: every field costs 1 for each place it is resolved: a fragment's fields once per spread
//! (async-graphql's complexity walk enters the fragment at every spread), and a connection's
//! children multiplied by its page size (`types::page_cost`: `first` or `last`, 20 when absent,
//! clamped to 1..=100). A document whose operation costs more than `MAX_COST` is refused after
//! validation and before anything runs, with `COST_LIMIT_EXCEEDED` and its `cost` and `limit`
//! in `extensions`. Lists are batched per level (`loaders`), so the cost bounds the rows a
//! request reads; `REQUEST_STATEMENT_BUDGET` bounds its statements.

use async_graphql::ServerError;
use async_graphql::{ErrorExtensionValues, ValidationResult};

/// Highest cost accepted. A page of 20 posts with their authors and flags costs about 200;
/// 100 posts with 100 comments each, 10,000 times their fields. (Its value is in `config`,
/// which checks `SUBSCRIPTION_MAX_COST` against it.)
pub(crate) const MAX_COST: usize = crate::config::MAX_QUERY_COST;

/// Most aliases one document may hold, counted once per place they are resolved (a fragment's
/// once per spread). Clients that render a page use a handful.
pub(crate) const MAX_ALIASES: usize = 30;
/// Most directives on one field.
pub(crate) const MAX_DIRECTIVES: usize = 8;

/// Refuses an operation whose cost (async-graphql's complexity with `types::page_cost`) is over
/// `MAX_COST`, with its own code and both numbers (run on the validation's result, by
/// `hooks::RequestHooks`).
pub(crate) fn check_cost(result: ValidationResult) -> Result<ValidationResult, Vec<ServerError>> {
    if result.complexity > MAX_COST {
        let mut error = ServerError::new(
            format!(
                "this request would cost {} (each field once per place it is resolved, connections times \
                     their page size); at most {MAX_COST} is accepted: ask for smaller pages or fewer fields",
                result.complexity
            ),
            None,
        );
        let mut extensions = ErrorExtensionValues::default();
        extensions.set("code", "COST_LIMIT_EXCEEDED");
        extensions.set("cost", result.complexity as u64);
        extensions.set("limit", MAX_COST as u64);
        error.extensions = Some(extensions);
        return Err(vec![error]);
    }
    Ok(result)
}
