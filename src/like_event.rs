//! The vocabulary every step of a like's life shares, and nothing else: what can be liked
//! (`LikeTarget`), the event a toggle records (`LikeEvent`) with its ONE codec — the stream
//! entry's fields, the pending record kept beside the liked-set, the dead letter — and a
//! committed count (`CountChange`).
//!
//! A leaf module: `likes`, `worker`, `cache` and `live` all import it and it imports none of
//! them, so the like path has no import circle.

/// What can be liked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LikeTarget {
    Post(i64),
    /// A top-level comment or a reply.
    Comment(i64),
}

impl LikeTarget {
    /// The post's or comment's database id.
    pub fn id(&self) -> i64 {
        match self {
            LikeTarget::Post(id) | LikeTarget::Comment(id) => *id,
        }
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            LikeTarget::Post(_) => "post",
            LikeTarget::Comment(_) => "comment",
        }
    }

    /// The liked-set / stream member: `p:<id>` or `c:<id>`.
    pub fn member(&self) -> String {
        match self {
            LikeTarget::Post(id) => format!("p:{id}"),
            LikeTarget::Comment(id) => format!("c:{id}"),
        }
    }

    pub fn parse_member(member: &str) -> Option<Self> {
        let (kind, id) = member.split_once(':')?;
        let id = id.parse::<i64>().ok().filter(|id| *id > 0)?;
        match kind {
            "p" => Some(LikeTarget::Post(id)),
            "c" => Some(LikeTarget::Comment(id)),
            _ => None,
        }
    }
}

/// A committed like count, with the version that orders it among the target's changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountChange {
    pub target: LikeTarget,
    pub like_count: i32,
    pub version: i64,
}

/// One like or unlike, as the toggle script accepted it. Its order among the same user's
/// events is its stream entry id (`StreamId`), which Redis assigns when the event is appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LikeEvent {
    pub target: LikeTarget,
    pub user_id: i64,
    pub course_id: i64,
    pub liked: bool,
}

/// The field names of an event's labelled form (`LikeEvent::labelled_fields`).
mod field {
    pub(super) const OP: &str = "op";
    pub(super) const TARGET: &str = "t";
    pub(super) const USER: &str = "u";
    pub(super) const COURSE: &str = "c";
    /// The W3C `traceparent` of the mutation that made the event, when traces are on
    /// (`telemetry::otel`): the worker's batch links back to it. Optional, never decoded into
    /// the event.
    pub(super) const TRACE: &str = "tp";
}

const LIKE: &str = "like";
const UNLIKE: &str = "unlike";

