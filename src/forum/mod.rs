//! The forum's rows and the SQL that reads and writes them: courses and membership, users,
//! posts, two-level comments; `roster`, the one service that changes who belongs to a course;
//! `unread`, what each member has read.
//! Visible SQL, one file per table family; no GraphQL in here.

pub(crate) mod audience;
pub(crate) mod comments;
pub(crate) mod courses;
pub(crate) mod paging;
pub(crate) mod posts;
pub(crate) mod questions;
pub(crate) mod roster;
pub(crate) mod search;
pub(crate) mod search_stats;
pub(crate) mod unread;
pub(crate) mod users;
