//! Connection cursors: opaque, authenticated, and validated when opened like any other input.
//!
//! A cursor is `base64url(position ‖ tag)`: the position is where a walk stands (`k:<id>` for
//! a keyset walk, `a:` at a pinned post of a NEW first page, `r:hot:`/`r:top:` and the shown
//! ids for a ranked one; a walk of `Course.posts` with a filter puts `f:<filter>;` before it,
//! the filter's canonical text, so its cursors serve that filter only), the tag the first 16
//! bytes of HMAC-SHA256 of the position under the server's cursor key (`CursorKeys`). The tag
//! proves only that this server issued the cursor: it says nothing about who may read what
//! (every page is still checked against the viewer), and a client can hand back any cursor it
//! was given, on any connection of the same kind. What it rules out is a position nobody was
//! given: a forged, altered, truncated or foreign-key cursor is BAD_USER_INPUT, refused before
//! any SQL runs, so a ranked walk's list of shown posts is always one the server built.
//!
//! Keys (`CURSOR_KEYS`, docs/operations.md): the first signs, every one verifies, so a key is
//! rotated by putting the new one first and dropping the old one once its cursors have aged
//! out; a cursor under a dropped key is refused and the client restarts from the first page.

use std::sync::Arc;

use async_graphql::connection::CursorType;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};

use crate::config::MIN_CURSOR_KEY_BYTES;
use crate::error::{AppError, AppResult};

type HmacSha256 = Hmac<sha2::Sha256>;

/// Bytes of the HMAC-SHA256 kept in a cursor: 128 bits, beyond guessing.
pub(crate) const TAG_BYTES: usize = 16;

/// Longest cursor accepted, in characters: a filtered HOT/TOP walk's last cursor (1,000 ids of
/// up to 9 bytes each, the filter of at most `MAX_FILTER_BYTES`, the prefixes and the tag)
/// fits; anything longer is refused before decoding.
pub(crate) const MAX_CURSOR_CHARS: usize = 12_200;

/// Longest filter text a cursor carries (`forum::posts::PostFilter::key`: about 60 bytes).
const MAX_FILTER_BYTES: usize = 64;

/// The cursor keys: the first signs, all verify (rotation). Cheap to clone.
#[derive(Clone)]
pub struct CursorKeys(Arc<Vec<HmacSha256>>);

impl std::fmt::Debug for CursorKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CursorKeys({} key(s))", self.0.len())
    }
}

impl CursorKeys {
    /// Keys from secrets, the signing one first; each at least `MIN_CURSOR_KEY_BYTES` long.
    pub fn new<S: AsRef<[u8]>>(secrets: &[S]) -> AppResult<Self> {
        if secrets.is_empty() {
            return Err(AppError::Config("CURSOR_KEYS must hold at least one key".into()));
        }
        let macs = secrets
            .iter()
            .map(|secret| {
                let secret = secret.as_ref();
                if secret.len() < MIN_CURSOR_KEY_BYTES {
                    return Err(AppError::Config(format!(
                        "each key of CURSOR_KEYS must be at least {MIN_CURSOR_KEY_BYTES} bytes long (a random string)"
                    )));
                }
                HmacSha256::new_from_slice(secret).map_err(|e| AppError::Config(format!("cursor key: {e}")))
            })
            .collect::<AppResult<Vec<_>>>()?;
        Ok(Self(Arc::new(macs)))
    }

