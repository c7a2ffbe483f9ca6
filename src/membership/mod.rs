//! Course membership as a live fact: who belongs to which course, with what role, as it is now.
//!
//! `Memberships` keeps each user's roles in memory so most requests run no membership statement,
//! and it is told of every change by `listener`, which LISTENs to the `course_members_changed`
//! notifications that a trigger on `course_members` sends after every commit (migration 0007),
//! whoever wrote the rows: the roster API, a roster import, or another system's SQL.
//!
//! The cache is trusted only while the listener is connected: a notification sent while it is
//! not is lost, so until it has listened again every read goes to PostgreSQL, and when it has,
//! everything is treated as changed (the cache is emptied and every open subscription checks
//! its access again).
//!
//! A read that raced a change is not kept: every change bumps a generation, and a reading is
//! stored only if the generation did not move while it was read.
//!
//! The readings are a moka cache bounded by the `memberships` share of `CACHE_BUDGET_BYTES`
//! (`cache::budget`), weighed by each user's number of courses; a reader gets the `Arc` of the
//! roles, never a copy.
//!
//! `watch(user)` gives an open subscription a way to hear of its user's changes, so it can end
//! with FORBIDDEN when access is lost (`graphql::subscription`).

pub(crate) mod listener;
pub(crate) mod warm;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cache::budget::{CacheBudget, CacheName, DEFAULT_BUDGET_BYTES, WeighedCache};

use sea_orm::ConnectionTrait;
use tokio::sync::watch;

use crate::error::AppResult;
use crate::forum::courses::{self, Role};

/// A user's role in each course they belong to.
pub(crate) type Roles = Arc<HashMap<i64, Role>>;

/// Every instance's view of course membership (cheap to clone).
#[derive(Clone)]
pub struct Memberships {
    inner: Arc<Inner>,
}

/// A user's roles as memory holds them.
struct Reading {
    roles: Roles,
    /// Kept by the warm, and no request of the user has looked them up since. The first
    /// request that does is the user's first on this instance, as if it had read them: a like
    /// then still takes the first-touch path (`graphql::access::post_to_like`), whose one
    /// statement also loads the liked-set the instance has likely never seen.
    warmed: AtomicBool,
}

struct Inner {
    roles: WeighedCache<i64, Reading>,
    /// Orders a `keep` against a `changed` (see there); guards no data.
    order: Mutex<()>,
    /// Bumped by every change heard, before the cache forgets it.
    generation: AtomicU64,
    /// Whether the listener is connected: only then may a reading be kept.
    listening: AtomicBool,
    /// `MEMBERSHIP_CACHE=false`: nothing is ever kept (changes are still heard, for the open
    /// subscriptions).
    keep_nothing: bool,
    /// Per user with an open subscription: bumped when that user's membership changes.
    watchers: Mutex<Watchers>,
    /// Bumped when everything may have changed (a TRUNCATE, or the listener reconnected).
    everything: EverythingChanged,
    listener_hooks: Arc<listener::ListenerHooks>,
    /// The last `barrier:<n>` notification heard.
    barrier: AtomicU64,
    /// Warms (`warm::warm`) that ended, done or failed.
    warms_ended: AtomicU64,
}

#[derive(Default)]
struct Watchers {
    by_user: HashMap<i64, watch::Sender<u64>>,
    /// Users whose subscriptions have all ended are forgotten when the map grows past this
    /// (twice what was left after the last sweep): amortised O(1) per subscription.
    sweep_at: usize,
}

struct EverythingChanged(watch::Sender<u64>);

impl Default for EverythingChanged {
    fn default() -> Self {
        Self(watch::channel(0).0)
    }
}

impl Memberships {
    /// `keep`: whether readings may be kept in memory (`MEMBERSHIP_CACHE`). Under a budget of
    /// its own (tests); the server uses `with_budget`.
    pub fn new(keep: bool) -> Self {
        Self::with_budget(keep, &CacheBudget::new(DEFAULT_BUDGET_BYTES))
    }

