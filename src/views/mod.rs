//! Post views that bots cannot inflate (docs/architecture.md, "Post views").
//!
//! 1. `startPostView(postId)` is first admitted (`lua/view_admit.lua`, in the user's slot
//!    `{u<user>}`): the user's view-start rate limit (`VIEW_START_RATE_PER_MINUTE`) and bound on
//!    open tickets (`VIEW_MAX_OPEN_TICKETS`) are checked, and the new ticket takes a slot, in
//!    one script, before any database work. Then (access-checked: live post, viewer a member of
//!    its course) it stores the ticket in Redis: one `SET … PX` of the user, the post, the
//!    client IP and the ticket's lifetimes, no script. The key's remaining time to live is the
//!    clock the completion reads (the time since the start, by Redis's clock, one clock for
//!    every instance). A start that fails after its admission gives the slot back. When the
//!    caller knows the post from memory, admission and ticket go in one pipelined round trip
//!    (`admit_and_open`). The ticket the client gets is `<post id>.<uuid>`: opaque to
//!    clients, it names the post so the ticket key can carry the post's hash tag.
//! 2. `completePostView(ticket)` runs `lua/view_complete.lua`: ownership, single use, expiry,
//!    dwell (at least `VIEW_MIN_DWELL` by the Redis clock) and both caps (per user and per IP,
//!    per post, per `VIEW_CAP_WINDOW`) are decided in ONE script, so racing completions can
//!    neither reuse a ticket nor pass a cap. A counted view is added to the post's HyperLogLog
//!    of unique viewers in the same script.
//! 3. The counted view then INCRs one of `VIEW_SHARDS` counters chosen at random
//!    (`lua/view_count.lua`, which also marks the post dirty in that shard). Shard k of every
//!    post lives in slot `{vc<k>}`, so a viral post's increments are spread over N keys/slots.
//! 4. `aggregator::ViewAggregator`, in the worker, every `VIEW_FLUSH_INTERVAL`: moves every
//!    shard's counters into a pending flush record tagged with a batch uuid
//!    (`lua/view_take.lua`, atomic per shard), applies all pending records in ONE SQL statement
//!    that also records their batch uuids in `view_flushes` (so a replay is skipped), and only
//!    after COMMIT deletes the records. A crash at any step loses nothing and applies nothing
//!    twice.
//! 5. `Post.viewCount` = `posts.view_count` + the post's unflushed shard counters;
//!    `Post.uniqueViewers` = PFCOUNT. A page reads all of them in one pipelined round trip
//!    (`graphql::loaders::ViewLoader`).
//!
//! Choices: a ticket of another user (or one that never existed, or expired long ago and was
//! evicted by its TTL) is `NOT_FOUND`, not a refusal reason: the caller learns nothing about
//! tickets that are not theirs, and the ticket stays usable by its owner. A `TOO_SHORT`
//! completion leaves the ticket usable (complete it later); `CAPPED` uses it up. The IP cap
//! uses the IP of the completing request. Between the script that decides a view and the
//! INCR that counts it (two slots, so two commands) a crash loses that one view: never a
//! double count.
//!
//! Open tickets: a completion that uses the ticket up (counted, `CAPPED`, `ALREADY_USED`,
//! `EXPIRED`, or NOT_FOUND) frees its slot with a ZREM in the user's slot (a second command:
//! the ticket lives in the post's slot). If that ZREM is lost (Redis failing between the two),
//! the slot frees itself when the ticket expires. A `TOO_SHORT` ticket keeps its slot.

pub(crate) mod aggregator;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::kv::Redis;
use axum::http::HeaderMap;
use redis::Script;

use crate::config::Settings;
use crate::error::{AppError, AppResult};
use crate::kv::keys::Keys;
use crate::telemetry::names;

/// Why a completed view did not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, async_graphql::Enum)]
pub enum ViewRefusal {
    /// Completed before `minDwellMs` had passed (the ticket stays usable).
    TooShort,
    /// The user or the IP reached its cap of counted views on this post for the window.
    Capped,
    /// The ticket was completed before.
    AlreadyUsed,
    /// The ticket is older than the server's ticket lifetime (`VIEW_TICKET_TTL`, an hour by
    /// default): start a new view.
    Expired,
}

/// What `complete` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewOutcome {
    Counted,
    Refused(ViewRefusal),
}

/// The client address of a request, as the HTTP layer determined it (request data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientIp(pub IpAddr);

