//! Who sees what of a post: its kind, whether it is private (its author and staff only), and
//! whether its author, or a comment's, is hidden behind a pseudonym. The rules live here, in
//! one place, and every path that hands a post, a comment, a reply or a notification to a
//! reader asks them (`graphql::types`, `graphql::access`, the lists and the live streams).
//!
//! **Staff** are a course's instructors.
//!
//! **Anonymity.** A course allows anonymous writing `off`, to `classmates` or to `everyone`;
//! a post, comment or reply written anonymously records whom it hides its author from as the
//! course allowed it then, so a later change of the setting unmasks nothing. Hidden from a
//! reader, the author is replaced by a pseudonym: an HMAC of the thread and the author under a
//! server secret (`server_secrets`), so it is stable within a thread, different across
//! threads, and nobody without the secret can compute whose it is. The author always sees
//! themselves; staff see the author unless it was hidden from everyone.

use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use sea_orm::{ConnectionTrait, FromQueryResult};
use tokio::sync::OnceCell;

use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::courses::Role;

/// What a post is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, async_graphql::Enum)]
pub enum PostKind {
    /// Asks something: it can be answered (an accepted answer) and resolved.
    Question,
    /// Anything else said to the course.
    Discussion,
    /// Staff speaking to the whole course: every member is notified.
    Announcement,
}

impl PostKind {
    pub(crate) fn parse(raw: &str) -> AppResult<Self> {
        match raw {
            "question" => Ok(PostKind::Question),
            "discussion" => Ok(PostKind::Discussion),
            "announcement" => Ok(PostKind::Announcement),
            other => Err(AppError::Internal(format!("unknown post kind `{other}`"))),
        }
    }

    /// The spelling `posts.kind` stores.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PostKind::Question => "question",
            PostKind::Discussion => "discussion",
            PostKind::Announcement => "announcement",
        }
    }
}

/// Whom a course lets its members hide from when they write anonymously.
#[derive(Clone, Copy, Debug, PartialEq, Eq, async_graphql::Enum)]
pub enum Anonymity {
    /// Everything is signed.
    Off,
    /// Other students see a pseudonym; staff see the author.
    Classmates,
    /// Everyone but the author sees a pseudonym, staff included.
    Everyone,
}

impl Anonymity {
    pub(crate) fn parse(raw: &str) -> AppResult<Self> {
        match raw {
            "off" => Ok(Anonymity::Off),
            "classmates" => Ok(Anonymity::Classmates),
            "everyone" => Ok(Anonymity::Everyone),
            other => Err(AppError::Internal(format!("unknown anonymity `{other}`"))),
        }
    }

    /// The spelling `courses.anonymity` stores.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Anonymity::Off => "off",
            Anonymity::Classmates => "classmates",
            Anonymity::Everyone => "everyone",
        }
    }

    /// What an anonymous write in a course with this setting records in `anonymous_to`, or
    /// BAD_USER_INPUT when the course does not allow it.
    pub(crate) fn anonymous_to(self) -> AppResult<&'static str> {
        match self {
            Anonymity::Off => Err(AppError::bad_input("this course does not allow anonymous writing")),
            Anonymity::Classmates => Ok("classmates"),
            Anonymity::Everyone => Ok("everyone"),
        }
    }
}

/// Whom a course lets its members hide from when they write anonymously
/// (`forum::audience::Anonymity`); NOT_FOUND for no such course.
pub(crate) async fn course_anonymity(db: &impl ConnectionTrait, course_id: i64) -> AppResult<Anonymity> {
    #[derive(FromQueryResult)]
    struct Setting {
        anonymity: String,
    }
    let row = Setting::find_by_statement(stmt("SELECT anonymity FROM courses WHERE id = $1", [course_id.into()]))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("course"))?;
    Anonymity::parse(&row.anonymity)
}

/// Whether a reader sees who wrote something: `anonymous_to` is the row's column (NULL when
/// signed), `role` the reader's in the course.
pub(crate) fn author_visible(reader: i64, role: Role, author: i64, anonymous_to: Option<&str>) -> bool {
    match anonymous_to {
        None => true,
        Some(_) if reader == author => true,
        Some("classmates") => role == Role::Instructor,
        Some(_) => false,
    }
}

/// Whether a reader may see a post at all (and so its comments and replies): a private post
/// only by its author and staff.
pub(crate) fn may_read(reader: i64, role: Role, author: i64, private: bool) -> bool {
    !private || reader == author || role == Role::Instructor
}

/// The SQL condition a list of posts (aliased or not as `posts`) adds for a reader: `$n` is
/// the reader's id, `staff` whether they are staff (then nothing is hidden).
pub(crate) fn readable_sql(reader_param: usize, staff: bool) -> String {
    if staff { "TRUE".to_owned() } else { format!("(NOT private OR user_id = ${reader_param})") }
}

