//! Configuration: every setting is a flag and an environment variable (clap), validated once at
//! start-up so that a missing or malformed value stops the process with one clear sentence.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::error::AppError;

/// How a like reaches PostgreSQL (`crate::likes` describes the three levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LikeMode {
    /// Level 1: one statement per like, insert-on-conflict feeding the counter.
    Sync,
    /// Level 2: insert/delete the like row synchronously, mark the target dirty; a job recounts.
    Recount,
    /// Level 3: Redis liked-sets answer at once; a worker applies the stream in batches.
    Buffered,
}

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Settings shared by every subcommand. Values that only some subcommands need are optional
/// here and demanded by the accessor (`database_url()`, …) so the error names the variable.
#[derive(Clone, Debug, Args)]
pub struct Settings {
    /// PostgreSQL connection URL, e.g. postgres://postgres@127.0.0.1:5432/course_forum
    #[arg(long, env = "DATABASE_URL", global = true)]
    pub database_url: Option<String>,

    /// Redis connection URL.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379", global = true)]
    pub redis_url: String,

    /// A Redis Cluster's seed nodes, comma-separated (redis://host:port,…). When set, every
    /// Redis user speaks to the cluster and REDIS_URL is not used.
    #[arg(long, env = "REDIS_CLUSTER_NODES", value_delimiter = ',', global = true)]
    pub redis_cluster_nodes: Vec<String>,

    /// Prefix of every Redis key this process touches; tests use a fresh one each.
    #[arg(long, env = "REDIS_KEY_PREFIX", default_value = "cf", global = true)]
    pub redis_key_prefix: String,

    /// HS256 secret for bearer tokens (at least 16 bytes).
    #[arg(long, env = "JWT_SECRET", global = true, hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// Tokens from an identity provider (RS256, ES256) are verified against this JWKS: a file
    /// path, or an http(s) URL (the provider's `jwks_uri`). Unset: only HS256 tokens.
    #[arg(long, env = "JWKS", global = true)]
    pub jwks: Option<String>,

    /// The `iss` every JWKS-verified token must carry (the provider's issuer URL). Required with JWKS.
    #[arg(long, env = "JWT_ISSUER", global = true)]
    pub jwt_issuer: Option<String>,

    /// The `aud` every JWKS-verified token must carry (this server's client id at the provider).
    /// Required with JWKS.
    #[arg(long, env = "JWT_AUDIENCE", global = true)]
    pub jwt_audience: Option<String>,

    /// The claim a first sign-in takes the new user's handle from (lowercased, reduced to
    /// a-z, 0-9 and _).
    #[arg(long, env = "JWT_HANDLE_CLAIM", default_value = "preferred_username", global = true)]
    pub jwt_handle_claim: String,

    /// The claim a first sign-in takes the new user's display name from (else the handle).
    #[arg(long, env = "JWT_NAME_CLAIM", default_value = "name", global = true)]
    pub jwt_name_claim: String,

    /// Accept the server's own HS256 tokens (JWT_SECRET) while JWKS is set. Off by default:
    /// beside a real provider, the development secret would be a key to every account.
    #[arg(long, env = "ALLOW_DEV_TOKENS_WITH_JWKS", default_value_t = false, action = clap::ArgAction::Set, global = true)]
    pub allow_dev_tokens_with_jwks: bool,

    /// Address the HTTP server listens on.
    #[arg(long, env = "BIND", default_value = "127.0.0.1:8000", global = true)]
    pub bind: SocketAddr,

    /// How likes are written: sync (level 1), recount (level 2) or buffered (level 3).
    #[arg(long, env = "LIKE_MODE", value_enum, default_value = "buffered", global = true)]
    pub like_mode: LikeMode,

    /// Number of like-stream shards (users are spread over them; one worker lease each).
    #[arg(long, env = "LIKE_STREAM_SHARDS", default_value_t = 4, global = true)]
    pub like_stream_shards: u32,

    /// Most stream entries the worker applies in one transaction.
    #[arg(long, env = "LIKE_BATCH_SIZE", default_value_t = 500, global = true)]
    pub like_batch_size: usize,

    /// How long a user's liked-set stays in Redis after its last use.
    #[arg(long, env = "LIKED_SET_TTL", default_value = "24h", value_parser = parse_duration, global = true)]
    pub liked_set_ttl: Duration,

    /// How long a worker's shard lease lasts without renewal (another instance takes over after).
    #[arg(long, env = "WORKER_LEASE_TTL", default_value = "10s", value_parser = parse_duration, global = true)]
    pub worker_lease_ttl: Duration,

    /// Deliveries after which an entry that still fails alone is moved to the dead-letter stream.
    #[arg(long, env = "WORKER_MAX_DELIVERIES", default_value_t = 5, global = true)]
    pub worker_max_deliveries: u64,

    /// How often the recount job (level 2) looks for dirty targets.
    #[arg(long, env = "RECOUNT_INTERVAL", default_value = "1s", value_parser = parse_duration, global = true)]
    pub recount_interval: Duration,