/// The client of a connection: the peer, or — only when the peer is the trusted proxy — the
/// last `X-Forwarded-For` entry (the one that proxy appended; earlier entries are whatever
/// the client claimed). A malformed header falls back to the peer.
pub(crate) fn client_ip(peer: SocketAddr, headers: &HeaderMap, trusted_proxy: Option<IpAddr>) -> IpAddr {
    let peer_ip = peer.ip().to_canonical();
    if trusted_proxy.map(|p| p.to_canonical()) != Some(peer_ip) {
        return peer_ip;
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .last()
        .and_then(|last| last.trim().parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
        .unwrap_or(peer_ip)
}

/// The view settings, from `Settings`.
#[derive(Clone, Debug)]
pub struct ViewConfig {
    pub min_dwell: Duration,
    pub ticket_ttl: Duration,
    pub cap_per_user: u32,
    pub cap_per_ip: u32,
    pub cap_window: Duration,
    pub shards: u32,
    /// View starts per user per minute (0: no limit).
    pub start_rate_per_minute: u32,
    /// Most open tickets per user (0: no bound).
    pub max_open_tickets: u32,
}

impl ViewConfig {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            min_dwell: settings.view_min_dwell,
            ticket_ttl: settings.view_ticket_ttl,
            cap_per_user: settings.view_cap_per_user,
            cap_per_ip: settings.view_cap_per_ip,
            cap_window: settings.view_cap_window,
            shards: settings.view_shards.max(1),
            start_rate_per_minute: settings.view_start_rate_per_minute,
            max_open_tickets: settings.view_max_open_tickets,
        }
    }
}

/// The window of the view-start rate limit.
const START_WINDOW: Duration = Duration::from_secs(60);

struct Scripts {
    admit: Script,
    complete: Script,
    count: Script,
}

/// A started view, as the client receives it.
#[derive(Clone, Debug)]
pub struct StartedView {
    pub ticket: String,
    pub min_dwell: Duration,
}

/// A view start the user's limits admitted: its ticket holds one of the user's open slots
/// until it is completed, expires, or the start is withdrawn (`Views::withdraw`).
#[derive(Clone, Debug)]
pub struct Admission {
    user_id: i64,
    post_id: i64,
    uuid: String,
    backdate: Duration,
}

impl Admission {
    /// The ticket as the client gets it, and as the user's open-ticket set names it.
    fn ticket(&self) -> String {
        format!("{}.{}", self.post_id, self.uuid)
    }
}

/// The unflushed part of a post's views and its unique viewers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveViews {
    pub unflushed: i64,
    pub unique_viewers: i64,
}

/// Starting, completing and reading views (the Redis side; access checks are the caller's).
#[derive(Clone)]
pub struct Views {
    redis: Redis,
    keys: Keys,
    config: ViewConfig,
    scripts: Arc<Scripts>,
}

impl Views {
    pub fn new(redis: Redis, keys: Keys, config: ViewConfig) -> Self {
        let scripts = Arc::new(Scripts {
            admit: crate::kv::script(&[
                include_str!("../../lua/fixed_window.lua"),
                include_str!("../../lua/view_admit.lua"),
            ]),
            complete: Script::new(include_str!("../../lua/view_complete.lua")),
            count: Script::new(include_str!("../../lua/view_count.lua")),
        });
        Self { redis, keys, config, scripts }
    }

    pub fn config(&self) -> &ViewConfig {
        &self.config
    }

    /// Starts a view of a post the caller has already proven the user may read: `admit`, then
    /// `open` (the slot given back if opening fails).
    pub async fn start(&self, user_id: i64, post_id: i64, ip: IpAddr) -> AppResult<StartedView> {
        self.start_backdated(user_id, post_id, ip, Duration::ZERO).await
    }

    /// `start`, as if it had happened `backdate` ago (benchmarks and tests: no 30 s waits).
    pub async fn start_backdated(
        &self,
        user_id: i64,
        post_id: i64,
        ip: IpAddr,
        backdate: Duration,
    ) -> AppResult<StartedView> {
        let admission = self.admit_backdated(user_id, post_id, backdate).await?;
        let started = self.open(&admission, ip).await;
        if started.is_err() {
            self.withdraw(&admission).await;
        }
        started
    }

    /// Admits a view start of `user_id` on `post_id` (one script, no database work): counts it
    /// against the user's view-start rate limit and takes one of their open-ticket slots.
    /// Over either limit it is RATE_LIMITED with `retryAfterMs` (when the window resets, or
    /// when the oldest open ticket expires), and nothing is stored.
    pub async fn admit(&self, user_id: i64, post_id: i64) -> AppResult<Admission> {
        self.admit_backdated(user_id, post_id, Duration::ZERO).await
    }

