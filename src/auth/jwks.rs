//! An identity provider's signing keys (its JWKS): read from a file or fetched from a URL at
//! start-up, kept in memory by key id (`kid`), and read again when a token names a key id not
//! in memory — at most once a minute, so a stream of tokens with made-up key ids cannot turn
//! this server into a load generator against the provider.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::JwksSource;
use crate::error::{AppError, AppResult};

/// The shortest time between two fetches caused by unknown key ids. Providers rotate keys by
/// publishing the new one before signing with it, so one fetch finds it; a minute bounds
/// what forged key ids can cost.
pub(crate) const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(60);

/// The largest key set accepted (real ones are a few kilobytes).
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// One usable verification key, and the one algorithm it verifies: a token must name that
/// algorithm, so an RSA key never checks an ES256 signature and the other way round.
pub struct JwksKey {
    pub algorithm: Algorithm,
    pub key: DecodingKey,
}

type Keys = HashMap<String, Arc<JwksKey>>;

/// The provider's keys, shared by every request of the process.
pub struct KeySet {
    source: JwksSource,
    http: reqwest::Client,
    keys: RwLock<Arc<Keys>>,
    /// When a missing key id last caused a fetch. The lock also makes concurrent misses wait
    /// for one fetch instead of each starting their own.
    last_refetch: Mutex<Option<Instant>>,
}

impl KeySet {
    /// Reads the key set once. A file that cannot be read or holds no usable key stops
    /// start-up (it is this server's own configuration); a URL that does not answer only
    /// warns, so a provider's outage does not keep the server down: the first token then
    /// fetches again.
    pub async fn load(source: JwksSource, timeout: Duration) -> AppResult<Self> {
        crate::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| AppError::Config(format!("cannot build the JWKS HTTP client: {e}")))?;
        let set = KeySet { source, http, keys: RwLock::new(Arc::new(HashMap::new())), last_refetch: Mutex::new(None) };
        match set.fetch().await {
            Ok(keys) => {
                tracing::info!(source = %set.describe(), keys = keys.len(), "JWKS loaded");
                set.replace(keys);
            }
            Err(why) => match &set.source {
                JwksSource::File(_) => return Err(AppError::Config(format!("JWKS: {why}"))),
                JwksSource::Url(_) => {
                    tracing::warn!(source = %set.describe(), error = %why, "JWKS not loaded; fetching again on the first token");
                }
            },
        }
        Ok(set)
    }

    /// The key `kid` names, reading the set again first if it is not known and the last such
    /// read is more than `REFETCH_AT_MOST_EVERY` ago.
    pub async fn key(&self, kid: &str) -> Option<Arc<JwksKey>> {
        if let Some(key) = self.known(kid) {
            return Some(key);
        }
        let mut last = self.last_refetch.lock().await;
        // Another request may have fetched while this one waited for the lock.
        if let Some(key) = self.known(kid) {
            return Some(key);
        }
        if last.is_some_and(|at| at.elapsed() < REFETCH_AT_MOST_EVERY) {
            tracing::debug!(kid, "unknown JWKS key id; fetched less than a minute ago, not fetching again");
            return None;
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(keys) => {
                tracing::info!(source = %self.describe(), kid, keys = keys.len(), "JWKS fetched again for an unknown key id");
                self.replace(keys);
            }
            Err(why) => tracing::warn!(source = %self.describe(), kid, error = %why, "JWKS fetch failed"),
        }
        self.known(kid)
    }

    fn known(&self, kid: &str) -> Option<Arc<JwksKey>> {
        self.keys.read().unwrap_or_else(|poisoned| poisoned.into_inner()).get(kid).cloned()
    }

    fn replace(&self, keys: Keys) {
        *self.keys.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(keys);
    }

    fn describe(&self) -> String {
        match &self.source {
            JwksSource::File(path) => path.display().to_string(),
            JwksSource::Url(url) => url.to_string(),
        }
    }

    async fn fetch(&self) -> Result<Keys, String> {
        let body = match &self.source {
            JwksSource::File(path) => {
                tokio::fs::read(path).await.map_err(|e| format!("cannot read {}: {e}", path.display()))?
            }
            JwksSource::Url(url) => {
                let response = self.http.get(url.clone()).send().await.map_err(|e| format!("GET {url}: {e}"))?;
                if !response.status().is_success() {
                    return Err(format!("GET {url} answered {}", response.status()));
                }
                if response.content_length().is_some_and(|len| len > MAX_JWKS_BYTES as u64) {
                    return Err(format!("GET {url}: the key set is larger than {MAX_JWKS_BYTES} bytes"));
                }
                response.bytes().await.map_err(|e| format!("GET {url}: {e}"))?.to_vec()
            }
        };
        if body.len() > MAX_JWKS_BYTES {
            return Err(format!("the key set is larger than {MAX_JWKS_BYTES} bytes"));
        }
        let keys = parse(&body)?;
        if keys.is_empty() {
            return Err("the key set holds no RS256 or ES256 signing key with a kid".into());
        }
        Ok(keys)
    }
}

/// The usable keys of a JWKS document (`{"keys": [...]}`). A key this server cannot use (no
/// `kid`, an encryption key, another algorithm or curve, a malformed one) is skipped rather
/// than failing the set: providers publish keys for other purposes beside the signing ones.
pub(crate) fn parse(body: &[u8]) -> Result<Keys, String> {
    #[derive(serde::Deserialize)]
    struct Document {
        keys: Vec<serde_json::Value>,
    }
    let document: Document =
        serde_json::from_slice(body).map_err(|e| format!("not a JWKS document (`{{\"keys\": [...]}}`): {e}"))?;
    let mut keys = HashMap::new();
    for raw in document.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(raw) else { continue };
        let Some(kid) = jwk.common.key_id.clone() else { continue };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))) {
            continue;
        }
        let Some(algorithm) = signing_algorithm(&jwk) else {
            tracing::debug!(kid, "JWKS key skipped: not an RS256 or ES256 key");
            continue;
        };
        match DecodingKey::from_jwk(&jwk) {
            Ok(key) => {
                keys.insert(kid, Arc::new(JwksKey { algorithm, key }));
            }
            Err(e) => tracing::warn!(kid, error = %e, "JWKS key skipped: malformed"),
        }
    }
    Ok(keys)
}

/// RS256 for an RSA key, ES256 for a P-256 key; the key's own `alg`, when it has one, must
/// agree. Nothing else is accepted.
fn signing_algorithm(jwk: &Jwk) -> Option<Algorithm> {
    let by_key = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
        _ => return None,
    };
    match jwk.common.key_algorithm {
        None => Some(by_key),
        Some(KeyAlgorithm::RS256) if by_key == Algorithm::RS256 => Some(by_key),
        Some(KeyAlgorithm::ES256) if by_key == Algorithm::ES256 => Some(by_key),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_other_kinds_are_skipped() {
        let body = br#"{"keys": [
            {"kty": "oct", "kid": "secret", "k": "c2VjcmV0"},
            {"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "ps", "alg": "PS256", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "rs", "alg": "RS256", "use": "sig", "n": "AQAB", "e": "AQAB"}
        ]}"#;
        let keys = parse(body).expect("a JWKS document");
        assert_eq!(keys.keys().collect::<Vec<_>>(), vec!["rs"]);
        assert_eq!(keys["rs"].algorithm, Algorithm::RS256);
    }

    #[test]
    fn a_document_without_keys_is_refused() {
        assert!(parse(b"{}").is_err());
        assert!(parse(b"not json").is_err());
    }
}
