//! The `setSearchLanguage` mutation: staff choose how a course's text is split into
//! searchable words, and the course is re-indexed. The search fields and their types are
//! `graphql::types::search`'s; the SQL `forum::search`'s.

use async_graphql::{Context, ID, Object, Result};

use super::context::{state, viewer};
use super::errors::nullable;
use super::ids::{self, NodeKind};
use super::mutation::{require_staff, within_limit};
use super::types::Course;
use super::types::search::SearchLanguage;
use crate::forum::search;
use crate::kv::ratelimit::WriteKind;

#[derive(Default)]
pub(crate) struct SearchMutations;

#[Object]
impl SearchMutations {
    /// Staff set the course's search language (FORBIDDEN for students), and every post,
    /// comment and reply of the course is re-indexed with it in the same transaction: searches
    /// find them by the new language's words at once.
    async fn set_search_language(
        &self,
        ctx: &Context<'_>,
        #[graphql(desc = "The course's global id (`Course.id`).")] course_id: ID,
        #[graphql(desc = "ENGLISH (stemmed, stop words left out) or SIMPLE (every word as written).")]
        language: SearchLanguage,
    ) -> Result<Option<Course>> {
        nullable(async {
            let viewer = viewer(ctx)?;
            let course_id = ids::decode_one(&course_id, NodeKind::Course)?;
            within_limit(ctx, viewer.user_id, WriteKind::Edit).await?;
            let (course, role) = super::access::course(ctx, course_id).await?;
            require_staff(role, "set the course's search language")?;
            search::set_language(&state(ctx)?.db, course.course_id, language.language()).await?;
            Ok(Course::known(course.course_id))
        })
        .await
    }
}
