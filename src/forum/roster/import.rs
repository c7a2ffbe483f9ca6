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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io::Read;

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::people::{self, Known};
use super::{
    MAX_CODE_CHARS, MAX_DISPLAY_NAME_CHARS, MAX_ISSUER_CHARS, MAX_SUBJECT_CHARS, MAX_TITLE_CHARS, check_handle,
    check_text, ensure_users,
};
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::courses::Role;

/// The columns every roster file has, in any order.
pub const REQUIRED_COLUMNS: [&str; 5] = ["course_code", "course_title", "handle", "display_name", "role"];
/// Columns a file may add, both or neither: the person's identity at an external issuer
/// (OIDC `iss` and `sub`), so that signing in there later finds their courses.
pub const IDENTITY_COLUMNS: [&str; 2] = ["issuer", "subject"];

/// One problem with one line of the file (1-based, as an editor shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub line: u64,
    pub message: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Every bad line, as one error: BAD_USER_INPUT, a line per problem.
pub fn bad_file(name: &str, mut errors: Vec<LineError>) -> AppError {
    errors.sort_by_key(|e| e.line);
    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    AppError::BadUserInput(format!("{name}: {} problem(s), nothing was applied:\n{}", errors.len(), lines.join("\n")))
}

/// One valid line.
#[derive(Clone, Debug)]
struct Entry {
    line: u64,
    course_code: String,
    course_title: String,
    handle: String,
    display_name: String,
    role: Role,
    identity: Option<(String, String)>,
}

/// A file whose every line is valid and agrees with every other.
#[derive(Debug, Default)]
pub struct RosterFile {
    entries: Vec<Entry>,
}

impl RosterFile {
    /// How many people-in-courses it lists (lines, less exact repeats).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Reads and checks a roster file: the header, then every line (field count, empty fields,
/// role, handle, lengths), then the lines against each other (a course with two titles, a
/// person with two roles in one course or two display names, an identity given to two
/// people). Returns every problem found.
pub fn parse(input: impl Read) -> Result<RosterFile, Vec<LineError>> {
    let mut reader =
        csv::ReaderBuilder::new().has_headers(false).flexible(true).trim(csv::Trim::All).from_reader(input);
    let mut records = reader.records();
    let header = match records.next() {
        None => {
            return Err(vec![LineError {
                line: 1,
                message: format!("the file is empty: expected the header {}", header_hint()),
            }]);
        }
        Some(Err(err)) => return Err(vec![csv_error(&err, 1)]),
        Some(Ok(record)) => record,
    };
    let columns =
        Columns::from_header(&header).map_err(|message| vec![LineError { line: line_of(&header, 1), message }])?;

    let mut errors = Vec::new();
    let mut checker = Consistency::default();
    let mut entries = Vec::new();
    let mut last_line = 1;
    for record in records {
        let record = match record {
            Ok(record) => record,
            Err(err) => {
                errors.push(csv_error(&err, last_line + 1));
                continue;
            }
        };
        let line = line_of(&record, last_line + 1);
        last_line = line;
        let Some((fields, problems)) = columns.fields(&record, line, &mut errors) else { continue };
        // Also a line with problems of its own is held against the others, by its good fields:
        // every contradiction is reported in the same run.
        let before = errors.len();
        errors.extend(problems.into_iter().map(|message| LineError { line, message }));
        let repeat = checker.check(&fields, &mut errors);
        if errors.len() == before
            && !repeat
            && let Some(role) = fields.role
        {
            let Fields { course_code, course_title, handle, display_name, identity, .. } = fields;
            entries.push(Entry { line, course_code, course_title, handle, display_name, role, identity });
        }
    }
    if errors.is_empty() { Ok(RosterFile { entries }) } else { Err(errors) }
}

fn header_hint() -> String {
    format!("`{}` (and optionally `,{}`)", REQUIRED_COLUMNS.join(","), IDENTITY_COLUMNS.join(","))
}

fn line_of(record: &csv::StringRecord, fallback: u64) -> u64 {
    record.position().map_or(fallback, |p| p.line())
}

fn csv_error(err: &csv::Error, fallback: u64) -> LineError {
    let line = err.position().map_or(fallback, |p| p.line());
    let message = match err.kind() {
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8 text".to_owned(),
        _ => format!("unreadable CSV: {err}"),
    };
    LineError { line, message }
}

/// Where each column is in this file.
struct Columns {
    count: usize,
    course_code: usize,
    course_title: usize,
    handle: usize,
    display_name: usize,
    role: usize,
    identity: Option<(usize, usize)>,
}

impl Columns {
    fn from_header(header: &csv::StringRecord) -> Result<Columns, String> {
        let names: Vec<String> =
            header.iter().map(|name| name.trim_start_matches('\u{feff}').to_ascii_lowercase()).collect();
        let position = |wanted: &str| names.iter().position(|n| n == wanted);
        let mut problems = Vec::new();
        let unknown: Vec<&str> = names
            .iter()
            .filter(|n| !REQUIRED_COLUMNS.contains(&n.as_str()) && !IDENTITY_COLUMNS.contains(&n.as_str()))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            problems.push(format!("unknown column(s) `{}`", unknown.join("`, `")));
        }
        let twice: BTreeSet<&str> =
            names.iter().filter(|n| names.iter().filter(|m| m == n).count() > 1).map(String::as_str).collect();
        if !twice.is_empty() {
            problems.push(format!("column(s) named twice: `{}`", twice.into_iter().collect::<Vec<_>>().join("`, `")));
        }
        let missing: Vec<&str> = REQUIRED_COLUMNS.iter().copied().filter(|c| position(c).is_none()).collect();
        if !missing.is_empty() {
            problems.push(format!("missing column(s) `{}`", missing.join("`, `")));
        }
        let identity = match (position("issuer"), position("subject")) {
            (Some(issuer), Some(subject)) => Some((issuer, subject)),
            (None, None) => None,
            _ => {
                problems.push("`issuer` and `subject` come together: give both columns or neither".into());
                None
            }
        };
        if !problems.is_empty() {
            return Err(format!("bad header ({}); expected {}", problems.join("; "), header_hint()));
        }
        let at = |c: &str| position(c).unwrap_or_default();
        Ok(Columns {
            count: names.len(),
            course_code: at("course_code"),
            course_title: at("course_title"),
            handle: at("handle"),
            display_name: at("display_name"),
            role: at("role"),
            identity,
        })
    }