    /// Live like counts: at most one update per target per this interval, per subscriber.
    /// (30 ms rather than 60 or 100: on a post with thousands of watchers the round of writes,
    /// not this interval, bounds the frames, and the interval only adds to the last count's
    /// wait; docs/performance.md.)
    #[arg(long, env = "LIVE_COALESCE", default_value = "30ms", value_parser = parse_duration, global = true)]
    pub live_coalesce: Duration,

    /// Worker threads of the websocket connections' own runtime (`live::runtime`); 0 runs
    /// them on the request handlers' runtime.
    #[arg(long, env = "LIVE_THREADS", default_value_t = 2, global = true)]
    pub live_threads: usize,

    /// How much lower the OS priority of those threads is than the request handlers' (their
    /// nice value, 0 to 19): under load, likes and pages run first and the watchers' frames
    /// coalesce. 0 shares the CPU evenly.
    #[arg(long, env = "LIVE_NICE", default_value_t = 12, global = true)]
    pub live_nice: i32,

    /// Notifications each user keeps: the newest this many (older ones are deleted as new
    /// ones arrive).
    #[arg(long, env = "NOTIFICATIONS_PER_USER", default_value_t = 500, global = true)]
    pub notifications_per_user: i64,

    /// Unread tracking: posts one member may have opened above their read mark of a course
    /// before the oldest of them are folded into it (the oldest unread posts age out as read).
    #[arg(long, env = "UNREAD_EXCEPTIONS_PER_COURSE", default_value_t = 1000, global = true)]
    pub unread_exceptions_per_course: i64,

    /// Most subscriptions one websocket connection may hold open.
    #[arg(long, env = "LIVE_MAX_SUBSCRIPTIONS", default_value_t = 50, global = true)]
    pub live_max_subscriptions: usize,

    /// Websockets: how long a new socket may wait before sending connection_init; later it is
    /// closed with 4408.
    #[arg(long, env = "WS_INIT_TIMEOUT", default_value = "10s", value_parser = parse_duration, global = true)]
    pub ws_init_timeout: Duration,

    /// Websockets: how often an idle, acknowledged socket is pinged (`ping`, or `ka` on the
    /// legacy protocol), so proxies keep it open and a dead peer is noticed; 0s turns it off.
    #[arg(long, env = "WS_KEEPALIVE", default_value = "15s", value_parser = parse_duration, global = true)]
    pub ws_keepalive: Duration,

    /// Websockets: longest one frame may take to leave for a client that does not read (its
    /// socket's buffers full); past it the socket is closed with 1008 (or dropped, when even
    /// the close frame cannot be written). It also bounds how long such a socket outlives its
    /// token.
    #[arg(long, env = "WS_SEND_TIMEOUT", default_value = "10s", value_parser = parse_duration, global = true)]
    pub ws_send_timeout: Duration,

    /// Websockets: most sockets one user may hold open on this instance (0: no cap).
    #[arg(long, env = "WS_MAX_PER_USER", default_value_t = 10, global = true)]
    pub ws_max_per_user: usize,

    /// Websockets: most sockets one client address may hold open on this instance (0: no cap).
    #[arg(long, env = "WS_MAX_PER_ADDRESS", default_value_t = 500, global = true)]
    pub ws_max_per_address: usize,

    /// Websockets: file descriptors kept for PostgreSQL, Redis and HTTP. A new websocket is
    /// refused (503 UNAVAILABLE, before the upgrade) once the process holds RLIMIT_NOFILE less
    /// this many descriptors; must be below the limit.
    #[arg(long, env = "WS_DESCRIPTOR_RESERVE", default_value_t = 512, global = true)]
    pub ws_descriptor_reserve: u64,

    /// Websockets: operations (subscribe messages) one connection may start per minute, with
    /// bursts up to the same number (0: no limit).
    #[arg(long, env = "WS_OPERATIONS_PER_MINUTE", default_value_t = 120, global = true)]
    pub ws_operations_per_minute: u32,

    /// Websockets: messages of any kind (pings and pongs included, at either level) one
    /// connection may send per minute, with bursts up to the same number; past it the socket is
    /// closed with 4429 (0: no limit).
    #[arg(long, env = "WS_MESSAGES_PER_MINUTE", default_value_t = 600, global = true)]
    pub ws_messages_per_minute: u32,

    /// Highest cost of a subscription's selection, checked once at subscribe time (else
    /// COST_LIMIT_EXCEEDED): the selection runs again on every event, for every subscriber, so
    /// it is held far below MAX_COST (20,000), which bounds a query.
    #[arg(long, env = "SUBSCRIPTION_MAX_COST", default_value_t = 500, global = true)]
    pub subscription_max_cost: usize,

    /// Most SQL statements one event of a subscription may run to resolve its selection; past
    /// it that event is answered with STATEMENT_BUDGET_EXCEEDED (the subscription goes on).
    #[arg(long, env = "SUBSCRIPTION_EVENT_STATEMENT_BUDGET", default_value_t = 20, global = true)]
    pub subscription_event_statement_budget: u64,

