//! Parsing a roster file: the header, every line on its own (field count, empty fields, role,
//! handle, lengths), then the lines against each other; every problem reported with its line.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;

use super::LineError;
use crate::forum::courses::Role;
use crate::forum::roster::{
    MAX_CODE_CHARS, MAX_DISPLAY_NAME_CHARS, MAX_ISSUER_CHARS, MAX_SUBJECT_CHARS, MAX_TITLE_CHARS, check_handle,
    check_text,
};

/// The columns every roster file has, in any order.
pub(super) const REQUIRED_COLUMNS: [&str; 5] = ["course_code", "course_title", "handle", "display_name", "role"];
/// Columns a file may add, both or neither: the person's identity at an external issuer
/// (OIDC `iss` and `sub`), so that signing in there later finds their courses.
pub(super) const IDENTITY_COLUMNS: [&str; 2] = ["issuer", "subject"];

/// One valid line.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) line: u64,
    pub(super) course_code: String,
    pub(super) course_title: String,
    pub(super) handle: String,
    pub(super) display_name: String,
    pub(super) role: Role,
    pub(super) identity: Option<(String, String)>,
}

/// A file whose every line is valid and agrees with every other.
#[derive(Debug, Default)]
pub(crate) struct RosterFile {
    pub(super) entries: Vec<Entry>,
}

/// Reads and checks a roster file: the header, then every line (field count, empty fields,
/// role, handle, lengths), then the lines against each other (a course with two titles, a
/// person with two roles in one course or two display names, an identity given to two
/// people). Returns every problem found.
pub(crate) fn parse(input: impl Read) -> Result<RosterFile, Vec<LineError>> {
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
        assert_eq!(file.entries.len(), 2);
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
}
