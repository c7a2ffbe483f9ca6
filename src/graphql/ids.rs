//! Opaque global ids (`Node.id`): base64url of `Kind:number`. Clients treat them as strings;
//! the server decodes them strictly, and an id of the wrong kind is BAD_USER_INPUT.

use async_graphql::ID;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{AppError, AppResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    User,
    Course,
    Post,
    Comment,
    Reply,
    Notification,
    Tag,
}

impl NodeKind {
    fn name(self) -> &'static str {
        match self {
            NodeKind::User => "User",
            NodeKind::Course => "Course",
            NodeKind::Post => "Post",
            NodeKind::Comment => "Comment",
            NodeKind::Reply => "Reply",
            NodeKind::Notification => "Notification",
            NodeKind::Tag => "Tag",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [
            NodeKind::User,
            NodeKind::Course,
            NodeKind::Post,
            NodeKind::Comment,
            NodeKind::Reply,
            NodeKind::Notification,
            NodeKind::Tag,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// Encodes a database id as a global id of `kind`.
pub fn encode(kind: NodeKind, id: i64) -> ID {
    ID(URL_SAFE_NO_PAD.encode(format!("{}:{id}", kind.name())))
}

/// Decodes any global id.
pub fn decode(raw: &str) -> AppResult<(NodeKind, i64)> {
    let malformed = || AppError::bad_input(format!("`{}` is not a valid id", truncate(raw)));
    let bytes = URL_SAFE_NO_PAD.decode(raw.trim_end_matches('=')).map_err(|_| malformed())?;
    let text = std::str::from_utf8(&bytes).map_err(|_| malformed())?;
    let (kind, number) = text.split_once(':').ok_or_else(malformed)?;
    let kind = NodeKind::parse(kind).ok_or_else(malformed)?;
    // Canonical digits only ("+1" and "01" would give one object many ids).
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) || number.starts_with('0') {
        return Err(malformed());
    }
    let id = number.parse::<i64>().map_err(|_| malformed())?;
    Ok((kind, id))
}

/// Decodes a global id that must be one of `expected` kinds.
pub(crate) fn decode_as(raw: &ID, expected: &[NodeKind]) -> AppResult<(NodeKind, i64)> {
    let (kind, id) = decode(raw)?;
    if expected.contains(&kind) {
        Ok((kind, id))
    } else {
        let names: Vec<_> = expected.iter().map(|k| k.name()).collect();
        Err(AppError::bad_input(format!(
            "expected the id of a {}, got the id of a {}",
            names.join(" or "),
            kind.name()
        )))
    }
}

/// Decodes a global id of exactly one kind, returning the database id.
pub(crate) fn decode_one(raw: &ID, expected: NodeKind) -> AppResult<i64> {
    decode_as(raw, &[expected]).map(|(_, id)| id)
}

/// Decodes a list of global ids of one kind.
pub(crate) fn decode_all(raw: &[ID], expected: NodeKind) -> AppResult<Vec<i64>> {
    raw.iter().map(|id| decode_one(id, expected)).collect()
}

fn truncate(raw: &str) -> String {
    raw.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let id = encode(NodeKind::Post, 42);
        assert_eq!(decode(&id).unwrap(), (NodeKind::Post, 42));
        assert!(decode("not-an-id").is_err());
        assert!(decode(&URL_SAFE_NO_PAD.encode("Post:-1")).is_err());
        assert!(decode(&URL_SAFE_NO_PAD.encode("Banana:1")).is_err());
        assert!(decode_one(&id, NodeKind::Course).is_err());
    }
}