    /// As `new`, bounded by the `memberships` share of `budget`.
    pub fn with_budget(keep: bool, budget: &CacheBudget) -> Self {
        // A hash map entry per course: the key, the role, the control byte, with slack.
        let roles = budget.weighed(CacheName::Memberships, None, |_, reading: &Reading| {
            (std::mem::size_of::<HashMap<i64, Role>>()
                + reading.roles.capacity() * (std::mem::size_of::<(i64, Role)>() + 1)) as u64
        });
        Self {
            inner: Arc::new(Inner {
                roles,
                order: Mutex::default(),
                generation: AtomicU64::default(),
                listening: AtomicBool::default(),
                keep_nothing: !keep,
                watchers: Mutex::default(),
                everything: EverythingChanged::default(),
                listener_hooks: Arc::default(),
                barrier: AtomicU64::default(),
                warms_ended: AtomicU64::default(),
            }),
        }
    }

    /// The user's roles: from memory when the listener vouches for it, else from PostgreSQL
    /// (and kept, when nothing changed meanwhile).
    pub async fn roles_of_user(&self, db: &impl ConnectionTrait, user_id: i64) -> AppResult<Roles> {
        if let Some(roles) = self.cached(user_id) {
            return Ok(roles);
        }
        self.read_and_keep(db, user_id).await
    }

    /// The user's roles from PostgreSQL, kept when nothing changed meanwhile: what
    /// `roles_of_user` does once memory did not hold them.
    pub(crate) async fn read_and_keep(&self, db: &impl ConnectionTrait, user_id: i64) -> AppResult<Roles> {
        let generation = self.generation();
        let roles = Arc::new(courses::roles_of_user(db, user_id).await?);
        self.keep(user_id, roles.clone(), generation);
        Ok(roles)
    }

    /// The user's roles if memory holds a trusted copy: a request's lookup.
    pub fn cached(&self, user_id: i64) -> Option<Roles> {
        self.look_up(user_id).map(|(roles, _)| roles)
    }

    /// As `cached`, and whether this is the first lookup of roles the warm kept (see
    /// `Reading::warmed`).
    pub(crate) fn look_up(&self, user_id: i64) -> Option<(Roles, bool)> {
        if !self.inner.listening.load(Ordering::Acquire) {
            return None;
        }
        let reading = self.inner.roles.get(&user_id);
        metrics::counter!(crate::telemetry::names::MEMBERSHIP_CACHE_LOOKUPS, "result" => if reading.is_some() { "hit" } else { "miss" })
            .increment(1);
        reading.map(|reading| (reading.roles.clone(), reading.warmed.swap(false, Ordering::AcqRel)))
    }

    /// What memory holds of the user, without counting as a request's lookup (for tests and
    /// diagnostics).
    pub fn holds(&self, user_id: i64) -> Option<Roles> {
        self.inner
            .listening
            .load(Ordering::Acquire)
            .then(|| self.inner.roles.get(&user_id))
            .flatten()
            .map(|r| r.roles.clone())
    }

    /// The generation to pass to `keep` for a reading about to start.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Whether a reading would be kept now (the cache is on and the listener connected): a
    /// miss then means the user is new to this instance, not that nothing is ever kept.
    pub fn keeps_readings(&self) -> bool {
        !self.inner.keep_nothing && self.inner.listening.load(Ordering::Acquire)
    }

    /// Keeps a reading of the user's roles taken when the generation was `read_at`, unless a
    /// change was heard since (or the listener is not connected).
    pub fn keep(&self, user_id: i64, roles: Roles, read_at: u64) {
        self.keep_unless_changed([(user_id, roles)], read_at, false);
    }

    /// Keeps the warm's readings of several users taken when the generation was `read_at`: all
    /// of them, or none if a change was heard since (or the listener is not connected). Whether
    /// they were kept.
    pub(crate) fn keep_warmed(&self, readings: impl IntoIterator<Item = (i64, Roles)>, read_at: u64) -> bool {
        self.keep_unless_changed(readings, read_at, true)
    }