    /// One line on its own: its fields (each empty, or `None`, when bad) and every problem it
    /// has. None, with the problem noted, when it has the wrong number of fields.
    fn fields(
        &self,
        record: &csv::StringRecord,
        line: u64,
        errors: &mut Vec<LineError>,
    ) -> Option<(Fields, Vec<String>)> {
        if record.len() != self.count {
            errors.push(LineError { line, message: format!("expected {} fields, found {}", self.count, record.len()) });
            return None;
        }
        let field = |i: usize| record.get(i).unwrap_or_default();
        let mut problems = Vec::new();
        let course_code = checked(&mut problems, "course_code", field(self.course_code), MAX_CODE_CHARS);
        let course_title = checked(&mut problems, "course_title", field(self.course_title), MAX_TITLE_CHARS);
        let handle = checked(&mut problems, "handle", field(self.handle), 32);
        let display_name = checked(&mut problems, "display_name", field(self.display_name), MAX_DISPLAY_NAME_CHARS);
        let role_text = checked(&mut problems, "role", field(self.role), 20);
        let identity = match self.identity.map(|(issuer, subject)| (field(issuer), field(subject))) {
            None | Some(("", "")) => None,
            Some((_, "") | ("", _)) => {
                problems.push("`issuer` and `subject` come together: fill both or neither".into());
                None
            }
            Some((issuer, subject)) => Some((
                checked(&mut problems, "issuer", issuer, MAX_ISSUER_CHARS),
                checked(&mut problems, "subject", subject, MAX_SUBJECT_CHARS),
            )),
        };
        let mut handle = handle;
        if !handle.is_empty()
            && let Err(problem) = check_handle(&handle)
        {
            problems.push(problem);
            handle.clear();
        }
        let role = match role_text.to_ascii_lowercase().as_str() {
            "student" => Some(Role::Student),
            "instructor" => Some(Role::Instructor),
            "" => None,
            _ => {
                problems.push(format!("role must be `student` or `instructor`, not `{role_text}`"));
                None
            }
        };
        Some((Fields { line, course_code, course_title, handle, display_name, role, identity }, problems))
    }
}

