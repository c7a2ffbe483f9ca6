//! Who a roster line or an `admin grant` names, by proof rather than by name.
//!
//! A person is (issuer, subject). A handle is only a name: the operator's own choice for a user
//! they created (`roster import`, `seed --demo`), but the person's own choice for a user their
//! first sign-in provisioned (taken from a token claim, often an e-mail address they picked).
//! So:
//!
//! - An identity already recorded finds its user, whatever handle the line gives.
//! - A handle finds a user only if the operator made that user (`provisioned_by = 'operator'`).
//!   A self-provisioned user's handle names nobody: they are named by issuer and subject, or
//!   by id.
//! - An identity is linked only to a user the operator made who has no identity yet; never to
//!   a self-provisioned user, nor to one linked to another identity.
//!
//! Anything else is a `Refusal` with its reason, which the caller reports (and skips).

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::{AppError, AppResult};

/// The advisory lock held by whatever links identities from the command line (`roster import`,
/// `admin grant`), so two of them never plan against the same unlinked user at once.
pub(crate) const LINK_LOCK: i64 = 4242015;

/// A user as these rules see them.
#[derive(Clone, Debug, FromQueryResult)]
pub(crate) struct Known {
    pub id: i64,
    pub handle: String,
    /// Provisioned by their own first sign-in (`provisioned_by = 'sign_in'`).
    pub self_provisioned: bool,
    /// The issuer of an identity linked to them, if any (the smallest, when several).
    pub linked_issuer: Option<String>,
}

const KNOWN: &str = "SELECT u.id, u.handle, u.provisioned_by = 'sign_in' AS self_provisioned, \
     (SELECT min(i.issuer) FROM user_identities i WHERE i.user_id = u.id) AS linked_issuer FROM users u";

/// The users with these handles.
pub(crate) async fn by_handles(db: &impl ConnectionTrait, handles: &[String]) -> AppResult<Vec<Known>> {
    Ok(Known::find_by_statement(stmt(&format!("{KNOWN} WHERE u.handle = ANY($1)"), [handles.to_vec().into()]))
        .all(db)
        .await?)
}

pub(crate) async fn by_handle(db: &impl ConnectionTrait, handle: &str) -> AppResult<Option<Known>> {
    Ok(Known::find_by_statement(stmt(&format!("{KNOWN} WHERE u.handle = $1"), [handle.into()])).one(db).await?)
}

pub(crate) async fn by_id(db: &impl ConnectionTrait, id: i64) -> AppResult<Option<Known>> {
    Ok(Known::find_by_statement(stmt(&format!("{KNOWN} WHERE u.id = $1"), [id.into()])).one(db).await?)
}

/// The user (issuer, subject) is linked to.
pub(crate) async fn by_identity(db: &impl ConnectionTrait, issuer: &str, subject: &str) -> AppResult<Option<Known>> {
    Ok(Known::find_by_statement(stmt(
        &format!("{KNOWN} JOIN user_identities f ON f.user_id = u.id WHERE f.issuer = $1 AND f.subject = $2"),
        [issuer.into(), subject.into()],
    ))
    .one(db)
    .await?)
}

/// Why a user may not be named or linked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Found by handle, but their handle is their own choice.
    SelfProvisioned { handle: String, issuer: Option<String> },
    /// Found by handle to receive an identity, but linked to another already.
    LinkedElsewhere { handle: String, issuer: String },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::SelfProvisioned { handle, issuer } => write!(
                f,
                "@{handle} was provisioned by their own sign-in{}: that handle is their choice, not proof of who \
                 they are; name them by issuer and subject (or by id)",
                issuer.as_deref().map(|i| format!(" at {i}")).unwrap_or_default()
            ),
            Refusal::LinkedElsewhere { handle, issuer } => write!(
                f,
                "@{handle} is already linked to another identity (at {issuer}); an identity is never linked to \
                 someone who has one"
            ),
        }
    }
}

/// May this user, found by `handle`, be taken as the person a line or grant names by that
/// handle alone? Only if the operator made them.
pub(crate) fn may_name_by_handle(user: &Known) -> Result<(), Refusal> {
    if user.self_provisioned {
        return Err(Refusal::SelfProvisioned { handle: user.handle.clone(), issuer: user.linked_issuer.clone() });
    }
    Ok(())
}

/// May an identity be linked to this user, found by handle? Only if the operator made them and
/// they have no identity yet.
pub(crate) fn may_link(user: &Known) -> Result<(), Refusal> {
    may_name_by_handle(user)?;
    if let Some(issuer) = &user.linked_issuer {
        return Err(Refusal::LinkedElsewhere { handle: user.handle.clone(), issuer: issuer.clone() });
    }
    Ok(())
}

/// Links the identities (issuer, subject, user id), each only to a user the operator made who
/// has no identity: the rule checked again by the statement itself, so that nothing that
/// changed since the caller's check can slip through. CONFLICT (and the caller rolls back) if
/// any link was not made.
pub(crate) async fn link_all(db: &impl ConnectionTrait, links: &[(String, String, i64)]) -> AppResult<()> {
    if links.is_empty() {
        return Ok(());
    }
    let issuers: Vec<String> = links.iter().map(|l| l.0.clone()).collect();
    let subjects: Vec<String> = links.iter().map(|l| l.1.clone()).collect();
    let users: Vec<i64> = links.iter().map(|l| l.2).collect();
    let made = db
        .execute_raw(stmt(
            "INSERT INTO user_identities (issuer, subject, user_id) \
             SELECT f.issuer, f.subject, f.user_id FROM unnest($1::text[], $2::text[], $3::bigint[]) \
               AS f(issuer, subject, user_id) \
             JOIN users u ON u.id = f.user_id AND u.provisioned_by = 'operator' \
             WHERE NOT EXISTS (SELECT 1 FROM user_identities i WHERE i.user_id = f.user_id) \
             ON CONFLICT (issuer, subject) DO NOTHING",
            [issuers.into(), subjects.into(), users.into()],
        ))
        .await?
        .rows_affected();
    if made != links.len() as u64 {
        return Err(AppError::Conflict(format!(
            "{} of {} identities could not be linked: a user or identity changed meanwhile (someone signed in?); \
             nothing was applied, run it again",
            links.len() as u64 - made,
            links.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(self_provisioned: bool, linked_issuer: Option<&str>) -> Known {
        Known { id: 1, handle: "dr_tran".into(), self_provisioned, linked_issuer: linked_issuer.map(str::to_owned) }
    }

    #[test]
    fn only_an_operators_unlinked_user_takes_an_identity() {
        assert_eq!(may_link(&user(false, None)), Ok(()));
        assert!(matches!(may_link(&user(false, Some("https://idp"))), Err(Refusal::LinkedElsewhere { .. })));
        assert!(matches!(may_link(&user(true, Some("https://idp"))), Err(Refusal::SelfProvisioned { .. })));
        assert!(matches!(may_link(&user(true, None)), Err(Refusal::SelfProvisioned { .. })));
    }

    #[test]
    fn a_self_provisioned_handle_names_nobody() {
        assert_eq!(may_name_by_handle(&user(false, Some("https://idp"))), Ok(()));
        let refusal = may_name_by_handle(&user(true, Some("https://idp"))).expect_err("refused");
        assert!(refusal.to_string().contains("own sign-in at https://idp"), "{refusal}");
    }
}
