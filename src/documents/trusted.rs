//! Trusted documents: when `TRUSTED_DOCUMENTS` names a manifest, only the documents in it run.
//!
//! The manifest is what a client's build emits:
//! - Apollo's persisted query manifest (`generate-persisted-query-manifest`):
//!   `{"format": "apollo-persisted-query-manifest", "version": 1, "operations": [{"id", "body", …}]}`;
//! - Relay's (`persistConfig` output) and most others: a JSON object of id → text.
//!
//! A request then names its document by id (`extensions.persistedQuery.sha256Hash`, which
//! `persisted` resolves from here, never from Redis) or sends a text that is in the manifest
//! (compared by SHA-256, whatever the ids are). Anything else is refused before it is parsed,
//! with `TRUSTED_DOCUMENT_REQUIRED`, over HTTP and over the websocket. Nothing is registered at
//! run time in this mode.
//!
//! The manifest is read at start (a missing or malformed one stops the start with the reason)
//! and again on SIGHUP; a reload that fails keeps the documents already loaded.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::sha256_hex;
use crate::error::{AppError, AppResult};

/// One loaded manifest.
#[derive(Default)]
struct Manifest {
    /// Text by the id the manifest gives it.
    by_id: HashMap<String, Arc<str>>,
    /// The SHA-256 of every text, for requests that send the text itself.
    hashes: HashSet<String>,
}

/// The documents allowed to run, reloadable.
pub struct TrustedDocuments {
    path: PathBuf,
    manifest: RwLock<Arc<Manifest>>,
}

impl TrustedDocuments {
    /// Reads the manifest at `path`, or says why it cannot be used.
    pub fn load(path: &Path) -> AppResult<Self> {
        let manifest = read(path)?;
        tracing::info!(path = %path.display(), documents = manifest.by_id.len(), "trusted documents loaded");
        Ok(Self { path: path.to_owned(), manifest: RwLock::new(Arc::new(manifest)) })
    }

    /// Reads the manifest again; on failure the documents already loaded stay. Returns how many
    /// documents are trusted now.
    pub fn reload(&self) -> AppResult<usize> {
        let manifest = read(&self.path)?;
        let count = manifest.by_id.len();
        if let Ok(mut current) = self.manifest.write() {
            *current = Arc::new(manifest);
        }
        tracing::info!(path = %self.path.display(), documents = count, "trusted documents reloaded");
        Ok(count)
    }

    /// Reloads the manifest on every SIGHUP until `shutdown` turns true.
    pub async fn reload_on_hangup(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGHUP; the trusted documents will not be reloaded");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = shutdown.wait_for(|stopping| *stopping) => return,
                heard = hangups.recv() => {
                    if heard.is_none() {
                        return;
                    }
                    if let Err(err) = self.reload() {
                        tracing::error!(error = %err, "trusted documents not reloaded; the previous ones stay");
                    }
                }
            }
        }
    }

    fn current(&self) -> Arc<Manifest> {
        self.manifest.read().map(|m| m.clone()).unwrap_or_default()
    }

    /// The text of the document with this id.
    pub fn text(&self, id: &str) -> Option<Arc<str>> {
        self.current().by_id.get(id).cloned()
    }

    /// Whether the text with this SHA-256 is one of the manifest's.
    pub fn allows_hash(&self, sha256: &str) -> bool {
        self.current().hashes.contains(sha256)
    }

    /// Documents trusted now.
    pub fn len(&self) -> usize {
        self.current().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The refusal of a document not in the manifest.
pub(crate) fn refusal() -> async_graphql::ServerError {
    let mut error = async_graphql::ServerError::new(
        "this server runs only the documents of its trusted-documents manifest; this one is not among them",
        None,
    );
    let mut extensions = async_graphql::ErrorExtensionValues::default();
    extensions.set("code", "TRUSTED_DOCUMENT_REQUIRED");
    error.extensions = Some(extensions);
    error
}

fn read(path: &Path) -> AppResult<Manifest> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        AppError::Config(format!("TRUSTED_DOCUMENTS: cannot read the manifest {}: {err}", path.display()))
    })?;
    parse(&text).map_err(|why| AppError::Config(format!("TRUSTED_DOCUMENTS: {}: {why}", path.display())))
}

/// A manifest in either format (see the module doc).
fn parse(text: &str) -> Result<Manifest, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("the manifest must be a JSON object")?;
    let mut manifest = Manifest::default();
    let mut add = |id: &str, body: &str| {
        manifest.hashes.insert(sha256_hex(body));
        manifest.by_id.insert(id.to_owned(), Arc::from(body));
    };
    if object.get("format").and_then(|f| f.as_str()) == Some("apollo-persisted-query-manifest") {
        let operations = object.get("operations").and_then(|o| o.as_array()).ok_or("`operations` must be a list")?;
        for (i, operation) in operations.iter().enumerate() {
            let id = operation.get("id").and_then(|v| v.as_str());
            let body = operation.get("body").and_then(|v| v.as_str());
            let (Some(id), Some(body)) = (id, body) else {
                return Err(format!("operation {i} needs a string `id` and `body`"));
            };
            add(id, body);
        }
    } else {
        for (id, body) in object {
            let body = body.as_str().ok_or_else(|| format!("the document `{id}` must be a string"))?;
            add(id, body);
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_manifest_formats_are_read() {
        let apollo = r#"{"format":"apollo-persisted-query-manifest","version":1,
            "operations":[{"id":"abc","body":"query A { me { id } }","name":"A","type":"query"}]}"#;
        let manifest = parse(apollo).expect("apollo");
        assert_eq!(manifest.by_id.get("abc").map(|t| &**t), Some("query A { me { id } }"));
        assert!(manifest.hashes.contains(&sha256_hex("query A { me { id } }")));
        let relay = r#"{"1f2e": "query B { me { handle } }"}"#;
        assert_eq!(parse(relay).expect("relay").by_id.len(), 1);
        assert!(parse("[1]").is_err());
        assert!(parse(r#"{"format":"apollo-persisted-query-manifest","operations":[{"id":1}]}"#).is_err());
    }
}