    /// Browser origins besides the server's own that may call the API (CORS for POST /graphql)
    /// and open its websocket, comma-separated, e.g. https://forum.example.edu.
    #[arg(long, env = "CORS_ALLOWED_ORIGINS", value_delimiter = ',', value_parser = parse_origin, global = true)]
    pub cors_allowed_origins: Vec<String>,

    /// Run the like worker inside `serve` (false: run `course-forum worker` separately).
    #[arg(long, env = "WORKER_IN_SERVE", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub worker_in_serve: bool,

    /// Keep course memberships in memory, forgotten when a change is heard (false: every
    /// request reads them from PostgreSQL; for a PostgreSQL reached through a pooler that
    /// cannot LISTEN, such as PgBouncer in transaction mode, and for measuring the difference).
    #[arg(long, env = "MEMBERSHIP_CACHE", default_value_t = true, action = clap::ArgAction::Set, global = true)]
    pub membership_cache: bool,

    /// Start buffered mode even though Redis may evict keys (allkeys-* policy). Loses likes.
    #[arg(long, env = "ALLOW_EVICTING_REDIS", default_value_t = false, action = clap::ArgAction::Set, global = true)]
    pub allow_evicting_redis: bool,

    /// Like/unlike toggles allowed per user per minute (0 disables the limit).
    #[arg(long, env = "LIKE_RATE_PER_MINUTE", default_value_t = 60, global = true)]
    pub like_rate_per_minute: u32,

    /// New posts allowed per user per minute (0 disables the limit).
    #[arg(long, env = "POST_RATE_PER_MINUTE", default_value_t = 10, global = true)]
    pub post_rate_per_minute: u32,

    /// New comments and replies, together, allowed per user per minute (0 disables the limit).
    #[arg(long, env = "COMMENT_RATE_PER_MINUTE", default_value_t = 30, global = true)]
    pub comment_rate_per_minute: u32,

    /// Edits of posts, comments and replies, together, allowed per user per minute (0 disables the limit).
    #[arg(long, env = "EDIT_RATE_PER_MINUTE", default_value_t = 30, global = true)]
    pub edit_rate_per_minute: u32,

    /// Deletions of posts, comments and replies, together, allowed per user per minute (0
    /// disables the limit). An instructor's moderation counts against the instructor's own.
    #[arg(long, env = "DELETE_RATE_PER_MINUTE", default_value_t = 30, global = true)]
    pub delete_rate_per_minute: u32,

    /// How long to wait for a PostgreSQL or Redis connection before giving up.
    #[arg(long, env = "CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration, global = true)]
    pub connect_timeout: Duration,

