//! `course-forum roster import`: an LMS roster export (CSV) made true in one transaction.
//!
//! The file is the complete roster of every course it names: members of those courses who are
//! not in it are removed, people and courses it names that are missing are created, roles
//! follow the file. Courses it does not name are not touched. So a nightly sync run twice
//! changes nothing the second time.
//!
//! Three steps, so that a file is applied entirely or not at all:
//! 1. `parse` checks every line on its own and against the others, and reports every bad line
//!    with its number (not just the first: whoever fixes the export wants the whole list);
//! 2. `plan` reads what the named courses hold now, under the roster locks, finds who each
//!    person is (`people`: by issuer and subject first; by handle only a user the operator
//!    made), and computes the difference (a `Plan`). A person who cannot be found that way
//!    (their handle belongs to someone who signed themselves up, or to someone linked to
//!    another identity) has their lines skipped, each with its reason, and the rest applies;
//! 3. `apply` writes the plan, set-wise. The caller commits, or rolls back for `--dry-run`.
//!
//! Its files are those steps: `parse` (the file, line by line and against itself), `plan`
//! (the file against the database: who each person is, and the difference) and `apply`; here
//! the one error a line can have, shared by all three.

mod apply;
mod parse;
mod plan;

use std::fmt;

use crate::error::AppError;

pub(crate) use apply::apply;
pub(crate) use parse::{RosterFile, parse};
pub(crate) use plan::{ImportError, Plan, plan};

/// One problem with one line of the file (1-based, as an editor shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LineError {
    pub line: u64,
    pub message: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Every bad line, as one error: BAD_USER_INPUT, a line per problem.
pub(crate) fn bad_file(name: &str, mut errors: Vec<LineError>) -> AppError {
    errors.sort_by_key(|e| e.line);
    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    AppError::BadUserInput(format!("{name}: {} problem(s), nothing was applied:\n{}", errors.len(), lines.join("\n")))
}
