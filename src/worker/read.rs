//! Reading a shard's stream as its lease owner: the consumer groups, our own pending entries
//! first, then new ones (`lua/like_read.lua`), the read ahead of a pipelined step, the idle
//! wait, and decoding a reply into entries (`LikeEvent::decode`).

use std::time::Duration;

use redis::Value;

use super::LikeWorker;
use crate::error::{AppError, AppResult};
use crate::kv::keys::LIKE_GROUP;
use crate::like_event::LikeEvent;
use crate::telemetry::otel::TraceRef;

/// What a read as the lease owner found.
pub(super) enum Read {
    /// The lease is someone else's now: nothing was read.
    NotOwner,
    Entries {
        entries: Vec<Entry>,
        /// Own entries delivered before and not acknowledged (a replay).
        from_pending: bool,
    },
    /// Nothing to read; `last_id` is the stream's newest entry id.
    Idle { last_id: String },
}

/// One stream entry, parsed or not.
#[derive(Clone)]
pub(super) struct Entry {
    pub(super) id: String,
    pub(super) event: Result<LikeEvent, String>,
    /// The trace context of the mutation that appended it, when traces are on.
    pub(super) trace: Option<TraceRef>,
}

impl LikeWorker {
    /// Creates the consumer group of every shard (idempotent; MKSTREAM creates the stream).
    /// The group starts at `0` so entries written before it existed are applied too.
    pub async fn ensure_groups(&self) -> AppResult<()> {
        let mut conn = self.redis.clone();
        for shard in 0..self.keys.shards() {
            let created: redis::RedisResult<String> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(self.keys.like_stream(shard))
                .arg(LIKE_GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match created {
                Ok(_) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reads a batch only while holding the shard's lease (`lua/like_read.lua`): own pending
    /// entries first, then new ones. A worker that lost the lease reads nothing, so what it
    /// read before is exactly what the new owner claimed when it took over.
    ///
    /// `new_only` skips the own pending entries: for reading ahead while the batch before is
    /// in its transaction (still pending, it must not be read again).
    pub(super) async fn read_as_owner(&self, shard: u32, new_only: bool) -> AppResult<Read> {
        let mut conn = self.redis.clone();
        let mut invocation = self.read.key(self.keys.worker_lease(shard));
        invocation.key(self.keys.like_stream(shard)).arg(self.consumer()).arg(LIKE_GROUP).arg(self.config.batch_size);
        if new_only {
            invocation.arg("new");
        }
        let reply: Vec<Value> = invocation.invoke_async(&mut conn).await?;
        let unexpected = |why: String| AppError::Internal(format!("unexpected like_read.lua reply: {why}"));
        let mut reply = reply.into_iter();
        let status = match reply.next() {
            Some(Value::Int(status)) => status,
            other => return Err(unexpected(format!("status {other:?}"))),
        };
        match status {
            0 => Ok(Read::NotOwner),
            3 => {
                // The group vanished (Redis restarted empty or the stream was deleted).
                self.ensure_groups().await?;
                Ok(Read::Idle { last_id: "0-0".into() })
            }
            1 | 2 => {
                let entries = parse_read_reply(reply.next().unwrap_or(Value::Nil)).map_err(unexpected)?;
                if !entries.is_empty() {
                    return Ok(Read::Entries { entries, from_pending: status == 1 });
                }
                let last_id = match reply.next() {
                    Some(Value::BulkString(id)) => String::from_utf8(id).map_err(|_| unexpected("last id".into()))?,
                    Some(Value::SimpleString(id)) => id,
                    _ => "0-0".into(),
                };
                Ok(Read::Idle { last_id })
            }
            other => Err(unexpected(format!("status {other}"))),
        }
    }

    /// The next batch of new entries, read as the lease owner while the current batch is in
    /// its transaction. Nothing when there is none, or the lease is gone.
    pub(super) async fn read_ahead(&self, shard: u32) -> AppResult<Option<Vec<Entry>>> {
        Ok(match self.read_as_owner(shard, true).await? {
            Read::Entries { entries, .. } if !entries.is_empty() => Some(entries),
            _ => None,
        })
    }

    /// Waits up to `block` for an entry newer than `last_id` (plain XREAD: it takes no
    /// ownership; the next step reads it as the owner). An idle worker sleeps here instead of
    /// spinning, and wakes as soon as a like arrives.
    pub(super) async fn wait_for_entries_after(&self, stream: &str, last_id: &str, block: Duration) -> AppResult<()> {
        let mut conn = self.redis.clone();
        let _: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(stream)
            .arg(last_id)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}

/// Walks an XREADGROUP reply (`[[stream, [[id, [field, value, …]], …]], …]`, or a map of
/// streams under RESP3; nil when nothing came) straight into entries. A batch is thousands of
/// entries: parsing each into a map of owned values first cost more than the read itself.
fn parse_read_reply(reply: Value) -> Result<Vec<Entry>, String> {
    let streams = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .map(|stream| match stream {
                Value::Array(mut pair) if pair.len() == 2 => Ok(pair.swap_remove(1)),
                other => Err(format!("a stream is not [name, entries]: {other:?}")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Value::Map(streams) => {
            streams.into_iter().map(|(_, entries)| Ok(entries)).collect::<Result<Vec<_>, String>>()?
        }
        other => return Err(format!("not an array of streams: {other:?}")),
    };
    let mut parsed = Vec::new();
    for entries in streams {
        let Value::Array(entries) = entries else { return Err("a stream's entries are not an array".into()) };
        parsed.reserve(entries.len());
        for entry in entries {
            let Value::Array(mut parts) = entry else { return Err("an entry is not [id, fields]".into()) };
            if parts.len() != 2 {
                return Err("an entry is not [id, fields]".into());
            }
            let fields = parts.pop().unwrap_or(Value::Nil);
            let id = match parts.pop() {
                Some(Value::BulkString(id)) => String::from_utf8(id).map_err(|_| "an entry id is not text")?,
                Some(Value::SimpleString(id)) => id,
                other => return Err(format!("an entry id is not a string: {other:?}")),
            };
            parsed.push(Entry { id, trace: trace_of(&fields), event: parse_event(&fields) });
        }
    }
    Ok(parsed)
}

/// The trace context an entry carries (`LikeEvent::trace_of`), read only when traces are on.
fn trace_of(fields: &Value) -> Option<TraceRef> {
    if !crate::telemetry::otel::enabled() {
        return None;
    }
    LikeEvent::trace_of(field_pairs(fields)?)
}

/// One entry's fields as an event (`LikeEvent::decode`, the codec the toggle script's
/// arguments came from); anything else is the reason it cannot apply (it goes to the dead
/// letters).
fn parse_event(fields: &Value) -> Result<LikeEvent, String> {
    // A trimmed-then-claimed entry has nil fields: nothing to apply.
    LikeEvent::decode(field_pairs(fields).ok_or("the entry has no fields")?)
}

/// An entry's field/value pairs as bytes, as the event codec reads them; `None` when the entry
/// has no fields.
fn field_pairs(fields: &Value) -> Option<impl Iterator<Item = (&[u8], &[u8])>> {
    let Value::Array(fields) = fields else { return None };
    Some(fields.chunks(2).filter_map(|pair| match pair {
        [Value::BulkString(name), Value::BulkString(value)] => Some((name.as_slice(), value.as_slice())),
        _ => None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::like_event::LikeTarget;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn entry(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![bulk(id), Value::Array(fields.iter().map(|f| bulk(f)).collect())])
    }

    #[test]
    fn a_read_reply_parses_into_events_and_reasons() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("cf:{s0}:likes"),
            Value::Array(vec![
                entry("1-0", &["like", "p:7 3 2"]),
                entry("2-0", &["op", "unlike", "t", "c:9", "u", "3", "c", "2"]),
                entry("3-0", &["op", "like", "t", "x:1", "u", "3", "c", "2"]),
                entry("4-0", &["op", "like", "u", "3", "c", "2"]),
                // An entry deleted from the stream while pending is read back with nil fields.
                Value::Array(vec![bulk("5-0"), Value::Nil]),
                // The labelled form, as entries appended before the one-field form have it.
                entry("6-0", &["op", "like", "t", "p:7", "u", "4", "c", "2"]),
            ]),
        ])]);
        let entries = parse_read_reply(reply).expect("parses");
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["1-0", "2-0", "3-0", "4-0", "5-0", "6-0"]);
        assert_eq!(
            entries[0].event,
            Ok(LikeEvent { target: LikeTarget::Post(7), user_id: 3, course_id: 2, liked: true })
        );
        assert_eq!(
            entries[1].event,
            Ok(LikeEvent { target: LikeTarget::Comment(9), user_id: 3, course_id: 2, liked: false })
        );
        assert_eq!(entries[2].event, Err("bad target".to_owned()));
        assert_eq!(entries[3].event, Err("missing field t".to_owned()));
        assert!(entries[4].event.is_err());
        assert_eq!(
            entries[5].event,
            Ok(LikeEvent { target: LikeTarget::Post(7), user_id: 4, course_id: 2, liked: true })
        );
    }

    #[test]
    fn nil_is_no_entries_and_garbage_is_an_error() {
        assert!(parse_read_reply(Value::Nil).expect("nil").is_empty());
        assert!(parse_read_reply(Value::Int(3)).is_err());
        assert!(parse_read_reply(Value::Array(vec![Value::Int(3)])).is_err());
    }
}
