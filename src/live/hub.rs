//! The in-process side of live updates: one Redis subscription per process (`run_relay`),
//! reconnecting after Redis drops it, feeding a `Hub` that fans out to subscribers.
//!
//! Like counts go through a `watch` channel per target: it holds only the latest value, so a
//! burst coalesces by construction, a slow subscriber loses intermediate values but never the
//! last one, and nobody waits for a slow subscriber. Versions (`like_version`) order the
//! values: an older one arriving late is ignored. Activity goes through a bounded `broadcast`
//! channel per course; a subscriber that falls behind by more than its capacity skips ahead.
//!
//! Notifications go through a bounded `broadcast` channel per user. A change for a whole course
//! (an announcement) is fanned out here, in-process, to the channels of that course's members:
//! each open notification stream tells the hub its user's courses (`notification_courses`),
//! again whenever their membership changes, and reads every change back with the user's
//! access at delivery, so a stale index costs a wasted wake-up, never a leak.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::{Activity, LiveMessage};
use sea_orm::DatabaseConnection;

use crate::cache::pages::CoursePages;
use crate::config::RedisTarget;
use crate::kv;
use crate::like_event::{CountChange, LikeTarget};
use crate::telemetry::names;
use crate::telemetry::otel::{self, TraceRef};

/// Activity events a course channel holds for subscribers that are behind.
const ACTIVITY_CAPACITY: usize = 256;
/// Notification changes a user's channel holds for subscribers that are behind.
const NOTIFICATION_CAPACITY: usize = 64;
/// Read-mark changes a user's channel holds for subscribers that are behind.
const READ_MARKS_CAPACITY: usize = 64;

/// One user's read marks moved in a course: `(course, post)`, the post None for the whole
/// course.
pub(crate) type ReadMarksChange = (i64, Option<i64>);

/// The latest committed count of one target, as this process knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionedCount {
    /// Orders the target's changes (`like_version`); `i64::MIN` before any is known.
    pub version: i64,
    pub like_count: i32,
    /// When its transaction committed, in microseconds since the epoch (0 when the publisher
    /// did not say).
    pub committed_at_us: i64,
    /// The trace of the batch that committed it, when traces are on and it was sampled: each
    /// subscriber's delivery is a span of that trace (`telemetry::otel`).
    pub trace: Option<TraceRef>,
    /// How many values this process has accepted for the target. A subscriber that goes from
    /// seq 3 to seq 7 never saw 4, 5 and 6: they were coalesced away.
    pub seq: u64,
}

impl VersionedCount {
    const UNKNOWN: VersionedCount =
        VersionedCount { version: i64::MIN, like_count: 0, committed_at_us: 0, trace: None, seq: 0 };
}

/// This process's live counters (also exported: `telemetry::names::LIVE_*`).
#[derive(Default)]
pub struct HubStats {
    pub messages_received: AtomicU64,
    pub subscriptions_open: AtomicU64,
    /// Count updates delivered to subscribers.
    pub counts_delivered: AtomicU64,
    /// Count updates superseded before a subscriber received them (coalesced).
    pub counts_coalesced: AtomicU64,
    /// Payloads rendered by the shared fan-out groups (`fanout`): one per value and group,
    /// whatever the number of its subscribers.
    pub payloads_rendered: AtomicU64,
    /// Websocket operations whose execution the schema holds (`hold_execution`): a query or
    /// mutation while it runs, a subscription executed per subscriber for its life. A shared
    /// subscription's execution ends once it has started (`graphql::shared_live`).
    pub socket_executions: AtomicU64,
}

#[derive(Default)]
pub struct Hub {
    counts: Mutex<HashMap<LikeTarget, watch::Sender<VersionedCount>>>,
    activity: Mutex<HashMap<i64, broadcast::Sender<Activity>>>,
    /// Per user: a new notification's id, or None when their unread count moved otherwise.
    notifications: Mutex<NotificationChannels>,
    /// Per user: their read marks moved (`unreadCounts` of their own tabs only).
    read_marks: Mutex<HashMap<i64, broadcast::Sender<ReadMarksChange>>>,
    /// The shared fan-out groups (`fanout`), by target and rendering.
    pub(super) groups: Mutex<HashMap<super::GroupKey, Arc<super::Group>>>,
    pub stats: HubStats,
}

impl Hub {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Receivers for the latest counts of `targets`; dropping the guard releases them.
    pub fn watch_counts(self: &Arc<Self>, targets: &[LikeTarget]) -> CountWatch {
        let mut map = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let receivers = targets
            .iter()
            .map(|target| {
                let sender = map.entry(*target).or_insert_with(|| watch::channel(VersionedCount::UNKNOWN).0);
                (*target, sender.subscribe())
            })
            .collect();
        self.opened();
        CountWatch { receivers, guard: HubGuard { hub: self.clone(), targets: targets.to_vec() } }
    }

