//! Automatic persisted queries (Apollo's protocol) and the cache of parsed documents.
//!
//! A client sends a query's SHA-256 in `extensions.persistedQuery.sha256Hash` (version 1)
//! instead of its text. A hash the server does not know is `PERSISTED_QUERY_NOT_FOUND`
//! (message `PersistedQueryNotFound`, which clients recognise): the client then sends the text
//! with the hash. Persisted queries may come by GET, which gives cacheable URLs; mutations stay
//! POST-only (`http::graphql_http::require_query` runs on the resolved text).
//!
//! **Trust model.** A persisted query saves bandwidth; it is not an allowlist (for that, see
//! `trusted`). Anyone may run a hash the server knows. Only a member may add one, and only a
//! document worth keeping: the text is kept in Redis (`keys::persisted_query`, for
//! `PERSISTED_QUERY_TTL`, renewed on every use) when the request came with a valid token, the
//! text hashes to the hash, it fits `PERSISTED_QUERY_MAX_BYTES`, it parsed and validated
//! against the schema (cost limit included), and the user is under
//! `PERSISTED_QUERY_REGISTRATIONS_PER_HOUR`. Otherwise the request still runs, and nothing is
//! kept: the client simply sends the text again next time. So a stranger can neither grow
//! Redis nor plant a document, and a member can add at most that many documents an hour.
//!
//! `ParsedDocuments` keeps the parsed form of documents by their SHA-256, so a repeated query
//! (persisted or not) is not parsed again. It holds its share of `CACHE_BUDGET_BYTES`
//! (`cache::budget`; each document weighed by an estimate from its text), keeps only documents
//! that validated for a signed-in caller (`graphql::hooks`), and hands out `Arc`s. Nothing in it can go stale: a document's parse
//! depends on its text alone. Validation still runs on every request: its cost limit depends
//! on the variables.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_graphql::parser::types::ExecutableDocument;
use async_graphql::{Request, Value};

use super::sha256_hex;
use super::trusted::TrustedDocuments;
use crate::cache::budget::{CacheBudget, CacheName, Measured, WeighedCache, string_bytes};
use crate::config::Settings;
use crate::error::{AppError, AppResult};
use crate::kv::Redis;
use crate::kv::keys::Keys;
use crate::kv::ratelimit::RateLimiter;

/// How long a persisted query stays in Redis after its last use.
pub(crate) const PERSISTED_QUERY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The window of `PERSISTED_QUERY_REGISTRATIONS_PER_HOUR`.
const REGISTRATION_WINDOW: Duration = Duration::from_secs(3600);

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

/// What a request said of persisted queries, once its text is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persisted {
    /// It named no hash.
    No,
    /// It named a hash the server knew; the text was filled in.
    Known,
    /// It sent a text with its hash: the text may be kept once the request validated
    /// (`PersistedQueries::register`).
    Offered { hash: String },
}

/// Persisted queries: Redis (automatic), or a manifest loaded at start (`trusted`).
pub struct PersistedQueries {
    redis: Redis,
    keys: Keys,
    max_bytes: usize,
    registrations: RateLimiter,
    trusted: Option<Arc<TrustedDocuments>>,
}

impl PersistedQueries {
    pub fn new(redis: Redis, keys: Keys, settings: &Settings, trusted: Option<Arc<TrustedDocuments>>) -> Self {
        let registrations = RateLimiter::new(
            redis.clone(),
            settings.persisted_query_registrations_per_hour,
            REGISTRATION_WINDOW,
            "persisted query registrations",
        );
        Self { redis, keys, max_bytes: settings.persisted_query_max_bytes, registrations, trusted }
    }

    /// The manifest of trusted documents, when only those may run.
    pub fn trusted(&self) -> Option<&Arc<TrustedDocuments>> {
        self.trusted.as_ref()
    }

    /// Fills in the text of a persisted query named by its hash alone, or checks that a text
    /// sent with a hash is that hash's. Writes nothing.
    pub async fn resolve(&self, request: &mut Request) -> AppResult<Persisted> {
        let Some(hash) = requested_hash(request)? else { return Ok(Persisted::No) };
        if !request.query.trim().is_empty() {
            if sha256_hex(&request.query) != hash {
                return Err(AppError::bad_input(
                    "extensions.persistedQuery.sha256Hash is not the SHA-256 of the query",
                ));
            }
            // With a manifest, the text is checked against it with every other text (`hooks`).
            return Ok(if self.trusted.is_some() { Persisted::Known } else { Persisted::Offered { hash } });
        }
        if let Some(trusted) = &self.trusted {
            request.query = trusted.text(&hash).ok_or(AppError::PersistedQueryNotFound)?.to_string();
            return Ok(Persisted::Known);
        }
        let ttl = PERSISTED_QUERY_TTL.as_secs();
        let mut conn = self.redis.clone();
        let key = self.keys.persisted_query(&hash);
        let text: Option<String> = redis::cmd("GETEX").arg(&key).arg("EX").arg(ttl).query_async(&mut conn).await?;
        request.query = text.ok_or(AppError::PersistedQueryNotFound)?;
        Ok(Persisted::Known)
    }