impl LikeEvent {
    /// `like` or `unlike`, as the stream entry and the dead letters spell it.
    pub fn op(&self) -> &'static str {
        if self.liked { LIKE } else { UNLIKE }
    }

    /// The stream entry's one field, as `lua/like_toggle.lua` appends it (the script receives
    /// it as arguments and passes it to XADD untouched): the op names the field, and its value
    /// is `<member> <user id> <course id>` (`like` → `p:7 3 2`).
    ///
    /// One field rather than four: the worker reads thousands of entries per batch, and every
    /// field is two more strings that Redis writes into the reply, the read script copies into
    /// Lua and back, and the client parses. (`decode` still reads the labelled form, which
    /// entries appended before this form have.)
    pub fn stream_fields(&self) -> Vec<String> {
        vec![self.op().to_owned(), format!("{} {} {}", self.target.member(), self.user_id, self.course_id)]
    }

    /// The stream entry's fields with the mutation's trace context when there is one.
    pub fn stream_fields_traced(&self, traceparent: Option<String>) -> Vec<String> {
        let mut fields = self.stream_fields();
        if let Some(traceparent) = traceparent {
            fields.extend([field::TRACE.to_owned(), traceparent]);
        }
        fields
    }

    /// The event as named fields (`op like t p:7 u 3 c 2`), for people reading it: the dead
    /// letters carry this form. `decode` reads it too.
    pub fn labelled_fields(&self) -> Vec<String> {
        [
            (field::OP, self.op().to_owned()),
            (field::TARGET, self.target.member()),
            (field::USER, self.user_id.to_string()),
            (field::COURSE, self.course_id.to_string()),
        ]
        .into_iter()
        .flat_map(|(name, value)| [name.to_owned(), value])
        .collect()
    }

    /// The trace context a stream entry carries, if any (see `field::TRACE`).
    pub fn trace_of<'a>(
        pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Option<crate::telemetry::otel::TraceRef> {
        pairs
            .into_iter()
            .find(|(name, _)| *name == field::TRACE.as_bytes())
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
            .and_then(crate::telemetry::otel::TraceRef::parse)
    }

    /// Decodes a stream entry's field/value pairs, in the stream form (`stream_fields`) or the
    /// labelled one (`labelled_fields`); the error is why it can never apply (it goes to the
    /// dead letters). Unknown fields are ignored, so new ones can be added.
    pub fn decode<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Result<Self, String> {
        let (mut op, mut target, mut user, mut course) = (None, None, None, None);
        for (name, value) in pairs {
            let value = std::str::from_utf8(value).map_err(|_| "a field is not text")?;
            match std::str::from_utf8(name).unwrap_or("") {
                op_name @ (LIKE | UNLIKE) => {
                    let mut parts = value.split(' ');
                    let (Some(member), Some(user_id), Some(course_id), None) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        return Err(format!("bad event {value:?}"));
                    };
                    (op, target, user, course) = (Some(op_name), Some(member), Some(user_id), Some(course_id));
                    break;
                }
                field::OP => op = Some(value),
                field::TARGET => target = Some(value),
                field::USER => user = Some(value),
                field::COURSE => course = Some(value),
                _ => {}
            }
        }
        let target = LikeTarget::parse_member(target.ok_or("missing field t")?).ok_or("bad target")?;
        let user_id = user.ok_or("missing field u")?.parse::<i64>().map_err(|_| "bad user id")?;
        let course_id = course.ok_or("missing field c")?.parse::<i64>().map_err(|_| "bad course id")?;
        let liked = match op.ok_or("missing field op")? {
            LIKE => true,
            UNLIKE => false,
            other => return Err(format!("bad op {other}")),
        };
        Ok(LikeEvent { target, user_id, course_id, liked })
    }

    /// The pending record of this event once appended as `entry_id`: the value kept under the
    /// target's member in the (user, course) pending hash until the worker applies it. `+` or
    /// `-`, a space, the entry id. `lua/like_toggle.lua` writes it (from `pending_op` and the id
    /// XADD returned); the worker compares it byte for byte before removing it; the liked-set
    /// load (`lua/liked_set_load.lua`) reads only its first byte.
    pub fn pending_record(&self, entry_id: &str) -> String {
        format!("{} {entry_id}", self.pending_op())
    }

    /// The first byte of the pending record: `+` like, `-` unlike.
    pub fn pending_op(&self) -> &'static str {
        if self.liked { "+" } else { "-" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_flat(flat: &[String]) -> Result<LikeEvent, String> {
        LikeEvent::decode(flat.chunks(2).map(|pair| (pair[0].as_bytes(), pair[1].as_bytes())))
    }

    #[test]
    fn an_event_survives_its_codec_in_both_forms() {
        for event in [
            LikeEvent { target: LikeTarget::Post(7), user_id: 3, course_id: 2, liked: true },
            LikeEvent { target: LikeTarget::Comment(9), user_id: 12, course_id: 1, liked: false },
        ] {
            assert_eq!(decode_flat(&event.stream_fields()), Ok(event));
            assert_eq!(decode_flat(&event.labelled_fields()), Ok(event));
            let traced = event.stream_fields_traced(Some("00-trace".into()));
            assert_eq!(decode_flat(&traced), Ok(event));
        }
        let like = LikeEvent { target: LikeTarget::Post(7), user_id: 3, course_id: 2, liked: true };
        assert_eq!(like.stream_fields(), ["like", "p:7 3 2"]);
        assert_eq!(like.labelled_fields(), ["op", "like", "t", "p:7", "u", "3", "c", "2"]);
    }

    #[test]
    fn a_bad_entry_says_why() {
        let decode =
            |pairs: &[(&str, &str)]| LikeEvent::decode(pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        assert_eq!(decode(&[("op", "like"), ("u", "1"), ("c", "2")]), Err("missing field t".into()));
        assert_eq!(decode(&[("op", "like"), ("t", "x:1"), ("u", "1"), ("c", "2")]), Err("bad target".into()));
        assert_eq!(decode(&[("op", "love"), ("t", "p:1"), ("u", "1"), ("c", "2")]), Err("bad op love".into()));
        assert_eq!(decode(&[("op", "like"), ("t", "p:1"), ("u", "x"), ("c", "2")]), Err("bad user id".into()));
        assert_eq!(decode(&[("like", "p:1 2")]), Err("bad event \"p:1 2\"".into()));
        assert_eq!(decode(&[("like", "p:1 2 3 4")]), Err("bad event \"p:1 2 3 4\"".into()));
        assert_eq!(decode(&[("unlike", "q:1 2 3")]), Err("bad target".into()));
        assert_eq!(decode(&[("like", "p:1 x 3")]), Err("bad user id".into()));
    }

    #[test]
    fn the_pending_record_names_op_and_entry() {
        let like = LikeEvent { target: LikeTarget::Post(7), user_id: 3, course_id: 2, liked: true };
        assert_eq!(like.pending_record("17-0"), "+ 17-0");
        assert_eq!(LikeEvent { liked: false, ..like }.pending_record("18-0"), "- 18-0");
    }
}