    /// The one rule of every reading kept: all of `readings`, or none if the generation moved
    /// since `read_at`.
    fn keep_unless_changed(
        &self,
        readings: impl IntoIterator<Item = (i64, Roles)>,
        read_at: u64,
        warmed: bool,
    ) -> bool {
        if !self.keeps_readings() {
            return false;
        }
        let _order = lock(&self.inner.order);
        // Checked under the lock that `changed` takes after bumping: a change is either seen
        // here, or it removes these entries after they were inserted.
        if self.generation() != read_at {
            return false;
        }
        for (user_id, roles) in readings {
            self.inner.roles.insert(user_id, Arc::new(Reading { roles, warmed: AtomicBool::new(warmed) }));
        }
        true
    }

    /// The bytes the cache holds and its share of the budget (its bookkeeping settled first).
    pub fn fill(&self) -> (u64, u64) {
        use crate::cache::budget::Measured;
        let figures = self.inner.roles.figures();
        (figures.used_bytes, figures.capacity_bytes)
    }

    /// The user's membership changed (a notification, or a roster change this instance made):
    /// forget it and wake their open subscriptions.
    pub fn changed(&self, user_id: i64) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        {
            let _order = lock(&self.inner.order);
            self.inner.roles.invalidate(&user_id);
        }
        if let Some(sender) = lock(&self.inner.watchers).by_user.get(&user_id) {
            sender.send_modify(|n| *n += 1);
        }
    }

    /// Anything may have changed: forget everything and wake every subscription.
    pub fn everything_changed(&self) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        {
            let _order = lock(&self.inner.order);
            self.inner.roles.invalidate_all();
        }
        self.inner.everything.0.send_modify(|n| *n += 1);
    }

    /// A `barrier:<n>` notification was heard. PostgreSQL delivers notifications in commit
    /// order, so every change committed before the barrier was sent has been heard too: a
    /// caller that sends one after its own change (`pg_notify('course_members_changed',
    /// 'barrier:<n>')`) and waits for `barrier_passed(n)` knows this instance acts on it.
    pub(crate) fn pass_barrier(&self, n: u64) {
        self.inner.barrier.store(n, Ordering::Release);
    }

    /// Whether the last barrier heard is `n`.
    pub fn barrier_passed(&self, n: u64) -> bool {
        self.inner.barrier.load(Ordering::Acquire) == n
    }

    /// How many warms of the cache have ended (done or failed) since the process started: the
    /// start waits for the first (`startup`), tests for the next.
    pub fn warms_ended(&self) -> u64 {
        self.inner.warms_ended.load(Ordering::Acquire)
    }

    pub(crate) fn warm_ended(&self) {
        self.inner.warms_ended.fetch_add(1, Ordering::AcqRel);
    }

    /// Where a test can hold this instance's listener.
    pub fn listener_hooks(&self) -> Arc<listener::ListenerHooks> {
        self.inner.listener_hooks.clone()
    }

    /// Whether the listener is connected (the cache is trusted only then).
    pub fn listening(&self) -> bool {
        self.inner.listening.load(Ordering::Acquire)
    }

    /// The listener lost its connection: stop trusting memory until it is back.
    pub(crate) fn stop_trusting(&self) {
        self.inner.listening.store(false, Ordering::Release);
        self.everything_changed();
    }

    /// The listener is connected again: whatever happened meanwhile was not heard, so everything
    /// counts as changed, and memory is trusted again from here.
    pub fn start_trusting(&self) {
        self.everything_changed();
        self.inner.listening.store(true, Ordering::Release);
    }

    /// A way for an open subscription to hear that the user's membership may have changed.
    pub fn watch(&self, user_id: i64) -> MembershipWatch {
        let mut watchers = lock(&self.inner.watchers);
        if watchers.by_user.len() >= watchers.sweep_at {
            watchers.by_user.retain(|_, sender| sender.receiver_count() > 0);
            watchers.sweep_at = (watchers.by_user.len() * 2).max(64);
        }
        let user = watchers.by_user.entry(user_id).or_insert_with(|| watch::channel(0).0).subscribe();
        MembershipWatch { user, everything: self.inner.everything.0.subscribe() }
    }
}

/// Wakes when one user's membership may have changed.
pub struct MembershipWatch {
    user: watch::Receiver<u64>,
    everything: watch::Receiver<u64>,
}