/// One line's fields; a bad one is empty (`None` for the role).
struct Fields {
    line: u64,
    course_code: String,
    course_title: String,
    handle: String,
    display_name: String,
    role: Option<Role>,
    identity: Option<(String, String)>,
}

/// The field trimmed, or "" with its problem noted.
fn checked(problems: &mut Vec<String>, name: &str, value: &str, max: usize) -> String {
    match check_text(name, value, max) {
        Ok(text) => text.to_owned(),
        Err(problem) => {
            problems.push(problem);
            String::new()
        }
    }
}

/// What the lines seen so far say, to catch a line that contradicts an earlier one.
#[derive(Default)]
struct Consistency {
    titles: HashMap<String, (String, u64)>,
    names: HashMap<String, (String, u64)>,
    roles: HashMap<(String, String), (Role, u64)>,
    identity_of: HashMap<String, ((String, String), u64)>,
    owner_of: HashMap<(String, String), (String, u64)>,
}

impl Consistency {
    /// Notes every contradiction between this line's good fields and earlier lines', and
    /// records them. True when an earlier line listed exactly this person in this course with
    /// this role (a harmless repeat, kept once).
    fn check(&mut self, e: &Fields, errors: &mut Vec<LineError>) -> bool {
        let mut problem = |message: String| errors.push(LineError { line: e.line, message });
        let (has_course, has_handle) = (!e.course_code.is_empty(), !e.handle.is_empty());
        if has_course && !e.course_title.is_empty() {
            match self.titles.get(&e.course_code) {
                Some((title, line)) if *title != e.course_title => problem(format!(
                    "course {} is titled `{}` here but `{title}` on line {line}",
                    e.course_code, e.course_title
                )),
                Some(_) => {}
                None => {
                    self.titles.insert(e.course_code.clone(), (e.course_title.clone(), e.line));
                }
            }
        }
        if has_handle && !e.display_name.is_empty() {
            match self.names.get(&e.handle) {
                Some((name, line)) if *name != e.display_name => {
                    problem(format!("@{} is named `{}` here but `{name}` on line {line}", e.handle, e.display_name))
                }
                Some(_) => {}
                None => {
                    self.names.insert(e.handle.clone(), (e.display_name.clone(), e.line));
                }
            }
        }
        let mut repeat = false;
        if has_course
            && has_handle
            && let Some(role) = e.role
        {
            match self.roles.get(&(e.course_code.clone(), e.handle.clone())) {
                Some((earlier, line)) if *earlier != role => problem(format!(
                    "@{} is listed in {} as {} here but as {} on line {line}",
                    e.handle,
                    e.course_code,
                    role.as_str(),
                    earlier.as_str()
                )),
                Some(_) => repeat = true,
                None => {
                    self.roles.insert((e.course_code.clone(), e.handle.clone()), (role, e.line));
                }
            }
        }
        if has_handle
            && let Some(identity) = &e.identity
            && !identity.0.is_empty()
            && !identity.1.is_empty()
        {
            if let Some((other, line)) = self.identity_of.get(&e.handle)
                && other != identity
            {
                problem(format!(
                    "@{} has issuer/subject `{}`/`{}` here but `{}`/`{}` on line {line}",
                    e.handle, identity.0, identity.1, other.0, other.1
                ));
            }
            if let Some((owner, line)) = self.owner_of.get(identity)
                && *owner != e.handle
            {
                problem(format!(
                    "issuer/subject `{}`/`{}` belongs to @{owner} on line {line}, not to @{}",
                    identity.0, identity.1, e.handle
                ));
            }
            self.identity_of.entry(e.handle.clone()).or_insert((identity.clone(), e.line));
            self.owner_of.entry(identity.clone()).or_insert((e.handle.clone(), e.line));
        }
        repeat
    }
}