    /// Keeps an offered text under its hash, if the request that carried it validated (the
    /// caller checks) for `user_id`, fits the size cap and the user is under the registration
    /// rate. Returns whether it was kept; a refusal is not the request's failure (it ran), so
    /// it is only logged and counted.
    pub async fn register(&self, user_id: i64, hash: &str, text: &str) -> bool {
        let outcome = if text.len() > self.max_bytes {
            "too_large"
        } else {
            match self.registrations.check(&self.keys.write_rate(user_id, "apq")).await {
                Err(AppError::RateLimited { .. }) => "rate_limited",
                Err(err) => {
                    tracing::warn!(error = %err, "a persisted query could not be counted; not kept");
                    "failed"
                }
                Ok(()) => {
                    let mut conn = self.redis.clone();
                    let stored: Result<(), _> = redis::cmd("SET")
                        .arg(self.keys.persisted_query(hash))
                        .arg(text)
                        .arg("EX")
                        .arg(PERSISTED_QUERY_TTL.as_secs())
                        .query_async(&mut conn)
                        .await;
                    match stored {
                        Ok(()) => "kept",
                        Err(err) => {
                            tracing::warn!(error = %err, "a persisted query could not be kept");
                            "failed"
                        }
                    }
                }
            }
        };
        metrics::counter!(crate::telemetry::names::PERSISTED_QUERY_REGISTRATIONS, "outcome" => outcome).increment(1);
        outcome == "kept"
    }
}

/// Parsed documents by the SHA-256 of their text, in their share of `CACHE_BUDGET_BYTES` (see
/// the module doc).
pub struct ParsedDocuments {
    documents: WeighedCache<String, KeptDocument>,
    parses: AtomicU64,
    hits: AtomicU64,
}

/// A parsed document and the length of its text, which its weight is estimated from.
pub struct KeptDocument {
    pub document: ExecutableDocument,
    pub text_bytes: usize,
}

/// Estimated heap bytes of a parsed document per byte of its text (names, positions, vectors
/// and maps of the AST): an `ExecutableDocument` cannot report its own size.
const PARSED_BYTES_PER_TEXT_BYTE: u64 = 12;

impl ParsedDocuments {
    pub fn new(budget: &CacheBudget) -> Self {
        let documents = budget.weighed(CacheName::ParsedDocuments, None, |hash: &String, kept: &KeptDocument| {
            string_bytes(hash) + (kept.text_bytes as u64).saturating_mul(PARSED_BYTES_PER_TEXT_BYTE)
        });
        Self { documents, parses: AtomicU64::new(0), hits: AtomicU64::new(0) }
    }

    /// The parsed document of a text seen before (by its SHA-256), if kept.
    pub fn get(&self, hash: &str) -> Option<Arc<KeptDocument>> {
        let found = self.documents.get(&hash.to_owned());
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Counts a parse this process did (a miss).
    pub fn parsed(&self) {
        self.parses.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps a document that validated for a signed-in caller.
    pub fn keep(&self, hash: String, document: ExecutableDocument, text_bytes: usize) {
        self.documents.insert(hash, Arc::new(KeptDocument { document, text_bytes }));
    }

    /// Documents parsed by this process (cache misses).
    pub fn parses(&self) -> u64 {
        self.parses.load(Ordering::Relaxed)
    }

    /// Requests that reused a parsed document.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Estimated bytes held now, and the cap.
    pub fn weighed_bytes(&self) -> (u64, u64) {
        let figures = self.documents.figures();
        (figures.used_bytes, figures.capacity_bytes)
    }

    /// Documents held now.
    pub fn len(&self) -> u64 {
        self.documents.figures().entries
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_held_within_their_byte_budget() {
        // A 2 MiB budget gives the parsed documents a share of about half a megabyte.
        let budget = CacheBudget::new(2 * 1024 * 1024);
        let documents = ParsedDocuments::new(&budget);
        for i in 0..200 {
            let text = format!("query Q{i} {{ {} }}", "me { id } ".repeat(500));
            let parsed = async_graphql::parser::parse_query(&text).expect("parses");
            documents.keep(sha256_hex(&text), parsed, text.len());
        }
        let (bytes, capacity) = documents.weighed_bytes();
        assert!(bytes <= capacity, "{bytes} bytes held, capacity {capacity}");
        assert!(documents.len() < 200, "older documents were evicted");
    }
}
