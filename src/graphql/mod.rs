//! The GraphQL schema, apart from its transport: types, resolvers, loaders, limits, and the
//! mapping of every error to a machine-readable `extensions.code`.

pub mod access;
pub mod batch_gate;
pub mod context;
pub mod cursor;
pub mod errors;
pub mod ids;
pub mod limits;
pub mod loaders;
pub mod metrics;
pub mod mutation;
pub mod query;
pub mod revocation;
pub mod roster;
pub mod subscription;
pub mod types;

use async_graphql::Schema;

use crate::state::AppState;

pub type AppSchema = Schema<query::Query, mutation::Mutation, subscription::Subscription>;

/// Deepest selection accepted (a post page with comments, replies and their authors fits).
pub const MAX_DEPTH: usize = 16;
/// Highest query cost accepted (`limits::CostLimit`; README, "What a request may cost").
pub const MAX_COST: usize = limits::MAX_COST;

/// The schema without runtime data: for SDL export.
pub fn schema_builder() -> async_graphql::SchemaBuilder<query::Query, mutation::Mutation, subscription::Subscription> {
    Schema::build(query::Query, mutation::Mutation::default(), subscription::Subscription)
        .limit_depth(MAX_DEPTH)
        .limit_directives(limits::MAX_DIRECTIVES)
        // Outermost first: the metrics see the codes ErrorCodes assigns.
        .extension(metrics::RequestMetrics)
        .extension(errors::ErrorCodes)
        .extension(limits::AliasLimit)
        .extension(limits::CostLimit)
}

/// The schema served, with the shared state attached.
pub fn build_schema(state: AppState) -> AppSchema {
    schema_builder().data(state).finish()
}

/// The SDL of the running schema (what `schema.graphql` holds).
pub fn sdl() -> String {
    schema_builder().finish().sdl()
}