    /// Size of the PostgreSQL connection pool of requests (one of its connections is the
    /// membership listener's).
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value_t = 20, global = true)]
    pub db_max_connections: u32,

    /// Size of the background jobs' own PostgreSQL pool (like worker, view aggregator, feed
    /// fan-out): requests cannot starve the jobs of connections, nor the jobs the requests.
    #[arg(long, env = "JOBS_DB_MAX_CONNECTIONS", default_value_t = 4, global = true)]
    pub jobs_db_max_connections: u32,

    /// Size of the PostgreSQL pool of searches, apart from the other requests': a burst of
    /// searches cannot take the connections a like or a page needs. Its statements are planned
    /// for their own parameters every time.
    #[arg(long, env = "SEARCH_DB_MAX_CONNECTIONS", default_value_t = 4, global = true)]
    pub search_db_max_connections: u32,

    /// Search candidates kept in each instance's memory (`cache::search`): how long a first
    /// page's candidates for one query, course and kind of reader serve its searches, each of
    /// which still reads what changed since they were found (answers are never stale). Past
    /// it they are found again, so the changes re-read stay few. 0s turns this memory off.
    #[arg(long, env = "SEARCH_CACHE_TTL", default_value = "60s", value_parser = parse_duration, global = true)]
    pub search_cache_ttl: Duration,

    /// Posts a search's words may be expected to match (estimated as the planner would, from
    /// the lexeme statistics ANALYZE keeps: `forum::search_stats`) and still be looked up all
    /// at once, in one pass of the words' index. A query expected to match more is looked for in windows of ids,
    /// newest first, which stop once they hold its candidates. The answer is the same either
    /// way; only its cost differs. `0` always takes the windows.
    #[arg(long, env = "SEARCH_ONE_PASS_POSTS", default_value_t = 300, global = true)]
    pub search_one_pass_posts: u32,

    /// `SEARCH_ONE_PASS_POSTS` for comments and replies.
    #[arg(long, env = "SEARCH_ONE_PASS_COMMENTS", default_value_t = 1_000, global = true)]
    pub search_one_pass_comments: u32,

    /// Searches each user may run per minute that look for matches afresh (`cache::search`):
    /// a first page this instance keeps no candidates for, a later page, a search across
    /// courses or by author. A first page from kept candidates (about a millisecond) is not
    /// counted. `0` turns the limit off.
    #[arg(long, env = "SEARCH_RATE_PER_MINUTE", default_value_t = 60, global = true)]
    pub search_rate_per_minute: u32,

    /// Longest one SQL statement of a request may run before PostgreSQL cancels it (its
    /// transaction rolls back and the request fails with TIMEOUT). Jobs and commands have none.
    #[arg(long, env = "STATEMENT_TIMEOUT", default_value = "5s", value_parser = parse_duration, global = true)]
    pub statement_timeout: Duration,

    /// Most SQL statements one GraphQL query or mutation (over HTTP or a websocket) may run;
    /// past it the request is abandoned with STATEMENT_BUDGET_EXCEEDED (the last fence behind
    /// the cost limits and the batched loaders: a page runs 2 or 3).
    #[arg(long, env = "REQUEST_STATEMENT_BUDGET", default_value_t = 200, global = true)]
    pub request_statement_budget: u64,

    /// Longest a GraphQL query or mutation (over HTTP or a websocket), or one event of a
    /// subscription, may take; past it the request is abandoned and answered with TIMEOUT.
    /// Longer than STATEMENT_TIMEOUT, so a statement in flight is cancelled by PostgreSQL (and
    /// rolled back) rather than left behind.
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "15s", value_parser = parse_duration, global = true)]
    pub request_timeout: Duration,

    /// Largest accepted request body, in bytes.
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 64 * 1024, global = true)]
    pub max_body_bytes: usize,

    /// Post views: how long a view ticket must be open before completing it counts (server-measured).
    #[arg(long, env = "VIEW_MIN_DWELL", default_value = "30s", value_parser = parse_duration, global = true)]
    pub view_min_dwell: Duration,

    /// Post views: how long a started view may still be completed; later it is EXPIRED.
    #[arg(long, env = "VIEW_TICKET_TTL", default_value = "1h", value_parser = parse_duration, global = true)]
    pub view_ticket_ttl: Duration,

    /// Post views: most counted views per user per post per VIEW_CAP_WINDOW (0: no cap).
    #[arg(long, env = "VIEW_CAP_PER_USER", default_value_t = 5, global = true)]
    pub view_cap_per_user: u32,

    /// Post views: most counted views per client IP per post per VIEW_CAP_WINDOW (0: no cap).
    #[arg(long, env = "VIEW_CAP_PER_IP", default_value_t = 50, global = true)]
    pub view_cap_per_ip: u32,

    /// Post views: the window of both caps (fixed, from the first counted view).
    #[arg(long, env = "VIEW_CAP_WINDOW", default_value = "1h", value_parser = parse_duration, global = true)]
    pub view_cap_window: Duration,

    /// Post views: `startPostView` calls allowed per user per minute (0 disables the limit).
    #[arg(long, env = "VIEW_START_RATE_PER_MINUTE", default_value_t = 120, global = true)]
    pub view_start_rate_per_minute: u32,

    /// Post views: most view tickets one user may hold open (started, not yet completed or
    /// expired); one more is refused until a ticket is completed or expires (0: no bound).
    #[arg(long, env = "VIEW_MAX_OPEN_TICKETS", default_value_t = 100, global = true)]
    pub view_max_open_tickets: u32,

    /// Post views: counter shards (a counted view INCRs one at random, so a viral post is not one hot key).
    #[arg(long, env = "VIEW_SHARDS", default_value_t = 10, global = true)]
    pub view_shards: u32,

    /// Post views: how often the aggregator moves counted views into PostgreSQL (one statement).
    #[arg(long, env = "VIEW_FLUSH_INTERVAL", default_value = "10s", value_parser = parse_duration, global = true)]
    pub view_flush_interval: Duration,

    /// The reverse proxy in front of the server: only a request from this address may name the
    /// client with X-Forwarded-For (its last entry). Unset: the socket's peer is the client.
    #[arg(long, env = "TRUSTED_PROXY", global = true)]
    pub trusted_proxy: Option<IpAddr>,

    /// Log format: text (human) or json.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,

    /// The built web playground (web-playground/dist): GraphiQL at `/` from `graphiql/`, the
    /// demo forum at `/demo` from `demo/`. When missing, `/` says how to build it.
    #[arg(long, env = "PLAYGROUND_DIR", default_value = "web-playground/dist", global = true)]
    pub playground_dir: std::path::PathBuf,

    /// Demo mode: the JSON `seed --demo` printed (users and their tokens), served at
    /// `/demo/users.json` for GraphiQL and the demo forum. Development only: it hands out tokens.
    #[arg(long, env = "DEMO_USERS_FILE", global = true)]
    pub demo_users_file: Option<std::path::PathBuf>,

    /// Home feed: courses with at least this many members are celebrities: their posts are not
    /// pushed into every member's timeline but kept in one list per course, merged at read time.
    #[arg(long, env = "FEED_FANOUT_MAX_MEMBERS", default_value_t = 2_000, global = true)]
    pub feed_fanout_max_members: usize,

    /// Home feed: post ids kept per timeline and per celebrity list (older posts come from PostgreSQL).
    #[arg(long, env = "FEED_TIMELINE_CAP", default_value_t = 800, global = true)]
    pub feed_timeline_cap: usize,

    /// Home feed: a timeline nobody read for this long expires; fan-out skips users without one.
    #[arg(long, env = "FEED_TIMELINE_TTL", default_value = "7days", value_parser = parse_duration, global = true)]
    pub feed_timeline_ttl: Duration,

    /// Home feed: how often the fan-out job looks for new posts in the outbox.
    #[arg(long, env = "FEED_FANOUT_INTERVAL", default_value = "100ms", value_parser = parse_duration, global = true)]
    pub feed_fanout_interval: Duration,

    /// Home feed: most new posts one fan-out transaction pushes.
    #[arg(long, env = "FEED_FANOUT_BATCH", default_value_t = 100, global = true)]
    pub feed_fanout_batch: usize,

    /// Post cache: how long a cached post is fresh; later it is served stale while ONE request
    /// reloads it in the background.
    #[arg(long, env = "POST_CACHE_TTL", default_value = "30s", value_parser = parse_duration, global = true)]
    pub post_cache_ttl: Duration,

    /// Post cache: random extra freshness (0 up to this) per entry, so entries loaded together
    /// do not expire together.
    #[arg(long, env = "POST_CACHE_TTL_JITTER", default_value = "10s", value_parser = parse_duration, global = true)]
    pub post_cache_ttl_jitter: Duration,

    /// Post cache: how long "no such post" is remembered (ids that do not exist cost no query meanwhile).
    #[arg(long, env = "POST_CACHE_MISSING_TTL", default_value = "5s", value_parser = parse_duration, global = true)]
    pub post_cache_missing_ttl: Duration,

    /// Course pages and posts kept in each instance's memory: the longest one is served without
    /// reading it again when no change to it was heard (changes drop or patch it at once). 0s
    /// turns this memory off.
    #[arg(long, env = "COURSE_PAGE_CACHE_TTL", default_value = "30s", value_parser = parse_duration, global = true)]
    pub course_page_cache_ttl: Duration,

    /// Cache and feed locks: how long the one request loading a post or rebuilding a timeline
    /// holds its lock, and so the longest the others wait for it.
    #[arg(long, env = "CACHE_LOCK_TTL", default_value = "3s", value_parser = parse_duration, global = true)]
    pub cache_lock_ttl: Duration,

    // Operations (health, metrics, shutdown).
    /// On SIGTERM/SIGINT: how long in-flight requests and background jobs get to finish before
    /// the process exits anyway (the worker's uncommitted batch stays pending and is replayed).
    #[arg(long, env = "SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = parse_duration, global = true)]
    pub shutdown_timeout: Duration,

    /// `course-forum worker` only: serve /healthz, /readyz and /metrics on this address (unset:
    /// no listener). `serve` has them on BIND.
    #[arg(long, env = "WORKER_METRICS_BIND", global = true)]
    pub worker_metrics_bind: Option<SocketAddr>,

    /// Longest query text kept as an automatic persisted query, in bytes (`documents::persisted`).
    /// A longer one still runs; it is just not kept.
    #[arg(long, env = "PERSISTED_QUERY_MAX_BYTES", default_value_t = 4 * 1024, global = true)]
    pub persisted_query_max_bytes: usize,

    /// Persisted queries one user may add per hour (0: no limit).
    #[arg(long, env = "PERSISTED_QUERY_REGISTRATIONS_PER_HOUR", default_value_t = 60, global = true)]
    pub persisted_query_registrations_per_hour: u32,

    /// A manifest of trusted documents (Apollo's persisted query manifest, or a JSON object of
    /// id → text): when set, only its documents run, and SIGHUP reloads it (`documents::trusted`).
    #[arg(long, env = "TRUSTED_DOCUMENTS", global = true)]
    pub trusted_documents: Option<std::path::PathBuf>,

    // Cursors.
    /// Secrets that sign connection cursors (HMAC-SHA256), separated by commas, each at least
    /// 16 bytes: the first signs, every one verifies (rotation: put the new key first, drop the
    /// old one later). Unset: one random key kept in Redis, shared by every instance of the
    /// prefix (docs/operations.md, "Cursor keys").
    #[arg(long, env = "CURSOR_KEYS", value_delimiter = ',', hide_env_values = true, global = true)]
    pub cursor_keys: Vec<String>,

    /// Every in-process cache together (course pages, posts, users, memberships, parsed
    /// documents) holds at most this many bytes, split by fixed shares (`cache::budget`).
    /// Plain bytes or with a unit: 268435456, 256MiB, 1GiB, 500MB.
    #[arg(long, env = "CACHE_BUDGET_BYTES", default_value = "256MiB", value_parser = parse_cache_budget, global = true)]
    pub cache_budget_bytes: u64,
}

