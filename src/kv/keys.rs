//! Every Redis key this service uses, named in one place. All keys start with the configured
//! prefix, so tests (and several deployments) can share one Redis without meeting.
//!
//! Redis Cluster rule: every script touches keys of ONE hash slot. A user's liked-sets and the
//! like stream they append to share the hash tag `{s<k>}` of the user's shard k.
//!
//! | key | type | TTL | purpose |
//! |---|---|---|---|
//! | `<p>:{s<k>}:liked:<user>:<course>` | SET | LIKED_SET_TTL | what the user liked in the course (`p:<id>`, `c:<id>`, sentinel `_`) |
//! | `<p>:{s<k>}:pending:<user>:<course>` | HASH | none (records removed as they apply) | the (user, course) events not yet applied: member → `+ <entry id>` / `- <entry id>`, the last accepted op per target; a liked-set load overlays them |
//! | `<p>:{s<k>}:loadgen` | HASH | none | 1,024 buckets of (user, course) → how often the worker removed a pending record there; a load that sees the value move retries |
//! | `<p>:{s<k>}:likes` | STREAM | none (entries trimmed after commit) | like/unlike events of shard k |
//! | `<p>:{s<k>}:lease` | STRING | WORKER_LEASE_TTL | owner token of the one active consumer of shard k |
//! | `<p>:like_mode` | STRING | none | the like mode the last instance started in: a start in another mode applies the streams and drops the liked-sets first |
//! | `<p>:likes:dead` | STREAM | none | dead letters: entries that failed alone, with the error |
//! | `<p>:{recount}:dirty` | ZSET | none | level 2: targets to recount, scored by mark sequence |
//! | `<p>:{recount}:seq` | STRING | none | level 2: the mark sequence |
//! | `<p>:{s<k>}:rl:like:<user>` | STRING | 60 s | like toggles in the current rate-limit window (in the user's shard slot: the toggle script counts it) |
//! | `<p>:{u<user>}:rl:<kind>` | STRING | 60 s | the user's writes of one kind (`post`, `comment`, `edit`, `delete`, `view`) in the current rate-limit window |
//! | `<p>:{u<user>}:views:open` | ZSET | until its last ticket expires (VIEW_TICKET_TTL) | the user's open view tickets, `<post>.<uuid>` scored by the ticket's expiry (ms, Redis clock); completing a ticket removes it, expired ones are trimmed by the next start |
//! | `<p>:{live}:events` | Pub/Sub channel | — | committed like counts and course activity, to every instance |
//! | `<p>:{v<post>}:vt:<uuid>` | STRING | VIEW_TICKET_TTL + grace (the life) | a started view: `<user> <post> <ip> <validity ms> <life ms>`, then ` used`; the time since its start is the life minus its `PTTL` |
//! | `<p>:{v<post>}:cap:u:<user>` | STRING | VIEW_CAP_WINDOW | counted views of the user on the post in the current window |
//! | `<p>:{v<post>}:cap:ip:<ip>` | STRING | VIEW_CAP_WINDOW | counted views from the IP on the post in the current window |
//! | `<p>:{v<post>}:uniq` | HyperLogLog | none | unique viewers (user ids) of the post |
//! | `<p>:{vc<k>}:views:<post>` | STRING | none (GETDEL by the aggregator) | counted, unflushed views of the post in counter shard k |
//! | `<p>:{vc<k>}:dirty` | SET | none | posts with an unflushed counter in shard k |
//! | `<p>:{vc<k>}:flush:<batch>` | HASH | none (deleted after COMMIT) | pending flush record: post → views moved out of shard k, batch uuid |
//! | `<p>:{vc<k>}:flushes` | SET | none | batch uuids of shard k's pending flush records |
//! | `<p>:{pc<post>}:post` | HASH | 10 × the freshness window (live), POST_CACHE_MISSING_TTL (missing) | the post cache entry: state `s` (`live`/`missing`), fresh-until `fresh` (ms), the row `row` (JSON), counters `likes`, `like_v`, `comments`, `views` |
//! | `<p>:{pc<post>}:lock` | STRING | CACHE_LOCK_TTL | owner token of the one request loading the post into the cache |
//! | `<p>:{pc<post>}:gen` | STRING | 1 day, refreshed | invalidation generation: bumped by every write, so a load that began before it does not store |
//! | `<p>:{tl<user>}:timeline` | ZSET | FEED_TIMELINE_TTL, refreshed on read | the user's home timeline: post ids scored by id, capped at FEED_TIMELINE_CAP, plus one score-0 sentinel naming the courses it was built for (`c:1,5,9`) or `building:<token>` |
//! | `<p>:{tl<user>}:rebuild` | STRING | CACHE_LOCK_TTL | owner token of the one request rebuilding the timeline |
//! | `<p>:{fc<course>}:recent` | ZSET | none | a celebrity course's recent post ids (capped), plus the sentinel `_`; its existence makes the course a celebrity |
//! | `<p>:cursor_key` | STRING | none | the random key signing connection cursors when CURSOR_KEYS is unset: written once (SET NX) by the first instance to start, read by every one at start |
//! | `<p>:apq:<sha256>` | STRING | 7 days, renewed on every use | a persisted query's text, by its SHA-256 (Apollo's automatic persisted queries) |
//!
//! Views: the completion script touches only `{v<post>}` keys (ticket, both caps, the
//! HyperLogLog: single use and caps in one atomic script, one slot). The counters are spread
//! deliberately: counter shard k of every post lives in slot `{vc<k>}`, so a viral post's
//! increments land on N slots, and the aggregator's per-shard move script stays in one slot.
//!
//! Write limits: a user's window counters and open view tickets share `{u<user>}`, so the
//! view-start script checks the rate and the open tickets in one slot; the ticket itself is
//! written by a second script in the post's slot.
//!
//! Feed and cache: a post's cache entry, lock and generation share `{pc<post>}`; a timeline and
//! its rebuild lock share `{tl<user>}`; each celebrity list is alone in `{fc<course>}`. Every
//! feed and cache script touches one of these tags only; fan-out pipelines one script per
//! timeline, so a cluster client spreads them over the nodes.