impl MembershipWatch {
    /// Resolves at the next change heard since the last call (or since the watch was made).
    pub async fn changed(&mut self) {
        tokio::select! {
            result = self.user.changed() => if result.is_err() { std::future::pending::<()>().await },
            result = self.everything.changed() => if result.is_err() { std::future::pending::<()>().await },
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind: keep using it.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Memberships, Roles};
    use crate::forum::courses::Role;

    fn roles(course: i64) -> Roles {
        Arc::new(HashMap::from([(course, Role::Student)]))
    }

    fn trusted() -> Memberships {
        let memberships = Memberships::new(true);
        memberships.start_trusting();
        memberships
    }

    #[test]
    fn a_reading_is_kept_only_while_the_listener_vouches_for_it() {
        let memberships = Memberships::new(true);
        memberships.keep(1, roles(7), memberships.generation());
        assert!(memberships.cached(1).is_none(), "not listening: nothing kept");
        memberships.start_trusting();
        memberships.keep(1, roles(7), memberships.generation());
        assert!(memberships.cached(1).is_some());
        memberships.stop_trusting();
        assert!(memberships.cached(1).is_none(), "the connection dropped: memory is not trusted");
        memberships.start_trusting();
        assert!(memberships.cached(1).is_none(), "back: everything counts as changed");
    }

    #[test]
    fn a_reading_that_raced_a_change_is_not_kept() {
        let memberships = trusted();
        let read_at = memberships.generation();
        // The change is heard while the reading is in flight (about another user, even).
        memberships.changed(2);
        memberships.keep(1, roles(7), read_at);
        assert!(memberships.cached(1).is_none());
        memberships.keep(1, roles(7), memberships.generation());
        memberships.changed(1);
        assert!(memberships.cached(1).is_none(), "forgotten when heard");
    }

    #[test]
    fn a_batch_of_readings_is_kept_whole_or_not_at_all() {
        let memberships = trusted();
        let read_at = memberships.generation();
        memberships.changed(9);
        assert!(!memberships.keep_warmed([(1, roles(7)), (2, roles(7))], read_at), "a change was heard meanwhile");
        assert!(memberships.holds(1).is_none() && memberships.holds(2).is_none(), "none of it kept");
        assert!(memberships.keep_warmed([(1, roles(7)), (2, roles(8))], memberships.generation()));
        assert!(memberships.holds(2).is_some_and(|r| r.contains_key(&8)), "all of it kept");
        let first_use = |user| memberships.look_up(user).map(|(_, first)| first);
        assert_eq!(first_use(1), Some(true), "the first lookup of what the warm kept");
        assert_eq!(first_use(1), Some(false), "and only the first");
        memberships.keep(2, roles(8), memberships.generation());
        assert_eq!(first_use(2), Some(false), "a request's reading replaced the warm's");
        memberships.stop_trusting();
        assert!(!memberships.keep_warmed([(3, roles(7))], memberships.generation()), "not listening");
    }

    #[test]
    fn turned_off_it_keeps_nothing() {
        let memberships = Memberships::new(false);
        memberships.start_trusting();
        memberships.keep(1, roles(7), memberships.generation());
        assert!(memberships.cached(1).is_none());
    }

    #[tokio::test]
    async fn a_watch_wakes_for_its_user_and_for_everything() {
        let memberships = trusted();
        let mut alice = memberships.watch(1);
        let timeout = Duration::from_millis(100);
        memberships.changed(2);
        assert!(tokio::time::timeout(timeout, alice.changed()).await.is_err(), "another user's change");
        memberships.changed(1);
        assert!(tokio::time::timeout(timeout, alice.changed()).await.is_ok());
        memberships.everything_changed();
        assert!(tokio::time::timeout(timeout, alice.changed()).await.is_ok());
        assert!(tokio::time::timeout(timeout, alice.changed()).await.is_err(), "each change wakes once");
    }

    #[test]
    fn users_without_open_subscriptions_are_forgotten() {
        let memberships = trusted();
        for user in 0..1_000 {
            drop(memberships.watch(user));
        }
        let _kept = memberships.watch(5_000);
        assert!(super::lock(&memberships.inner.watchers).by_user.len() <= 129);
    }
}
