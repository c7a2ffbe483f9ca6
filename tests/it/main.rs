//! The integration tests, one binary: each module is the suite that was once a file of its own
//! (`tests/it/<suite>.rs`), and its tests are named `<suite>::<test>` (e.g.
//! `cargo nextest run -E 'binary(it) & test(/^faults::/)'`). `common` is the harness they share: every test
//! spawns its own database, Redis key prefix and server (`common::TestApp`).
//!
//! One binary instead of one per file: the crate and its dependencies are linked once rather
//! than fifty times. Under cargo-nextest (what `script/test` runs) every test still runs in a
//! process of its own; under plain `cargo test` they share one process, and the few tests that
//! read figures of the whole process (`/metrics`, one recorder per process) first run
//! themselves alone in a new process (`common::ran_alone_elsewhere`).

// First: `common` defines `in_each_like_mode!`, which the suites after it use.
#[macro_use]
mod common;

mod adversarial;
mod announcements;
mod anonymity;
mod apq;
mod authorization;
mod bad_input;
mod batched_fields;
mod buffered_likes;
mod cli;
mod cluster_failover;
mod cluster_layout;
mod comments;
mod concurrency;
mod cors;
mod cost_model;
mod course_pages;
mod delete_race;
mod descriptors;
mod faults;
mod feed;
mod first_touch;
mod fuzz;
mod graphql_http;
mod identity;
mod isolation;
mod kv_cluster;
mod like_interleavings;
mod like_mode_switch;
mod like_model;
mod like_operations;
mod like_reload;
mod live;
mod live_objects;
mod live_runtime;
mod loaders;
mod membership_live;
mod nodes;
mod notifications;
mod nullability;
mod operations;
mod otel;
mod pagination;
mod post_cache;
mod post_filters;
mod questions;
mod ranking;
mod recount_race;
mod roster;
mod roster_cli;
mod schema_descriptions;
mod schema_sdl;
mod search;
mod search_candidates;
mod shared_live;
mod shutdown;
mod similar_titles;
mod smoke;
mod socket_limits;
mod unread;
mod views;
mod worker_crash;
mod worker_fencing;
mod worker_pipeline;
mod write_limits;
mod ws_membership;
mod ws_token_expiry;