// ---------------------------------------------------------------------------------------------
// The difference
// ---------------------------------------------------------------------------------------------

/// What applying a file changes, in a stable order (courses and handles sorted).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// (code, title)
    pub courses_created: Vec<(String, String)>,
    /// (handle, display name)
    pub users_created: Vec<(String, String)>,
    /// (course code, handle, role)
    pub added: Vec<(String, String, Role)>,
    /// (course code, handle, the role they had)
    pub removed: Vec<(String, String, Role)>,
    /// (course code, handle, from, to)
    pub role_changes: Vec<(String, String, Role, Role)>,
    /// (handle, issuer, subject)
    pub identities_linked: Vec<(String, String, String)>,
    /// Lines not applied, each with its reason (`people`), in line order. Not changes.
    pub skipped: Vec<LineError>,
    /// Ids needed to apply it (not part of the difference).
    course_ids: HashMap<String, i64>,
    user_ids: HashMap<String, i64>,
}

impl Plan {
    /// How many changes it makes (zero: the database already matches the file).
    pub fn changes(&self) -> usize {
        self.courses_created.len()
            + self.users_created.len()
            + self.added.len()
            + self.removed.len()
            + self.role_changes.len()
            + self.identities_linked.len()
    }

    /// One line of counts, the last thing the command prints.
    pub fn summary(&self) -> String {
        format!(
            "courses created: {}, users created: {}, members added: {}, members removed: {}, role changes: {}, identities linked: {}, lines skipped: {}",
            self.courses_created.len(),
            self.users_created.len(),
            self.added.len(),
            self.removed.len(),
            self.role_changes.len(),
            self.identities_linked.len(),
            self.skipped.len()
        )
    }
}

/// The difference, one change a line (what `--dry-run` shows).
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (code, title) in &self.courses_created {
            writeln!(f, "+ course {code} \"{title}\"")?;
        }
        for (handle, name) in &self.users_created {
            writeln!(f, "+ user @{handle} \"{name}\"")?;
        }
        for (code, handle, role) in &self.added {
            writeln!(f, "+ {code} @{handle} {}", role.as_str())?;
        }
        for (code, handle, role) in &self.removed {
            writeln!(f, "- {code} @{handle} (was {})", role.as_str())?;
        }
        for (code, handle, from, to) in &self.role_changes {
            writeln!(f, "~ {code} @{handle} {} -> {}", from.as_str(), to.as_str())?;
        }
        for (handle, issuer, subject) in &self.identities_linked {
            writeln!(f, "+ identity @{handle} = {issuer} {subject}")?;
        }
        for skipped in &self.skipped {
            writeln!(f, "! {skipped}")?;
        }
        Ok(())
    }
}

#[derive(FromQueryResult)]
struct CourseNow {
    id: i64,
    code: String,
}

#[derive(FromQueryResult)]
struct MemberNow {
    course_id: i64,
    user_id: i64,
    handle: String,
    role: String,
}

#[derive(FromQueryResult)]
struct IdentityNow {
    issuer: String,
    subject: String,
    user_id: i64,
    handle: String,
}