    /// Signs a position with the first key.
    pub fn seal(&self, position: &[u8]) -> String {
        let mut mac = self.0[0].clone();
        mac.update(position);
        let tag = mac.finalize().into_bytes();
        let mut bytes = Vec::with_capacity(position.len() + TAG_BYTES);
        bytes.extend_from_slice(position);
        bytes.extend_from_slice(&tag[..TAG_BYTES]);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The position of a cursor this server issued under one of its keys, else BAD_USER_INPUT.
    /// Costs O(length) and touches nothing but memory.
    pub fn open(&self, raw: &str) -> AppResult<Vec<u8>> {
        let refused = || {
            AppError::bad_input(
                "invalid cursor: pass back a cursor this API returned (one signed under a retired key is refused too: start again from the first page)",
            )
        };
        if raw.len() > MAX_CURSOR_CHARS {
            return Err(refused());
        }
        let mut bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| refused())?;
        if bytes.len() <= TAG_BYTES {
            return Err(refused());
        }
        let tag = bytes.split_off(bytes.len() - TAG_BYTES);
        // `verify_truncated_left` compares in constant time.
        let genuine = self.0.iter().any(|key| {
            let mut mac = key.clone();
            mac.update(&bytes);
            mac.verify_truncated_left(&tag).is_ok()
        });
        if genuine { Ok(bytes) } else { Err(refused()) }
    }

    /// The id of a keyset cursor (`after`/`before` of a NEW, comment, reply, notification or
    /// feed walk), if one was given.
    pub fn key(&self, raw: Option<&str>) -> AppResult<Option<i64>> {
        raw.map(|raw| {
            let position = self.open(raw)?;
            key_position(&position).ok_or_else(|| AppError::bad_input("this cursor belongs to another order"))
        })
        .transpose()
    }

    /// A cursor of `Course.posts`: the filter it walks and where it stands.
    pub fn posts(&self, raw: &str) -> AppResult<PostsCursor> {
        let invalid = || AppError::bad_input("invalid cursor: pass back a cursor this API returned");
        let position = self.open(raw)?;
        let (filter, inner) = match position.strip_prefix(b"f:") {
            None => ("", position.as_slice()),
            Some(rest) => {
                let end = rest.iter().position(|b| *b == b';').ok_or_else(invalid)?;
                let filter = std::str::from_utf8(&rest[..end]).map_err(|_| invalid())?;
                if filter.is_empty() || filter.len() > MAX_FILTER_BYTES {
                    return Err(invalid());
                }
                (filter, &rest[end + 1..])
            }
        };
        let at = if let Some(id) = key_position(inner) {
            PostsAt::Key(id)
        } else if inner == ABOVE_UNPINNED {
            PostsAt::AboveUnpinned
        } else {
            let (ranking, shown) = rank_position(inner).ok_or_else(invalid)?;
            let len = shown.len();
            PostsAt::Ranked(RankCursor { ranking, shown: Arc::new(shown), len })
        };
        Ok(PostsCursor { filter: filter.into(), at, keys: self.clone() })
    }
}

/// The keys of this process: CURSOR_KEYS when set, else the prefix's one random key kept in
/// Redis (written once with SET NX by whichever instance starts first, then read by every
/// instance at start, so all of them sign and verify alike).
pub(crate) async fn load_keys(
    settings: &crate::config::Settings,
    redis: &crate::kv::Redis,
    keys: &crate::kv::keys::Keys,
) -> AppResult<CursorKeys> {
    if let Some(secrets) = settings.cursor_secrets()? {
        return CursorKeys::new(&secrets);
    }
    let name = keys.cursor_key();
    let fresh = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
    let mut conn = redis.clone();
    let _: Option<String> = redis::cmd("SET").arg(&name).arg(&fresh).arg("NX").query_async(&mut conn).await?;
    let kept: Option<String> = redis::cmd("GET").arg(&name).query_async(&mut conn).await?;
    let secret = kept
        .and_then(|k| URL_SAFE_NO_PAD.decode(k).ok())
        .filter(|k| k.len() >= MIN_CURSOR_KEY_BYTES)
        .ok_or_else(|| AppError::Internal(format!("the cursor key in Redis ({name}) is missing or not a key")))?;
    CursorKeys::new(&[secret])
}

/// `k:<id>`, the id positive.
fn key_position(position: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(position).ok()?;
    text.strip_prefix("k:").and_then(|n| n.parse::<i64>().ok()).filter(|n| *n > 0)
}

/// Cursors are opened by the resolvers with the state's keys (`CursorKeys::key`, `::posts`);
/// async-graphql decodes a cursor type only in its `connection::query` helper, which this
/// schema does not use. So the trait's decoder refuses: nothing unsigned is ever accepted.
fn unkeyed_decode<T>() -> AppResult<T> {
    Err(AppError::bad_input("invalid cursor: pass back a cursor this API returned"))
}

