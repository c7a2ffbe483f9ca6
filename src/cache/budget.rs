//! One memory budget for every in-process cache, and the one way to build such a cache.
//!
//! `CACHE_BUDGET_BYTES` (256 MiB by default) caps the sum of what the process keeps in memory
//! on its own behalf: course pages and the index beside them, single posts, users,
//! memberships, parsed GraphQL documents, search candidates and headlines. Each cache gets a fixed share of it
//! (`CacheName::per_mille`), so no cache can crowd out another and a flood aimed at one of
//! them costs at most its share:
//!
//! | cache | share |
//! |---|---|
//! | `course_pages` | 33 % |
//! | `course_pages_index` | 5 % (which post is on which page, counts heard since; `cache::pages`) |
//! | `posts` | 15 % |
//! | `parsed_documents` | 17 % |
//! | `course_titles` | 10 % (each course's title index for similar posts; `cache::titles`) |
//! | `users` | 8 % |
//! | `memberships` | 7 % |
//! | `search_candidates` | 3 % (first pages' candidates of recent searches; `cache::search`) |
//! | `search_headlines` | 2 % (the headlines of recent searches' hits, per query and row; `cache::search`) |
//!
//! `CacheBudget::weighed` builds a moka cache of `Arc<V>` values bounded by its share in bytes:
//! every entry weighs its approximate heap size (the caller's `weigh`) plus a fixed overhead
//! for the key, the `Arc` and moka's own bookkeeping. Readers get the `Arc`, never a copy made
//! under a lock. moka admits a new entry only if it is used more often than what it would
//! push out (TinyLFU), so one-off entries cannot flush the hot ones.
//!
//! moka applies its bookkeeping in batches; an insert of an entry larger than 1/64 of its
//! cache runs it at once, so the figures and the bound hold within a few small entries.
//! `/metrics` reads each registered cache's figures at scrape time (`publish_metrics`):
//! `cache_used_bytes`, `cache_entries`, `cache_capacity_bytes`, and `cache_evictions_total`.

use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::notification::RemovalCause;

use crate::telemetry::names;

/// The default of `CACHE_BUDGET_BYTES`.
pub const DEFAULT_BUDGET_BYTES: u64 = 256 * 1024 * 1024;

/// What one entry costs beyond its value's heap: moka's entry and its place in the
/// concurrent map and the access-order queues, the key, the `Arc` header. An estimate
/// (measured order of magnitude), not an exact count.
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 160;

/// The caches that share the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheName {
    CoursePages,
    CoursePagesIndex,
    Posts,
    ParsedDocuments,
    Users,
    Memberships,
    CourseTitles,
    SearchCandidates,
    SearchHeadlines,
}

impl CacheName {
    pub const ALL: [CacheName; 9] = [
        CacheName::CoursePages,
        CacheName::CoursePagesIndex,
        CacheName::Posts,
        CacheName::ParsedDocuments,
        CacheName::Users,
        CacheName::Memberships,
        CacheName::CourseTitles,
        CacheName::SearchCandidates,
        CacheName::SearchHeadlines,
    ];

    /// The `cache` label of its metrics.
    pub fn label(self) -> &'static str {
        match self {
            CacheName::CoursePages => "course_pages",
            CacheName::CoursePagesIndex => "course_pages_index",
            CacheName::Posts => "posts",
            CacheName::ParsedDocuments => "parsed_documents",
            CacheName::Users => "users",
            CacheName::Memberships => "memberships",
            CacheName::CourseTitles => "course_titles",
            CacheName::SearchCandidates => "search_candidates",
            CacheName::SearchHeadlines => "search_headlines",
        }
    }

    /// Its share of the budget, in thousandths (they add up to 1000).
    pub fn per_mille(self) -> u64 {
        match self {
            CacheName::CoursePages => 330,
            CacheName::CoursePagesIndex => 50,
            CacheName::Posts => 150,
            CacheName::ParsedDocuments => 170,
            CacheName::Users => 80,
            CacheName::Memberships => 70,
            CacheName::CourseTitles => 100,
            CacheName::SearchCandidates => 30,
            CacheName::SearchHeadlines => 20,
        }
    }
}

