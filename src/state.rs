//! The one context handed to every handler and resolver: settings and the shared clients.

use std::sync::Arc;

use crate::kv::Redis;
use sea_orm::DatabaseConnection;

use crate::auth::{Authenticator, TokenKeys};
use crate::cache::PostCache;
use crate::cache::pages::CoursePages;
use crate::cache::users::UserRows;
use crate::config::Settings;
use crate::db::StatementCounter;
use crate::feed::Feed;
use crate::kv::keys::Keys;
use crate::kv::ratelimit::{RateLimiter, WriteLimits};
use crate::likes::Likes;
use crate::live::Publisher;
use crate::live::hub::Hub;
use crate::membership::Memberships;
use crate::views::Views;

#[derive(Clone)]
pub struct AppState {
    pub settings: Arc<Settings>,
    pub db: DatabaseConnection,
    /// The background jobs' own pool (like worker, view aggregator, feed fan-out), apart from
    /// the requests' `db`: their statements count as `role="background"` in
    /// `sql_statements_total`.
    pub jobs_db: DatabaseConnection,
    /// Searches' own pool (`db::connect_search`: planned per query, apart from the other
    /// requests'); its statements count as `role="api"`.
    pub search_db: DatabaseConnection,
    /// Searches from kept candidates (`db::connect_search_kept`: one generic plan, apart from
    /// `search_db`'s planned-per-query windows); its statements count as `role="api"`.
    pub search_kept_db: DatabaseConnection,
    /// How many SQL statements `db` and `jobs_db` have run, for statements-per-request
    /// measurements.
    pub sql_statements: StatementCounter,
    /// Multiplexed, self-reconnecting; clone it per use.
    pub redis: Redis,
    pub keys: Keys,
    /// Mints the server's own (development) tokens.
    pub tokens: TokenKeys,
    /// Turns a bearer token of either kind (HS256, or RS256/ES256 from the JWKS) into a user.
    pub auth: Authenticator,
    pub likes: Likes,
    /// Per-user limits on posts, comments and replies, edits and deletes (view starts are
    /// limited by `views`).
    pub write_limits: WriteLimits,
    /// Per-user limit on searches that look for matches afresh (`SEARCH_RATE_PER_MINUTE`,
    /// `cache::search::FreshSearches`).
    pub search_limit: RateLimiter,
    /// Publishes committed changes to every instance.
    pub publisher: Publisher,
    /// This process's fan-out of live updates to its websocket subscribers.
    pub live: Arc<Hub>,
    /// Post view tickets, caps and counters (Redis).
    pub views: Views,
    /// Posts by id through the stampede-proof cache: `post(id)`, access checks, feed hydration.
    pub post_cache: PostCache,
    /// Rows of course pages served lately, in this process (`cache::pages`).
    pub course_pages: CoursePages,
    /// Each course's titles, for similar posts, in this process (`cache::titles`).
    pub course_titles: crate::cache::titles::CourseTitles,
    /// The candidates of recent first pages of course searches (`cache::search`).
    pub search_candidates: crate::cache::search::SearchCandidates,
    /// Users read lately, in this process (they never change).
    pub users: UserRows,
    /// Home feed pages (timelines, celebrity lists, PostgreSQL below them).
    pub feed: Feed,
    /// Who belongs to which course, kept in memory while this process hears every change.
    pub memberships: Memberships,
    /// Parsed GraphQL documents that validated for a signed-in caller, by the SHA-256 of
    /// their text, bounded by bytes.
    pub parsed_documents: Arc<crate::documents::persisted::ParsedDocuments>,
    /// Automatic persisted queries (Redis), or the trusted documents' manifest.
    pub persisted_queries: Arc<crate::documents::persisted::PersistedQueries>,
    /// Sign the cursors this server hands out and verify those it is handed back.
    pub cursor_keys: crate::cursor::CursorKeys,
    /// The names anonymous writers go by (`forum::audience`), keyed by a secret read once.
    pub pseudonyms: crate::forum::audience::Pseudonyms,
    /// `CACHE_BUDGET_BYTES` split among the in-process caches, and their figures for /metrics.
    pub cache_budget: Arc<crate::cache::budget::CacheBudget>,
    /// The handles above that a request's loaders read through, behind one pointer.
    pub read_handles: Arc<ReadHandles>,
}

/// The handles a request's loaders read through (`graphql::loaders`), shared: each request,
/// and each websocket connection for as long as it is open, holds one pointer to them
/// instead of its own copies (together about 1.3 KB, one of them a string).
pub struct ReadHandles {
    pub db: DatabaseConnection,
    pub users: UserRows,
    pub likes: Likes,
    pub views: Views,
    pub course_pages: CoursePages,
    pub post_cache: PostCache,
}

impl AppState {
    /// The step after every COMMIT of like counts: into the post cache, then to subscribers.
    pub fn after_commit(&self) -> crate::likes::committed::AfterCommit {
        crate::likes::committed::AfterCommit::new(self.post_cache.clone(), self.publisher.clone(), self.db.clone())
    }
}
