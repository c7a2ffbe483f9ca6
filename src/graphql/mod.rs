//! The GraphQL schema, apart from its transport: types, resolvers, loaders, limits, and the
//! mapping of every error to a machine-readable `extensions.code`.

pub(crate) mod access;
pub(crate) mod batch_gate;
pub(crate) mod context;
pub(crate) mod document_limits;
pub(crate) mod errors;
pub(crate) mod hooks;
pub(crate) mod ids;
pub(crate) mod limits;
pub(crate) mod loaders;
pub(crate) mod metrics;
pub(crate) mod mutation;
pub(crate) mod notifications;
pub(crate) mod query;
pub(crate) mod questions;
pub(crate) mod revocation;
pub(crate) mod roster;
pub(crate) mod search;
pub(crate) mod shared_live;
pub(crate) mod socket;
pub(crate) mod subscription;
pub(crate) mod types;
pub(crate) mod unread;

use async_graphql::connection::Connection;
use async_graphql::{SDLExportOptions, Schema};
use chrono::{DateTime, Utc};

use crate::state::AppState;

pub(crate) type AppSchema = Schema<query::Query, Mutation, subscription::Subscription>;

/// What can be changed. Every mutation needs a signed-in user, else UNAUTHENTICATED. Writes
/// are limited per user per minute: one over its limit is RATE_LIMITED, with
/// `extensions.retryAfterMs` saying when to try again. Ids are checked as in `Query`
/// (BAD_USER_INPUT, NOT_FOUND, FORBIDDEN); text is trimmed and must not be empty.
#[derive(async_graphql::MergedObject, Default)]
pub struct Mutation(
    mutation::PostMutations,
    mutation::CommentMutations,
    mutation::LikeMutations,
    mutation::ViewMutations,
    mutation::NotificationMutations,
    roster::RosterMutations,
    questions::QuestionMutations,
    unread::UnreadMutations,
    search::SearchMutations,
);

/// Deepest selection accepted (a post page with comments, replies and their authors fits).
pub(crate) const MAX_DEPTH: usize = 16;

/// The schema without runtime data: for SDL export.
pub fn schema_builder() -> async_graphql::SchemaBuilder<query::Query, Mutation, subscription::Subscription> {
    Schema::build(query::Query, Mutation::default(), subscription::Subscription)
        .limit_depth(MAX_DEPTH)
        .limit_directives(limits::MAX_DIRECTIVES)
        .extension(hooks::RequestHooks)
        // Types the library defines carry its generic descriptions (or none); a front-end
        // developer reads these instead. The wire format stays the library's.
        .override_output_type_description::<DateTime<Utc>>(DATETIME_DESCRIPTION)
        .override_output_type_description::<Connection<crate::cursor::PostsCursor, types::Post>>(
            "A page of posts. Ask for the next one with `after: pageInfo.endCursor` while \
             `pageInfo.hasNextPage` is true.",
        )
        .override_output_type_description::<Connection<crate::cursor::KeyCursor, types::Comment>>(
            "A page of top-level comments. Ask for the next one with `after: pageInfo.endCursor` while \
             `pageInfo.hasNextPage` is true.",
        )
        .override_output_type_description::<
            Connection<crate::cursor::KeyCursor, types::Notification, notifications::NotificationTotals>,
        >(
            "A page of your notifications, newest first, with the count of those unread. Ask for the next \
             one with `after: pageInfo.endCursor` while `pageInfo.hasNextPage` is true.",
        )
        .override_output_type_description::<Connection<types::search::SearchCursor, types::search::SearchHit>>(
            "A page of search hits, best first. Ask for the next one with `after: pageInfo.endCursor` while \
             `pageInfo.hasNextPage` is true.",
        )
        .override_output_type_description::<Connection<crate::cursor::KeyCursor, types::Reply>>(
            "A page of replies. Ask for the next one with `after: pageInfo.endCursor` while \
             `pageInfo.hasNextPage` is true.",
        )
}

/// chrono's `DateTime<Utc>` scalar already names RFC 3339 as its `specifiedByURL`; its own
/// description speaks to Rust implementers, so the schema says what a client receives
/// (`to_rfc3339`: a `+00:00` offset, fractional seconds only as far as they are non-zero).
const DATETIME_DESCRIPTION: &str = "A point in time: an RFC 3339 string in UTC, with a `+00:00` offset and fractional \
                                    seconds when there are any, e.g. `2026-03-01T09:30:00.123456+00:00`.";

/// The schema served, with the shared state attached.
pub(crate) fn build_schema(state: AppState) -> AppSchema {
    schema_builder().data(state).data(shared_live::SharedShapes::default()).finish()
}

/// The SDL of the running schema (what `schema.graphql` holds). `@specifiedBy` is included so
/// the file shows what introspection answers (`specifiedByURL`), which async-graphql leaves
/// out of SDL by default.
pub fn sdl() -> String {
    schema_builder().finish().sdl_with_options(SDLExportOptions::new().include_specified_by())
}
