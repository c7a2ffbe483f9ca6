//! Shared fan-out of like counts. The subscribers of one target who asked for the same
//! rendering (the same selection, `graphql::shared_live`) form a group; one task per group
//! waits for the target's next committed count, renders it once, and offers it to every
//! member's socket mailbox, then waits out the coalescing interval before the next. A socket
//! writes what its mailbox holds.
//!
//! So an update costs one rendering and one offer per member: no per-subscriber timer, channel
//! registration or execution. A mailbox holds at most the newest payload per subscription and
//! target: a socket that cannot write keeps no queue, its counts coalesce to the newest.
//!
//! What the payload is and who may join is the GraphQL layer's; this module moves bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;

use super::hub::{Hub, TargetWatch, VersionedCount};
use super::{Group, GroupKey};
use crate::like_event::LikeTarget;
use crate::telemetry::names;

/// Renders the payload of a value for a group (the same bytes for every member).
pub(crate) type Render = Arc<dyn Fn(&VersionedCount) -> String + Send + Sync>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One socket's shared subscriptions and the payloads waiting to be written for them.
#[derive(Default)]
pub struct Mailbox {
    state: Mutex<MailboxState>,
    waker: AtomicWaker,
    next_key: AtomicU64,
}

#[derive(Default)]
struct MailboxState {
    /// By key. A socket holds a few (at most `LIVE_MAX_SUBSCRIPTIONS`), so a list searched in
    /// order, grown one at a time: a socket with one subscription holds one slot, not a hash
    /// table's four.
    subscriptions: Vec<(u64, Slot)>,
    /// Subscriptions with something to write, in the order it arrived (each at most once).
    ready: VecDeque<u64>,
}

struct Slot {
    /// The frame up to its payload: `{"type":"next","id":"…","payload":`.
    prefix: Box<str>,
    /// False until the socket took the subscription over, and while the subscriber's access
    /// is being checked again: nothing leaves meanwhile.
    open: bool,
    /// The newest payload per target not yet written.
    pending: Vec<(LikeTarget, Arc<str>)>,
    queued: bool,
}

impl MailboxState {
    fn slot(&mut self, key: u64) -> Option<&mut Slot> {
        self.subscriptions.iter_mut().find(|(held, _)| *held == key).map(|(_, slot)| slot)
    }
}

impl Mailbox {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Registers a subscription whose frames start with `prefix`; its key in this mailbox.
    /// It holds its frames back (newest per target) until `set_open(key, true)`.
    pub fn add(&self, prefix: String) -> u64 {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let slot = Slot { prefix: prefix.into(), open: false, pending: Vec::new(), queued: false };
        let mut state = lock(&self.state);
        state.subscriptions.reserve_exact(1);
        state.subscriptions.push((key, slot));
        key
    }

    /// Forgets a subscription and whatever it had not written yet.
    pub fn remove(&self, key: u64) {
        let mut state = lock(&self.state);
        state.subscriptions.retain(|(held, _)| *held != key);
        if state.subscriptions.is_empty() {
            state.subscriptions = Vec::new();
        }
    }

    /// Holds a subscription's frames (`open` false) or lets them go again.
    pub fn set_open(&self, key: u64, open: bool) {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let Some(slot) = state.slot(key) else { return };
        slot.open = open;
        if open && !slot.pending.is_empty() && !slot.queued {
            slot.queued = true;
            state.ready.push_back(key);
            self.waker.wake();
        }
    }

    /// Offers the newest payload of `target` to a subscription (replacing one not yet
    /// written); false when the subscription is gone.
    fn offer(&self, key: u64, target: LikeTarget, payload: &Arc<str>) -> bool {
        let mut state = lock(&self.state);
        let state = &mut *state;
        let Some(slot) = state.slot(key) else { return false };
        match slot.pending.iter_mut().find(|(pending, _)| *pending == target) {
            Some((_, older)) => *older = payload.clone(),
            None => {
                // Most subscriptions watch one target: room for one at a time.
                slot.pending.reserve_exact(1);
                slot.pending.push((target, payload.clone()));
            }
        }
        if slot.open && !slot.queued {
            slot.queued = true;
            state.ready.push_back(key);
            self.waker.wake();
        }
        true
    }