// Fixed limits that settings are checked against. They live here, not with the modules that
// enforce them (`cache::budget`, `cursor`, `graphql::limits`), because every module
// reads `config` and `config` imports none of them (`layering`).

/// The smallest `CACHE_BUDGET_BYTES` accepted: below it the shares (`cache::budget`) could not
/// hold one large page.
pub(crate) const MIN_CACHE_BUDGET_BYTES: u64 = 1024 * 1024;

/// Shortest secret accepted as a cursor key (`CURSOR_KEYS`, or the key kept in Redis).
pub(crate) const MIN_CURSOR_KEY_BYTES: usize = 16;

/// Highest cost of a GraphQL request (`graphql::limits::MAX_COST`, which enforces it);
/// `SUBSCRIPTION_MAX_COST` may not exceed it.
pub(crate) const MAX_QUERY_COST: usize = 20_000;

/// Reads `CACHE_BUDGET_BYTES` (see `parse_bytes`), at least 1 MiB.
pub(crate) fn parse_cache_budget(raw: &str) -> Result<u64, String> {
    let bytes = parse_bytes(raw)?;
    if bytes < MIN_CACHE_BUDGET_BYTES {
        return Err(format!("`{raw}` is below the smallest cache budget, 1MiB"));
    }
    Ok(bytes)
}

