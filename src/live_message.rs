//! The vocabulary of a live update, which publishers, the relay and the in-process caches
//! share: `LiveMessage`, the wire format on the one Pub/Sub channel, and a course's
//! `Activity`. A leaf: `live` publishes and relays these messages, `cache::pages` applies
//! them to its pages; it imports neither.

use serde::{Deserialize, Serialize};

use crate::like_event::{CountChange, LikeTarget};

/// What happened in a course, for `courseActivity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, async_graphql::Enum)]
pub enum ActivityKind {
    /// A post was created; `post` holds it.
    PostCreated,
    /// A top-level comment was created; `comment` holds it.
    CommentCreated,
    /// A reply was created; `reply` holds it.
    ReplyCreated,
    /// A post was deleted; `nodeId` is its id.
    PostDeleted,
    /// A top-level comment was deleted, with its replies; `nodeId` is its id.
    CommentDeleted,
    /// A reply was deleted; `nodeId` is its id.
    ReplyDeleted,
    /// A post changed state (an accepted answer, resolved, endorsed, pinned, made public,
    /// its tags); `post` holds it as it is now.
    PostUpdated,
    /// A top-level comment changed state (endorsed); `comment` holds it as it is now.
    CommentUpdated,
    /// A reply changed state (endorsed); `reply` holds it as it is now.
    ReplyUpdated,
}

/// A committed change in a course: ids only; subscribers resolve the rest lazily.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    pub course_id: i64,
    pub kind: ActivityKind,
    /// The post, comment or reply the event is about.
    pub node_id: i64,
    pub post_id: i64,
    /// The author of the post, when it is private: then only they and staff receive the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_to: Option<i64>,
    /// Who did it (absent from older publishers): a reader's unread counts ignore what they
    /// wrote themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<i64>,
}

/// The wire format on the Pub/Sub channel.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveMessage {
    /// `(member, like_count, version)` per target, e.g. `("p:12", 40, 57)`.
    Counts {
        counts: Vec<(String, i32, i64)>,
        /// When the transaction behind these counts committed, in microseconds since the Unix
        /// epoch by the publisher's clock (absent from older publishers). Subscribers get it as
        /// `likeCountCommittedAt`, so commit→client latency can be measured end to end.
        #[serde(default)]
        committed_at_us: Option<i64>,
    },
    Activity {
        activity: Activity,
    },
    /// These posts' rows changed in a way no other message tells (an edit): for the
    /// instances' in-process caches (`cache::pages`).
    PostsChanged {
        posts: Vec<i64>,
    },
    /// Committed view counts `(post, view_count)` after an aggregator flush: for the in-process
    /// caches.
    ViewCounts {
        counts: Vec<(i64, i64)>,
    },
    /// Users whose notifications changed: `(user, Some(id))` for a new notification,
    /// `(user, None)` when some were withdrawn or marked read (their unread count moved).
    Notifications {
        changes: Vec<(i64, Option<i64>)>,
    },
    /// The notifications of every member of a course changed: `Some(id)` for a new
    /// announcement, None when one was withdrawn (their unread counts moved). Each instance
    /// hands it to the open notification streams of the course's members.
    CourseNotifications {
        course_id: i64,
        added: Option<i64>,
    },
    /// A user's read marks in a course moved (`markPostRead`: `post_id` is the post;
    /// `markCourseRead`: None): to that user's own `unreadCounts` streams, in every tab.
    ReadMarks {
        user_id: i64,
        course_id: i64,
        post_id: Option<i64>,
    },
}

impl LiveMessage {
    pub fn counts(changes: &[CountChange], committed_at_us: i64) -> Self {
        LiveMessage::Counts {
            counts: changes.iter().map(|c| (c.target.member(), c.like_count, c.version)).collect(),
            committed_at_us: Some(committed_at_us),
        }
    }

    /// The counts of a `Counts` message, skipping members that do not parse.
    pub fn count_changes(counts: &[(String, i32, i64)]) -> Vec<CountChange> {
        counts
            .iter()
            .filter_map(|(member, like_count, version)| {
                LikeTarget::parse_member(member).map(|target| CountChange {
                    target,
                    like_count: *like_count,
                    version: *version,
                })
            })
            .collect()
    }
}
