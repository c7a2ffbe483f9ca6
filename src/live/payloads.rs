//! Payloads rendered once per value and shared by every subscriber who asked for the same
//! shape of it. A cell holds the latest rendering of one target's count for one shape (an
//! opaque key the caller chose, such as a normalized selection): the first subscriber to reach
//! a new value renders it, the others clone the `Arc`. The hub only stores bytes here; what a
//! shape is and who may share it is the GraphQL layer's (`graphql::shared_live`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::hub::VersionedCount;
use crate::like_event::LikeTarget;
use crate::telemetry::names;

/// Renderings below which the cells' index is never swept (the sweep runs when the index has
/// doubled since the last one, so its cost stays amortized over the insertions).
const SWEEP_FLOOR: usize = 64;

/// The value a rendering was made of: the payload is a function of the shape, the target and
/// these, so equal keys mean equal bytes (whatever `seq` a restarted channel has reached).
type ValueKey = (u64, i64, i32, i64);

fn value_key(value: &VersionedCount) -> ValueKey {
    (value.seq, value.version, value.like_count, value.committed_at_us)
}

/// A cell's place in the index: the target, and the caller's key of the shape.
type CellKey = (LikeTarget, Arc<str>);

/// The latest rendering of one target's count in one shape.
#[derive(Default)]
pub struct PayloadCell {
    latest: Mutex<Option<(ValueKey, Arc<str>)>>,
}

impl PayloadCell {
    /// The payload of `value`: the cell's own when it already holds this value, else `render`'s
    /// (counted in `payloads.rendered`), kept for the next subscriber.
    pub fn get_or_render(
        &self,
        payloads: &Payloads,
        value: &VersionedCount,
        render: impl FnOnce() -> String,
    ) -> Arc<str> {
        let key = value_key(value);
        let mut latest = self.latest.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((held, payload)) = latest.as_ref()
            && *held == key
        {
            return payload.clone();
        }
        let payload: Arc<str> = render().into();
        payloads.rendered.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::LIVE_PAYLOADS_RENDERED).increment(1);
        *latest = Some((key, payload.clone()));
        payload
    }
}

/// The process's payload cells, by target and shape. A cell lives while a subscriber holds
/// it; the index keeps only weak references, swept as it grows.
#[derive(Default)]
pub struct Payloads {
    cells: Mutex<HashMap<CellKey, Weak<PayloadCell>>>,
    /// Index size that triggers the next sweep of dead cells.
    sweep_at: AtomicUsize,
    /// Payloads rendered (each shared by every subscriber of its cell that reached that value).
    pub rendered: AtomicU64,
}

impl Payloads {
    /// The cell of `target` in `shape`, shared with every other subscriber asking for both.
    pub fn cell(&self, target: LikeTarget, shape: &Arc<str>) -> Arc<PayloadCell> {
        let mut cells = self.cells.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (target, shape.clone());
        if let Some(cell) = cells.get(&key).and_then(Weak::upgrade) {
            return cell;
        }
        let cell = Arc::new(PayloadCell::default());
        cells.insert(key, Arc::downgrade(&cell));
        let sweep_at = self.sweep_at.load(Ordering::Relaxed).max(SWEEP_FLOOR);
        if cells.len() >= sweep_at {
            cells.retain(|_, cell| cell.strong_count() > 0);
            self.sweep_at.store(cells.len() * 2, Ordering::Relaxed);
        }
        cell
    }

    /// Cells in the index, dead ones not yet swept included.
    pub fn indexed(&self) -> usize {
        self.cells.lock().map(|cells| cells.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(seq: u64, count: i32) -> VersionedCount {
        VersionedCount { version: seq as i64, like_count: count, committed_at_us: 7, trace: None, seq }
    }

    #[test]
    fn a_value_is_rendered_once_per_shape_and_again_when_it_changes() {
        let payloads = Payloads::default();
        let shape: Arc<str> = "a".into();
        let (one, two) = (payloads.cell(LikeTarget::Post(1), &shape), payloads.cell(LikeTarget::Post(1), &shape));
        assert!(Arc::ptr_eq(&one, &two), "the same target and shape share one cell");
        let other = payloads.cell(LikeTarget::Post(1), &"b".into());
        assert!(!Arc::ptr_eq(&one, &other), "another shape has its own");
        let first = one.get_or_render(&payloads, &value(1, 5), || "five".into());
        let again = two.get_or_render(&payloads, &value(1, 5), || unreachable!("already rendered"));
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(payloads.rendered.load(Ordering::Relaxed), 1);
        assert_eq!(&*two.get_or_render(&payloads, &value(2, 6), || "six".into()), "six");
        assert_eq!(payloads.rendered.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn dead_cells_are_swept_as_the_index_grows() {
        let payloads = Payloads::default();
        let shape: Arc<str> = "a".into();
        for id in 0..1_000 {
            drop(payloads.cell(LikeTarget::Post(id), &shape));
        }
        assert!(payloads.indexed() < 2 * SWEEP_FLOOR, "{} cells indexed", payloads.indexed());
    }
}
