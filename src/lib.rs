//! course-forum: a GraphQL server that gives every course its own forum.
//!
//! # Layout
//!
//! - `cli`       — subcommands (`serve`, `migrate`, `seed --demo`, `token`, `export-schema`).
//! - `config`    — settings from flags and env, validated once with one clear sentence.
//! - `startup`   — connect, assemble `AppState`, bind, serve until a shutdown future resolves.
//! - `state`     — the one context every handler and resolver receives.
//! - `http`      — axum routes: `POST /graphql`, GraphiQL at `/`, `/healthz`; authentication.
//! - `auth`      — HS256 tokens and the per-request `Viewer` with its memberships.
//! - `graphql`   — the schema apart from transport: types, queries, mutations, loaders,
//!                 global ids, cursors, access checks, error codes.
//! - `forum`     — rows and visible SQL for courses, users, posts, comments; keyset paging.
//! - `likes`     — like/unlike and "liked by me", written through the configured level.
//! - `kv`        — Redis: connection, key layout, Lua scripts (`lua/`), rate limits.
//! - `db`        — PostgreSQL pool with bounded timeouts; migrations from `migrations/`.
//! - `seed`      — the demo forum.
//! - `error`     — the one error type and its machine-readable codes.
//! - `telemetry` — tracing subscriber (text or JSON).
//!
//! # The life of a like (LIKE_MODE=sync, level 1)
//!
//! `likePost` mutation (`graphql::mutation`) → `graphql::access::post` proves the post is live
//! and the viewer a member of its course → `likes::Likes::set` rate-limits in Redis
//! (`lua/rate_limit.lua`) → `likes::sync::set` runs ONE statement: insert into `post_likes`
//! ON CONFLICT DO NOTHING, and bump `posts.like_count` by exactly the rows RETURNING reports →
//! the mutation returns the post with its new `likeCount` and `likedByMe` for client caches.

pub mod auth;
pub mod cli;
pub mod config;
pub mod db;
pub mod error;
pub mod forum;
pub mod graphql;
pub mod http;
pub mod kv;
pub mod likes;
pub mod seed;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod worker;
