//! Which user an identity provider's subject is. `user_identities` maps (issuer, subject) to a
//! user; the first valid token of a subject not in it provisions the user, with a handle and a
//! display name taken from the token's claims. A handle someone else holds gets a suffix
//! derived from the issuer and subject only, so the same person gets the same handle whichever
//! instance provisions them and however often it is computed.
//!
//! A user provisioned here is marked `provisioned_by = 'sign_in'`: their handle is a claim
//! they chose, so `roster import` and `admin grant` never find them by it, and never link
//! another identity to them (`forum::roster::people`).

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, FromQueryResult, Statement, TransactionTrait, Value};

use crate::error::{AppError, AppResult};

/// What a verified token says about its person.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claimed<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    /// The handle claim's value, as the provider sent it.
    pub handle: Option<&'a str>,
    /// The name claim's value, as the provider sent it.
    pub name: Option<&'a str>,
}

/// Handles tried before giving up: the claimed one, then suffixed ones. A second suffixed
/// collision already needs someone to have taken `alice_1a2b3c4d` on purpose.
const HANDLE_ATTEMPTS: u32 = 6;
/// Longest handle (the `users.handle` CHECK).
const MAX_HANDLE: usize = 32;
/// Longest display name (the `users.display_name` CHECK), in characters.
const MAX_NAME: usize = 100;
/// A suffix: `_` and eight hex digits.
const SUFFIX_LEN: usize = 9;
/// The handle of a person whose handle claim is missing or has nothing usable in it.
const FALLBACK_HANDLE: &str = "user";

#[derive(FromQueryResult)]
struct UserId {
    user_id: i64,
}

/// The user `claimed` is, provisioned on first sight. Two first requests for the same
/// subject at once end with one user: each creates its user and claims (issuer, subject) in
/// one transaction, the primary key lets only one claim win, and the loser rolls its user back
/// and takes the winner's.
pub(crate) async fn user_for(db: &DatabaseConnection, claimed: &Claimed<'_>) -> AppResult<i64> {
    if claimed.issuer.is_empty() || claimed.issuer.chars().count() > 500 {
        return Err(AppError::Unauthenticated("invalid token: iss must be 1 to 500 characters".into()));
    }
    if claimed.subject.is_empty() || claimed.subject.chars().count() > 255 {
        return Err(AppError::Unauthenticated("invalid token: sub must be 1 to 255 characters".into()));
    }
    if let Some(user_id) = recorded(db, claimed).await? {
        return Ok(user_id);
    }
    let base = handle_base(claimed.handle);
    let txn = db.begin().await?;
    let mut created = None;
    for attempt in 0..HANDLE_ATTEMPTS {
        let handle = handle_candidate(&base, claimed.issuer, claimed.subject, attempt);
        let name = display_name(claimed.name, &handle);
        // Waits for a concurrent insert of the same handle to commit or roll back.
        let row = UserId::find_by_statement(stmt(
            "INSERT INTO users (handle, display_name, provisioned_by) VALUES ($1, $2, 'sign_in') \
             ON CONFLICT (handle) DO NOTHING RETURNING id AS user_id",
            [handle.into(), name.into()],
        ))
        .one(&txn)
        .await?;
        if let Some(row) = row {
            created = Some(row.user_id);
            break;
        }
    }
    let Some(user_id) = created else {
        txn.rollback().await?;
        return Err(AppError::Internal(format!(
            "no free handle for a new user from {} after {HANDLE_ATTEMPTS} attempts",
            claimed.issuer
        )));
    };
    let claimed_now = UserId::find_by_statement(stmt(
        "INSERT INTO user_identities (issuer, subject, user_id) VALUES ($1, $2, $3) \
         ON CONFLICT (issuer, subject) DO NOTHING RETURNING user_id",
        [claimed.issuer.into(), claimed.subject.into(), user_id.into()],
    ))
    .one(&txn)
    .await?;
    if claimed_now.is_some() {
        txn.commit().await?;
        tracing::info!(user_id, issuer = claimed.issuer, "provisioned a user on their first sign-in");
        return Ok(user_id);
    }
    // A concurrent first request won; its row is committed (the insert above waited for it).
    txn.rollback().await?;
    recorded(db, claimed).await?.ok_or_else(|| {
        AppError::Internal("the identity another request provisioned is gone (its user was deleted meanwhile)".into())
    })
}

async fn recorded(db: &impl ConnectionTrait, claimed: &Claimed<'_>) -> AppResult<Option<i64>> {
    let row = UserId::find_by_statement(stmt(
        "SELECT user_id FROM user_identities WHERE issuer = $1 AND subject = $2",
        [claimed.issuer.into(), claimed.subject.into()],
    ))
    .one(db)
    .await?;
    Ok(row.map(|row| row.user_id))
}

