//! The forum's rows and the SQL that reads and writes them: courses and membership, users,
//! posts, two-level comments; `roster`, the one service that changes who belongs to a course.
//! Visible SQL, one file per table family; no GraphQL in here.

pub mod comments;
pub mod courses;
pub mod paging;
pub mod posts;
pub mod roster;
pub mod users;
