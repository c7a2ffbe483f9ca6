//! The process's file descriptors as a resource. Every socket is one: each websocket, each
//! HTTP connection, each PostgreSQL and Redis connection. This module owns what the process
//! knows of them:
//!
//! - `raise_limit` lifts the soft `RLIMIT_NOFILE` to the hard one at start (a server meant for
//!   many sockets should not stop at a distribution's default of 1,024) and logs both;
//! - `admit_socket` says whether one more websocket fits: while the process holds fewer than
//!   the limit less `WS_DESCRIPTOR_RESERVE` (the descriptors kept for PostgreSQL, Redis and
//!   HTTP), else the upgrade is refused with 503 `UNAVAILABLE`. It costs O(1): the open
//!   descriptors are counted from `/proc/self/fd` at most every `SAMPLE_EVERY`, plus the
//!   websockets admitted since that count;
//! - `headroom` is what `/readyz` and `/metrics` report (open, limit, reserve, what is left),
//!   from the same shared count, so no caller can make the process list its descriptors more
//!   often than once per `SAMPLE_EVERY`.
//!
//! Should the limit be reached anyway, `accept` fails with EMFILE: axum's `serve` logs the
//! error and sleeps one second before it accepts again (`axum::serve::Listener` for
//! `TcpListener`), so a full process waits instead of spinning (`tests/it/descriptors.rs`
//! measures it).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{AppError, AppResult};
use crate::telemetry::names;

/// How old a count of the open descriptors may be before the next admission counts again.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Not known (never counted, or no `/proc/self/fd` on this system).
const UNKNOWN: u64 = u64::MAX;

/// The process's `RLIMIT_NOFILE`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    pub soft: u64,
    pub hard: u64,
}

/// The soft and hard `RLIMIT_NOFILE` of the process now.
pub(crate) fn limit() -> AppResult<Limit> {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given, which lives through the call.
    let failed = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) } != 0;
    if failed {
        return Err(AppError::Internal(format!("getrlimit(RLIMIT_NOFILE): {}", std::io::Error::last_os_error())));
    }
    Ok(Limit { soft: current.rlim_cur, hard: current.rlim_max })
}

/// Sets the soft `RLIMIT_NOFILE` (the hard one stays).
pub(crate) fn set_soft_limit(soft: u64) -> AppResult<()> {
    let Limit { hard, .. } = limit()?;
    let wanted = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
    // SAFETY: setrlimit only reads the struct it is given, which lives through the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } != 0 {
        return Err(AppError::Internal(format!(
            "setrlimit(RLIMIT_NOFILE, {soft}): {}",
            std::io::Error::last_os_error()
        )));
    }
    forget_sample();
    Ok(())
}

/// Raises the soft limit to the hard one and logs both. A hard limit of "unlimited" cannot be
/// a soft one for descriptors (Linux caps it at `fs.nr_open`), so the soft limit goes to
/// `fs.nr_open` then. Failing to raise is logged and not fatal: the process serves within the
/// soft limit it has.
pub(crate) fn raise_limit() -> AppResult<Limit> {
    let before = limit()?;
    let target = if before.hard == libc::RLIM_INFINITY { nr_open().unwrap_or(before.soft) } else { before.hard };
    if before.soft < target
        && let Err(err) = set_soft_limit(target)
    {
        tracing::warn!(soft = before.soft, hard = before.hard, error = %err, "cannot raise the descriptor limit");
        return Ok(before);
    }
    let after = limit()?;
    tracing::info!(
        soft_before = before.soft,
        soft = after.soft,
        hard = after.hard,
        "file descriptor limit (RLIMIT_NOFILE): the soft limit is raised to the hard one"
    );
    Ok(after)
}

/// Refuses a reserve that leaves websockets no descriptor at all.
pub(crate) fn check_reserve(reserve: u64, limit: Limit) -> AppResult<()> {
    if reserve >= limit.soft {
        return Err(AppError::Config(format!(
            "WS_DESCRIPTOR_RESERVE={reserve} leaves no descriptor for websockets: this process may open at most {} \
             (RLIMIT_NOFILE, hard limit {}); lower WS_DESCRIPTOR_RESERVE or raise the limit (ulimit -n, LimitNOFILE=)",
            limit.soft, limit.hard
        )));
    }
    Ok(())
}

fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open").ok()?.trim().parse().ok()
}

/// Counts the descriptors open now (`/proc/self/fd`, else `/dev/fd`), None when neither can
/// be read. Reading a directory of 20,000 entries takes milliseconds: never per request.
pub(crate) fn count_open() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").or_else(|_| std::fs::read_dir("/dev/fd")).ok()?;
    // The listing includes the descriptor that reads it.
    Some((entries.count() as u64).saturating_sub(1))
}

/// The last count and what moved since, shared by every connection of the process.
struct Sample {
    /// Descriptors open at the last count (`UNKNOWN` if none).
    open: AtomicU64,
    /// The soft limit at the last count.
    limit: AtomicU64,
    /// When the last count was taken, in microseconds since `epoch()` (`UNKNOWN`: never).
    taken_at: AtomicU64,
    /// Websockets admitted since the last count.
    admitted_since: AtomicU64,
    /// One caller counts at a time; the others use the last count meanwhile.
    counting: AtomicBool,
}

