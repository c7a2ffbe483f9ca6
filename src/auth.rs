//! Authentication: HS256 bearer tokens (`sub` = user id, `exp` required) and the `Viewer`, the
//! authenticated user of one request with their course memberships loaded once, lazily.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use crate::error::{AppError, AppResult};
use crate::forum::courses::{self, Role};

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    iat: u64,
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
        let claims = Claims { sub: user_id.to_string(), iat: now, exp: now + ttl.as_secs() };
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
        validation.set_required_spec_claims(&["exp", "sub"]);
        validation.leeway = 5;
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

/// Who is asking, for one request (or one websocket connection). Over HTTP, memberships are
/// read from PostgreSQL at most once per request and never kept longer, so a member removed
/// from a course loses access with the next request. A websocket's viewer lives as long as the
/// connection and serves every operation on it, so it keeps nothing: each access check reads
/// the memberships as they are now.
pub struct Viewer {
    pub user_id: i64,
    memberships: OnceCell<Arc<HashMap<i64, Role>>>,
    /// A connection's viewer: memberships are never kept.
    read_every_time: bool,
}

impl Viewer {
    /// The viewer of one HTTP request.
    pub fn new(user_id: i64) -> Self {
        Self { user_id, memberships: OnceCell::new(), read_every_time: false }
    }

    /// The viewer of a websocket connection, shared by all its operations.
    pub fn for_connection(user_id: i64) -> Self {
        Self { user_id, memberships: OnceCell::new(), read_every_time: true }
    }

    /// The viewer's role in every course they belong to: read once per request, or every time
    /// for a connection.
    pub async fn memberships(&self, db: &DatabaseConnection) -> AppResult<Arc<HashMap<i64, Role>>> {
        if self.read_every_time {
            return Ok(Arc::new(courses::roles_of_user(db, self.user_id).await?));
        }
        self.memberships
            .get_or_try_init(|| async { courses::roles_of_user(db, self.user_id).await.map(Arc::new) })
            .await
            .cloned()
    }

    /// Whether this request has read the memberships already (never, for a connection).
    pub fn memberships_read(&self) -> bool {
        self.memberships.initialized()
    }

    /// Keeps memberships this request read together with something else (one statement
    /// instead of two, e.g. `forum::courses::find_with_roles_of_user`); a request that had
    /// already read them keeps its first reading, and a connection keeps nothing.
    pub fn remember_memberships(&self, memberships: HashMap<i64, Role>) {
        if !self.read_every_time {
            let _ = self.memberships.set(Arc::new(memberships));
        }
    }

    /// The viewer's role in `course_id`, or FORBIDDEN.
    pub async fn require_member(&self, db: &DatabaseConnection, course_id: i64) -> AppResult<Role> {
        role_in(&*self.memberships(db).await?, course_id)
    }
}

/// The role in `course_id` among `memberships`, or FORBIDDEN.
pub fn role_in(memberships: &HashMap<i64, Role>, course_id: i64) -> AppResult<Role> {
    memberships
        .get(&course_id)
        .copied()
        .ok_or_else(|| AppError::Forbidden("you are not a member of this course".into()))
}
