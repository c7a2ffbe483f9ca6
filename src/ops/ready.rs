//! Readiness, for `GET /readyz`: can this process serve requests right now? It can when
//! PostgreSQL and Redis both answer within `PROBE_TIMEOUT`. The report also shows the like
//! worker's lease state per shard (who holds it, and whether that is this process), so an
//! operator sees at once whether likes are being applied; a lease held elsewhere, or by
//! nobody for a moment, does not make this process unready (another instance may run the
//! worker, and a lapsed lease is taken over within `WORKER_LEASE_TTL`). It also says whether the
//! process hears membership changes (`membership_listener`), and how many descriptors it has
//! left (`descriptors`).

use std::time::{Duration, Instant};

use sea_orm::ConnectionTrait;
use serde::Serialize;

use super::{descriptors, streams};
use crate::config::LikeMode;
use crate::state::AppState;

/// How long each probe may take before it counts as a failure.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize)]
pub(crate) struct Readiness {
    pub ready: bool,
    pub postgres: Probe,
    pub redis: Probe,
    pub worker: WorkerState,
    /// Whether this process hears membership changes (its `LISTEN` is connected). When it does
    /// not, it still serves, reading memberships from PostgreSQL, so this is not part of `ready`.
    pub membership_listener: bool,
    /// The process's file descriptors: open, the limit, the reserve kept from websockets, and
    /// how many more websockets fit (informational: a process at its websocket capacity still
    /// serves HTTP, so it stays ready).
    pub descriptors: descriptors::Headroom,
}

#[derive(Debug, Serialize)]
pub(crate) struct Probe {
    pub ok: bool,
    pub millis: u64,
    /// Why it failed, in a few words (the detail is in the log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WorkerState {
    pub mode: &'static str,
    /// This process runs the like worker (`WORKER_IN_SERVE`).
    pub in_process: bool,
    /// This process's worker consumer name, when it runs one.
    pub consumer: Option<String>,
    /// Per shard, in buffered mode when Redis answered.
    pub shards: Vec<ShardLease>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ShardLease {
    pub shard: u32,
    pub holder: Option<String>,
    /// The holder is this process's worker.
    pub ours: bool,
    pub ttl_ms: Option<i64>,
    /// Unapplied likes, and the age of the oldest.
    pub entries: u64,
    pub oldest_age_ms: Option<u64>,
}

/// Probes PostgreSQL and Redis concurrently, each bounded by `PROBE_TIMEOUT`.
pub(crate) async fn readiness(state: &AppState, consumer: Option<&str>) -> Readiness {
    let postgres = probe("PostgreSQL", async {
        state.db.execute_unprepared("SELECT 1").await.map(|_| ()).map_err(|e| e.to_string())
    });
    // Probes are not requests' work: their Redis commands count as role="probe".
    let probe_redis = state.redis.with_role("probe");
    let redis = probe("Redis", async {
        let mut conn = probe_redis.clone();
        redis::cmd("PING").query_async::<String>(&mut conn).await.map(|_| ()).map_err(|e| e.to_string())
    });
    let (postgres, redis) = tokio::join!(postgres, redis);
    let mut shards = Vec::new();
    if redis.ok && state.settings.like_mode == LikeMode::Buffered {
        match tokio::time::timeout(PROBE_TIMEOUT, streams::status(&probe_redis, &state.keys)).await {
            Ok(Ok(status)) => {
                shards = status
                    .shards
                    .into_iter()
                    .map(|s| ShardLease {
                        shard: s.shard,
                        ours: consumer.is_some() && s.lease_holder.as_deref() == consumer,
                        holder: s.lease_holder,
                        ttl_ms: s.lease_ttl_ms,
                        entries: s.entries,
                        oldest_age_ms: s.oldest_age_ms,
                    })
                    .collect();
            }
            Ok(Err(err)) => tracing::warn!(error = %err, "readyz: cannot read the like streams"),
            Err(_) => tracing::warn!("readyz: the like streams did not answer in time"),
        }
    }
    Readiness {
        ready: postgres.ok && redis.ok,
        postgres,
        redis,
        worker: WorkerState {
            mode: crate::likes::mode_name(state.settings.like_mode),
            in_process: consumer.is_some(),
            consumer: consumer.map(str::to_owned),
            shards,
        },
        membership_listener: state.memberships.listening(),
        descriptors: descriptors::headroom(state.settings.ws_descriptor_reserve),
    }
}

async fn probe(service: &'static str, check: impl Future<Output = Result<(), String>>) -> Probe {
    let started = Instant::now();
    let outcome = tokio::time::timeout(PROBE_TIMEOUT, check).await;
    let millis = started.elapsed().as_millis() as u64;
    let error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(detail)) => {
            tracing::warn!(service, error = detail, "readiness probe failed");
            Some("unreachable")
        }
        Err(_) => {
            tracing::warn!(service, timeout = ?PROBE_TIMEOUT, "readiness probe timed out");
            Some("timed out")
        }
    };
    Probe { ok: error.is_none(), millis, error }
}