/// What a cache holds now, as `/metrics` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheFigures {
    /// Approximate bytes held (moka's weighted size).
    pub used_bytes: u64,
    pub entries: u64,
    /// Its share of the budget.
    pub capacity_bytes: u64,
}

/// Anything that can tell its figures (a `WeighedCache`, or a structure kept beside one).
pub trait Measured: Send + Sync {
    fn figures(&self) -> CacheFigures;
}

/// The process's cache budget (one per `AppState`).
pub struct CacheBudget {
    total: u64,
    registered: Mutex<Vec<(CacheName, Arc<dyn Measured>)>>,
}

impl CacheBudget {
    pub fn new(total_bytes: u64) -> Arc<Self> {
        Arc::new(Self { total: total_bytes, registered: Mutex::default() })
    }

    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// The bytes `name` may hold.
    pub fn share(&self, name: CacheName) -> u64 {
        self.total / 1000 * name.per_mille() + self.total % 1000 * name.per_mille() / 1000
    }

    /// The bytes the parsed-document cache (`documents::persisted`) may hold.
    pub fn parsed_documents_bytes(&self) -> u64 {
        self.share(CacheName::ParsedDocuments)
    }

    /// A cache of `Arc<V>` bounded by `name`'s share, registered for `/metrics`. `weigh` tells
    /// the approximate heap bytes an entry owns beyond `size_of::<V>()` (strings, vectors);
    /// `ttl` drops entries that long after their insert.
    pub fn weighed<K, V>(
        &self,
        name: CacheName,
        ttl: Option<Duration>,
        weigh: impl Fn(&K, &V) -> u64 + Send + Sync + 'static,
    ) -> WeighedCache<K, V>
    where
        K: Hash + Eq + Send + Sync + 'static,
        V: Send + Sync + 'static,
    {
        let cache = WeighedCache::build(name, self.share(name), ttl, weigh);
        self.register(name, Arc::new(cache.clone()));
        cache
    }

    /// Adds a structure's figures to `/metrics` under `name`.
    pub fn register(&self, name: CacheName, measured: Arc<dyn Measured>) {
        self.registered.lock().unwrap_or_else(|p| p.into_inner()).push((name, measured));
    }

    /// Every registered cache's figures, now.
    pub fn figures(&self) -> Vec<(CacheName, CacheFigures)> {
        let registered: Vec<(CacheName, Arc<dyn Measured>)> =
            self.registered.lock().unwrap_or_else(|p| p.into_inner()).clone();
        registered.into_iter().map(|(name, measured)| (name, measured.figures())).collect()
    }

    /// Bytes held by every registered cache together.
    pub fn used_bytes(&self) -> u64 {
        self.figures().iter().map(|(_, f)| f.used_bytes).sum()
    }

    /// Sets the per-cache gauges (at scrape time).
    pub fn publish_metrics(&self) {
        for (name, figures) in self.figures() {
            let cache = name.label();
            metrics::gauge!(names::CACHE_USED_BYTES, "cache" => cache).set(figures.used_bytes as f64);
            metrics::gauge!(names::CACHE_ENTRIES, "cache" => cache).set(figures.entries as f64);
            metrics::gauge!(names::CACHE_CAPACITY_BYTES, "cache" => cache).set(figures.capacity_bytes as f64);
        }
    }
}

/// The approximate heap bytes of an entry, beyond the fixed costs.
type Weigh<K, V> = Arc<dyn Fn(&K, &V) -> u64 + Send + Sync>;

/// A moka cache of `Arc<V>` bounded in bytes (see the module doc). Cheap to clone (shared).
pub struct WeighedCache<K, V> {
    inner: moka::sync::Cache<K, Arc<V>>,
    capacity: u64,
    weigh: Weigh<K, V>,
}

impl<K, V> Clone for WeighedCache<K, V> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), capacity: self.capacity, weigh: self.weigh.clone() }
    }
}

