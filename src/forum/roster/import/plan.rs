//! Planning an import: what the file's courses, people and identities are now (read under the
//! roster locks), who each person the file names is (`people`), and the difference to write.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use sea_orm::{ConnectionTrait, FromQueryResult};

use super::{LineError, RosterFile};
use crate::db::stmt;
use crate::error::AppError;
use crate::forum::courses::Role;
use crate::forum::roster::people::{self, Known};

/// What applying a file changes, in a stable order (courses and handles sorted).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
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
    pub(super) course_ids: HashMap<String, i64>,
    pub(super) user_ids: HashMap<String, i64>,
}

impl Plan {
    /// One line of counts, the last thing the command prints.
    pub(crate) fn summary(&self) -> String {
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
pub(crate) async fn plan(db: &impl ConnectionTrait, file: &RosterFile) -> Result<Plan, ImportError> {
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
pub(crate) enum ImportError {
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

/// Who one person of the file turned out to be.
struct Found {
    /// The existing user's id; none for a user to create.
    user: Option<i64>,
    /// The handle they have, or get when created.
    handle: String,
    /// Whether the line's issuer and subject are to be linked to them.
    link: bool,
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
            let found: Result<Found, String> = match person.identity {
                Some((issuer, subject)) => match by_identity.get(&(issuer.as_str(), subject.as_str())) {
                    Some(&(id, has)) => Ok(Found { user: Some(id), handle: has.to_owned(), link: false }),
                    None => match by_handle.get(handle) {
                        None => Ok(Found { user: None, handle: handle.to_owned(), link: true }),
                        Some(user) => people::may_link(user)
                            .map(|()| Found { user: Some(user.id), handle: user.handle.clone(), link: true })
                            .map_err(|refusal| format!("{refusal}; issuer/subject `{issuer}`/`{subject}` not linked")),
                    },
                },
                None => match by_handle.get(handle) {
                    None => Ok(Found { user: None, handle: handle.to_owned(), link: false }),
                    Some(user) => people::may_name_by_handle(user)
                        .map(|()| Found { user: Some(user.id), handle: user.handle.clone(), link: false })
                        .map_err(|refusal| refusal.to_string()),
                },
            };
            let found = found.and_then(|found| match found.user {
                Some(id) => match found_by.get(&id) {
                    Some((other, line)) => Err(format!(
                        "@{handle} is @{has}, whom line {line} names already (as @{other}); list each person once",
                        has = found.handle
                    )),
                    None => {
                        found_by.insert(id, (handle, first_line));
                        Ok(found)
                    }
                },
                None => Ok(found),
            });
            match found {
                Ok(Found { user, handle: has, link }) => {
                    match user {
                        Some(id) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forum::roster::import::parse;

    const HEADER: &str = "course_code,course_title,handle,display_name,role\n";

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
        let changes = plan.courses_created.len()
            + plan.users_created.len()
            + plan.added.len()
            + plan.removed.len()
            + plan.role_changes.len()
            + plan.identities_linked.len();
        assert_eq!(changes, 6);
    }
}
