//! The crate's one deliberate surface beyond the binary: what the integration tests
//! (`tests/it`) and the benchmark (`bench/`) drive, item by item. Every module of the crate is
//! private; a test or bench that needs something new adds it here, in view of review, rather
//! than the whole crate being `pub`.
//!
//! The paths mirror the crate's own (`testing::config::Settings` is `config::Settings`), so a
//! reader finds the item where its module lives.

/// Settings, as the binary reads them from flags and env.
pub mod config {
    pub use crate::config::{JwksSource, LikeMode, LogFormat, RedisTarget, Settings, parse_origin};
}

/// The one error type.
pub mod error {
    pub use crate::error::{AppError, AppResult};
}

/// Assembling and running a server (or its jobs) in-process.
pub mod startup {
    pub use crate::startup::{Application, build_feed_fanout, build_view_aggregator, build_worker};
}

/// The context every handler receives: tests read its connections and counters.
pub mod state {
    pub use crate::state::AppState;
}

/// Tokens and identities.
pub mod auth {
    pub use crate::auth::{DEV_AUDIENCE, DEV_ISSUER, TokenKeys};
    pub mod identity {
        pub use crate::auth::identity::handle_candidate;
    }
    pub mod jwks {
        pub use crate::auth::jwks::KeySet;
    }
}

/// PostgreSQL: connections, migrations, statements.
pub mod db {
    pub use crate::db::{connect_url, migrate, stmt};
}

/// Redis: connections, key layout, scans.
pub mod kv {
    pub use crate::kv::{KeyScan, Redis, connect, connect_cluster, connect_to, query_scripts, unlink_matching};
    pub mod keys {
        pub use crate::kv::keys::{Keys, LIKE_GROUP};
    }
}

/// Global ids, the schema and its SDL.
pub mod graphql {
    pub use crate::graphql::{schema_builder, sdl};
    pub mod ids {
        pub use crate::graphql::ids::{NodeKind, decode, encode};
    }
}

/// Persisted documents' hashing.
pub mod documents {
    pub use crate::documents::sha256_hex;
}

/// A like's shared vocabulary.
pub mod like_event {
    pub use crate::like_event::{CountChange, LikeEvent, LikeTarget};
}

/// The three like modes' entry points, and the pieces the worker and recount job run.
pub mod likes {
    pub use crate::likes::{LikeTarget, Membership};
    pub mod apply {
        pub use crate::likes::apply::apply;
    }
    pub mod committed {
        pub use crate::likes::committed::AfterCommit;
    }
    pub mod recount {
        pub use crate::likes::recount::{DirtyMarks, RecountHooks, reconcile_all, reconcile_all_with, set};
    }
    pub mod sync {
        pub use crate::likes::sync::set;
    }
}

/// Search's constants that a migration repeats.
pub mod search {
    pub use crate::forum::search::COMMENT_BUCKET;
    pub use crate::forum::search_stats::SearchStats;
}

/// The like worker, stepped by hand.
pub mod worker {
    pub use crate::worker::{BatchTimings, LikeWorker, WorkerConfig, is_transient, retire_script, unapplied_events};
}

/// Live updates: messages and the publisher.
pub mod live {
    pub use crate::live::{Activity, ActivityKind, LiveMessage, Publisher, now_micros};
}

/// Caches: the post cache, course pages, the memory budget.
pub mod cache {
    pub use crate::cache::{CacheConfig, PostCache};
    pub mod budget {
        pub use crate::cache::budget::{CacheBudget, DEFAULT_BUDGET_BYTES};
    }
    pub mod pages {
        pub use crate::cache::pages::{CoursePages, RANKED_PAGE_TTL};
    }
}

/// Course membership in memory, and the warm that fills it.
pub mod membership {
    pub use crate::membership::Memberships;
    pub mod warm {
        pub use crate::membership::warm::{CHUNK_USERS, Warmed, warm};
    }
}

/// Forum rows and their SQL.
pub mod forum {
    pub mod comments {
        pub use crate::forum::comments::recount_post_comments;
    }
    pub mod courses {
        pub use crate::forum::courses::roles_of_user;
    }
    pub mod paging {
        pub use crate::forum::paging::{Page, PageRequest};
    }
    pub mod posts {
        pub use crate::forum::posts::*;
    }
}

/// The home feed's jobs and lists.
pub mod feed {
    pub mod fanout {
        pub use crate::feed::fanout::FanoutJob;
    }
    pub mod lists {
        pub use crate::feed::lists::Lists;
    }
}

/// Views and their aggregator.
pub mod views {
    pub use crate::views::{ViewOutcome, ViewRefusal};
    pub mod aggregator {
        pub use crate::views::aggregator::ViewAggregator;
    }
}

/// What operators ask: checks, stream status, orphans.
pub mod ops {
    pub mod check {
        pub use crate::ops::check::{Report, run};
    }
    pub mod liked_sets {
        pub use crate::ops::liked_sets::pending_orphans;
    }
    pub mod streams {
        pub use crate::ops::streams::status;
    }
}

/// Test hooks that hold a running step at a chosen point.
pub mod hooks {
    pub use crate::hooks::Gate;
}

/// The metric catalog and the log subscriber.
pub mod telemetry {
    pub use crate::telemetry::{CATALOG, init};
}

/// The process's TLS provider, installed before any HTTP client.
pub mod tls {
    pub use crate::tls::install_crypto_provider;
}

/// The command line, as the binary parses it.
pub mod cli {
    pub use crate::cli::Cli;
}