    /// The latest count of one target, for a shared fan-out group: not a subscriber of its own
    /// (`count_subscriber` counts those); the channel is forgotten once nothing watches it.
    pub(crate) fn watch_target(self: &Arc<Self>, target: LikeTarget) -> TargetWatch {
        let mut map = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let receiver = map.entry(target).or_insert_with(|| watch::channel(VersionedCount::UNKNOWN).0).subscribe();
        TargetWatch { receiver, hub: self.clone(), target }
    }

    /// Counts one open subscription (`subscriptions_open`) until the guard is dropped.
    pub fn count_subscriber(self: &Arc<Self>) -> HubGuard {
        self.opened();
        HubGuard { hub: self.clone(), targets: Vec::new() }
    }

    /// Counts one execution of a websocket operation (`socket_executions`) for as long as the
    /// guard lives: it goes in the operation's request data, dropped with its execution.
    pub fn hold_execution(self: &Arc<Self>) -> ExecutionHeld {
        self.stats.socket_executions.fetch_add(1, Ordering::Relaxed);
        ExecutionHeld(self.clone())
    }

    /// Counts `delivered` count updates handed to subscribers and `coalesced` ones they never saw.
    pub(crate) fn delivered(&self, delivered: u64, coalesced: u64) {
        self.stats.counts_delivered.fetch_add(delivered, Ordering::Relaxed);
        self.stats.counts_coalesced.fetch_add(coalesced, Ordering::Relaxed);
        metrics::counter!(names::LIVE_UPDATES_DELIVERED).increment(delivered);
        if coalesced > 0 {
            metrics::counter!(names::LIVE_UPDATES_COALESCED).increment(coalesced);
        }
    }

    pub fn watch_activity(self: &Arc<Self>, course_id: i64) -> (broadcast::Receiver<Activity>, HubGuard) {
        let mut map = self.activity.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let receiver = map.entry(course_id).or_insert_with(|| broadcast::channel(ACTIVITY_CAPACITY).0).subscribe();
        self.opened();
        (receiver, HubGuard { hub: self.clone(), targets: Vec::new() })
    }

    /// The notification changes of one user; dropping the guard releases the channel. Course
    /// changes reach it once `notification_courses` has said which courses are the user's.
    pub fn watch_notifications(self: &Arc<Self>, user_id: i64) -> (broadcast::Receiver<Option<i64>>, HubGuard) {
        let mut channels = self.notifications.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let receiver = channels
            .by_user
            .entry(user_id)
            .or_insert_with(|| UserChannel { sender: broadcast::channel(NOTIFICATION_CAPACITY).0, courses: Vec::new() })
            .sender
            .subscribe();
        self.opened();
        (receiver, HubGuard { hub: self.clone(), targets: Vec::new() })
    }

    /// The read-mark changes of one user; dropping the guard releases the channel.
    pub fn watch_read_marks(self: &Arc<Self>, user_id: i64) -> (broadcast::Receiver<ReadMarksChange>, HubGuard) {
        let mut map = self.read_marks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let receiver = map.entry(user_id).or_insert_with(|| broadcast::channel(READ_MARKS_CAPACITY).0).subscribe();
        self.opened();
        (receiver, HubGuard { hub: self.clone(), targets: Vec::new() })
    }

    /// The courses of a user with an open notification stream, as that stream last read them:
    /// course-wide changes of these courses reach the user's channel. Nothing for a user
    /// without an open channel.
    pub fn notification_courses(&self, user_id: i64, courses: &[i64]) {
        let mut channels = self.notifications.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels.set_courses(user_id, courses);
    }

    fn opened(&self) {
        self.stats.subscriptions_open.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!(names::LIVE_SUBSCRIPTIONS_OPEN).increment(1.0);
    }

    /// Applies one message from the channel.
    pub fn dispatch(&self, message: LiveMessage) {
        self.dispatch_traced(message, None)
    }