    /// The next frame to write, or Pending (woken when one is offered).
    pub fn poll_frame(&self, cx: &mut Context<'_>) -> Poll<String> {
        self.waker.register(cx.waker());
        let mut state = lock(&self.state);
        let state = &mut *state;
        while let Some(key) = state.ready.pop_front() {
            let Some(slot) = state.slot(key) else { continue };
            slot.queued = false;
            if !slot.open {
                continue;
            }
            let Some((_, payload)) = slot.pending.pop() else { continue };
            let mut frame = String::with_capacity(slot.prefix.len() + payload.len() + 1);
            frame.push_str(&slot.prefix);
            frame.push_str(&payload);
            frame.push('}');
            if !slot.pending.is_empty() {
                slot.queued = true;
                state.ready.push_back(key);
            }
            return Poll::Ready(frame);
        }
        Poll::Pending
    }
}

impl Group {
    /// Offers `payload` to every member; how many took it.
    fn offer(&self, target: LikeTarget, payload: &Arc<str>) -> u64 {
        let members = lock(&self.members);
        let mut offered = 0;
        for (mailbox, key) in members.values() {
            if let Some(mailbox) = mailbox.upgrade()
                && mailbox.offer(*key, target, payload)
            {
                offered += 1;
            }
        }
        offered
    }
}

/// A subscription's place in a group: leaves it when dropped.
pub struct GroupMembership {
    group: Arc<Group>,
    member: u64,
}

impl Drop for GroupMembership {
    fn drop(&mut self) {
        let mut members = lock(&self.group.members);
        members.remove(&self.member);
        if members.is_empty() {
            self.group.emptied.notify_one();
        }
    }
}

impl Hub {
    /// Joins the group of `target` rendered as `shape` (its task started with `render` and
    /// `interval` when this is its first member): each value it renders reaches subscription
    /// `key` of `mailbox`.
    pub fn join_group(
        self: &Arc<Self>,
        target: LikeTarget,
        shape: Arc<str>,
        render: impl FnOnce() -> Render,
        interval: Duration,
        mailbox: &Arc<Mailbox>,
        key: u64,
    ) -> GroupMembership {
        let mut groups = lock(&self.groups);
        let group_key = (target, shape);
        let group = match groups.get(&group_key) {
            Some(group) => group.clone(),
            None => {
                let group = Arc::new(Group::default());
                groups.insert(group_key.clone(), group.clone());
                let watch = self.watch_target(target);
                tokio::spawn(run_group(self.clone(), group_key, group.clone(), watch, render(), interval));
                group
            }
        };
        let member = group.next_member.fetch_add(1, Ordering::Relaxed);
        lock(&group.members).insert(member, (Arc::downgrade(mailbox), key));
        drop(groups);
        GroupMembership { group, member }
    }

    /// Removes `group` from the index if it has no member left (under the index's lock, so a
    /// subscriber joining now finds either this group with its member or no group at all).
    fn close_group_if_empty(&self, key: &GroupKey, group: &Arc<Group>) -> bool {
        let mut groups = lock(&self.groups);
        if !lock(&group.members).is_empty() {
            return false;
        }
        forget(&mut groups, key, group);
        true
    }
}

/// Removes `group` from the index when it is the one indexed under `key`.
fn forget(groups: &mut HashMap<GroupKey, Arc<Group>>, key: &GroupKey, group: &Arc<Group>) {
    if groups.get(key).is_some_and(|indexed| Arc::ptr_eq(indexed, group)) {
        groups.remove(key);
    }
}

