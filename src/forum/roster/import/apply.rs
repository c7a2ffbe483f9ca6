//! Applying a plan: a few set-wise statements in the caller's transaction, whatever the file's
//! size.

use std::collections::{BTreeSet, HashMap};

use sea_orm::ConnectionTrait;

use super::Plan;
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::roster::people;
use crate::forum::roster::{ensure_course, ensure_users};

/// Writes the plan in the caller's transaction (call right after `plan`, in the same one), a
/// few set-wise statements whatever the file's size. Returns the users whose memberships
/// changed.
pub(crate) async fn apply(db: &impl ConnectionTrait, plan: &Plan) -> AppResult<Vec<i64>> {
    let mut course_ids = plan.course_ids.clone();
    for (code, title) in &plan.courses_created {
        let (course, _) = ensure_course(db, code, title).await?;
        course_ids.insert(code.clone(), course.id);
    }
    let mut user_ids = plan.user_ids.clone();
    let ensured = ensure_users(db, &plan.users_created).await?;
    // A handle planned as new but taken meanwhile (a first sign-in does not wait for the
    // import's lock) is someone else: their user must not receive this file's roles or identity.
    if ensured.created.len() != plan.users_created.len() {
        let taken: Vec<&str> = plan
            .users_created
            .iter()
            .map(|(handle, _)| handle.as_str())
            .filter(|handle| !ensured.created.iter().any(|c| c == handle))
            .collect();
        return Err(AppError::Conflict(format!(
            "@{} signed up while the import ran; nothing was applied: run it again",
            taken.join(", @")
        )));
    }
    user_ids.extend(ensured.ids);

    let id = |map: &HashMap<String, i64>, key: &str| {
        map.get(key).copied().ok_or_else(|| AppError::Internal(format!("roster import lost the id of `{key}`")))
    };
    let mut changed = BTreeSet::new();
    if !plan.added.is_empty() {
        let (mut courses, mut users, mut roles) = (Vec::new(), Vec::new(), Vec::new());
        for (code, handle, role) in &plan.added {
            courses.push(id(&course_ids, code)?);
            users.push(id(&user_ids, handle)?);
            roles.push(role.as_str().to_owned());
        }
        changed.extend(users.iter().copied());
        db.execute_raw(stmt(
            "INSERT INTO course_members (course_id, user_id, role) \
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[])",
            [courses.into(), users.into(), roles.into()],
        ))
        .await?;
    }
    if !plan.removed.is_empty() {
        let (mut courses, mut users) = (Vec::new(), Vec::new());
        for (code, handle, _) in &plan.removed {
            courses.push(id(&course_ids, code)?);
            users.push(id(&user_ids, handle)?);
        }
        changed.extend(users.iter().copied());
        db.execute_raw(stmt(
            "DELETE FROM course_members m USING unnest($1::bigint[], $2::bigint[]) AS r(course_id, user_id) \
             WHERE m.course_id = r.course_id AND m.user_id = r.user_id",
            [courses.into(), users.into()],
        ))
        .await?;
    }
    if !plan.role_changes.is_empty() {
        let (mut courses, mut users, mut roles) = (Vec::new(), Vec::new(), Vec::new());
        for (code, handle, _, role) in &plan.role_changes {
            courses.push(id(&course_ids, code)?);
            users.push(id(&user_ids, handle)?);
            roles.push(role.as_str().to_owned());
        }
        changed.extend(users.iter().copied());
        db.execute_raw(stmt(
            "UPDATE course_members m SET role = r.role \
             FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS r(course_id, user_id, role) \
             WHERE m.course_id = r.course_id AND m.user_id = r.user_id",
            [courses.into(), users.into(), roles.into()],
        ))
        .await?;
    }
    let mut links = Vec::with_capacity(plan.identities_linked.len());
    for (handle, issuer, subject) in &plan.identities_linked {
        links.push((issuer.clone(), subject.clone(), id(&user_ids, handle)?));
    }
    people::link_all(db, &links).await?;
    tracing::info!(summary = %plan.summary(), "roster import applied");
    Ok(changed.into_iter().collect())
}
