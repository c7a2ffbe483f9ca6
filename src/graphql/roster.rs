//! Roster mutations: administrators create courses; administrators and a course's instructors
//! add and remove its members and change their roles. The rules are `forum::roster`'s; this
//! layer decodes the ids, runs each change in a transaction of its own, and after COMMIT tells
//! this instance's `Memberships`, so the very next request here already sees the change (a
//! removed member's like is refused at once). Other instances hear of it from the trigger on
//! `course_members`.

use async_graphql::{Context, ID, Object, Result, SimpleObject};
use chrono::{DateTime, Utc};
use sea_orm::TransactionTrait;

use super::context::{state, viewer};
use super::errors::nullable;
use super::ids::{self, NodeKind, encode};
use super::types::User;
use crate::error::{AppError, AppResult};
use crate::forum::courses::{CourseRow, Role};
use crate::forum::roster::{self, Actor, MemberChange};
use crate::state::AppState;

/// A course as the roster sees it: what it is, not what is said in it. An administrator
/// manages rosters without being a member, so roster answers never lead to a course's posts
/// (`Course.posts`); members read those through `course(id:)`.
#[derive(SimpleObject)]
pub(crate) struct RosterCourse {
    /// Global id of the course (the same as `Course.id`).
    pub id: ID,
    /// Short code, unique, e.g. `CS101`.
    pub code: String,
    /// Full name, e.g. `Introduction to Programming`.
    pub title: String,
    /// When the course was created.
    pub created_at: DateTime<Utc>,
}

impl From<CourseRow> for RosterCourse {
    fn from(row: CourseRow) -> Self {
        RosterCourse {
            id: encode(NodeKind::Course, row.id),
            code: row.code,
            title: row.title,
            created_at: row.created_at,
        }
    }
}

/// A person's place in a course after a roster mutation.
#[derive(SimpleObject)]
pub(crate) struct CourseMembership {
    /// The course whose roster changed.
    pub course: RosterCourse,
    /// The person added, removed or given a role.
    pub user: User,
    /// Their role now; null once removed.
    pub role: Option<Role>,
    /// False when the roster already was as asked and nothing was written (adding a member
    /// with the role they have, setting the role they have).
    pub changed: bool,
}

impl From<MemberChange> for CourseMembership {
    fn from(change: MemberChange) -> Self {
        CourseMembership {
            course: change.course.into(),
            user: User(change.user),
            role: change.role,
            changed: change.changed,
        }
    }
}

#[derive(Default)]
pub(crate) struct RosterMutations;

#[Object]
impl RosterMutations {
    /// Creates a course with no members (administrators only; add its instructors next). A
    /// code already taken is CONFLICT.
    async fn create_course(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "Short code, unique, e.g. `CS101`: 1 to 32 characters after trimming.")] code: String,
        #[graphql(desc = "Full name: 1 to 200 characters after trimming.")] title: String,
    ) -> Result<Option<RosterCourse>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let db = &state(ctx)?.db;
            let txn = db.begin().await.map_err(AppError::from)?;
            let row = roster::create_course(&txn, Actor::User(viewer.user_id), &code, &title).await?;
            txn.commit().await.map_err(AppError::from)?;
            Ok(row.into())
        })
        .await
    }

    /// Adds a user to a course (an administrator, or an instructor of the course). Adding a
    /// member with the role they have already succeeds with `changed: false`; with the other
    /// role it is BAD_USER_INPUT (use `setCourseMemberRole`).
    async fn add_course_member(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id` or `RosterCourse.id`).")] course_id: ID,
        #[graphql(desc = "The global id of the user to add (`User.id`).")] user_id: ID,
        #[graphql(desc = "The role to give them.")] role: Role,
    ) -> Result<Option<CourseMembership>> {
        nullable(async {
            let change = change_roster(ctx, &course_id, &user_id, Change::Add(role)).await?;
            Ok(change.into())
        })
        .await
    }

    /// Removes a member from a course; their posts, comments and likes stay. Someone who is not
    /// a member is NOT_FOUND. An instructor may not remove the course's last instructor.
    async fn remove_course_member(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id` or `RosterCourse.id`).")] course_id: ID,
        #[graphql(desc = "The global id of the member to remove (`User.id`).")] user_id: ID,
    ) -> Result<Option<CourseMembership>> {
        nullable(async {
            let change = change_roster(ctx, &course_id, &user_id, Change::Remove).await?;
            Ok(change.into())
        })
        .await
    }

    /// Changes a member's role. Someone who is not a member is NOT_FOUND. An instructor may not
    /// demote the course's last instructor.
    async fn set_course_member_role(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id` or `RosterCourse.id`).")] course_id: ID,
        #[graphql(desc = "The member's global id (`User.id`).")] user_id: ID,
        #[graphql(desc = "Their new role.")] role: Role,
    ) -> Result<Option<CourseMembership>> {
        nullable(async {
            let change = change_roster(ctx, &course_id, &user_id, Change::SetRole(role)).await?;
            Ok(change.into())
        })
        .await
    }
}

enum Change {
    Add(Role),
    Remove,
    SetRole(Role),
}

/// One membership change as the viewer, in its own transaction; then this instance is told.
async fn change_roster(ctx: &Context<'_>, course_id: &ID, user_id: &ID, change: Change) -> AppResult<MemberChange> {
    let viewer = viewer(ctx)?;
    let course_id = ids::decode_one(course_id, NodeKind::Course)?;
    let user_id = ids::decode_one(user_id, NodeKind::User)?;
    let state: &AppState = state(ctx)?;
    let actor = Actor::User(viewer.user_id);
    let txn = state.db.begin().await?;
    let result = match change {
        Change::Add(role) => roster::add_member(&txn, actor, course_id, user_id, role).await?,
        Change::Remove => roster::remove_member(&txn, actor, course_id, user_id).await?,
        Change::SetRole(role) => roster::set_role(&txn, actor, course_id, user_id, role).await?,
    };
    txn.commit().await?;
    if result.changed {
        state.memberships.changed(result.user.id);
    }
    Ok(result)
}