/// Names for anonymous writers, keyed by the `pseudonyms` server secret (read once, on first
/// use, from `server_secrets`). Cheap to clone.
#[derive(Clone)]
pub struct Pseudonyms {
    key: Arc<OnceCell<Hmac<sha2::Sha256>>>,
}

const ADJECTIVES: [&str; 32] = [
    "Amber", "Brave", "Calm", "Clever", "Coral", "Curious", "Daring", "Eager", "Gentle", "Golden", "Happy", "Honest",
    "Jolly", "Keen", "Kind", "Lively", "Lucky", "Mellow", "Merry", "Misty", "Noble", "Patient", "Quiet", "Rapid",
    "Silver", "Steady", "Sunny", "Swift", "Tidy", "Vivid", "Wise", "Witty",
];
const ANIMALS: [&str; 32] = [
    "Badger", "Beaver", "Bison", "Crane", "Dolphin", "Falcon", "Ferret", "Finch", "Fox", "Gecko", "Heron", "Ibis",
    "Koala", "Lemur", "Lynx", "Marten", "Moose", "Newt", "Otter", "Owl", "Panda", "Puffin", "Quail", "Raven", "Robin",
    "Salmon", "Seal", "Sparrow", "Stork", "Tapir", "Walrus", "Wren",
];

impl Default for Pseudonyms {
    fn default() -> Self {
        Self::new()
    }
}

impl Pseudonyms {
    pub(crate) fn new() -> Self {
        Self { key: Arc::new(OnceCell::new()) }
    }

    /// The name `author` goes by in the thread of `post_id`: "Anonymous Calm Heron 42". One of
    /// 102,400, so two anonymous writers of one thread share a name with odds of 1 in 102,400.
    pub(crate) async fn name(&self, db: &impl ConnectionTrait, post_id: i64, author: i64) -> AppResult<String> {
        let key = self
            .key
            .get_or_try_init(|| async {
                #[derive(FromQueryResult)]
                struct Secret {
                    secret: String,
                }
                let row =
                    Secret::find_by_statement(stmt("SELECT secret FROM server_secrets WHERE name = 'pseudonyms'", []))
                        .one(db)
                        .await?
                        .ok_or_else(|| {
                            AppError::Internal("server_secrets has no `pseudonyms` row: run migrations".into())
                        })?;
                Hmac::<sha2::Sha256>::new_from_slice(row.secret.as_bytes())
                    .map_err(|e| AppError::Internal(format!("pseudonym key: {e}")))
            })
            .await?;
        Ok(pseudonym_under(key, post_id, author))
    }
}

/// The pseudonym of `author` in the thread of `post_id` under `key` (`Pseudonyms::name`).
fn pseudonym_under(key: &Hmac<sha2::Sha256>, post_id: i64, author: i64) -> String {
    let mut mac = key.clone();
    mac.update(format!("thread:{post_id}:author:{author}").as_bytes());
    let digest = mac.finalize().into_bytes();
    let adjective = ADJECTIVES[usize::from(digest[0]) % ADJECTIVES.len()];
    let animal = ANIMALS[usize::from(digest[1]) % ANIMALS.len()];
    let number = u16::from_be_bytes([digest[2], digest[3]]) % 100;
    format!("Anonymous {adjective} {animal} {number}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_author_and_staff_see_through_classmates_anonymity_and_nobody_else_does() {
        assert!(author_visible(7, Role::Student, 7, Some("classmates")));
        assert!(author_visible(1, Role::Instructor, 7, Some("classmates")));
        assert!(!author_visible(2, Role::Student, 7, Some("classmates")));
        assert!(!author_visible(1, Role::Instructor, 7, Some("everyone")));
        assert!(author_visible(7, Role::Student, 7, Some("everyone")));
        assert!(author_visible(2, Role::Student, 7, None));
    }

    #[test]
    fn a_pseudonym_is_stable_in_its_thread_and_another_elsewhere_or_under_another_secret() {
        let key = |secret: &str| Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
        let (key, other_key) = (key("a server secret"), key("another server's secret"));
        let name = pseudonym_under(&key, 10, 7);
        assert!(name.starts_with("Anonymous "), "{name}");
        assert_eq!(pseudonym_under(&key, 10, 7), name, "stable for the same thread and author");
        // Another thread, another writer in the thread, another secret: another name (odds of a
        // clash are 1 in 102,400 each; these inputs are fixed, so the test is deterministic).
        let elsewhere: Vec<String> = (11..31).map(|thread| pseudonym_under(&key, thread, 7)).collect();
        assert!(elsewhere.iter().all(|other| *other != name), "{name} in {elsewhere:?}");
        assert_ne!(pseudonym_under(&key, 10, 8), name);
        assert_ne!(pseudonym_under(&other_key, 10, 7), name);
    }

    #[test]
    fn a_private_post_is_its_authors_and_staffs() {
        assert!(may_read(7, Role::Student, 7, true));
        assert!(may_read(1, Role::Instructor, 7, true));
        assert!(!may_read(2, Role::Student, 7, true));
        assert!(may_read(2, Role::Student, 7, false));
    }
}
