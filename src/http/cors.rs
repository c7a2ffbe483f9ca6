//! Which browser origins may use the API: CORS for `/graphql` (preflight and the actual
//! request) and the `Origin` check of the websocket upgrade, from one list
//! (`CORS_ALLOWED_ORIGINS`) plus the server's own origin.
//!
//! The server's own origin is the one whose host (and port) is the request's `Host`: a page
//! served by this server (GraphiQL at `/`, the demo) is always allowed, under whatever name
//! and scheme it was reached, without configuring it. Behind a proxy that rewrites `Host`,
//! list the public origin instead.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, header};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// How long a browser may reuse a preflight answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(3600);

/// The configured origins, already in the form browsers send (`config::parse_origin`).
#[derive(Clone, Debug, Default)]
pub(super) struct AllowedOrigins(Arc<[String]>);

impl AllowedOrigins {
    pub(super) fn new(origins: &[String]) -> Self {
        Self(origins.iter().cloned().collect())
    }

    /// True when a request carrying this `Origin` may proceed: a listed origin, or the
    /// server's own (same host and port as the request's `Host`). `Origin: null` (sandboxed
    /// frames, some redirects) is never allowed.
    pub(super) fn allows(&self, origin: &HeaderValue, headers: &HeaderMap) -> bool {
        let Ok(origin) = origin.to_str() else { return false };
        self.0.iter().any(|allowed| allowed == origin) || same_host(origin, headers.get(header::HOST))
    }

    /// The CORS layer for `/graphql`: POST (and GET) with `Authorization` and `Content-Type`
    /// from allowed origins. No credentials: the API reads bearer tokens, never cookies.
    pub(super) fn layer(&self) -> CorsLayer {
        let origins = self.clone();
        CorsLayer::new()
            .allow_origin(AllowOrigin::predicate(move |origin, request| origins.allows(origin, &request.headers)))
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .expose_headers([header::HeaderName::from_static("x-request-id")])
            .max_age(PREFLIGHT_MAX_AGE)
    }
}

/// `Origin` is `scheme://host[:port]`; `Host` is `host[:port]`, both without a default port.
fn same_host(origin: &str, host: Option<&HeaderValue>) -> bool {
    let Some(host) = host.and_then(|h| h.to_str().ok()) else { return false };
    let authority = match origin.split_once("://") {
        Some(("http" | "https", authority)) => authority,
        _ => return false,
    };
    !authority.is_empty() && authority.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).expect("host"));
        headers
    }

    #[test]
    fn listed_and_own_origins_are_allowed_others_not() {
        let origins = AllowedOrigins::new(&["https://app.example.edu".to_owned()]);
        let at = headers("forum.example.edu");
        let allows = |origin: &str| origins.allows(&HeaderValue::from_str(origin).expect("origin"), &at);
        assert!(allows("https://app.example.edu"));
        assert!(allows("https://forum.example.edu"), "the server's own");
        assert!(allows("http://FORUM.example.edu"));
        assert!(!allows("https://forum.example.edu:8443"), "another port is another origin");
        assert!(!allows("https://evil.example"));
        assert!(!allows("https://app.example.edu.evil.example"));
        assert!(!allows("null"));
        assert!(!allows("forum.example.edu"));
    }
}