    async fn admit_backdated(&self, user_id: i64, post_id: i64, backdate: Duration) -> AppResult<Admission> {
        let admission = Admission { user_id, post_id, uuid: uuid::Uuid::new_v4().simple().to_string(), backdate };
        if !self.limited() {
            return Ok(admission);
        }
        let mut conn = self.redis.clone();
        let (status, wait_ms): (i64, u64) = self.admit_invocation(&admission).invoke_async(&mut conn).await?;
        self.admitted(status, wait_ms)?;
        Ok(admission)
    }

    /// Whether view starts are limited at all (else admission costs nothing).
    fn limited(&self) -> bool {
        self.config.max_open_tickets > 0 || self.config.start_rate_per_minute > 0
    }

    fn admit_invocation(&self, admission: &Admission) -> redis::ScriptInvocation<'_> {
        let mut invocation = self.scripts.admit.key(self.keys.open_views(admission.user_id));
        invocation
            .key(self.keys.write_rate(admission.user_id, "view"))
            .arg(self.config.max_open_tickets)
            .arg(admission.ticket())
            .arg(self.config.ticket_ttl.as_millis() as u64)
            .arg(admission.backdate.as_millis() as u64)
            .arg(self.config.start_rate_per_minute)
            .arg(START_WINDOW.as_millis() as u64);
        invocation
    }

    /// `view_admit.lua`'s verdict: admitted, or RATE_LIMITED with when to retry.
    fn admitted(&self, status: i64, wait_ms: u64) -> AppResult<()> {
        let (max_open, rate) = (self.config.max_open_tickets, self.config.start_rate_per_minute);
        let (kind, what) = match status {
            0 => return Ok(()),
            1 => (
                "open_views",
                format!(
                    "too many open view tickets: at most {max_open}; complete one, or wait until the oldest expires"
                ),
            ),
            2 => (
                "view_start",
                format!("too many view starts: at most {rate} per {}", humantime::format_duration(START_WINDOW)),
            ),
            other => return Err(AppError::Internal(format!("view_admit.lua answered {other}"))),
        };
        metrics::counter!(names::WRITE_LIMIT_REFUSALS, "kind" => kind).increment(1);
        Err(AppError::RateLimited { what, retry_after_ms: wait_ms.max(1) })
    }

    /// `admit` and `open` in ONE round trip (a pipeline of the admission script and the
    /// ticket's SET), for a post the caller has proven the user may read without asking Redis
    /// (the post was in memory). A start the limits refuse has its ticket removed at once, so
    /// it is as if nothing was stored.
    pub async fn admit_and_open(&self, user_id: i64, post_id: i64, ip: IpAddr) -> AppResult<StartedView> {
        let admission =
            Admission { user_id, post_id, uuid: uuid::Uuid::new_v4().simple().to_string(), backdate: Duration::ZERO };
        let mut pipe = redis::pipe();
        if self.limited() {
            pipe.invoke_script(&self.admit_invocation(&admission));
        }
        pipe.add_command(self.open_command(&admission, ip)).ignore();
        // The pipeline runs again if Redis had lost the script (`query_scripts`): the
        // admission's ticket is the same, so its slot is taken once and its SET is the same;
        // only its rate count may repeat.
        let scripts = [&self.scripts.admit];
        if !self.limited() {
            let () = crate::kv::query_scripts(&self.redis, &pipe, &scripts).await?;
            return Ok(self.started(&admission));
        }
        let ((status, wait_ms),): ((i64, u64),) = crate::kv::query_scripts(&self.redis, &pipe, &scripts).await?;
        if let Err(refused) = self.admitted(status, wait_ms) {
            let mut conn = self.redis.clone();
            let key = self.keys.view_ticket(post_id, &admission.uuid);
            let _: redis::RedisResult<i64> = redis::cmd("UNLINK").arg(key).query_async(&mut conn).await;
            return Err(refused);
        }
        Ok(self.started(&admission))
    }

    /// Gives an admitted start's slot back: the start failed (the post is gone, the viewer
    /// not a member, Redis failed). Best effort: a slot not given back frees itself when the
    /// ticket would have expired.
    pub async fn withdraw(&self, admission: &Admission) {
        self.free_slot(admission.user_id, &admission.ticket()).await;
    }

    async fn free_slot(&self, user_id: i64, ticket: &str) {
        if self.config.max_open_tickets == 0 {
            return;
        }
        let mut conn = self.redis.clone();
        let freed: redis::RedisResult<i64> =
            redis::cmd("ZREM").arg(self.keys.open_views(user_id)).arg(ticket).query_async(&mut conn).await;
        if let Err(err) = freed {
            tracing::warn!(error = %err, user_id, "could not free an open view ticket's slot; it frees itself when the ticket expires");
        }
    }

    /// Stores the ticket of an admitted start, for a post the caller has proven the user may
    /// read (the admission's post).
    pub async fn open(&self, admission: &Admission, ip: IpAddr) -> AppResult<StartedView> {
        let mut conn = self.redis.clone();
        let () = self.open_command(admission, ip).query_async(&mut conn).await?;
        Ok(self.started(admission))
    }

    /// The ticket's `SET`: `<user> <post> <ip> <validity ms> <life ms>` (what
    /// `lua/view_complete.lua` reads), expiring after its life. The life is the validity plus
    /// a grace, so a late completion still hears EXPIRED; the remaining time to live is the
    /// completion's clock, so a start backdated (benchmarks and tests) lives that much less.
    fn open_command(&self, admission: &Admission, ip: IpAddr) -> redis::Cmd {
        let Admission { user_id, post_id, ref uuid, backdate } = *admission;
        let validity_ms = self.config.ticket_ttl.as_millis() as u64;
        let life_ms = validity_ms + validity_ms.max(60_000);
        let left_ms = life_ms.saturating_sub(backdate.as_millis() as u64).max(1);
        let mut set = redis::cmd("SET");
        set.arg(self.keys.view_ticket(post_id, uuid))
            .arg(format!("{user_id} {post_id} {ip} {validity_ms} {life_ms}"))
            .arg("PX")
            .arg(left_ms);
        set
    }

    fn started(&self, admission: &Admission) -> StartedView {
        StartedView { ticket: admission.ticket(), min_dwell: self.config.min_dwell }
    }

    /// Completes a ticket for `user_id`. Unknown, malformed and foreign tickets are NOT_FOUND.
    /// Unless it was `TOO_SHORT` (still usable), the ticket's open slot is freed: a counted
    /// view's in the same round trip as its count.
    pub async fn complete(&self, user_id: i64, ticket: &str, ip: IpAddr) -> AppResult<ViewOutcome> {
        let (post_id, uuid) = parse_ticket(ticket).ok_or_else(|| AppError::not_found("view ticket"))?;
        let outcome = self.decide(user_id, post_id, &uuid, ip).await;
        if let Ok(ViewOutcome::Counted) = outcome {
            self.count(user_id, post_id, &format!("{post_id}.{uuid}")).await?;
            return outcome;
        }
        let used_up = match &outcome {
            Ok(ViewOutcome::Refused(ViewRefusal::TooShort)) => false,
            Ok(_) => true,
            // The user's own ticket that no longer exists; a foreign one is not in their set.
            Err(AppError::NotFound(_)) => true,
            Err(_) => false,
        };
        if used_up {
            self.free_slot(user_id, &format!("{post_id}.{uuid}")).await;
        }
        outcome
    }

    /// `complete`'s verdict: the completion script alone.
    async fn decide(&self, user_id: i64, post_id: i64, uuid: &str, ip: IpAddr) -> AppResult<ViewOutcome> {
        let mut conn = self.redis.clone();
        let (status, _detail): (i64, i64) = self
            .scripts
            .complete
            .key(self.keys.view_ticket(post_id, uuid))
            .key(self.keys.view_cap_user(post_id, user_id))
            .key(self.keys.view_cap_ip(post_id, &ip.to_string()))
            .key(self.keys.view_uniques(post_id))
            .arg(user_id)
            .arg(post_id)
            .arg(self.config.min_dwell.as_millis() as u64)
            .arg(self.config.cap_per_user)
            .arg(self.config.cap_per_ip)
            .arg(self.config.cap_window.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        let outcome = match status {
            0 => return Err(AppError::not_found("view ticket")),
            1 => ViewOutcome::Counted,
            2 => ViewOutcome::Refused(ViewRefusal::AlreadyUsed),
            3 => ViewOutcome::Refused(ViewRefusal::Expired),
            4 => ViewOutcome::Refused(ViewRefusal::TooShort),
            5 => ViewOutcome::Refused(ViewRefusal::Capped),
            other => return Err(AppError::Internal(format!("view_complete.lua answered {other}"))),
        };
        Ok(outcome)
    }

    /// Counts a view the completion script counted, in one of the post's shards, and frees its
    /// ticket's open slot, in one pipelined round trip (two slots: the shard's and the user's).
    /// Sent again only if Redis had lost the script, which then had not run: no double count.
    async fn count(&self, user_id: i64, post_id: i64, ticket: &str) -> AppResult<()> {
        let shard = rand::random_range(0..self.config.shards);
        let mut pipe = redis::pipe();
        pipe.invoke_script(
            self.scripts
                .count
                .key(self.keys.view_counter(shard, post_id))
                .key(self.keys.view_dirty(shard))
                .arg(post_id),
        )
        .ignore();
        if self.config.max_open_tickets > 0 {
            pipe.cmd("ZREM").arg(self.keys.open_views(user_id)).arg(ticket).ignore();
        }
        let () = crate::kv::query_scripts(&self.redis, &pipe, &[&self.scripts.count]).await?;
        Ok(())
    }

    /// Unflushed views and unique viewers of many posts in one pipelined round trip: one MGET
    /// per counter shard (its keys share a slot) and one PFCOUNT per post.
    pub async fn live_views(&self, post_ids: &[i64]) -> AppResult<HashMap<i64, LiveViews>> {
        if post_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let mut pipe = redis::pipe();
        for shard in 0..self.config.shards {
            let keys: Vec<String> = post_ids.iter().map(|p| self.keys.view_counter(shard, *p)).collect();
            pipe.cmd("MGET").arg(keys);
        }
        for post_id in post_ids {
            pipe.cmd("PFCOUNT").arg(self.keys.view_uniques(*post_id));
        }
        let mut conn = self.redis.clone();
        let (per_shard, uniques): (Vec<Vec<Option<i64>>>, Vec<i64>) = {
            let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
            let shards = self.config.shards as usize;
            let mut per_shard = Vec::with_capacity(shards);
            let mut uniques = Vec::with_capacity(post_ids.len());
            for (i, reply) in replies.into_iter().enumerate() {
                if i < shards {
                    per_shard.push(redis::FromRedisValue::from_redis_value(reply).map_err(unexpected_reply)?);
                } else {
                    uniques.push(redis::FromRedisValue::from_redis_value(reply).map_err(unexpected_reply)?);
                }
            }
            (per_shard, uniques)
        };
        let mut out = HashMap::with_capacity(post_ids.len());
        for (i, post_id) in post_ids.iter().enumerate() {
            let unflushed = per_shard.iter().map(|shard| shard.get(i).copied().flatten().unwrap_or(0)).sum();
            let unique_viewers = uniques.get(i).copied().unwrap_or(0);
            out.insert(*post_id, LiveViews { unflushed, unique_viewers });
        }
        Ok(out)
    }
}

