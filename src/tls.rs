//! TLS for the process's outgoing HTTPS (an identity provider's JWKS): rustls with its `ring`
//! provider, the one the PostgreSQL driver already builds. reqwest is built without a provider
//! of its own (Cargo.toml), so one must be installed before any `reqwest::Client` is built.

/// Makes rustls's `ring` provider the process default. Idempotent; cheap to call before
/// building any HTTP client.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err only when another thread installed one first, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