/// The handle a claim asks for, made to fit `^[a-z0-9_]{2,32}$`: lowercased, the part before
/// an `@` (providers often put an e-mail address there), every run of other characters one
/// `_`, no `_` at either end. Nothing usable left: `user`.
pub(crate) fn handle_base(claim: Option<&str>) -> String {
    let claim = claim.unwrap_or_default().trim();
    let local = claim.split('@').next().unwrap_or_default();
    let mut handle = String::with_capacity(local.len().min(MAX_HANDLE));
    for c in local.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            handle.push(c);
        } else if !handle.ends_with('_') {
            handle.push('_');
        }
    }
    let handle: String = handle.trim_matches('_').chars().take(MAX_HANDLE).collect();
    let handle = handle.trim_end_matches('_');
    if handle.len() < 2 { FALLBACK_HANDLE.to_owned() } else { handle.to_owned() }
}

/// The handle tried at `attempt`: the base first, then the base (shortened to fit) with a
/// suffix from `stable_hash` of the issuer, subject and attempt: the same inputs give the
/// same handle on every instance and every run.
pub fn handle_candidate(base: &str, issuer: &str, subject: &str, attempt: u32) -> String {
    if attempt == 0 {
        return base.to_owned();
    }
    let hash = stable_hash(&[issuer.as_bytes(), subject.as_bytes(), &attempt.to_be_bytes()]);
    let kept: String = base.chars().take(MAX_HANDLE - SUFFIX_LEN).collect();
    format!("{}_{:08x}", kept.trim_end_matches('_'), hash as u32)
}

/// FNV-1a (64 bit) over the parts, each followed by a 0xff byte (which UTF-8 never contains) so
/// that ("ab", "c") and ("a", "bc") differ. Not for secrets: only to spread handles, stably
/// (std's hashers are randomly seeded per process).
pub(crate) fn stable_hash(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for part in parts {
        for &byte in part.iter().chain(std::iter::once(&0xff)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash
}

/// The name claim without control characters, trimmed, at most 100 characters; the handle
/// when nothing is left.
pub(crate) fn display_name(claim: Option<&str>, handle: &str) -> String {
    let cleaned: String = claim.unwrap_or_default().chars().filter(|c| !c.is_control()).collect();
    let name: String = cleaned.trim().chars().take(MAX_NAME).collect();
    let name = name.trim_end();
    if name.is_empty() { handle.to_owned() } else { name.to_owned() }
}

fn stmt<I: IntoIterator<Item = Value>>(sql: &str, values: I) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_fit_the_users_check() {
        assert_eq!(handle_base(Some("Alice")), "alice");
        assert_eq!(handle_base(Some("Alice.Smith@Example.com")), "alice_smith");
        assert_eq!(handle_base(Some("  Jürgen   Groß ")), "j_rgen_gro");
        assert_eq!(handle_base(Some("__x__")), "user");
        assert_eq!(handle_base(Some("@example.com")), "user");
        assert_eq!(handle_base(None), "user");
        assert_eq!(handle_base(Some(&"a".repeat(40))), "a".repeat(32));
        assert_eq!(handle_base(Some(&format!("{}.b", "a".repeat(31)))), "a".repeat(31));
    }

    #[test]
    fn suffixes_are_stable_and_fit() {
        let first = handle_candidate("alice", "https://idp.example", "subject-1", 1);
        assert_eq!(first, handle_candidate("alice", "https://idp.example", "subject-1", 1));
        assert_ne!(first, handle_candidate("alice", "https://idp.example", "subject-2", 1));
        assert_ne!(first, handle_candidate("alice", "https://idp.example", "subject-1", 2));
        // Pinned (computed independently): a change here would give people other handles
        // than the ones instances already handed out.
        assert_eq!(first, "alice_f80d12a7");
        let long = handle_candidate(&"a".repeat(32), "iss", "sub", 1);
        assert_eq!(long.len(), 32);
        assert!(long.starts_with(&"a".repeat(23)) && long.as_bytes()[23] == b'_', "{long}");
        assert_eq!(handle_candidate("alice", "iss", "sub", 0), "alice");
    }

    #[test]
    fn display_names_fit_the_users_check() {
        assert_eq!(display_name(Some("  Alice Smith \n"), "alice"), "Alice Smith");
        assert_eq!(display_name(Some("   "), "alice"), "alice");
        assert_eq!(display_name(None, "alice"), "alice");
        assert_eq!(display_name(Some(&"é".repeat(150)), "x").chars().count(), 100);
    }
}