fn unexpected_reply(err: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("unexpected Redis reply for post views: {err}"))
}

/// `<post id>.<uuid>` → (post id, uuid in simple form); None for anything else.
fn parse_ticket(ticket: &str) -> Option<(i64, String)> {
    let (post, uuid) = ticket.split_once('.')?;
    let post_id = post.parse::<i64>().ok().filter(|id| *id > 0)?;
    let uuid = uuid::Uuid::try_parse(uuid).ok()?;
    Some((post_id, uuid.simple().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_parse_strictly() {
        let uuid = uuid::Uuid::new_v4().simple().to_string();
        assert_eq!(parse_ticket(&format!("12.{uuid}")), Some((12, uuid.clone())));
        for bad in ["", "12", "x.y", &format!("0.{uuid}"), &format!("-3.{uuid}"), &format!("12.{uuid}x")] {
            assert_eq!(parse_ticket(bad), None, "{bad}");
        }
    }

    #[test]
    fn forwarded_for_is_believed_only_from_the_trusted_proxy() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "6.6.6.6, 203.0.113.9".parse().expect("header"));
        let proxy: SocketAddr = "10.0.0.2:5000".parse().expect("addr");
        let stranger: SocketAddr = "198.51.100.4:5000".parse().expect("addr");
        let trusted = Some("10.0.0.2".parse().expect("ip"));
        assert_eq!(client_ip(proxy, &headers, trusted), "203.0.113.9".parse::<IpAddr>().expect("ip"));
        assert_eq!(client_ip(stranger, &headers, trusted), stranger.ip());
        assert_eq!(client_ip(proxy, &headers, None), proxy.ip());
        headers.insert("x-forwarded-for", "not an ip".parse().expect("header"));
        assert_eq!(client_ip(proxy, &headers, trusted), proxy.ip());
    }
}