/// Reads a byte count: plain bytes (`268435456`) or with a unit: `KiB`, `MiB`, `GiB` (powers
/// of 1024), `KB`, `MB`, `GB` (powers of 1000), `B`.
pub(crate) fn parse_bytes(raw: &str) -> Result<u64, String> {
    let text = raw.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let refuse = || format!("`{raw}` is not a size like 268435456, 256MiB or 1GiB");
    let number: u64 = digits.parse().map_err(|_| refuse())?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(refuse()),
    };
    number.checked_mul(factor).ok_or_else(refuse)
}

/// True when the URL's host is this machine: `localhost`, 127.0.0.0/8 or ::1.
fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Parses durations written like `30s`, `250ms`, `1m`.
pub(crate) fn parse_duration(raw: &str) -> Result<Duration, String> {
    humantime::parse_duration(raw.trim()).map_err(|e| format!("`{raw}` is not a duration like 30s or 250ms ({e})"))
}

/// Reads one origin (`https://forum.example.edu`, `http://localhost:5173`) and returns it the
/// way browsers write the `Origin` header (lowercase host, no default port), so matching is
/// plain equality.
pub fn parse_origin(raw: &str) -> Result<String, String> {
    let refuse = || {
        format!(
            "`{raw}` is not an origin like https://forum.example.edu (a scheme, a host and an optional port; no path)"
        )
    };
    let url = url::Url::parse(raw.trim()).map_err(|_| refuse())?;
    let bare = matches!(url.scheme(), "http" | "https")
        && url.host().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    if !bare {
        return Err(refuse());
    }
    Ok(url.origin().ascii_serialization())
}

/// Where Redis is: one node, or a Redis Cluster (its seed nodes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    Node(String),
    Cluster(Vec<String>),
}

impl Settings {
    pub fn database_url(&self) -> Result<&str, AppError> {
        match self.database_url.as_deref() {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => Ok(url),
            Some(_) => Err(AppError::Config(
                "DATABASE_URL must be a postgres:// URL, e.g. postgres://postgres@127.0.0.1:5432/course_forum".into(),
            )),
            None => Err(AppError::Config(
                "DATABASE_URL is not set: point it at PostgreSQL, e.g. postgres://postgres@127.0.0.1:5432/course_forum"
                    .into(),
            )),
        }
    }

    pub fn jwt_secret(&self) -> Result<&str, AppError> {
        match self.jwt_secret.as_deref() {
            Some(secret) if secret.len() >= 16 => Ok(secret),
            Some(_) => Err(AppError::Config("JWT_SECRET must be at least 16 bytes long".into())),
            None => Err(AppError::Config("JWT_SECRET is not set: give it a random string of at least 16 bytes".into())),
        }
    }

    /// Where the JWKS comes from and what its tokens must say, when one is configured. JWKS
    /// without JWT_ISSUER and JWT_AUDIENCE is refused: a provider signs tokens for many
    /// applications, and only `iss` and `aud` say a token was meant for this one.
    pub fn jwks(&self) -> Result<Option<JwksSettings>, AppError> {
        let given =
            |value: &Option<String>| value.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let (issuer, audience) = (given(&self.jwt_issuer), given(&self.jwt_audience));
        let Some(location) = given(&self.jwks) else {
            if issuer.is_some() || audience.is_some() {
                return Err(AppError::Config(
                    "JWT_ISSUER and JWT_AUDIENCE only apply to JWKS tokens: set JWKS to the provider's key set (a file or URL)"
                        .into(),
                ));
            }
            return Ok(None);
        };
        let (Some(issuer), Some(audience)) = (issuer, audience) else {
            return Err(AppError::Config(
                "JWKS is set, so JWT_ISSUER and JWT_AUDIENCE must be too: the `iss` and `aud` the provider's tokens carry for this server"
                    .into(),
            ));
        };
        let source = if location.starts_with("https://") || location.starts_with("http://") {
            let url = url::Url::parse(&location).map_err(|e| {
                AppError::Config(format!("JWKS is not a valid URL ({e}): give an https:// URL or a file path"))
            })?;
            // The key set decides whose tokens are good: fetched in the clear, anyone on the
            // path could hand us their own keys. Plain http only to this machine.
            if url.scheme() != "https" && !is_loopback(&url) {
                return Err(AppError::Config(format!(
                    "JWKS must be an https:// URL (http:// only on loopback: localhost, 127.0.0.0/8, ::1), not `{url}`"
                )));
            }
            JwksSource::Url(url)
        } else if location.contains("://") {
            return Err(AppError::Config("JWKS must be an http(s):// URL or a file path".into()));
        } else {
            JwksSource::File(location.into())
        };
        for (name, claim) in [("JWT_HANDLE_CLAIM", &self.jwt_handle_claim), ("JWT_NAME_CLAIM", &self.jwt_name_claim)] {
            if claim.trim().is_empty() {
                return Err(AppError::Config(format!("{name} must name a claim, e.g. preferred_username")));
            }
        }
        Ok(Some(JwksSettings {
            source,
            issuer,
            audience,
            handle_claim: self.jwt_handle_claim.trim().to_owned(),
            name_claim: self.jwt_name_claim.trim().to_owned(),
        }))
    }