    /// Applies one message from the channel that came with a trace context.
    pub fn dispatch_traced(&self, message: LiveMessage, trace: Option<TraceRef>) {
        self.stats.messages_received.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::LIVE_MESSAGES_RECEIVED).increment(1);
        match message {
            LiveMessage::Counts { counts, committed_at_us } => {
                let map = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                for change in LiveMessage::count_changes(&counts) {
                    if let Some(sender) = map.get(&change.target) {
                        publish_if_newer(sender, change, committed_at_us.unwrap_or(0), trace);
                    }
                }
            }
            LiveMessage::Activity { activity } => {
                let map = self.activity.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some(sender) = map.get(&activity.course_id) {
                    let _ = sender.send(activity);
                }
            }
            LiveMessage::Notifications { changes } => {
                let channels = self.notifications.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                for (user_id, added) in changes {
                    if let Some(channel) = channels.by_user.get(&user_id) {
                        let _ = channel.sender.send(added);
                    }
                }
            }
            LiveMessage::CourseNotifications { course_id, added } => {
                let channels = self.notifications.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                for user_id in channels.by_course.get(&course_id).into_iter().flatten() {
                    if let Some(channel) = channels.by_user.get(user_id) {
                        let _ = channel.sender.send(added);
                    }
                }
            }
            LiveMessage::ReadMarks { user_id, course_id, post_id } => {
                let map = self.read_marks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some(sender) = map.get(&user_id) {
                    let _ = sender.send((course_id, post_id));
                }
            }
            // For the in-process caches only (the relay hands them there too).
            LiveMessage::PostsChanged { .. } | LiveMessage::ViewCounts { .. } => {}
        }
    }

    /// Forgets the count channels of `targets` that nobody listens to any more.
    fn release_targets(&self, targets: &[LikeTarget]) {
        let mut counts = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for target in targets {
            if counts.get(target).is_some_and(|s| s.receiver_count() == 0) {
                counts.remove(target);
            }
        }
    }

    /// Forgets channels nobody listens to any more.
    fn release(&self, targets: &[LikeTarget]) {
        self.stats.subscriptions_open.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!(names::LIVE_SUBSCRIPTIONS_OPEN).decrement(1.0);
        self.release_targets(targets);
        let mut activity = self.activity.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        activity.retain(|_, sender| sender.receiver_count() > 0);
        drop(activity);
        let mut read_marks = self.read_marks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        read_marks.retain(|_, sender| sender.receiver_count() > 0);
        drop(read_marks);
        let mut notifications = self.notifications.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        notifications.forget_unwatched();
    }

    /// Targets with at least one live watcher in this process.
    pub fn watched_targets(&self) -> usize {
        self.counts.lock().map(|m| m.len()).unwrap_or_default()
    }

    /// The targets watched right now.
    pub fn watched(&self) -> Vec<LikeTarget> {
        self.counts.lock().map(|m| m.keys().copied().collect()).unwrap_or_default()
    }

    /// Committed counts read from PostgreSQL (`resync`): each reaches its watchers if newer
    /// than what they have.
    pub fn apply_counts(&self, changes: &[CountChange]) {
        let map = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for change in changes {
            if let Some(sender) = map.get(&change.target) {
                publish_if_newer(sender, *change, 0, None);
            }
        }
    }
}

/// The notification channels of the users with an open stream, and which of them belong to
/// each course (for course-wide changes).
#[derive(Default)]
struct NotificationChannels {
    by_user: HashMap<i64, UserChannel>,
    /// Course → its members among `by_user`.
    by_course: HashMap<i64, HashSet<i64>>,
}

struct UserChannel {
    sender: broadcast::Sender<Option<i64>>,
    /// The courses this user is indexed under in `by_course`.
    courses: Vec<i64>,
}

impl NotificationChannels {
    fn set_courses(&mut self, user_id: i64, courses: &[i64]) {
        let Some(channel) = self.by_user.get_mut(&user_id) else { return };
        let old = std::mem::replace(&mut channel.courses, courses.to_vec());
        for course in &old {
            Self::unindex(&mut self.by_course, *course, user_id);
        }
        for course in courses {
            self.by_course.entry(*course).or_default().insert(user_id);
        }
    }

    fn unindex(by_course: &mut HashMap<i64, HashSet<i64>>, course: i64, user_id: i64) {
        if let Some(members) = by_course.get_mut(&course) {
            members.remove(&user_id);
            if members.is_empty() {
                by_course.remove(&course);
            }
        }
    }

    /// Drops the channels nobody listens to any more, and their users from the course index.
    fn forget_unwatched(&mut self) {
        let by_course = &mut self.by_course;
        self.by_user.retain(|user_id, channel| {
            let watched = channel.sender.receiver_count() > 0;
            if !watched {
                for course in &channel.courses {
                    Self::unindex(by_course, *course, *user_id);
                }
            }
            watched
        });
    }
}

fn publish_if_newer(
    sender: &watch::Sender<VersionedCount>,
    change: CountChange,
    committed_at_us: i64,
    trace: Option<TraceRef>,
) {
    sender.send_if_modified(|current| {
        if change.version > current.version {
            *current = VersionedCount {
                version: change.version,
                like_count: change.like_count,
                committed_at_us,
                trace,
                seq: current.seq + 1,
            };
            true
        } else {
            false
        }
    });
}

