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

/// The stream entry's field names.
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

    /// The stream entry's field/value pairs, in the order `lua/like_toggle.lua` appends them
    /// (the script receives them as arguments and passes them to XADD untouched).
    pub fn fields(&self) -> [(&'static str, String); 4] {
        [
            (field::OP, self.op().to_owned()),
            (field::TARGET, self.target.member()),
            (field::USER, self.user_id.to_string()),
            (field::COURSE, self.course_id.to_string()),
        ]
    }

    /// The fields as one flat list (`op like t p:7 …`), for XADD.
    pub fn flat_fields(&self) -> Vec<String> {
        self.fields().into_iter().flat_map(|(name, value)| [name.to_owned(), value]).collect()
    }

    /// The fields as XADD takes them, with the mutation's trace context when there is one.
    pub fn flat_fields_traced(&self, traceparent: Option<String>) -> Vec<String> {
        let mut fields = self.flat_fields();
        if let Some(traceparent) = traceparent {
            fields.extend([field::TRACE.to_owned(), traceparent]);
        }
        fields
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

    /// Decodes a stream entry's field/value pairs; the error is why it can never apply (it
    /// goes to the dead letters). Unknown fields are ignored, so new ones can be added.
    pub fn decode<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Result<Self, String> {
        let (mut op, mut target, mut user, mut course) = (None, None, None, None);
        for (name, value) in pairs {
            let value = std::str::from_utf8(value).map_err(|_| "a field is not text")?;
            match std::str::from_utf8(name).unwrap_or("") {
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

    #[test]
    fn an_event_survives_its_codec() {
        for event in [
            LikeEvent { target: LikeTarget::Post(7), user_id: 3, course_id: 2, liked: true },
            LikeEvent { target: LikeTarget::Comment(9), user_id: 12, course_id: 1, liked: false },
        ] {
            let fields = event.fields();
            let decoded = LikeEvent::decode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
            assert_eq!(decoded, Ok(event));
        }
    }

    #[test]
    fn a_bad_entry_says_why() {
        let decode =
            |pairs: &[(&str, &str)]| LikeEvent::decode(pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        assert_eq!(decode(&[("op", "like"), ("u", "1"), ("c", "2")]), Err("missing field t".into()));
        assert_eq!(decode(&[("op", "like"), ("t", "x:1"), ("u", "1"), ("c", "2")]), Err("bad target".into()));
        assert_eq!(decode(&[("op", "love"), ("t", "p:1"), ("u", "1"), ("c", "2")]), Err("bad op love".into()));
        assert_eq!(decode(&[("op", "like"), ("t", "p:1"), ("u", "x"), ("c", "2")]), Err("bad user id".into()));
    }

    #[test]
    fn the_pending_record_names_op_and_entry() {
        let like = LikeEvent { target: LikeTarget::Post(7), user_id: 3, course_id: 2, liked: true };
        assert_eq!(like.pending_record("17-0"), "+ 17-0");
        assert_eq!(LikeEvent { liked: false, ..like }.pending_record("18-0"), "- 18-0");
    }
}