impl<K, V> WeighedCache<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    fn build(
        name: CacheName,
        capacity: u64,
        ttl: Option<Duration>,
        weigh: impl Fn(&K, &V) -> u64 + Send + Sync + 'static,
    ) -> Self {
        let weigh: Weigh<K, V> = Arc::new(weigh);
        let weigher = weigh.clone();
        let label = name.label();
        let mut builder = moka::sync::Cache::builder()
            .name(label)
            .max_capacity(capacity)
            .weigher(move |k: &K, v: &Arc<V>| u32::try_from(entry_weight::<K, V>(weigher(k, v))).unwrap_or(u32::MAX))
            .eviction_listener(move |_key, _value, cause| {
                let cause = match cause {
                    RemovalCause::Size => "size",
                    RemovalCause::Expired => "expired",
                    RemovalCause::Explicit | RemovalCause::Replaced => return,
                };
                metrics::counter!(names::CACHE_EVICTIONS, "cache" => label, "cause" => cause).increment(1);
            });
        if let Some(ttl) = ttl.filter(|t| !t.is_zero()) {
            builder = builder.time_to_live(ttl);
        }
        Self { inner: builder.build(), capacity, weigh }
    }

    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        self.inner.get(key)
    }

    /// Keeps `value` (unless moka's admission prefers what it would evict). A large entry
    /// settles the cache's bookkeeping at once, so the bound holds right after it.
    pub fn insert(&self, key: K, value: Arc<V>) {
        let weight = entry_weight::<K, V>((self.weigh)(&key, &value));
        self.inner.insert(key, value);
        if weight.saturating_mul(64) > self.capacity {
            self.inner.run_pending_tasks();
        }
    }

    pub fn invalidate(&self, key: &K) {
        self.inner.invalidate(key);
    }

    pub fn invalidate_all(&self) {
        self.inner.invalidate_all();
    }

    /// Applies moka's pending bookkeeping (evictions, sizes): the figures are exact after it.
    pub fn settle(&self) {
        self.inner.run_pending_tasks();
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }

    /// Every entry (for tests and figures; O(entries)).
    pub fn iter(&self) -> impl Iterator<Item = (Arc<K>, Arc<V>)> + '_ {
        self.inner.iter()
    }
}

impl<K, V> Measured for WeighedCache<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    fn figures(&self) -> CacheFigures {
        self.inner.run_pending_tasks();
        CacheFigures {
            used_bytes: self.inner.weighted_size(),
            entries: self.inner.entry_count(),
            capacity_bytes: self.capacity,
        }
    }
}

/// An entry's weight: its value's own heap plus the fixed costs of keeping it.
fn entry_weight<K, V>(heap: u64) -> u64 {
    heap.saturating_add(ENTRY_OVERHEAD_BYTES + std::mem::size_of::<K>() as u64 + std::mem::size_of::<V>() as u64)
}

/// The heap a string owns.
pub(crate) fn string_bytes(s: &str) -> u64 {
    s.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_the_budget() {
        assert_eq!(CacheName::ALL.iter().map(|n| n.per_mille()).sum::<u64>(), 1000);
        let budget = CacheBudget::new(DEFAULT_BUDGET_BYTES);
        let shares: u64 = CacheName::ALL.iter().map(|n| budget.share(*n)).sum();
        assert!(shares <= DEFAULT_BUDGET_BYTES && shares > DEFAULT_BUDGET_BYTES - 1000);
        assert_eq!(budget.parsed_documents_bytes(), budget.share(CacheName::ParsedDocuments));
    }

    #[test]
    fn a_flood_of_large_values_stays_within_the_share() {
        let budget = CacheBudget::new(4 << 20);
        let cache = budget.weighed::<u64, String>(CacheName::Posts, None, |_, v| string_bytes(v));
        for key in 0..2_000u64 {
            cache.insert(key, Arc::new("x".repeat(20_000)));
        }
        let figures = cache.figures();
        assert!(figures.used_bytes <= figures.capacity_bytes, "{figures:?}");
        assert!(figures.entries > 0 && figures.entries < 2_000, "{figures:?}");
        assert_eq!(budget.figures().len(), 1);
        assert!(budget.used_bytes() <= budget.total_bytes());
    }
}
