//! Bearer tokens to users, for HTTP requests and websocket connections alike. A token's header
//! `alg` says which kind it is: HS256 is the server's own development token (`tokens`, `sub` =
//! user id), RS256 and ES256 come from the identity provider and are checked against its JWKS
//! (`jwks`), their subject turned into a user by `identity`. Any other `alg` (`none`, HS512,
//! PS256, …) is refused before any key is looked at, so no token can choose a weaker check.
//!
//! Once a JWKS is configured, the provider is who says who people are: the development
//! secret would otherwise stay a key to every account (`sub` = any user id), so HS256 tokens
//! are refused unless ALLOW_DEV_TOKENS_WITH_JWKS says otherwise. Both kinds have `exp` and,
//! when they carry one, `nbf` checked, with the same leeway.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, Validation};
use sea_orm::DatabaseConnection;
use serde::Deserialize;

use super::identity::{self, Claimed};
use super::jwks::KeySet;
use super::tokens::{TokenKeys, VerifiedToken};
use crate::config::{JwksSettings, Settings};
use crate::error::{AppError, AppResult};

/// Seconds of clock difference tolerated on `exp` (and `nbf`), as for the server's own tokens.
const LEEWAY_SECS: u64 = 5;

/// Verifies bearer tokens of both kinds; cheap to clone.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    dev: TokenKeys,
    /// False when a JWKS is configured and ALLOW_DEV_TOKENS_WITH_JWKS is not set: then every
    /// HS256 token is refused, whatever it says.
    dev_accepted: bool,
    provider: Option<Provider>,
    db: DatabaseConnection,
}

/// The identity provider: its keys and what its tokens must say.
struct Provider {
    keys: KeySet,
    settings: JwksSettings,
}

/// The claims read from a provider's token; `iss`, `aud`, `exp` and `nbf` are checked by the
/// validation, the rest kept for the handle and name claims.
#[derive(Deserialize)]
struct ProviderClaims {
    sub: String,
    iss: String,
    exp: u64,
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

impl Authenticator {
    /// The server's own tokens from JWT_SECRET, and the provider's when JWKS is set (its key
    /// set is read now; see `KeySet::load`).
    pub async fn from_settings(settings: &Settings, db: DatabaseConnection) -> AppResult<Self> {
        let dev = TokenKeys::new(settings.jwt_secret()?)?;
        let provider = match settings.jwks()? {
            Some(jwks) => {
                let keys =
                    KeySet::load(jwks.source.clone(), settings.connect_timeout.max(Duration::from_secs(1))).await?;
                Some(Provider { keys, settings: jwks })
            }
            None => None,
        };
        let dev_accepted = provider.is_none() || settings.allow_dev_tokens_with_jwks;
        if provider.is_some() && dev_accepted {
            tracing::warn!(
                "ALLOW_DEV_TOKENS_WITH_JWKS: the server's own HS256 tokens are accepted beside the provider's; \
                 whoever holds JWT_SECRET can sign in as anyone"
            );
        }
        Ok(Self { inner: Arc::new(Inner { dev, dev_accepted, provider, db }) })
    }

    /// `verify_token` of an `Authorization` header value (`Bearer <jwt>`).
    pub async fn verify_bearer(&self, header: &str) -> AppResult<VerifiedToken> {
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| AppError::Unauthenticated("Authorization must be `Bearer <token>`".into()))?;
        self.verify_token(token.trim()).await
    }

    /// The user a valid token speaks for (provisioned if the provider's subject is new), and
    /// until when. Anything wrong with the token is UNAUTHENTICATED; a database failure while
    /// looking the subject up is that failure.
    pub async fn verify_token(&self, token: &str) -> AppResult<VerifiedToken> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| AppError::Unauthenticated(format!("invalid token: {e}")))?;
        match header.alg {
            Algorithm::HS256 if !self.inner.dev_accepted => Err(AppError::Unauthenticated(
                "invalid token: the server's own HS256 tokens are not accepted while JWKS is configured \
                 (set ALLOW_DEV_TOKENS_WITH_JWKS=true to accept them)"
                    .into(),
            )),
            Algorithm::HS256 => self.inner.dev.verify_token(token),
            Algorithm::RS256 | Algorithm::ES256 => match &self.inner.provider {
                Some(provider) => provider.verify(&self.inner.db, token, header.alg, header.kid.as_deref()).await,
                None => Err(AppError::Unauthenticated(format!(
                    "invalid token: {:?} tokens are not accepted (no JWKS is configured)",
                    header.alg
                ))),
            },
            other => Err(AppError::Unauthenticated(format!("invalid token: alg {other:?} is not accepted"))),
        }
    }
}

impl Provider {
    async fn verify(
        &self,
        db: &DatabaseConnection,
        token: &str,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> AppResult<VerifiedToken> {
        let kid =
            kid.ok_or_else(|| AppError::Unauthenticated("invalid token: its header names no key (kid)".into()))?;
        let key = self
            .keys
            .key(kid)
            .await
            .ok_or_else(|| AppError::Unauthenticated(format!("invalid token: unknown key id {kid:?}")))?;
        // The key decides the algorithm, never the token: an RS256 header on an EC key's kid
        // is refused here, before any signature check.
        if key.algorithm != alg {
            return Err(AppError::Unauthenticated(format!(
                "invalid token: alg {alg:?} does not match key {kid:?} ({:?})",
                key.algorithm
            )));
        }
        let mut validation = Validation::new(key.algorithm);
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.audience]);
        validation.leeway = LEEWAY_SECS;
        // Optional, as the JWT spec has it, but honoured when present: a token issued for
        // later is refused until then.
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<ProviderClaims>(token, &key.key, &validation)
            .map_err(|e| AppError::Unauthenticated(format!("invalid token: {e}")))?
            .claims;
        let text = |name: &str| match name {
            "sub" => Some(claims.sub.as_str()),
            _ => claims.other.get(name).and_then(serde_json::Value::as_str),
        };
        let claimed = Claimed {
            issuer: &claims.iss,
            subject: &claims.sub,
            handle: text(&self.settings.handle_claim),
            name: text(&self.settings.name_claim),
        };
        let user_id = identity::user_for(db, &claimed).await?;
        Ok(VerifiedToken { user_id, expires_at: UNIX_EPOCH + Duration::from_secs(claims.exp) })
    }
}
