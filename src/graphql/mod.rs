//! The GraphQL schema, apart from its transport: types, resolvers, loaders, limits, and the
//! mapping of every error to a machine-readable `extensions.code`.

pub mod access;
pub mod context;
pub mod cursor;
pub mod errors;
pub mod ids;
pub mod loaders;
pub mod mutation;
pub mod query;
pub mod subscription;
pub mod types;

use async_graphql::Schema;

use crate::state::AppState;

pub type AppSchema = Schema<query::Query, mutation::Mutation, subscription::Subscription>;

/// Deepest selection accepted (a post page with comments, replies and their authors fits).
pub const MAX_DEPTH: usize = 16;
/// Highest query cost accepted; connection fields cost their page size times their children.
pub const MAX_COMPLEXITY: usize = 20_000;

type Builder = async_graphql::SchemaBuilder<query::Query, mutation::Mutation, subscription::Subscription>;

/// The types and limits, with no extension.
fn bare_builder() -> Builder {
    Schema::build(query::Query, mutation::Mutation::default(), subscription::Subscription)
        .limit_depth(MAX_DEPTH)
        .limit_complexity(MAX_COMPLEXITY)
}

/// The schema without runtime data: for SDL export.
pub fn schema_builder() -> Builder {
    bare_builder().extension(errors::ErrorCodes)
}

/// The schema served over websockets, with the shared state attached: its `ErrorCodes`
/// extension gives every error of a subscription (or an operation sent over the socket) its
/// code.
pub fn build_schema(state: AppState) -> AppSchema {
    schema_builder().data(state).finish()
}

/// The same schema for `POST /graphql`, without the extension: the HTTP handler assigns the
/// codes to the response itself (`errors::assign_code`, the one mapping). Why two: with ANY
/// extension installed, async-graphql sends every field through the extension chain (a type
/// and field lookup by name and a boxed future per field), which a 20-post page pays ~230
/// times (see README, Performance).
pub fn build_http_schema(state: AppState) -> AppSchema {
    bare_builder().data(state).finish()
}

/// The SDL of the running schema (what `schema.graphql` holds).
pub fn sdl() -> String {
    schema_builder().finish().sdl()
}
