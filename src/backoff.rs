//! Pacing for the background loops (the like worker, the feed fan-out): a delay that doubles
//! after each failure up to a cap and starts over after a success, and a pause that ends early
//! when shutdown is asked for.

use std::time::Duration;

use tokio::sync::watch;

/// Doubling retry delay: `first`, `2 × first`, … up to `max`.
#[derive(Debug)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Self { first, max, next: first }
    }

    /// After a success: the next failure waits `first` again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }

    /// After a failure: how long to wait now; the next failure waits twice as long.
    pub(crate) fn failed(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(self.max);
        pause
    }
}

/// Sleeps `pause` (nothing when zero), or less when `shutdown` changes meanwhile.
pub(crate) async fn pause_unless_shutdown(pause: Duration, shutdown: &mut watch::Receiver<bool>) {
    if pause.is_zero() {
        return;
    }
    tokio::select! {
        _ = tokio::time::sleep(pause) => {}
        _ = shutdown.changed() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_starts_over_after_a_success() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<u64> = (0..4).map(|_| backoff.failed().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 350, 350]);
        backoff.reset();
        assert_eq!(backoff.failed(), Duration::from_millis(100));
    }
}
