//! Bearer tokens: minting and verifying the server's own HS256 development tokens (`sub` = user
//! id; `exp`, `iss` and `aud` required), and what a verified token says. Tokens from a real
//! identity provider (RS256, ES256) are `jwks`'s; `verifier` tells the two apart.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};

/// `iss` of the server's own tokens. A token is only good for what it was minted for: the
/// same rule as for a provider's tokens, so both kinds carry and require `iss` and `aud`.
pub const DEV_ISSUER: &str = "course-forum";
/// `aud` of the server's own tokens.
pub const DEV_AUDIENCE: &str = "course-forum";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    iat: u64,
    iss: String,
    aud: String,
}

/// Mints and checks tokens with one secret.
#[derive(Clone)]
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl TokenKeys {
    pub fn new(secret: &str) -> AppResult<Self> {
        let bad = |e: jsonwebtoken::errors::Error| AppError::Config(format!("JWT_SECRET is unusable: {e}"));
        Ok(Self {
            encoding: EncodingKey::from_secret(secret.as_bytes()).map_err(bad)?,
            decoding: DecodingKey::from_secret(secret.as_bytes()).map_err(bad)?,
        })
    }

    /// A token for `user_id` valid for `ttl`.
    pub fn mint(&self, user_id: i64, ttl: Duration) -> AppResult<String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let claims = Claims {
            sub: user_id.to_string(),
            iat: now,
            exp: now + ttl.as_secs(),
            iss: DEV_ISSUER.to_owned(),
            aud: DEV_AUDIENCE.to_owned(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AppError::Internal(format!("cannot sign token: {e}")))
    }

    /// The user id a valid token speaks for.
    pub fn verify(&self, token: &str) -> AppResult<i64> {
        self.verify_token(token).map(|verified| verified.user_id)
    }

    /// The user a valid token speaks for, and until when.
    pub fn verify_token(&self, token: &str) -> AppResult<VerifiedToken> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        validation.set_issuer(&[DEV_ISSUER]);
        validation.set_audience(&[DEV_AUDIENCE]);
        validation.leeway = 5;
        // A token that says when it starts (`nbf`) is refused before then; ours carry none.
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map_err(|e| AppError::Unauthenticated(format!("invalid token: {e}")))?;
        let user_id = data
            .claims
            .sub
            .parse::<i64>()
            .map_err(|_| AppError::Unauthenticated("invalid token: sub is not a user id".into()))?;
        Ok(VerifiedToken { user_id, expires_at: UNIX_EPOCH + Duration::from_secs(data.claims.exp) })
    }

    /// Reads an `Authorization` header value (`Bearer <jwt>`).
    pub fn verify_header(&self, header: &str) -> AppResult<i64> {
        self.verify_bearer(header).map(|verified| verified.user_id)
    }

    /// `verify_token` of an `Authorization` header value (`Bearer <jwt>`).
    pub fn verify_bearer(&self, header: &str) -> AppResult<VerifiedToken> {
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| AppError::Unauthenticated("Authorization must be `Bearer <token>`".into()))?;
        self.verify_token(token.trim())
    }
}

/// What a valid token says: its user, and its `exp` (a websocket authenticated by it is closed
/// then).
#[derive(Clone, Copy, Debug)]
pub struct VerifiedToken {
    pub user_id: i64,
    pub expires_at: SystemTime,
}
