//! course-forum: a GraphQL server that gives every course its own forum.
//!
//! # Layout
//!
//! - `cli` — subcommands: `serve`, `worker`, `migrate`, `seed --demo`, `token`, `export-schema`,
//!   `reconcile`, `reset-*-cache`, `check`, `roster import`, `admin`.
//! - `config` — settings from flags and env, validated once with one clear sentence, and the fixed
//!   limits they are checked against.
//! - `startup` — connect, assemble `AppState`, bind, serve until a shutdown future resolves;
//!   shutdown of the server, websockets and `BackgroundJobs` in bounded time.
//! - `state` — the one context every handler and resolver receives.
//! - `http` — axum routes: `POST /graphql` (and GET), subscriptions at `/graphql/ws`, GraphiQL at
//!   `/`, `/healthz`, `/readyz`, `/metrics`; authentication, CORS and websocket bounds; request
//!   ids.
//! - `auth` — bearer tokens (the server's HS256 ones, and RS256/ES256 ones from an identity
//!   provider's JWKS, whose first sign-in provisions the user) and the per-request `Viewer` with
//!   its memberships.
//! - `membership` — course membership as a live fact: kept in memory per instance, told of every
//!   change by a LISTEN on the `course_members` trigger's notifications; open subscriptions watch
//!   it to end when access is lost.
//! - `graphql` — the schema apart from transport: types, queries, mutations, loaders, global ids,
//!   access checks, error codes, cost limits, when a request's loader batches start
//!   (`graphql::batch_gate`).
//! - `documents` — GraphQL documents before they run: automatic persisted queries and the parsed
//!   documents kept by hash (`documents::persisted`), the trusted documents' manifest
//!   (`documents::trusted`).
//! - `cursor` — connection cursors: opaque positions signed with the cursor keys (`CursorKeys`),
//!   checked before any SQL.
//! - `forum` — rows and visible SQL for courses, users, posts, comments; keyset paging; rosters
//!   (`forum::roster`; `forum::roster::import`: parse, plan, apply); who sees what of a post,
//!   private posts and anonymous authors' pseudonyms (`forum::audience`); answers,
//!   endorsements, pins and tags (`forum::questions`); full-text search, and the rules and SQL
//!   lookup of similar titles (`forum::search`); what each member has read, as watermarks and bounded exceptions
//!   (`forum::unread`).
//! - `like_event` — the vocabulary every step of a like shares: `LikeTarget`, the typed `LikeEvent`
//!   and its one codec (stream fields, pending record, dead letter), `CountChange`. A leaf:
//!   `likes`, `worker`, `cache`, `live` import it.
//! - `likes` — like/unlike and "liked by me" at three levels: `sync` (one statement), `recount`
//!   (row now, counter by a job under the rows' locks), `buffered` (Redis liked-sets + pending
//!   records + stream); `likes::apply` is the worker's one-transaction batch SQL;
//!   `likes::committed` the one after-commit step.
//! - `worker` — the one active consumer per like-stream shard (lease, fencing epoch, claim, batch,
//!   ack, dead letters), or the recount job; steppable by hand (`process_one_batch`); the drain
//!   that makes a mode switch safe. One file per concept: `worker::fencing`, `worker::read`,
//!   `worker::apply`, `worker::drain`, `worker::run`.
//! - `views` — post views bots cannot inflate: tickets with server-measured dwell, caps per user
//!   and IP, random counter shards, unique viewers (HyperLogLog), and the exactly-once aggregator
//!   (`views::aggregator`, one SQL statement per flush).
//! - `feed` — the home feed: the fan-out job (`feed::fanout`: transactional outbox → members'
//!   timelines, or one list per celebrity course), timelines rebuilt from PostgreSQL once under a
//!   lock, `homeFeed` pages merged from them.
//! - `notifications` — replies and `@handle` mentions: written in the cause's transaction, exactly
//!   once per (recipient, cause), withdrawn with the cause, shown only from the viewer's courses,
//!   capped per user, pushed live through `live`.
//! - `live` — after-commit live updates: one Redis Pub/Sub channel (sharded on a cluster) published
//!   to by whoever commits, relayed by every process to its websocket subscribers, re-read from
//!   PostgreSQL after a gap in the subscription; and the runtime the websocket connections run
//!   on, at a lower OS priority than the request handlers (`live::runtime`).
//! - `live_message` — what a live update says: `LiveMessage` (the wire format) and a course's
//!   `Activity`. A leaf: `live` publishes and relays it, `cache::pages` applies it.
//! - `cache` — the stampede-proof post cache (logical expiration, lock + brief wait, TTL jitter,
//!   "missing" markers, invalidation by generation) behind `post(id)`, access checks and feed
//!   hydration; the in-process caches under one byte budget (`cache::budget`): course pages
//!   (`cache::pages`), users, each course's titles for similar posts, kept exact by a
//!   catch-up read in every lookup (`cache::titles`), and the candidates of recent searches,
//!   read again with what changed since at every search (`cache::search`).
//! - `kv` — Redis, one node or a Redis Cluster (`kv::cluster`: pipelines split per slot, SCAN per
//!   master): connection, Pub/Sub (`kv::pubsub`), key layout (`kv::keys`, the key table),
//!   owner-token locks (`kv::lock`), per-user rate limits of likes and writes (`kv::ratelimit`).
//! - `db` — PostgreSQL pools with bounded timeouts (requests under STATEMENT_TIMEOUT, background
//!   jobs apart); the per-request statement budget (`db::budget`); migrations from `migrations/`.
//! - `seed` — the demo forum, its people and courses written through `forum::roster`.
//! - `error` — the one error type and its machine-readable codes.
//! - `backoff` — retry pacing of the background loops (doubling delay, shutdown-aware pause).
//! - `hooks` — test hooks: a `Gate` that holds a running step at a chosen point.
//! - `telemetry` — tracing subscriber (text or JSON); OpenTelemetry traces over OTLP and the trace
//!   context a like carries across processes (`telemetry::otel`); the metrics recorder and its
//!   catalog.
//! - `tls` — the rustls provider (`ring`) behind outgoing HTTPS.
//! - `testing` — the one public surface beside the binary's entry points: the items the integration
//!   tests and `bench` drive, listed one by one; every other module is private and its items
//!   `pub(crate)` at most.
//! - `ops` — what operators ask: stream lag, pending and leases read from Redis, the `/readyz`
//!   report, the invariants of `course-forum check`, file descriptors as a resource
//!   (`ops::descriptors`: the limit raised at start, websockets refused below it, the headroom).
//! - `layering` — (tests only) the crate's shape, read from its sources: no module imports back up
//!   (no cycles between modules), and this map is the crate.
//!
//! Imports go one way: no two modules import each other, directly or around a circle, at the
//! top level or among the files of one module. Vocabulary that two modules share lives in a
//! leaf below both (`like_event`, `live_message`, `documents`, `cursor`), or in their parent's
//! own file. `layering` checks both this map and that rule.
//!
//! Lua scripts live in `lua/` as real files, loaded once and run by EVALSHA.
//!
//! # The life of a like (LIKE_MODE=buffered, the default)
//!
//! 1. `likePost` mutation (`graphql::mutation`) → `graphql::access::post_to_like` proves the post is
//!    live and the viewer a member of its course (the trust boundary, before Redis).
//! 2. `likes::Likes::set` → `likes::buffered` runs `lua/like_toggle.lua` on the user's
//!    (user, course) liked-set: the rate limit, SADD, and only if that changed the set, XADD
//!    the event (`like_event::LikeEvent::fields`) to the user's stream shard and record it as
//!    pending beside the set (`+ <entry id>` under the target), atomically, in one round trip.
//!    A set not loaded answers -1 with its load generation; the service reads its rows from
//!    PostgreSQL and calls again with them (the script loads the rows, overlays the pending
//!    records, then toggles; -3 if an apply moved the generation meanwhile: read again). A
//!    user's first like on an instance reads the rows with its memberships in one statement
//!    (`graphql::access`), and the first call carries them: loaded unless the bucket's load
//!    stamp (`lua/load_stamp.lua`) says an apply the rows may miss was retired. The
//!    mutation answers at once.
//! 3. `worker::LikeWorker` — the shard's one consumer, by lease and fencing epoch — reads the
//!    entries (own pending first, then new; `LikeEvent::decode`), collapses the batch to the
//!    last op per (target, user, course), and writes everything in ONE transaction that first
//!    locks its shard's epoch row at its own epoch (else: roll back, the shard is elsewhere);
//!    `likes::apply`'s JOINs refuse deleted or foreign-course targets and users who are not
//!    members; counters follow RETURNING.
//! 4. After COMMIT: `likes::committed::AfterCommit` patches the counts into cached posts and
//!    publishes them on the one Pub/Sub channel.
//! 5. Then `lua/like_batch_done.lua`: XACK + trim, retire each event's pending record if it is
//!    still that event's, bump the load generation and stamp it with the batch's transaction
//!    id, drop the sets of refused or dead-lettered events. A crash before this replays the batch with no effect twice.
//! 6. Delivery: each instance's relay (`live::hub`) receives the counts once and fans them out
//!    to its `likeCounts` subscribers, newest `like_version` winning; a selection every reader
//!    sees alike is rendered once per value for all of them by the target's group
//!    (`graphql::shared_live`, `live::fanout`), and each socket writes it with its own id.
//!
//! In `sync` mode step 2 is instead one SQL statement (`likes::sync`): insert ON CONFLICT
//! DO NOTHING, and bump the counter by exactly the rows RETURNING reports; then the
//! after-commit step, and the user's liked-set (left by buffered mode) is dropped. Starting in
//! `sync` or `recount` first applies what buffered mode left in the streams
//! (`startup::settle_like_mode_switch`).
//!
//! # The life of a post in the home feed
//!
//! `createPost` writes the post and its `feed_outbox` row in one statement → the fan-out job
//! (`feed::fanout`) claims the row, pushes the id into each member's existing timeline (or the
//! celebrity course's list), deletes the row, commits → `homeFeed` (`feed::Feed::page`) merges
//! the viewer's timeline with their celebrity courses' lists, hydrates the page through
//! `cache::PostCache`, and continues from PostgreSQL below the lists.

// `pub` inside a private module is `pub(crate)` in fact; the lint makes the code say so, so an
// item's visibility is what it reads as. The crate's public items are `testing`'s and the
// binary's entry points below.
#![warn(unreachable_pub)]

mod auth;
mod backoff;
mod cache;
mod cli;
mod config;
mod cursor;
mod db;
mod documents;
mod error;
mod feed;
mod forum;
mod graphql;
mod hooks;
mod http;
mod kv;
#[cfg(test)]
mod layering;
mod like_event;
mod likes;
mod live;
mod live_message;
mod membership;
mod notifications;
mod ops;
mod seed;
mod startup;
mod state;
mod telemetry;
pub mod testing;
mod tls;
mod views;
mod worker;

/// The binary's entry points (`src/main.rs`): its command line and the TLS provider it installs
/// first. Everything else the crate has is private; `testing` is the tests' and bench's surface.
pub use cli::{Cli, run};
pub use tls::install_crypto_provider;