/// Reads what the file's courses, people and identities are now, and computes the difference.
/// Takes the roster locks of the named courses (in id order, as every roster change does, so
/// two imports cannot deadlock), and an advisory lock that makes concurrent imports (and
/// `admin grant`s) wait for each other (each would otherwise plan the creation of the same new
/// course, or link the same user).
pub async fn plan(db: &impl ConnectionTrait, file: &RosterFile) -> Result<Plan, ImportError> {
    db.execute_unprepared(&format!("SELECT pg_advisory_xact_lock({})", people::LINK_LOCK))
        .await
        .map_err(AppError::from)?;
    let codes: Vec<String> =
        file.entries.iter().map(|e| e.course_code.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let handles: Vec<String> =
        file.entries.iter().map(|e| e.handle.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let courses = CourseNow::find_by_statement(stmt(
        "SELECT id, code FROM courses WHERE code = ANY($1) ORDER BY id FOR NO KEY UPDATE",
        [codes.clone().into()],
    ))
    .all(db)
    .await
    .map_err(AppError::from)?;
    let users = people::by_handles(db, &handles).await?;
    let course_ids: Vec<i64> = courses.iter().map(|c| c.id).collect();
    let members = MemberNow::find_by_statement(stmt(
        "SELECT m.course_id, m.user_id, u.handle, m.role FROM course_members m JOIN users u ON u.id = m.user_id \
         WHERE m.course_id = ANY($1)",
        [course_ids.into()],
    ))
    .all(db)
    .await
    .map_err(AppError::from)?;
    let pairs: BTreeSet<(String, String)> = file.entries.iter().filter_map(|e| e.identity.clone()).collect();
    let (issuers, subjects): (Vec<String>, Vec<String>) = pairs.into_iter().unzip();
    let identities = IdentityNow::find_by_statement(stmt(
        "SELECT i.issuer, i.subject, u.id AS user_id, u.handle FROM user_identities i JOIN users u ON u.id = i.user_id \
         JOIN unnest($1::text[], $2::text[]) AS f(issuer, subject) ON f.issuer = i.issuer AND f.subject = i.subject",
        [issuers.into(), subjects.into()],
    ))
    .all(db)
    .await
    .map_err(AppError::from)?;
    difference(file, Now { courses, users, members, identities })
}

/// What the database holds now, for the file's courses, people and identities.
struct Now {
    courses: Vec<CourseNow>,
    /// The users whose handles the file gives.
    users: Vec<Known>,
    members: Vec<MemberNow>,
    identities: Vec<IdentityNow>,
}

/// Why an import did not go ahead.
#[derive(Debug)]
pub enum ImportError {
    /// Lines that contradict the database: the whole file is refused.
    Lines(Vec<LineError>),
    Failed(AppError),
}

impl From<AppError> for ImportError {
    fn from(err: AppError) -> Self {
        ImportError::Failed(err)
    }
}

fn difference(file: &RosterFile, now: Now) -> Result<Plan, ImportError> {
    let course_ids: HashMap<String, i64> = now.courses.iter().map(|c| (c.code.clone(), c.id)).collect();
    let code_of: HashMap<i64, String> = now.courses.iter().map(|c| (c.id, c.code.clone())).collect();
    let people = Resolved::of(file, &now);
    let mut user_ids = people.user_ids;

    // What the file says, of the people it names who were found: course code -> handle ->
    // role; and each course's title.
    let mut wanted: BTreeMap<String, BTreeMap<String, Role>> = BTreeMap::new();
    let mut titles = BTreeMap::new();
    for e in &file.entries {
        titles.entry(e.course_code.clone()).or_insert_with(|| e.course_title.clone());
        let people_of_course = wanted.entry(e.course_code.clone()).or_default();
        if let Some(handle) = people.handle_of.get(&e.handle) {
            people_of_course.insert(handle.clone(), e.role);
        }
    }

    // What the database has, for the courses the file names.
    let mut current: BTreeMap<String, BTreeMap<String, Role>> = BTreeMap::new();
    for m in now.members {
        let Some(code) = code_of.get(&m.course_id) else { continue };
        current.entry(code.clone()).or_default().insert(m.handle.clone(), Role::parse(&m.role)?);
        user_ids.insert(m.handle, m.user_id);
    }

    let mut plan = Plan {
        courses_created: titles
            .iter()
            .filter(|(code, _)| !course_ids.contains_key(*code))
            .map(|(code, title)| (code.clone(), title.clone()))
            .collect(),
        users_created: people.created,
        identities_linked: people.linked,
        skipped: people.skipped,
        course_ids,
        user_ids,
        ..Plan::default()
    };
    plan.users_created.sort();
    plan.identities_linked.sort();
    plan.skipped.sort_by_key(|e| e.line);
    let empty = BTreeMap::new();
    for (code, people) in &wanted {
        let have = current.get(code).unwrap_or(&empty);
        for (handle, role) in people {
            match have.get(handle) {
                None => plan.added.push((code.clone(), handle.clone(), *role)),
                Some(old) if old != role => plan.role_changes.push((code.clone(), handle.clone(), *old, *role)),
                Some(_) => {}
            }
        }
        for (handle, role) in have {
            if !people.contains_key(handle) {
                plan.removed.push((code.clone(), handle.clone(), *role));
            }
        }
    }
    Ok(plan)
}

/// Who each person the file names is (see `people` for the rule).
#[derive(Default)]
struct Resolved {
    /// The file's handle -> the handle of the user it turned out to be (another one when the
    /// line's issuer and subject belong to a user with another handle). Skipped people are not
    /// in it.
    handle_of: HashMap<String, String>,
    /// Handle -> id of every existing user found.
    user_ids: HashMap<String, i64>,
    /// (handle, display name) of the users to create.
    created: Vec<(String, String)>,
    /// (handle, issuer, subject) to link.
    linked: Vec<(String, String, String)>,
    skipped: Vec<LineError>,
}

/// One person as the file names them: every line they are on, their identity (`parse` made
/// sure their lines agree on it), their display name.
struct Named<'a> {
    lines: Vec<u64>,
    identity: Option<&'a (String, String)>,
    name: &'a str,
}

impl Resolved {
    fn of(file: &RosterFile, now: &Now) -> Resolved {
        let by_handle: HashMap<&str, &Known> = now.users.iter().map(|u| (u.handle.as_str(), u)).collect();
        let by_identity: HashMap<(&str, &str), (i64, &str)> = now
            .identities
            .iter()
            .map(|i| ((i.issuer.as_str(), i.subject.as_str()), (i.user_id, i.handle.as_str())))
            .collect();
        // In the order of their first line, so that "the same person as line N" points up.
        let mut order: Vec<&str> = Vec::new();
        let mut named: HashMap<&str, Named<'_>> = HashMap::new();
        for e in &file.entries {
            let person = named.entry(e.handle.as_str()).or_insert_with(|| {
                order.push(e.handle.as_str());
                Named { lines: Vec::new(), identity: None, name: &e.display_name }
            });
            person.lines.push(e.line);
            if person.identity.is_none() {
                person.identity = e.identity.as_ref();
            }
        }

        let mut resolved = Resolved::default();
        // User id -> (the file's handle for them, its first line).
        let mut found_by: HashMap<i64, (&str, u64)> = HashMap::new();
        for handle in order {
            let person = &named[handle];
            let first_line = person.lines[0];
            // (the user, if they exist; the handle they have or get; link the identity?)
            let found: Result<(Option<(i64, String)>, String, bool), String> = match person.identity {
                Some((issuer, subject)) => match by_identity.get(&(issuer.as_str(), subject.as_str())) {
                    Some(&(id, has)) => Ok((Some((id, has.to_owned())), has.to_owned(), false)),
                    None => match by_handle.get(handle) {
                        None => Ok((None, handle.to_owned(), true)),
                        Some(user) => people::may_link(user)
                            .map(|()| (Some((user.id, user.handle.clone())), user.handle.clone(), true))
                            .map_err(|refusal| format!("{refusal}; issuer/subject `{issuer}`/`{subject}` not linked")),
                    },
                },
                None => match by_handle.get(handle) {
                    None => Ok((None, handle.to_owned(), false)),
                    Some(user) => people::may_name_by_handle(user)
                        .map(|()| (Some((user.id, user.handle.clone())), user.handle.clone(), false))
                        .map_err(|refusal| refusal.to_string()),
                },
            };
            let found = found.and_then(|(user, has, link)| match &user {
                Some((id, _)) => match found_by.get(id) {
                    Some((other, line)) => Err(format!(
                        "@{handle} is @{has}, whom line {line} names already (as @{other}); list each person once"
                    )),
                    None => {
                        found_by.insert(*id, (handle, first_line));
                        Ok((user, has, link))
                    }
                },
                None => Ok((user, has, link)),
            });
            match found {
                Ok((user, has, link)) => {
                    match user {
                        Some((id, _)) => {
                            resolved.user_ids.insert(has.clone(), id);
                        }
                        None => resolved.created.push((has.clone(), person.name.to_owned())),
                    }
                    if link && let Some((issuer, subject)) = person.identity {
                        resolved.linked.push((has.clone(), issuer.clone(), subject.clone()));
                    }
                    resolved.handle_of.insert(handle.to_owned(), has);
                }
                Err(reason) => resolved
                    .skipped
                    .extend(person.lines.iter().map(|&line| LineError { line, message: format!("skipped: {reason}") })),
            }
        }
        resolved
    }
}

// ---------------------------------------------------------------------------------------------
// Writing it
// ---------------------------------------------------------------------------------------------

/// Writes the plan in the caller's transaction (call right after `plan`, in the same one), a
/// few set-wise statements whatever the file's size. Returns the users whose memberships
/// changed.
pub async fn apply(db: &impl ConnectionTrait, plan: &Plan) -> AppResult<Vec<i64>> {
    let mut course_ids = plan.course_ids.clone();
    for (code, title) in &plan.courses_created {
        let (course, _) = super::ensure_course(db, code, title).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "course_code,course_title,handle,display_name,role\n";

    fn lines(errors: &[LineError]) -> Vec<u64> {
        errors.iter().map(|e| e.line).collect()
    }

    #[test]
    fn a_good_file_parses_and_repeats_are_kept_once() {
        let text = format!(
            "{HEADER}CS101,Intro,alice,Alice N,student\nCS101,Intro,alice,Alice N,Student\n\"CS102\",\"Intro, part 2\",bob,Bob,instructor\n"
        );
        let file = parse(text.as_bytes()).expect("valid");
        assert_eq!(file.len(), 2);
    }

    #[test]
    fn every_bad_line_is_reported_with_its_number() {
        let text = format!(
            "{HEADER}CS101,Intro,alice,Alice,student\n\
             CS101,Intro,Bob!,Bob,student\n\
             CS101,Intro,carol,Carol,teacher\n\
             CS101,Other title,dave,Dave,student\n\
             CS101,Intro,erin,Erin\n\
             CS101,Intro,alice,Alice,instructor\n\
             ,Intro,frank,Frank,student\n"
        );
        let errors = parse(text.as_bytes()).expect_err("bad lines");
        assert_eq!(lines(&errors), vec![3, 4, 5, 6, 7, 8], "{errors:?}");
    }

    #[test]
    fn a_line_with_problems_is_still_held_against_the_others() {
        let text = format!("{HEADER}CS101,Intro,Bad Handle,X,student\nCS101,Other,alice,Alice,student\n");
        let errors = parse(text.as_bytes()).expect_err("bad lines");
        assert_eq!(lines(&errors), vec![2, 3], "{errors:?}");
    }

    #[test]
    fn a_bad_header_is_line_one() {
        let errors = parse("course,handle,role\nCS101,alice,student\n".as_bytes()).expect_err("bad header");
        assert_eq!(lines(&errors), vec![1]);
        assert!(errors[0].message.contains("missing column"), "{errors:?}");
        assert_eq!(lines(&parse("".as_bytes()).expect_err("empty")), vec![1]);
        let half = format!("{}issuer\n", HEADER.trim_end().to_owned() + ",");
        assert_eq!(lines(&parse(half.as_bytes()).expect_err("issuer alone")), vec![1]);
    }

    #[test]
    fn identities_must_agree() {
        let text = "course_code,course_title,handle,display_name,role,issuer,subject\n\
                    CS101,Intro,alice,Alice,student,https://idp,a1\n\
                    CS102,Calc,alice,Alice,student,https://idp,a2\n\
                    CS101,Intro,bob,Bob,student,https://idp,a1\n\
                    CS101,Intro,carol,Carol,student,https://idp,\n\
                    CS101,Intro,dave,Dave,student,,\n";
        let errors = parse(text.as_bytes()).expect_err("conflicting identities");
        assert_eq!(lines(&errors), vec![3, 4, 5], "{errors:?}");
    }

    fn known(id: i64, handle: &str, self_provisioned: bool, linked_issuer: Option<&str>) -> Known {
        Known { id, handle: handle.into(), self_provisioned, linked_issuer: linked_issuer.map(str::to_owned) }
    }

    #[test]
    fn people_are_found_by_identity_and_handles_only_name_an_operators_users() {
        let text = "course_code,course_title,handle,display_name,role,issuer,subject\n\
                    CS101,Intro,dr_tran,Dr Tran,instructor,https://idp,real\n\
                    CS101,Intro,bob,Bob,student,https://idp,bob-1\n\
                    CS101,Intro,carl,Carl,student,https://idp,carl-2\n\
                    CS101,Intro,erin,Erin,student,https://idp,erin-1\n\
                    CS101,Intro,sam,Sam,student,,\n\
                    CS101,Intro,eri,Erin,student,,\n\
                    CS101,Intro,nina,Nina,student,https://idp,nina-1\n";
        let file = parse(text.as_bytes()).expect("valid");
        let now = Now {
            courses: vec![CourseNow { id: 1, code: "CS101".into() }],
            users: vec![
                known(1, "dr_tran", true, Some("https://idp")),
                known(2, "bob", false, None),
                known(3, "carl", false, Some("https://idp")),
                known(5, "sam", true, Some("https://idp")),
                known(6, "eri", false, None),
            ],
            members: vec![],
            // erin-1 belongs to the user @eri (a roster linked it earlier).
            identities: vec![IdentityNow {
                issuer: "https://idp".into(),
                subject: "erin-1".into(),
                user_id: 6,
                handle: "eri".into(),
            }],
        };
        let Ok(plan) = difference(&file, now) else { panic!("a plan") };
        let skipped: Vec<(u64, &str)> = plan.skipped.iter().map(|e| (e.line, e.message.as_str())).collect();
        assert_eq!(skipped.iter().map(|s| s.0).collect::<Vec<_>>(), vec![2, 4, 6, 7], "{skipped:?}");
        assert!(skipped[0].1.contains("@dr_tran was provisioned by their own sign-in"), "{skipped:?}");
        assert!(skipped[1].1.contains("@carl is already linked to another identity"), "{skipped:?}");
        assert!(skipped[2].1.contains("@sam was provisioned by their own sign-in"), "{skipped:?}");
        assert!(skipped[3].1.contains("@eri is @eri, whom line 5 names already"), "{skipped:?}");
        let student = |h: &str| ("CS101".to_owned(), h.to_owned(), Role::Student);
        assert_eq!(plan.added, vec![student("bob"), student("eri"), student("nina")]);
        assert_eq!(plan.users_created, vec![("nina".to_owned(), "Nina".to_owned())]);
        assert_eq!(
            plan.identities_linked,
            vec![
                ("bob".to_owned(), "https://idp".to_owned(), "bob-1".to_owned()),
                ("nina".to_owned(), "https://idp".to_owned(), "nina-1".to_owned())
            ]
        );
    }

    #[test]
    fn the_difference_adds_removes_and_changes_roles() {
        let text = format!(
            "{HEADER}CS101,Intro,alice,Alice,instructor\nCS101,Intro,bob,Bob,student\nNEW1,New,bob,Bob,student\n"
        );
        let file = parse(text.as_bytes()).expect("valid");
        let now = Now {
            courses: vec![CourseNow { id: 1, code: "CS101".into() }],
            users: vec![known(10, "alice", false, None)],
            members: vec![
                MemberNow { course_id: 1, user_id: 10, handle: "alice".into(), role: "student".into() },
                MemberNow { course_id: 1, user_id: 11, handle: "zed".into(), role: "student".into() },
            ],
            identities: vec![],
        };
        let Ok(plan) = difference(&file, now) else { panic!("a plan") };
        assert_eq!(plan.courses_created, vec![("NEW1".to_owned(), "New".to_owned())]);
        assert_eq!(plan.users_created, vec![("bob".to_owned(), "Bob".to_owned())]);
        assert_eq!(
            plan.added,
            vec![
                ("CS101".to_owned(), "bob".to_owned(), Role::Student),
                ("NEW1".to_owned(), "bob".to_owned(), Role::Student)
            ]
        );
        assert_eq!(plan.removed, vec![("CS101".to_owned(), "zed".to_owned(), Role::Student)]);
        assert_eq!(plan.role_changes, vec![("CS101".to_owned(), "alice".to_owned(), Role::Student, Role::Instructor)]);
        assert_eq!(plan.changes(), 6);
    }
}
