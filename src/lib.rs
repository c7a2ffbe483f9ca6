//! course-forum: a GraphQL server that gives every course its own forum.
//!
//! # Layout
//!
//! - `cli`       — subcommands: `serve`, `worker`, `migrate`, `seed --demo`, `token`,
//!                 `export-schema`, `reconcile`, `reset-like-cache`, `check`.
//! - `config`    — settings from flags and env, validated once with one clear sentence.
//! - `startup`   — connect, assemble `AppState`, bind, serve until a shutdown future resolves;
//!                 shutdown of the server, websockets and `BackgroundJobs` in bounded time.
//! - `state`     — the one context every handler and resolver receives.
//! - `http`      — axum routes: `POST /graphql`, GraphiQL at `/`, `/healthz`, `/readyz`,
//!                 `/metrics`; authentication; a request id on every request.
//! - `auth`      — HS256 tokens and the per-request `Viewer` with its memberships.
//! - `graphql`   — the schema apart from transport: types, queries, mutations, loaders,
//!                 global ids, cursors, access checks, error codes.
//! - `forum`     — rows and visible SQL for courses, users, posts, comments; keyset paging.
//! - `likes`     — like/unlike and "liked by me" at three levels: `sync` (one statement),
//!                 `recount` (row now, counter by a job), `buffered` (Redis liked-sets + stream);
//!                 `likes::apply` is the worker's one-transaction batch SQL.
//! - `worker`    — the one active consumer per like-stream shard (lease, claim, batch, ack,
//!                 dead letters), or the recount job; steppable by hand (`process_one_batch`).
//! - `views`     — post views bots cannot inflate: tickets with server-measured dwell, caps per
//!                 user and IP, random counter shards, unique viewers (HyperLogLog), and the
//!                 exactly-once aggregator (`views::aggregator`, one SQL statement per flush).
//! - `feed`      — the home feed: the fan-out job (`feed::fanout`: transactional outbox →
//!                 members' timelines, or one list per celebrity course), timelines rebuilt
//!                 from PostgreSQL once under a lock, `homeFeed` pages merged from them.
//! - `cache`     — the stampede-proof post cache (logical expiration, lock + brief wait, TTL
//!                 jitter, "missing" markers, invalidation by generation) behind `post(id)`,
//!                 access checks and feed hydration.
//! - `kv`        — Redis: connection, key layout (`kv::keys`, the key table), owner-token locks
//!                 (`kv::lock`), rate limits.
//! - `db`        — PostgreSQL pool with bounded timeouts; migrations from `migrations/`.
//! - `seed`      — the demo forum.
//! - `error`     — the one error type and its machine-readable codes.
//! - `backoff`   — retry pacing of the background loops (doubling delay, shutdown-aware pause).
//! - `hooks`     — test hooks: a `Gate` that holds a running step at a chosen point.
//! - `telemetry` — tracing subscriber (text or JSON); the metrics recorder and its catalog.
//! - `ops`       — what operators ask: stream lag, pending and leases read from Redis, the
//!                 `/readyz` report, the invariants of `course-forum check`.
//!
//! Lua scripts live in `lua/` as real files, loaded once and run by EVALSHA.
//!
//! # The life of a like (LIKE_MODE=buffered, the default)
//!
//! 1. `likePost` mutation (`graphql::mutation`) → `graphql::access::post_to_like` proves the post is
//!    live and the viewer a member of its course (the trust boundary, before Redis).
//! 2. `likes::Likes::set` → `likes::buffered` runs `lua/like_toggle.lua` on the user's
//!    (user, course) liked-set: the rate limit, SADD, and only if that changed the set, XADD
//!    the event to the user's stream shard, atomically, in one round trip. A set not loaded
//!    answers -1; the service reads its members from PostgreSQL and calls again with them
//!    (the script loads them, then toggles). The mutation answers at once.
//! 3. `worker::LikeWorker` — the shard's one consumer, by lease — reads the entry (own
//!    pending first, then new), collapses the batch to the last op per (target, user,
//!    course), and `likes::apply` writes everything in ONE transaction: JOINs refuse deleted
//!    or foreign-course targets and users who are not members (their liked-sets are dropped
//!    after COMMIT to reload), counters follow RETURNING.
//! 4. After COMMIT: XACK + XDEL. A crash before this replays the batch with no effect twice.
//! 5. The committed counts are what live subscriptions will publish (after commit, never
//!    before).
//!
//! In `sync` mode step 2 is instead one SQL statement (`likes::sync`): insert ON CONFLICT
//! DO NOTHING, and bump the counter by exactly the rows RETURNING reports.
//!
//! # The life of a post in the home feed
//!
//! `createPost` writes the post and its `feed_outbox` row in one statement → the fan-out job
//! (`feed::fanout`) claims the row, pushes the id into each member's existing timeline (or the
//! celebrity course's list), deletes the row, commits → `homeFeed` (`feed::Feed::page`) merges
//! the viewer's timeline with their celebrity courses' lists, hydrates the page through
//! `cache::PostCache`, and continues from PostgreSQL below the lists.

pub mod auth;
pub mod backoff;
pub mod cache;
pub mod cli;
pub mod config;
pub mod db;
pub mod error;
pub mod feed;
pub mod forum;
pub mod graphql;
pub mod hooks;
pub mod http;
pub mod kv;
pub mod like_event;
pub mod likes;
pub mod live;
pub mod ops;
pub mod seed;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod views;
pub mod worker;
