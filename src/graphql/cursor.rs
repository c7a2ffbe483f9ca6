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
