//! What one client may hold of the websocket endpoint: open sockets per user and per client
//! address (`SocketCaps`), and operations per connection per minute (`OperationRate`). All of
//! it is counted in this instance's memory: behind a load balancer a user may hold up to the
//! cap on every instance, which still bounds what one instance spends on them.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use std::time::Instant;

/// Open-socket counters of this instance, shared by every connection.
pub(super) struct SocketCaps {
    users: Arc<Counter<i64>>,
    addresses: Arc<Counter<IpAddr>>,
}

impl SocketCaps {
    /// `0` turns a cap off.
    pub(super) fn new(max_per_user: usize, max_per_address: usize) -> Self {
        Self { users: Counter::new(max_per_user), addresses: Counter::new(max_per_address) }
    }

    /// A slot for one more socket from `address`, or None when it already holds the most.
    pub(super) fn address(&self, address: IpAddr) -> Option<Slot<IpAddr>> {
        self.addresses.take(address)
    }

    /// A slot for one more socket of `user_id`, or None when the user already holds the most.
    pub(super) fn user(&self, user_id: i64) -> Option<Slot<i64>> {
        self.users.take(user_id)
    }

    pub(super) fn max_per_user(&self) -> usize {
        self.users.max
    }

    pub(super) fn max_per_address(&self) -> usize {
        self.addresses.max
    }
}

struct Counter<K> {
    /// 0: unlimited.
    max: usize,
    open: Mutex<HashMap<K, usize>>,
}

impl<K: Hash + Eq + Copy> Counter<K> {
    fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { max, open: Mutex::new(HashMap::new()) })
    }

    fn take(self: &Arc<Self>, key: K) -> Option<Slot<K>> {
        // A panic elsewhere while holding the lock leaves a consistent map (each change is one
        // statement), so a poisoned lock is used as it is.
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if self.max != 0 && *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Slot { counter: self.clone(), key })
    }
}

/// One open socket counted against its user or address; dropping it frees the slot.
pub(super) struct Slot<K: Hash + Eq + Copy> {
    counter: Arc<Counter<K>>,
    key: K,
}

impl<K: Hash + Eq + Copy> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut open = self.counter.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                // Forget idle keys, so the map only holds who is connected now.
                open.remove(&self.key);
            }
        }
    }
}

/// A token bucket over one connection's operations: up to `per_minute` at once, then one
/// every `60 s / per_minute`. Checked as each message is read, before it executes.
pub(super) struct OperationRate {
    capacity: f64,
    per_second: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl OperationRate {
    /// None when `per_minute` is 0 (no limit).
    pub(super) fn new(per_minute: u32) -> Option<Self> {
        (per_minute > 0).then(|| {
            let capacity = f64::from(per_minute);
            Self { capacity, per_second: capacity / 60.0, tokens: capacity, refilled_at: Instant::now() }
        })
    }

    /// Takes one operation's token; false when the connection is over its rate.
    pub(super) fn allow(&mut self) -> bool {
        self.allow_at(Instant::now())
    }

    fn allow_at(&mut self, now: Instant) -> bool {
        let elapsed = now.duration_since(self.refilled_at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.refilled_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_refuses_the_next_socket_and_a_dropped_slot_frees_one() {
        let caps = SocketCaps::new(2, 0);
        let first = caps.user(7).expect("first");
        let _second = caps.user(7).expect("second");
        assert!(caps.user(7).is_none(), "third refused");
        assert!(caps.user(8).is_some(), "another user has their own count");
        drop(first);
        assert!(caps.user(7).is_some(), "a closed socket frees its slot");
        let address: IpAddr = "10.0.0.1".parse().expect("ip");
        let many: Vec<_> = (0..100).map(|_| caps.address(address).expect("no address cap")).collect();
        assert_eq!(many.len(), 100);
    }

    #[test]
    fn the_rate_allows_a_burst_then_refills_over_the_minute() {
        let mut rate = OperationRate::new(3).expect("limited");
        let start = rate.refilled_at;
        assert!(rate.allow_at(start) && rate.allow_at(start) && rate.allow_at(start));
        assert!(!rate.allow_at(start), "the fourth at once is over");
        let later = start + std::time::Duration::from_secs(20);
        assert!(rate.allow_at(later), "one more after 20 s");
        assert!(!rate.allow_at(later));
        assert!(OperationRate::new(0).is_none());
    }
}