/// The consumer group every like-stream shard has.
pub const LIKE_GROUP: &str = "like-writers";

/// How many generation buckets each shard's liked-set loads are spread over: a worker's
/// apply makes only the loads of its bucket retry.
pub(crate) const LOAD_GENERATION_BUCKETS: u32 = 1024;

/// Builds key names under one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    shards: u32,
}

impl Keys {
    pub fn new(prefix: impl Into<String>, shards: u32) -> Self {
        Self { prefix: prefix.into(), shards: shards.max(1) }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The stream shard a user's likes go to.
    pub fn shard_of(&self, user_id: i64) -> u32 {
        user_id.rem_euclid(self.shards as i64) as u32
    }

    pub fn liked_set(&self, user_id: i64, course_id: i64) -> String {
        format!("{}:{{s{}}}:liked:{user_id}:{course_id}", self.prefix, self.shard_of(user_id))
    }

    /// The (user, course) pending records: what the stream has accepted and not yet applied.
    pub fn liked_pending(&self, user_id: i64, course_id: i64) -> String {
        format!("{}:{{s{}}}:pending:{user_id}:{course_id}", self.prefix, self.shard_of(user_id))
    }

    /// SCAN pattern matching every pending-records hash.
    pub fn liked_pending_pattern(&self) -> String {
        format!("{}:{{s*}}:pending:*", self.prefix)
    }

    /// The load generations of shard k's liked-sets (one HASH of `LOAD_GENERATION_BUCKETS`
    /// fields: bounded, whatever the number of users).
    pub fn load_generations(&self, shard: u32) -> String {
        format!("{}:{{s{shard}}}:loadgen", self.prefix)
    }

    /// The field of `load_generations` that (user, course)'s liked-set loads watch.
    /// Mixed (splitmix64), so that the users of one shard, whose ids share a residue, still
    /// spread over every bucket.
    pub fn load_generation_bucket(&self, user_id: i64, course_id: i64) -> u32 {
        let mut x = (user_id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (course_id as u64);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((x ^ (x >> 31)) % u64::from(LOAD_GENERATION_BUCKETS)) as u32
    }

    /// SCAN pattern matching every liked-set (braces are literal in Redis globs).
    pub fn liked_set_pattern(&self) -> String {
        format!("{}:{{s*}}:liked:*", self.prefix)
    }

    pub fn like_stream(&self, shard: u32) -> String {
        format!("{}:{{s{shard}}}:likes", self.prefix)
    }

    /// The shared cursor key when CURSOR_KEYS is unset (`cursor::load_keys`).
    pub fn cursor_key(&self) -> String {
        format!("{}:cursor_key", self.prefix)
    }

    /// The like mode the last instance started in (`settle_like_mode_switch`).
    pub fn like_mode_marker(&self) -> String {
        format!("{}:like_mode", self.prefix)
    }

    pub fn worker_lease(&self, shard: u32) -> String {
        format!("{}:{{s{shard}}}:lease", self.prefix)
    }

    pub fn dead_letters(&self) -> String {
        format!("{}:likes:dead", self.prefix)
    }

    pub fn recount_dirty(&self) -> String {
        format!("{}:{{recount}}:dirty", self.prefix)
    }

    pub fn recount_seq(&self) -> String {
        format!("{}:{{recount}}:seq", self.prefix)
    }

    /// The Pub/Sub channel of committed changes (live counts and activity).
    /// A persisted query's text, by the lowercase hex SHA-256 of that text.
    pub fn persisted_query(&self, sha256: &str) -> String {
        format!("{}:apq:{sha256}", self.prefix)
    }

    pub fn live_channel(&self) -> String {
        format!("{}:{{live}}:events", self.prefix)
    }

    /// A started post view (ticket uuid in simple form). `vt`, not the earlier HASH tickets'
    /// `ticket`: across a rolling upgrade, an instance never reads a ticket of the other
    /// format (it is NOT_FOUND there, and the client starts a new view).
    pub fn view_ticket(&self, post_id: i64, ticket: &str) -> String {
        format!("{}:{{v{post_id}}}:vt:{ticket}", self.prefix)
    }

    pub fn view_cap_user(&self, post_id: i64, user_id: i64) -> String {
        format!("{}:{{v{post_id}}}:cap:u:{user_id}", self.prefix)
    }

    pub fn view_cap_ip(&self, post_id: i64, ip: &str) -> String {
        format!("{}:{{v{post_id}}}:cap:ip:{ip}", self.prefix)
    }

    /// HyperLogLog of the post's viewers.
    pub fn view_uniques(&self, post_id: i64) -> String {
        format!("{}:{{v{post_id}}}:uniq", self.prefix)
    }

    /// The prefix of counter shard k's per-post counters (`…views:<post>`).
    pub fn view_counter_prefix(&self, shard: u32) -> String {
        format!("{}:{{vc{shard}}}:views:", self.prefix)
    }

    pub fn view_counter(&self, shard: u32, post_id: i64) -> String {
        format!("{}{post_id}", self.view_counter_prefix(shard))
    }

    pub fn view_dirty(&self, shard: u32) -> String {
        format!("{}:{{vc{shard}}}:dirty", self.prefix)
    }

    pub fn view_flush_record(&self, shard: u32, batch: &str) -> String {
        format!("{}:{{vc{shard}}}:flush:{batch}", self.prefix)
    }

    pub fn view_flushes(&self, shard: u32) -> String {
        format!("{}:{{vc{shard}}}:flushes", self.prefix)
    }

    /// Fixed-window counter of a user's like toggles (STRING, expires with the window).
    /// In the user's shard slot, beside their liked-sets and stream: the toggle script checks
    /// the limit and toggles in one round trip.
    pub fn like_rate(&self, user_id: i64) -> String {
        format!("{}:{{s{}}}:rl:like:{user_id}", self.prefix, self.shard_of(user_id))
    }

    /// Fixed-window counter of one kind of write by a user (`kind`: `post`, `comment`,
    /// `edit`, `delete`, `view`; and `search`, through `search_rate`), expiring with its window.
    pub fn write_rate(&self, user_id: i64, kind: &str) -> String {
        format!("{}:{{u{user_id}}}:rl:{kind}", self.prefix)
    }

    /// Fixed-window counter of a user's searches that look for matches afresh
    /// (`SEARCH_RATE_PER_MINUTE`), expiring with its window.
    pub fn search_rate(&self, user_id: i64) -> String {
        self.write_rate(user_id, "search")
    }

    /// The user's open view tickets (ZSET `<post>.<uuid>` → expiry in ms), in the slot of their
    /// view-start counter: one script checks both.
    pub fn open_views(&self, user_id: i64) -> String {
        format!("{}:{{u{user_id}}}:views:open", self.prefix)
    }

    /// The post cache entry (HASH) of a post.
    pub fn post_cache_entry(&self, post_id: i64) -> String {
        format!("{}:{{pc{post_id}}}:post", self.prefix)
    }

    /// The lock held by the one request loading a post into the cache.
    pub fn post_cache_lock(&self, post_id: i64) -> String {
        format!("{}:{{pc{post_id}}}:lock", self.prefix)
    }

    /// The post's invalidation generation.
    pub fn post_cache_gen(&self, post_id: i64) -> String {
        format!("{}:{{pc{post_id}}}:gen", self.prefix)
    }

    /// A user's home timeline (ZSET of post ids plus its sentinel).
    pub fn timeline(&self, user_id: i64) -> String {
        format!("{}:{{tl{user_id}}}:timeline", self.prefix)
    }

    /// The lock held by the one request rebuilding a user's timeline.
    pub fn timeline_lock(&self, user_id: i64) -> String {
        format!("{}:{{tl{user_id}}}:rebuild", self.prefix)
    }

    /// A celebrity course's recent post ids.
    pub fn celebrity_list(&self, course_id: i64) -> String {
        format!("{}:{{fc{course_id}}}:recent", self.prefix)
    }

    /// SCAN patterns matching every feed and post-cache key (braces are literal in globs).
    pub fn feed_and_cache_patterns(&self) -> [String; 3] {
        ["pc", "tl", "fc"].map(|tag| format!("{}:{{{tag}*}}:*", self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot-defining part of a key: the first `{…}` section.
    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').expect("key has a hash tag");
        let close = key[open..].find('}').expect("closed tag") + open;
        &key[open + 1..close]
    }

    #[test]
    fn a_users_sets_and_rate_limit_share_the_slot_of_their_stream() {
        let keys = Keys::new("cf", 8);
        for user in [1, 7, 8, 12345] {
            let set = keys.liked_set(user, 3);
            let stream = keys.like_stream(keys.shard_of(user));
            assert_eq!(hash_tag(&set), hash_tag(&stream));
            assert_eq!(hash_tag(&keys.like_rate(user)), hash_tag(&stream));
            assert_eq!(hash_tag(&keys.liked_pending(user, 3)), hash_tag(&stream));
            assert_eq!(hash_tag(&keys.load_generations(keys.shard_of(user))), hash_tag(&stream));
        }
        assert_eq!(hash_tag(&keys.recount_dirty()), hash_tag(&keys.recount_seq()));
    }

    #[test]
    fn one_shards_liked_sets_spread_over_every_load_generation_bucket() {
        let keys = Keys::new("cf", 4);
        let mut used = std::collections::HashSet::new();
        // The users of shard 0 only (ids = 0 mod 4), in one course.
        for user in (0..40_000).step_by(4) {
            used.insert(keys.load_generation_bucket(user, 7));
        }
        assert_eq!(used.len(), LOAD_GENERATION_BUCKETS as usize);
    }

    #[test]
    fn a_view_script_stays_in_one_slot_and_counter_shards_spread() {
        let keys = Keys::new("cf", 8);
        let ticket = keys.view_ticket(42, "abc");
        for key in [keys.view_cap_user(42, 7), keys.view_cap_ip(42, "::1"), keys.view_uniques(42)] {
            assert_eq!(hash_tag(&ticket), hash_tag(&key));
        }
        let shard = keys.view_counter(3, 42);
        for key in [keys.view_dirty(3), keys.view_flushes(3), keys.view_flush_record(3, "b")] {
            assert_eq!(hash_tag(&shard), hash_tag(&key));
        }
        assert_ne!(hash_tag(&keys.view_counter(3, 42)), hash_tag(&keys.view_counter(4, 42)));
    }

    #[test]
    fn a_users_view_start_counter_and_open_tickets_share_a_slot() {
        let keys = Keys::new("cf", 8);
        assert_eq!(hash_tag(&keys.write_rate(7, "view")), hash_tag(&keys.open_views(7)));
        assert_eq!(hash_tag(&keys.write_rate(7, "post")), hash_tag(&keys.open_views(7)));
        assert_ne!(hash_tag(&keys.open_views(7)), hash_tag(&keys.open_views(8)));
        assert_ne!(hash_tag(&keys.open_views(7)), hash_tag(&keys.timeline(7)));
    }

    #[test]
    fn each_feed_and_cache_script_stays_in_one_slot() {
        let keys = Keys::new("cf", 8);
        let entry = keys.post_cache_entry(42);
        assert_eq!(hash_tag(&entry), hash_tag(&keys.post_cache_lock(42)));
        assert_eq!(hash_tag(&entry), hash_tag(&keys.post_cache_gen(42)));
        assert_ne!(hash_tag(&entry), hash_tag(&keys.post_cache_entry(43)));
        assert_eq!(hash_tag(&keys.timeline(7)), hash_tag(&keys.timeline_lock(7)));
        assert_ne!(hash_tag(&keys.timeline(7)), hash_tag(&keys.timeline(8)));
        assert_ne!(hash_tag(&keys.celebrity_list(7)), hash_tag(&keys.timeline(7)));
    }
}