/// A group's task: each new value of its target, rendered once and offered to every member,
/// at most once per `interval`; ends when the last member left.
async fn run_group(
    hub: Arc<Hub>,
    key: GroupKey,
    group: Arc<Group>,
    mut watch: TargetWatch,
    render: Render,
    interval: Duration,
) {
    let target = key.0;
    let receiver = &mut watch.receiver;
    let mut last_seq = receiver.borrow().seq;
    loop {
        tokio::select! {
            changed = receiver.changed() => {
                if changed.is_err() {
                    // The hub dropped the target (never while it is watched): nothing more comes.
                    forget(&mut lock(&hub.groups), &key, &group);
                    return;
                }
            }
            () = group.emptied.notified() => {}
        }
        if hub.close_group_if_empty(&key, &group) {
            return;
        }
        let value = *receiver.borrow_and_update();
        if value.version == i64::MIN || value.seq == last_seq {
            continue;
        }
        let skipped = value.seq.saturating_sub(last_seq + 1);
        last_seq = value.seq;
        let payload: Arc<str> = render(&value).into();
        hub.stats.payloads_rendered.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::LIVE_PAYLOADS_RENDERED).increment(1);
        let offered = group.offer(target, &payload);
        hub.delivered(offered, skipped * offered);
        if let Some(trace) = value.trace {
            // The hand-off to the group's subscribers, in the trace of the batch that committed
            // the count (`telemetry::otel`).
            let span = tracing::info_span!(
                "live.deliver",
                target = %target.member(),
                like_version = value.version,
                coalesced = skipped,
                subscribers = offered
            );
            trace.adopt(&span);
            drop(span.enter());
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    fn payload(text: &str) -> Arc<str> {
        text.into()
    }

    #[tokio::test]
    async fn a_mailbox_with_several_subscriptions_and_targets_writes_each_newest_once() {
        let mailbox = Mailbox::new();
        let keys: Vec<u64> = ["A", "B", "C"].into_iter().map(|prefix| mailbox.add(prefix.into())).collect();
        for key in &keys {
            mailbox.set_open(*key, true);
        }
        mailbox.remove(keys[1]);
        for key in &keys {
            mailbox.offer(*key, LikeTarget::Post(1), &payload("1"));
        }
        assert!(mailbox.offer(keys[2], LikeTarget::Comment(7), &payload("c")));
        assert!(mailbox.offer(keys[2], LikeTarget::Post(1), &payload("2")));
        let mut frames = Vec::new();
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        while let Poll::Ready(frame) = mailbox.poll_frame(&mut cx) {
            frames.push(frame);
        }
        frames.sort();
        assert_eq!(frames, ["A1}", "C2}", "Cc}"], "the removed one wrote nothing; each target its newest");
        mailbox.remove(keys[0]);
        mailbox.remove(keys[2]);
        assert!(!mailbox.offer(keys[2], LikeTarget::Post(1), &payload("3")));
        assert!(mailbox.poll_frame(&mut cx).is_pending());
    }

    #[tokio::test]
    async fn a_mailbox_keeps_the_newest_payload_per_target_and_holds_closed_subscriptions() {
        let mailbox = Mailbox::new();
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let one = mailbox.add("A".into());
        let two = mailbox.add("B".into());
        assert!(mailbox.offer(one, LikeTarget::Post(1), &payload("1")));
        assert!(mailbox.poll_frame(&mut cx).is_pending(), "a new subscription writes nothing until opened");
        mailbox.set_open(one, true);
        assert!(mailbox.offer(one, LikeTarget::Post(1), &payload("2")));
        assert!(mailbox.offer(two, LikeTarget::Post(1), &payload("3")));
        assert_eq!(poll_fn(|cx| mailbox.poll_frame(cx)).await, "A2}", "the newer replaced the older");
        assert!(mailbox.poll_frame(&mut cx).is_pending(), "a held subscription writes nothing");
        mailbox.set_open(two, true);
        assert_eq!(poll_fn(|cx| mailbox.poll_frame(cx)).await, "B3}");
        mailbox.set_open(two, false);
        assert!(mailbox.offer(two, LikeTarget::Post(1), &payload("5")));
        assert!(mailbox.poll_frame(&mut cx).is_pending(), "closed again, it holds its frames again");
        mailbox.set_open(two, true);
        assert_eq!(poll_fn(|cx| mailbox.poll_frame(cx)).await, "B5}");
        mailbox.remove(one);
        assert!(!mailbox.offer(one, LikeTarget::Post(1), &payload("4")), "a removed subscription takes nothing");
        assert!(mailbox.poll_frame(&mut cx).is_pending());
    }
}