    pub fn redis_url(&self) -> Result<&str, AppError> {
        if self.redis_url.starts_with("redis://") || self.redis_url.starts_with("rediss://") {
            Ok(&self.redis_url)
        } else {
            Err(AppError::Config("REDIS_URL must be a redis:// URL, e.g. redis://127.0.0.1:6379".into()))
        }
    }

    /// Where Redis is: a cluster's seed nodes when REDIS_CLUSTER_NODES is set, else REDIS_URL.
    pub fn redis_target(&self) -> Result<RedisTarget, AppError> {
        let nodes: Vec<String> =
            self.redis_cluster_nodes.iter().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect();
        if nodes.is_empty() {
            return Ok(RedisTarget::Node(self.redis_url()?.to_owned()));
        }
        if let Some(bad) = nodes.iter().find(|n| !(n.starts_with("redis://") || n.starts_with("rediss://"))) {
            return Err(AppError::Config(format!(
                "REDIS_CLUSTER_NODES must be redis:// URLs separated by commas, e.g. \
                 redis://127.0.0.1:7000,redis://127.0.0.1:7001; got `{bad}`"
            )));
        }
        Ok(RedisTarget::Cluster(nodes))
    }

    /// The secrets of CURSOR_KEYS, signing one first; None when unset (the key kept in Redis).
    pub fn cursor_secrets(&self) -> Result<Option<Vec<&str>>, AppError> {
        let secrets: Vec<&str> = self.cursor_keys.iter().map(|k| k.trim()).filter(|k| !k.is_empty()).collect();
        if secrets.is_empty() {
            return Ok(None);
        }
        if secrets.iter().any(|k| k.len() < MIN_CURSOR_KEY_BYTES) {
            return Err(AppError::Config(format!(
                "each key of CURSOR_KEYS must be at least {} bytes long (a random string); separate keys with commas",
                MIN_CURSOR_KEY_BYTES
            )));
        }
        Ok(Some(secrets))
    }