static SAMPLE: Sample = Sample {
    open: AtomicU64::new(UNKNOWN),
    limit: AtomicU64::new(UNKNOWN),
    taken_at: AtomicU64::new(UNKNOWN),
    admitted_since: AtomicU64::new(0),
    counting: AtomicBool::new(false),
};

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn micros_now() -> u64 {
    epoch().elapsed().as_micros() as u64
}

/// The next admission counts again (the limit just moved).
fn forget_sample() {
    SAMPLE.taken_at.store(UNKNOWN, Ordering::SeqCst);
}

/// Counts again when the last count is older than `SAMPLE_EVERY` (and no one else is).
fn refresh_if_stale() {
    let taken_at = SAMPLE.taken_at.load(Ordering::Acquire);
    let now = micros_now();
    let fresh = taken_at != UNKNOWN && now.saturating_sub(taken_at) < SAMPLE_EVERY.as_micros() as u64;
    if fresh || SAMPLE.counting.swap(true, Ordering::AcqRel) {
        return;
    }
    let open = count_open().unwrap_or(UNKNOWN);
    let soft = limit().map_or(UNKNOWN, |limit| limit.soft);
    SAMPLE.open.store(open, Ordering::Release);
    SAMPLE.limit.store(soft, Ordering::Release);
    SAMPLE.admitted_since.store(0, Ordering::Release);
    SAMPLE.taken_at.store(now, Ordering::Release);
    SAMPLE.counting.store(false, Ordering::Release);
}

/// Admits one more websocket, or refuses it (`AppError::AtCapacity`, answered 503
/// `UNAVAILABLE`) when the process holds `limit − reserve` descriptors or more. Counted
/// before the upgrade does any work; O(1) but for one count of `/proc/self/fd` per
/// `SAMPLE_EVERY` in the whole process.
pub(crate) fn admit_socket(reserve: u64) -> AppResult<()> {
    refresh_if_stale();
    let open = SAMPLE.open.load(Ordering::Acquire);
    let soft = SAMPLE.limit.load(Ordering::Acquire);
    if open == UNKNOWN || soft == UNKNOWN {
        // Nothing to go by (no /proc): the accept backoff is the only bound.
        return Ok(());
    }
    let open = open + SAMPLE.admitted_since.load(Ordering::Acquire);
    let cap = soft.saturating_sub(reserve);
    if open >= cap {
        return Err(AppError::AtCapacity(format!(
            "this instance is at its websocket capacity ({open} of {soft} descriptors open, {reserve} kept for \
             PostgreSQL, Redis and HTTP); try again shortly, or another instance"
        )));
    }
    SAMPLE.admitted_since.fetch_add(1, Ordering::AcqRel);
    Ok(())
}

/// What `/readyz` reports of the descriptors, counted now.
#[derive(Debug, Serialize)]
pub(crate) struct Headroom {
    /// Descriptors open (None when they cannot be counted here).
    pub open: Option<u64>,
    /// The soft `RLIMIT_NOFILE` (raised to the hard one at start).
    pub limit: Option<u64>,
    /// `WS_DESCRIPTOR_RESERVE`: kept for PostgreSQL, Redis and HTTP.
    pub reserve: u64,
    /// How many more websockets this process admits now: `limit − reserve − open`.
    pub headroom: Option<u64>,
}

/// The headroom as the admissions see it: from the shared count (at most `SAMPLE_EVERY` old)
/// plus the websockets admitted since. `/readyz` and `/metrics` answer anyone who asks, so they
/// never list `/proc/self/fd` themselves: however often they are called, the process counts at
/// most once per `SAMPLE_EVERY`.
pub(crate) fn headroom(reserve: u64) -> Headroom {
    refresh_if_stale();
    let known = |value: u64| (value != UNKNOWN).then_some(value);
    let open =
        known(SAMPLE.open.load(Ordering::Acquire)).map(|open| open + SAMPLE.admitted_since.load(Ordering::Acquire));
    let limit = known(SAMPLE.limit.load(Ordering::Acquire));
    let headroom = match (open, limit) {
        (Some(open), Some(limit)) => Some(limit.saturating_sub(reserve).saturating_sub(open)),
        _ => None,
    };
    Headroom { open, limit, reserve, headroom }
}

/// Sets the descriptor gauges of `/metrics` (read at scrape).
pub(crate) fn publish_metrics(reserve: u64) {
    let Headroom { open, limit, reserve, .. } = headroom(reserve);
    if let Some(open) = open {
        metrics::gauge!(names::PROCESS_OPEN_FDS).set(open as f64);
    }
    if let Some(limit) = limit {
        metrics::gauge!(names::PROCESS_MAX_FDS).set(limit as f64);
    }
    metrics::gauge!(names::PROCESS_RESERVED_FDS).set(reserve as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_must_leave_room_below_the_limit() {
        let limit = Limit { soft: 1024, hard: 4096 };
        assert!(check_reserve(512, limit).is_ok());
        let refused = check_reserve(1024, limit).expect_err("no room left");
        assert!(refused.to_string().contains("WS_DESCRIPTOR_RESERVE=1024"), "{refused}");
    }
}
