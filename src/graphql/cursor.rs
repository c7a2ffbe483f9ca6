//! Connection cursors: opaque, and validated when decoded like any other input.

use async_graphql::connection::CursorType;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{AppError, AppResult};

/// A keyset position: the id of the edge's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyCursor(pub i64);

impl CursorType for KeyCursor {
    type Error = AppError;

    fn decode_cursor(raw: &str) -> Result<Self, Self::Error> {
        let bad = || AppError::bad_input("malformed cursor: pass back a cursor this API returned");
        let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| bad())?;
        let text = std::str::from_utf8(&bytes).map_err(|_| bad())?;
        let id = text.strip_prefix("k:").and_then(|n| n.parse::<i64>().ok()).filter(|n| *n > 0).ok_or_else(bad)?;
        Ok(KeyCursor(id))
    }

    fn encode_cursor(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("k:{}", self.0))
    }
}

/// Decodes an optional cursor argument.
pub fn decode(raw: Option<&str>) -> AppResult<Option<i64>> {
    raw.map(|r| KeyCursor::decode_cursor(r).map(|c| c.0)).transpose()
}

/// Most posts one HOT or TOP walk shows: past it the walk ends (`hasNextPage` false), which
/// keeps its cursor small (about 2 KB at the end).
pub const MAX_RANKED_WALK: usize = 1000;

/// A position in a HOT or TOP walk: every post the walk has shown. The next page is the best
/// ranked posts not among them, read from the ranking as it is NOW. So a walk never shows a
/// post twice and, once it reaches the end, has skipped none that existed throughout, however
/// the posts moved meanwhile; a post that rises after the walk passed its rank simply comes
/// sooner. (A score bound would skip a post that rose past it and repeat one that fell.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankCursor {
    pub ranking: crate::forum::posts::Ranking,
    /// The posts shown, in walk order; this cursor stands after the first `len`.
    pub shown: std::sync::Arc<Vec<i64>>,
    pub len: usize,
}

impl RankCursor {
    fn prefix(ranking: crate::forum::posts::Ranking) -> &'static [u8] {
        match ranking {
            crate::forum::posts::Ranking::Hot => b"r:hot:",
            crate::forum::posts::Ranking::Top => b"r:top:",
        }
    }

    /// The ids shown before this position.
    pub fn shown(&self) -> &[i64] {
        &self.shown[..self.len]
    }
}

impl CursorType for RankCursor {
    type Error = AppError;

    /// The shown ids sorted, as LEB128 varints of their differences, after the order's prefix.
    fn decode_cursor(raw: &str) -> Result<Self, Self::Error> {
        use crate::forum::posts::Ranking;
        let bad = || AppError::bad_input("malformed cursor: pass back a cursor this API returned for the same order");
        let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| bad())?;
        let (ranking, mut rest) = [Ranking::Hot, Ranking::Top]
            .into_iter()
            .find_map(|r| bytes.strip_prefix(Self::prefix(r)).map(|rest| (r, rest)))
            .ok_or_else(bad)?;
        let mut shown = Vec::new();
        let mut previous: i64 = 0;
        while !rest.is_empty() {
            let mut delta: u64 = 0;
            let mut shift = 0;
            loop {
                let (&byte, tail) = rest.split_first().ok_or_else(bad)?;
                rest = tail;
                if shift > 56 {
                    return Err(bad());
                }
                delta |= u64::from(byte & 0x7f) << shift;
                shift += 7;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            let id = i64::try_from(delta).ok().and_then(|d| previous.checked_add(d)).filter(|_| delta > 0);
            previous = id.ok_or_else(bad)?;
            shown.push(previous);
            if shown.len() > MAX_RANKED_WALK {
                return Err(bad());
            }
        }
        let len = shown.len();
        Ok(RankCursor { ranking, shown: std::sync::Arc::new(shown), len })
    }

    fn encode_cursor(&self) -> String {
        let mut ids = self.shown().to_vec();
        ids.sort_unstable();
        let mut bytes = Self::prefix(self.ranking).to_vec();
        let mut previous = 0i64;
        for id in ids {
            let mut delta = (id - previous) as u64;
            previous = id;
            loop {
                let byte = (delta & 0x7f) as u8;
                delta >>= 7;
                if delta == 0 {
                    bytes.push(byte);
                    break;
                }
                bytes.push(byte | 0x80);
            }
        }
        URL_SAFE_NO_PAD.encode(bytes)
    }
}

/// A cursor of `Course.posts`: a keyset position in NEW order, or a ranked walk's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostsCursor {
    Key(KeyCursor),
    Ranked(RankCursor),
}

impl CursorType for PostsCursor {
    type Error = AppError;

    fn decode_cursor(raw: &str) -> Result<Self, Self::Error> {
        KeyCursor::decode_cursor(raw)
            .map(PostsCursor::Key)
            .or_else(|_| RankCursor::decode_cursor(raw).map(PostsCursor::Ranked))
    }

    fn encode_cursor(&self) -> String {
        match self {
            PostsCursor::Key(key) => key.encode_cursor(),
            PostsCursor::Ranked(ranked) => ranked.encode_cursor(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forum::posts::Ranking;

    #[test]
    fn a_ranked_cursor_round_trips_its_shown_posts_and_order() {
        let shown = vec![900_000_123, 5, 77, 1 << 40, 6];
        let cursor = RankCursor { ranking: Ranking::Top, shown: std::sync::Arc::new(shown.clone()), len: 4 };
        let decoded = RankCursor::decode_cursor(&cursor.encode_cursor()).expect("decodes");
        assert_eq!(decoded.ranking, Ranking::Top);
        let mut expected = shown[..4].to_vec();
        expected.sort_unstable();
        assert_eq!(decoded.shown(), expected.as_slice());
    }

    #[test]
    fn cursors_of_another_order_or_tampered_ones_are_refused() {
        let hot = RankCursor { ranking: Ranking::Hot, shown: std::sync::Arc::new(vec![3, 9]), len: 2 };
        assert!(matches!(PostsCursor::decode_cursor(&hot.encode_cursor()), Ok(PostsCursor::Ranked(_))));
        assert!(matches!(PostsCursor::decode_cursor(&KeyCursor(12).encode_cursor()), Ok(PostsCursor::Key(_))));
        // A zero difference (a repeated id), a truncated varint, an unknown prefix.
        for bytes in [&b"r:hot:\x03\x00"[..], &b"r:hot:\x83"[..], &b"r:new:\x03"[..]] {
            assert!(RankCursor::decode_cursor(&URL_SAFE_NO_PAD.encode(bytes)).is_err());
        }
        let too_long: Vec<u8> =
            b"r:top:".iter().copied().chain(std::iter::repeat_n(1u8, MAX_RANKED_WALK + 1)).collect();
        assert!(RankCursor::decode_cursor(&URL_SAFE_NO_PAD.encode(too_long)).is_err());
    }
}