    /// Checks everything `serve` needs, so a bad setting fails before anything connects.
    pub fn validate_for_serve(&self) -> Result<(), AppError> {
        self.cursor_secrets()?;
        self.database_url()?;
        self.redis_target()?;
        self.jwt_secret()?;
        self.jwks()?;
        if self.redis_key_prefix.is_empty() || self.redis_key_prefix.contains(['{', '}', ' ']) {
            return Err(AppError::Config("REDIS_KEY_PREFIX must be non-empty and contain no braces or spaces".into()));
        }
        if self.like_stream_shards == 0 || self.like_stream_shards > 1024 {
            return Err(AppError::Config("LIKE_STREAM_SHARDS must be between 1 and 1024".into()));
        }
        if self.like_batch_size == 0 || self.like_batch_size > 50_000 {
            return Err(AppError::Config("LIKE_BATCH_SIZE must be between 1 and 50000".into()));
        }
        if self.worker_lease_ttl < Duration::from_millis(200) {
            return Err(AppError::Config("WORKER_LEASE_TTL must be at least 200ms".into()));
        }
        if self.view_shards == 0 || self.view_shards > 1024 {
            return Err(AppError::Config("VIEW_SHARDS must be between 1 and 1024".into()));
        }
        if self.view_ticket_ttl <= self.view_min_dwell {
            return Err(AppError::Config("VIEW_TICKET_TTL must be longer than VIEW_MIN_DWELL".into()));
        }
        if self.view_flush_interval < Duration::from_millis(100) {
            return Err(AppError::Config("VIEW_FLUSH_INTERVAL must be at least 100ms".into()));
        }
        if self.view_cap_window < Duration::from_secs(1) {
            return Err(AppError::Config("VIEW_CAP_WINDOW must be at least 1s".into()));
        }
        if self.db_max_connections < 2 {
            return Err(AppError::Config(
                "DB_MAX_CONNECTIONS must be at least 2 (one connection is the membership listener's)".into(),
            ));
        }
        if !(1..=100_000).contains(&self.notifications_per_user) {
            return Err(AppError::Config("NOTIFICATIONS_PER_USER must be between 1 and 100000".into()));
        }
        if !(1..=100_000).contains(&self.unread_exceptions_per_course) {
            return Err(AppError::Config("UNREAD_EXCEPTIONS_PER_COURSE must be between 1 and 100000".into()));
        }
        if self.request_statement_budget == 0 {
            return Err(AppError::Config("REQUEST_STATEMENT_BUDGET must be at least 1".into()));
        }
        if self.jobs_db_max_connections == 0 {
            return Err(AppError::Config("JOBS_DB_MAX_CONNECTIONS must be at least 1".into()));
        }
        if self.search_db_max_connections == 0 {
            return Err(AppError::Config("SEARCH_DB_MAX_CONNECTIONS must be at least 1".into()));
        }
        if self.search_cache_ttl > Duration::from_secs(3600) {
            return Err(AppError::Config("SEARCH_CACHE_TTL must be at most 1h (0s turns it off)".into()));
        }
        if self.statement_timeout < Duration::from_millis(10) {
            return Err(AppError::Config("STATEMENT_TIMEOUT must be at least 10ms".into()));
        }
        if self.request_timeout <= self.statement_timeout {
            return Err(AppError::Config(
                "REQUEST_TIMEOUT must be longer than STATEMENT_TIMEOUT (a statement in flight is cancelled by \
                 PostgreSQL, not left behind)"
                    .into(),
            ));
        }
        if self.feed_fanout_max_members == 0 {
            return Err(AppError::Config("FEED_FANOUT_MAX_MEMBERS must be at least 1".into()));
        }
        if self.feed_timeline_cap == 0 || self.feed_timeline_cap > 10_000 {
            return Err(AppError::Config("FEED_TIMELINE_CAP must be between 1 and 10000".into()));
        }
        if self.feed_timeline_ttl < Duration::from_secs(1) {
            return Err(AppError::Config("FEED_TIMELINE_TTL must be at least 1s".into()));
        }
        if self.feed_fanout_interval < Duration::from_millis(10) {
            return Err(AppError::Config("FEED_FANOUT_INTERVAL must be at least 10ms".into()));
        }
        if self.feed_fanout_batch == 0 || self.feed_fanout_batch > 10_000 {
            return Err(AppError::Config("FEED_FANOUT_BATCH must be between 1 and 10000".into()));
        }
        if self.post_cache_ttl < Duration::from_millis(100) {
            return Err(AppError::Config("POST_CACHE_TTL must be at least 100ms".into()));
        }
        if self.post_cache_missing_ttl < Duration::from_millis(100) {
            return Err(AppError::Config("POST_CACHE_MISSING_TTL must be at least 100ms".into()));
        }
        if self.cache_lock_ttl < Duration::from_millis(100) || self.cache_lock_ttl > Duration::from_secs(60) {
            return Err(AppError::Config("CACHE_LOCK_TTL must be between 100ms and 60s".into()));
        }
        if self.ws_init_timeout < Duration::from_millis(100) || self.ws_init_timeout > Duration::from_secs(600) {
            return Err(AppError::Config("WS_INIT_TIMEOUT must be between 100ms and 10m".into()));
        }
        if self.live_threads > 64 {
            return Err(AppError::Config("LIVE_THREADS must be between 0 and 64".into()));
        }
        if !(0..=19).contains(&self.live_nice) {
            return Err(AppError::Config(
                "LIVE_NICE must be between 0 and 19 (how much lower the websockets' priority is)".into(),
            ));
        }
        if self.ws_send_timeout < Duration::from_millis(100) || self.ws_send_timeout > Duration::from_secs(600) {
            return Err(AppError::Config("WS_SEND_TIMEOUT must be between 100ms and 10m".into()));
        }
        if !self.ws_keepalive.is_zero() && self.ws_keepalive < Duration::from_millis(100) {
            return Err(AppError::Config("WS_KEEPALIVE must be 0s (off) or at least 100ms".into()));
        }
        if self.subscription_max_cost == 0 || self.subscription_max_cost > MAX_QUERY_COST {
            return Err(AppError::Config(format!(
                "SUBSCRIPTION_MAX_COST must be between 1 and MAX_COST ({})",
                MAX_QUERY_COST
            )));
        }
        if self.subscription_event_statement_budget == 0 {
            return Err(AppError::Config("SUBSCRIPTION_EVENT_STATEMENT_BUDGET must be at least 1".into()));
        }
        if self.shutdown_timeout < Duration::from_millis(100) || self.shutdown_timeout > Duration::from_secs(600) {
            return Err(AppError::Config("SHUTDOWN_TIMEOUT must be between 100ms and 10m".into()));
        }
        Ok(())
    }
}

/// Where a JWKS is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    File(std::path::PathBuf),
    Url(url::Url),
}

/// The settings of JWKS tokens, checked (`Settings::jwks`).
#[derive(Clone, Debug)]
pub struct JwksSettings {
    pub source: JwksSource,
    pub issuer: String,
    pub audience: String,
    pub handle_claim: String,
    pub name_claim: String,
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_read_with_or_without_a_unit() {
        assert_eq!(parse_bytes("268435456"), Ok(256 << 20));
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes(" 1 GiB "), Ok(1 << 30));
        assert_eq!(parse_bytes("64kb"), Ok(64_000));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("99999999999999GiB").is_err());
    }
}