/// Releases a subscriber's channels when its stream is dropped (unsubscribe or disconnect).
pub struct HubGuard {
    hub: Arc<Hub>,
    targets: Vec<LikeTarget>,
}

impl Drop for HubGuard {
    fn drop(&mut self) {
        self.hub.release(&self.targets);
    }
}

/// One execution counted in `socket_executions` (`Hub::hold_execution`).
pub struct ExecutionHeld(Arc<Hub>);

impl Drop for ExecutionHeld {
    fn drop(&mut self) {
        self.0.stats.socket_executions.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct CountWatch {
    pub receivers: Vec<(LikeTarget, watch::Receiver<VersionedCount>)>,
    pub guard: HubGuard,
}

impl HubGuard {
    /// Counts one update delivered to this subscriber, and the `skipped` ones it never saw.
    pub fn delivered(&self, skipped: u64) {
        self.hub.delivered(1, skipped);
    }
}

/// A shared fan-out group's view of one target's count (`watch_target`); the channel is
/// forgotten when this is dropped and nothing else watches it.
pub(crate) struct TargetWatch {
    pub receiver: watch::Receiver<VersionedCount>,
    hub: Arc<Hub>,
    target: LikeTarget,
}

impl Drop for TargetWatch {
    fn drop(&mut self) {
        // This receiver first, so that it is not counted as a watcher.
        self.receiver = watch::channel(VersionedCount::UNKNOWN).1;
        self.hub.release_targets(&[self.target]);
    }
}

/// Keeps one Redis subscription to `channel` for the life of the process, resubscribing after
/// Redis drops it, and hands every message to `hub`.
///
/// On one node it is a classic SUBSCRIBE, on a Redis Cluster a sharded one (`kv::pubsub`). When
/// the node holding the subscription goes away (a restart, a failover), it subscribes again,
/// on a cluster wherever the channel's slot is served now.
///
/// Whatever was published while no subscription stood is gone, so after every resubscription
/// the committed counts of every watched target are read once from PostgreSQL (`resync`): a
/// screen never stays on a number older than the gap.
pub(crate) async fn run_relay(
    target: RedisTarget,
    channel: String,
    hub: Arc<Hub>,
    pages: CoursePages,
    db: DatabaseConnection,
    ready: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let mut ready = ready;
    let mut backoff = Duration::from_millis(100);
    let mut subscriptions = 0u64;
    loop {
        match kv::pubsub::subscribe(&target, &channel).await {
            Ok(mut subscription) => {
                tracing::info!(channel, "live relay subscribed");
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                subscriptions += 1;
                if subscriptions > 1 {
                    // Changes published during the gap are lost: no cached page can vouch for
                    // itself any more.
                    pages.clear();
                    tokio::spawn(resync(hub.clone(), db.clone()));
                }
                backoff = Duration::from_millis(100);
                while let Some(payload) = subscription.next().await {
                    dispatch(&hub, &pages, &payload);
                }
                tracing::warn!("live relay lost its Redis subscription; resubscribing");
            }
            Err(err) => tracing::warn!(error = %err, retry_in = ?backoff, "live relay cannot subscribe"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Reads the committed counts of every watched target and hands the newer ones to the hub.
async fn resync(hub: Arc<Hub>, db: DatabaseConnection) {
    let watched = hub.watched();
    if watched.is_empty() {
        return;
    }
    match super::committed_counts(&db, &watched).await {
        Ok(counts) => {
            tracing::info!(targets = watched.len(), "live relay resubscribed; watched counts read again");
            hub.apply_counts(&counts);
        }
        Err(err) => tracing::warn!(error = %err, "live relay could not read the watched counts again"),
    }
}

/// Hands one published payload to the course pages and the hub. A payload that came with a
/// trace context (`telemetry::otel::frame_payload`) is relayed in a span of that trace.
fn dispatch(hub: &Hub, pages: &CoursePages, payload: &str) {
    let (trace, json) = otel::unframe_payload(payload);
    let span = match trace {
        Some(publisher) => {
            let span =
                tracing::info_span!("live.relay", otel.kind = "consumer", watched_targets = hub.watched_targets());
            publisher.adopt(&span);
            span
        }
        None => tracing::Span::none(),
    };
    let _entered = span.enter();
    match serde_json::from_str::<LiveMessage>(json) {
        Ok(live) => {
            pages.apply(&live);
            hub.dispatch_traced(live, trace.and_then(|_| TraceRef::of(&span)))
        }
        Err(err) => tracing::warn!(error = %err, "ignoring a malformed live message"),
    }
}