/// A keyset position: the id of the edge's row, signed when written out.
#[derive(Clone, Debug)]
pub(crate) struct KeyCursor {
    pub id: i64,
    keys: CursorKeys,
}

impl KeyCursor {
    pub(crate) fn new(keys: &CursorKeys, id: i64) -> Self {
        Self { id, keys: keys.clone() }
    }
}

impl CursorType for KeyCursor {
    type Error = AppError;

    fn decode_cursor(_: &str) -> Result<Self, Self::Error> {
        unkeyed_decode()
    }

    fn encode_cursor(&self) -> String {
        self.keys.seal(format!("k:{}", self.id).as_bytes())
    }
}

/// Most posts one HOT or TOP walk shows: past it the walk ends (`hasNextPage` false), which
/// keeps its cursor small (about 2 KB at the end).
pub(crate) const MAX_RANKED_WALK: usize = 1000;

/// A position in a HOT or TOP walk: every post the walk has shown. The next page is the best
/// ranked posts not among them, read from the ranking as it is NOW. So a walk never shows a
/// post twice and, once it reaches the end, has skipped none that existed throughout, however
/// the posts moved meanwhile; a post that rises after the walk passed its rank simply comes
/// sooner. (A score bound would skip a post that rose past it and repeat one that fell.) The
/// list is signed with the rest of the cursor: only lists this server built come back. The
/// pinned posts that led the first page are among the shown ones.
#[derive(Clone, Debug)]
pub struct RankCursor {
    pub ranking: crate::forum::posts::Ranking,
    /// The posts shown, in walk order; this cursor stands after the first `len`.
    pub shown: Arc<Vec<i64>>,
    pub len: usize,
}

fn rank_prefix(ranking: crate::forum::posts::Ranking) -> &'static [u8] {
    match ranking {
        crate::forum::posts::Ranking::Hot => b"r:hot:",
        crate::forum::posts::Ranking::Top => b"r:top:",
    }
}

