//! Automatic persisted queries (Apollo's protocol) and the cache of parsed documents.
//!
//! A client sends a query's SHA-256 in `extensions.persistedQuery.sha256Hash` (version 1)
//! instead of its text. The first time it sends the text too; the server checks that the text
//! hashes to the hash and keeps it in Redis (`keys::persisted_query`, for `PERSISTED_QUERY_TTL`,
//! renewed on every use), so every instance knows it. A hash the server does not know is
//! `PERSISTED_QUERY_NOT_FOUND` (message `PersistedQueryNotFound`, which clients recognise): the
//! client then sends the text once. Persisted queries may come by GET, which gives cacheable
//! URLs; mutations stay POST-only (`http::graphql_http::require_query` runs on the resolved
//! text).
//!
//! `ParsedDocuments` keeps the parsed form of recent documents by their SHA-256, so a repeated
//! query (persisted or not) is not parsed again. It holds at most `MAX_PARSED` documents and
//! starts afresh when full; nothing in it can go stale (a document's parse depends on its text
//! alone). Validation still runs on every request: its cost limit depends on the variables.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_graphql::parser::types::ExecutableDocument;
use async_graphql::{Request, Value};
use sha2::{Digest, Sha256};

use crate::error::{AppError, AppResult};
use crate::kv::Redis;
use crate::kv::keys::Keys;

/// How long a persisted query stays in Redis after its last use.
pub const PERSISTED_QUERY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parsed documents kept in memory per process.
pub const MAX_PARSED: usize = 2_000;

/// The lowercase hex SHA-256 of a query's text, as Apollo clients compute it.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The hash a request names in `extensions.persistedQuery`, if it names one.
fn requested_hash(request: &Request) -> AppResult<Option<String>> {
    let Some(persisted) = request.extensions.0.get("persistedQuery") else { return Ok(None) };
    let Value::Object(fields) = persisted else {
        return Err(AppError::bad_input("extensions.persistedQuery must be an object"));
    };
    match fields.get("version") {
        Some(Value::Number(n)) if n.as_i64() == Some(1) => {}
        _ => return Err(AppError::bad_input("extensions.persistedQuery.version must be 1")),
    }
    match fields.get("sha256Hash") {
        Some(Value::String(hash)) if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Some(hash.to_ascii_lowercase()))
        }
        _ => Err(AppError::bad_input("extensions.persistedQuery.sha256Hash must be 64 hexadecimal digits")),
    }
}

/// Fills in the text of a persisted query, or registers a new one. A request without
/// `persistedQuery` is left as it is. Returns the hash when the request named one.
pub async fn resolve(redis: &Redis, keys: &Keys, request: &mut Request) -> AppResult<Option<String>> {
    let Some(hash) = requested_hash(request)? else { return Ok(None) };
    let key = keys.persisted_query(&hash);
    let ttl = PERSISTED_QUERY_TTL.as_secs();
    let mut conn = redis.clone();
    if request.query.trim().is_empty() {
        let text: Option<String> = redis::cmd("GETEX").arg(&key).arg("EX").arg(ttl).query_async(&mut conn).await?;
        request.query = text.ok_or(AppError::PersistedQueryNotFound)?;
    } else {
        if sha256_hex(&request.query) != hash {
            return Err(AppError::bad_input("extensions.persistedQuery.sha256Hash is not the SHA-256 of the query"));
        }
        let () = redis::cmd("SET").arg(&key).arg(&request.query).arg("EX").arg(ttl).query_async(&mut conn).await?;
    }
    Ok(Some(hash))
}

/// Recently parsed documents by the SHA-256 of their text (see the module doc).
#[derive(Default)]
pub struct ParsedDocuments {
    documents: Mutex<HashMap<String, ExecutableDocument>>,
    parses: AtomicU64,
    hits: AtomicU64,
}

impl ParsedDocuments {
    /// Attaches the parsed document to the request: from the cache, or parsed now and kept. A
    /// text that does not parse is left for execution to report. `hash` is the text's SHA-256
    /// when already known (a persisted query).
    pub fn attach(&self, request: &mut Request, hash: Option<String>) {
        let hash = hash.unwrap_or_else(|| sha256_hex(&request.query));
        let cached = self.documents.lock().ok().and_then(|documents| documents.get(&hash).cloned());
        if let Some(document) = cached {
            self.hits.fetch_add(1, Ordering::Relaxed);
            request.set_parsed_query(document);
            return;
        }
        self.parses.fetch_add(1, Ordering::Relaxed);
        let Ok(document) = async_graphql::parser::parse_query(&request.query) else { return };
        if let Ok(mut documents) = self.documents.lock() {
            if documents.len() >= MAX_PARSED {
                documents.clear();
            }
            documents.insert(hash, document.clone());
        }
        request.set_parsed_query(document);
    }

    /// Documents parsed by this process (cache misses).
    pub fn parses(&self) -> u64 {
        self.parses.load(Ordering::Relaxed)
    }

    /// Requests that reused a parsed document.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_lowercase_hex_sha256_of_the_text() {
        // As Python's hashlib.sha256(b"{ __typename }").hexdigest() gives it.
        assert_eq!(sha256_hex("{ __typename }"), "7f56e67dd21ab3f30d1ff8b7bed08893f0a0db86449836189b361dd1e56ddb4b");
    }

    #[test]
    fn a_repeated_text_is_parsed_once() {
        let parsed = ParsedDocuments::default();
        for _ in 0..3 {
            let mut request = Request::new("query { me { id } }");
            parsed.attach(&mut request, None);
        }
        assert_eq!((parsed.parses(), parsed.hits()), (1, 2));
    }
}