/// `r:hot:`/`r:top:`, then the shown ids sorted, as LEB128 varints of their differences.
fn rank_position(position: &[u8]) -> Option<(crate::forum::posts::Ranking, Vec<i64>)> {
    use crate::forum::posts::Ranking;
    let (ranking, mut rest) = [Ranking::Hot, Ranking::Top]
        .into_iter()
        .find_map(|r| position.strip_prefix(rank_prefix(r)).map(|rest| (r, rest)))?;
    let mut shown = Vec::new();
    let mut previous: i64 = 0;
    while !rest.is_empty() {
        let mut delta: u64 = 0;
        let mut shift = 0;
        loop {
            let (&byte, tail) = rest.split_first()?;
            rest = tail;
            if shift > 56 {
                return None;
            }
            delta |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        previous = i64::try_from(delta).ok().and_then(|d| previous.checked_add(d)).filter(|_| delta > 0)?;
        shown.push(previous);
        if shown.len() > MAX_RANKED_WALK {
            return None;
        }
    }
    Some((ranking, shown))
}

impl RankCursor {
    /// The position after the first `len` posts of `walk`.
    pub fn new(ranking: crate::forum::posts::Ranking, walk: Arc<Vec<i64>>, len: usize) -> Self {
        Self { ranking, shown: walk, len }
    }

    /// The ids shown before this position.
    pub fn shown(&self) -> &[i64] {
        &self.shown[..self.len]
    }

    fn position(&self) -> Vec<u8> {
        let mut ids = self.shown().to_vec();
        ids.sort_unstable();
        let mut bytes = rank_prefix(self.ranking).to_vec();
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
        bytes
    }
}

/// The position at a pinned post of a NEW page: above every unpinned post, so the page after
/// it is the unpinned posts from the newest (the pins are not repeated).
const ABOVE_UNPINNED: &[u8] = b"a:";

/// Where a walk of `Course.posts` (or of the home feed) stands.
#[derive(Clone, Debug)]
pub enum PostsAt {
    /// NEW order: after (or before) the post with this id.
    Key(i64),
    /// NEW order: at a pinned post that leads the first page (`ABOVE_UNPINNED`).
    AboveUnpinned,
    /// A HOT or TOP walk.
    Ranked(RankCursor),
}

/// A cursor of `Course.posts` and of the home feed: the filter its walk reads (`""` for none,
/// else `forum::posts::PostFilter::key`) and where it stands; signed when written out.
#[derive(Clone, Debug)]
pub struct PostsCursor {
    pub filter: Arc<str>,
    pub at: PostsAt,
    keys: CursorKeys,
}

impl PostsCursor {
    pub fn new(keys: &CursorKeys, filter: Arc<str>, at: PostsAt) -> Self {
        Self { filter, at, keys: keys.clone() }
    }

    fn position(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        if !self.filter.is_empty() {
            bytes.extend_from_slice(b"f:");
            bytes.extend_from_slice(self.filter.as_bytes());
            bytes.push(b';');
        }
        match &self.at {
            PostsAt::Key(id) => bytes.extend_from_slice(format!("k:{id}").as_bytes()),
            PostsAt::AboveUnpinned => bytes.extend_from_slice(ABOVE_UNPINNED),
            PostsAt::Ranked(ranked) => bytes.extend_from_slice(&ranked.position()),
        }
        bytes
    }
}

impl CursorType for PostsCursor {
    type Error = AppError;

    fn decode_cursor(_: &str) -> Result<Self, Self::Error> {
        unkeyed_decode()
    }

    fn encode_cursor(&self) -> String {
        self.keys.seal(&self.position())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forum::posts::Ranking;

    fn keys(secrets: &[&str]) -> CursorKeys {
        CursorKeys::new(secrets).expect("keys")
    }

    const OLD: &str = "an old cursor key, retired soon";
    const NEW: &str = "the new cursor key, signing now";

    #[test]
    fn a_ranked_cursor_round_trips_its_shown_posts_and_order() {
        let keys = keys(&[NEW]);
        let shown = vec![900_000_123, 5, 77, 1 << 40, 6];
        let cursor = ranked(&keys, "", Ranking::Top, shown.clone(), 4);
        let Ok(PostsCursor { at: PostsAt::Ranked(decoded), filter, .. }) = keys.posts(&cursor) else {
            panic!("decodes")
        };
        assert_eq!(&*filter, "");
        assert_eq!(decoded.ranking, Ranking::Top);
        let mut expected = shown[..4].to_vec();
        expected.sort_unstable();
        assert_eq!(decoded.shown(), expected.as_slice());
        assert_eq!(keys.key(Some(&KeyCursor::new(&keys, 12).encode_cursor())).ok(), Some(Some(12)));
    }

    #[test]
    fn malformed_positions_are_refused_even_when_signed() {
        let keys = keys(&[NEW]);
        // A zero difference (a repeated id), a truncated varint, an unknown prefix, k:0.
        for bytes in [&b"r:hot:\x03\x00"[..], &b"r:hot:\x83"[..], &b"r:new:\x03"[..], &b"k:0"[..], &b"k:-4"[..]] {
            assert!(keys.posts(&keys.seal(bytes)).is_err(), "{bytes:?}");
        }
        let too_long: Vec<u8> =
            b"r:top:".iter().copied().chain(std::iter::repeat_n(1u8, MAX_RANKED_WALK + 1)).collect();
        assert!(keys.posts(&keys.seal(&too_long)).is_err());
        // A ranked cursor is not a keyset position.
        let ranked = ranked(&keys, "", Ranking::Hot, vec![3, 9], 2);
        assert!(keys.key(Some(&ranked)).is_err());
        // Filters: empty, unterminated, too long; a filtered position is no keyset position.
        for bytes in [&b"f:;k:3"[..], &b"f:k=question"[..], &b"f:k=question;"[..]] {
            assert!(keys.posts(&keys.seal(bytes)).is_err(), "{bytes:?}");
        }
        let long = format!("f:{};k:3", "u".repeat(MAX_FILTER_BYTES + 1));
        assert!(keys.posts(&keys.seal(long.as_bytes())).is_err());
        assert!(keys.key(Some(&keys.seal(b"f:u=1;k:3"))).is_err());
    }

    fn ranked(keys: &CursorKeys, filter: &str, ranking: Ranking, shown: Vec<i64>, len: usize) -> String {
        let at = PostsAt::Ranked(RankCursor::new(ranking, Arc::new(shown), len));
        PostsCursor::new(keys, filter.into(), at).encode_cursor()
    }

    #[test]
    fn a_filtered_cursor_carries_its_filter_and_position() {
        let keys = keys(&[NEW]);
        for at in [PostsAt::Key(41), PostsAt::AboveUnpinned] {
            let cursor = PostsCursor::new(&keys, "k=question,u=1,t=7".into(), at.clone()).encode_cursor();
            let decoded = keys.posts(&cursor).expect("decodes");
            assert_eq!(&*decoded.filter, "k=question,u=1,t=7");
            assert_eq!(format!("{:?}", decoded.at), format!("{at:?}"));
        }
        let cursor = ranked(&keys, "a=1", Ranking::Hot, vec![9, 3], 2);
        let Ok(PostsCursor { at: PostsAt::Ranked(decoded), filter, .. }) = keys.posts(&cursor) else {
            panic!("decodes")
        };
        assert_eq!((&*filter, decoded.shown()), ("a=1", &[3, 9][..]));
        // The longest walk with a long filter still fits the length limit.
        let worst =
            ranked(&keys, &"u".repeat(MAX_FILTER_BYTES), Ranking::Top, (1..=1000).map(|i| i << 53).collect(), 1000);
        assert!(worst.len() <= MAX_CURSOR_CHARS, "{}", worst.len());
    }

    #[test]
    fn forged_altered_truncated_and_unsigned_cursors_are_refused() {
        let keys = keys(&[NEW]);
        let genuine = KeyCursor::new(&keys, 42).encode_cursor();
        // The unsigned format of 6b52d0b, a flipped byte anywhere, a cut tag, random bytes.
        let unsigned = URL_SAFE_NO_PAD.encode("k:42");
        let mut flipped = Vec::new();
        let bytes = URL_SAFE_NO_PAD.decode(&genuine).expect("base64");
        for i in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[i] ^= 0x01;
            flipped.push(URL_SAFE_NO_PAD.encode(altered));
        }
        let truncated = URL_SAFE_NO_PAD.encode(&bytes[..bytes.len() - 1]);
        let random = URL_SAFE_NO_PAD.encode([7u8; 40]);
        let too_long = "A".repeat(MAX_CURSOR_CHARS + 1);
        for bad in [unsigned, truncated, random, too_long, String::new(), "%%%".into()].iter().chain(&flipped) {
            let refused = keys.key(Some(bad)).expect_err(bad);
            assert_eq!(refused.code(), "BAD_USER_INPUT");
        }
        assert_eq!(keys.key(Some(&genuine)).ok(), Some(Some(42)));
    }

    #[test]
    fn keys_rotate_the_first_signs_and_every_one_verifies() {
        let before = keys(&[OLD]);
        let cursor = KeyCursor::new(&before, 7).encode_cursor();
        let rotating = keys(&[NEW, OLD]);
        assert_eq!(rotating.key(Some(&cursor)).ok(), Some(Some(7)), "the old key still verifies");
        let fresh = KeyCursor::new(&rotating, 7).encode_cursor();
        assert_ne!(fresh, cursor, "the new key signs");
        let after = keys(&[NEW]);
        assert!(after.key(Some(&cursor)).is_err(), "the old key was dropped");
        assert_eq!(after.key(Some(&fresh)).ok(), Some(Some(7)));
        assert!(CursorKeys::new(&["short"]).is_err());
        assert!(CursorKeys::new::<&str>(&[]).is_err());
    }
}
