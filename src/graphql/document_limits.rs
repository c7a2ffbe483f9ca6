//! The linear pre-pass every document goes through before async-graphql looks at it.
//!
//! async-graphql's own checks that run right after parsing (`check_recursive_depth`,
//! `check_max_directives`) and its validation (the depth and complexity walks) enter a
//! fragment again at every spread, without memoizing. A 1 KB chain of fragments each spreading
//! the next twice (`fragment F0 on Query { ...F1 ...F1 } … fragment F30 on Query { __typename }`)
//! is then 2^31 steps before any rule of ours runs. So every document, over HTTP and over the
//! websocket, signed in or not, is first measured here in time linear in its size:
//!
//! 1. on its text, before it is parsed: its length and its lexical tokens (the count stops as
//!    soon as it passes the limit, so a refusal costs no more than the limit);
//! 2. on its parsed form: the selections, directives and aliases it would have once every
//!    fragment spread is replaced by the fragment, each fragment's figures computed once and
//!    reused at every spread (saturating, so 2^31 is a number, not an overflow), and a fragment
//!    that spreads itself is refused here rather than left to walks that would loop on it.
//!
//! A document over a limit is refused with `DOCUMENT_LIMIT_EXCEEDED` and the figures
//! (`limit`, `found`, `max`) in `extensions`; one with more aliases than `limits::MAX_ALIASES`
//! keeps its older `BAD_USER_INPUT`. Callers who have not signed in get the smaller budget
//! (`DocumentLimits::ANONYMOUS`): they can only run introspection and `__typename`, and
//! nothing they send should cost more than GraphiQL's own introspection query.

use std::collections::HashMap;

use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, Selection, SelectionSet};
use async_graphql::{ErrorExtensionValues, ServerError};

use super::limits::MAX_ALIASES;

/// The budget of one document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DocumentLimits {
    /// Bytes of the text.
    pub bytes: usize,
    /// Lexical tokens (names, punctuators, strings, numbers; not whitespace or comments).
    pub tokens: usize,
    /// Fragment definitions.
    pub fragments: usize,
    /// Fields, inline fragments and spreads, with every spread expanded.
    pub selections: u64,
    /// Directives, with every spread expanded.
    pub directives: u64,
}

impl DocumentLimits {
    /// For callers without a token. GraphiQL's introspection query is about 100 expanded
    /// selections and 700 tokens.
    pub(crate) const ANONYMOUS: DocumentLimits =
        DocumentLimits { bytes: 16 * 1024, tokens: 2_000, fragments: 20, selections: 1_000, directives: 50 };
    /// For signed-in callers. The demo forum's largest page is about 200 expanded selections;
    /// the cost limit (`limits::MAX_COST`) still bounds what the document reads.
    pub(crate) const SIGNED_IN: DocumentLimits =
        DocumentLimits { bytes: 64 * 1024, tokens: 15_000, fragments: 200, selections: 5_000, directives: 500 };

    pub(crate) fn for_caller(signed_in: bool) -> DocumentLimits {
        if signed_in { Self::SIGNED_IN } else { Self::ANONYMOUS }
    }
}

/// The refusal of a document over `limit`: `found` (at least; counting stops past `max`).
pub(crate) fn refusal(limit: &'static str, found: u64, max: u64, signed_in: bool) -> ServerError {
    let whom = if signed_in { "" } else { " without signing in" };
    let mut error = ServerError::new(
        format!("this document has {found} {limit}; at most {max} are accepted{whom}: send a smaller document"),
        None,
    );
    let mut extensions = ErrorExtensionValues::default();
    extensions.set("code", "DOCUMENT_LIMIT_EXCEEDED");
    extensions.set("limit", limit);
    extensions.set("found", found);
    extensions.set("max", max);
    error.extensions = Some(extensions);
    metrics::counter!(crate::telemetry::names::DOCUMENT_REFUSALS, "limit" => limit).increment(1);
    error
}

/// Refuses a text over the byte or token limit, before it is parsed. Stops counting at the
/// first token past the limit.
pub(crate) fn check_text(text: &str, limits: &DocumentLimits, signed_in: bool) -> Result<(), ServerError> {
    if text.len() > limits.bytes {
        return Err(refusal("bytes", text.len() as u64, limits.bytes as u64, signed_in));
    }
    let tokens = count_tokens(text, limits.tokens + 1);
    if tokens > limits.tokens {
        return Err(refusal("tokens", tokens as u64, limits.tokens as u64, signed_in));
    }
    Ok(())
}

/// GraphQL lexical tokens in `text`, counting no further than `stop`. Whitespace, commas and
/// comments are not tokens; a string (block strings included) is one; anything the lexer would
/// refuse counts as one token and is left for the parser to report.
pub(crate) fn count_tokens(text: &str, stop: usize) -> usize {
    let bytes = text.as_bytes();
    let mut at = 0;
    let mut tokens = 0;
    while at < bytes.len() && tokens < stop {
        let byte = bytes[at];
        match byte {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => at += 1,
            b'#' => {
                while at < bytes.len() && bytes[at] != b'\n' && bytes[at] != b'\r' {
                    at += 1;
                }
            }
            b'"' if bytes[at..].starts_with(b"\"\"\"") => {
                tokens += 1;
                at += 3;
                while at < bytes.len() && !bytes[at..].starts_with(b"\"\"\"") {
                    // An escaped triple quote does not close the block string.
                    at += if bytes[at..].starts_with(b"\\\"\"\"") { 4 } else { 1 };
                }
                at += 3;
            }
            b'"' => {
                tokens += 1;
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' && bytes[at] != b'\n' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            b'.' if bytes[at..].starts_with(b"...") => {
                tokens += 1;
                at += 3;
            }
            b'_' | b'a'..=b'z' | b'A'..=b'Z' | b'-' | b'0'..=b'9' => {
                tokens += 1;
                at += 1;
                while at < bytes.len()
                    && matches!(bytes[at], b'_' | b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'+' | b'-')
                {
                    at += 1;
                }
            }
            _ => {
                tokens += 1;
                // One character, however many bytes it takes.
                at += text[at..].chars().next().map_or(1, char::len_utf8);
            }
        }
    }
    tokens
}

/// What a document comes to with every fragment spread expanded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Expanded {
    pub selections: u64,
    pub directives: u64,
    pub aliases: u64,
}

impl Expanded {
    fn add(&mut self, other: Expanded) {
        self.selections = self.selections.saturating_add(other.selections);
        self.directives = self.directives.saturating_add(other.directives);
        self.aliases = self.aliases.saturating_add(other.aliases);
    }
}

/// Refuses a parsed document over the fragment, selection, directive or alias limits, or
/// whose fragments spread themselves. Linear in the document: each fragment is measured once.
pub(crate) fn check_document(
    document: &ExecutableDocument,
    limits: &DocumentLimits,
    signed_in: bool,
) -> Result<Expanded, ServerError> {
    if document.fragments.len() > limits.fragments {
        return Err(refusal("fragments", document.fragments.len() as u64, limits.fragments as u64, signed_in));
    }
    let mut measure = Measure { document, fragments: HashMap::new() };
    let mut total = Expanded::default();
    let operations: Vec<&SelectionSet> = match &document.operations {
        DocumentOperations::Single(operation) => vec![&operation.node.selection_set.node],
        DocumentOperations::Multiple(operations) => operations.values().map(|o| &o.node.selection_set.node).collect(),
    };
    for set in operations {
        total.add(measure.set(set)?);
    }
    for (name, fragment) in &document.fragments {
        // Fragments no operation spreads are still validated (and refused as unused): measure
        // them too (each once), so they cannot hide a cycle from this pass.
        measure.fragment(name.as_str(), &fragment.node.selection_set.node)?;
    }
    if total.aliases > MAX_ALIASES as u64 {
        // No code here: `errors` makes it BAD_USER_INPUT, as the alias limit always was.
        return Err(ServerError::new(
            format!("a request may use at most {MAX_ALIASES} aliases; this one uses {}", total.aliases),
            None,
        ));
    }
    if total.selections > limits.selections {
        return Err(refusal("selections", total.selections, limits.selections, signed_in));
    }
    if total.directives > limits.directives {
        return Err(refusal("directives", total.directives, limits.directives, signed_in));
    }
    Ok(total)
}

/// A fragment's state in the walk: being measured (a spread reaching it again is a cycle), or
/// measured.
#[derive(Clone, Copy)]
enum Fragment {
    Entered,
    Measured(Expanded),
}

struct Measure<'a> {
    document: &'a ExecutableDocument,
    fragments: HashMap<&'a str, Fragment>,
}

impl<'a> Measure<'a> {
    fn fragment(&mut self, name: &'a str, set: &'a SelectionSet) -> Result<Expanded, ServerError> {
        match self.fragments.get(name) {
            Some(Fragment::Measured(expanded)) => return Ok(*expanded),
            Some(Fragment::Entered) => {
                // Parse errors have no code of their own: `errors` makes this BAD_USER_INPUT.
                return Err(ServerError::new(format!("fragment `{name}` spreads itself (directly or not)"), None));
            }
            None => {}
        }
        self.fragments.insert(name, Fragment::Entered);
        let expanded = self.set(set)?;
        self.fragments.insert(name, Fragment::Measured(expanded));
        Ok(expanded)
    }

    /// Recursion follows the nesting of the text (bounded by the parser's recursion limit) and
    /// chains of fragments (bounded by `DocumentLimits::fragments`).
    fn set(&mut self, set: &'a SelectionSet) -> Result<Expanded, ServerError> {
        let mut total = Expanded::default();
        for selection in &set.items {
            total.selections = total.selections.saturating_add(1);
            match &selection.node {
                Selection::Field(field) => {
                    total.directives = total.directives.saturating_add(field.node.directives.len() as u64);
                    total.aliases = total.aliases.saturating_add(u64::from(field.node.alias.is_some()));
                    total.add(self.set(&field.node.selection_set.node)?);
                }
                Selection::InlineFragment(inline) => {
                    total.directives = total.directives.saturating_add(inline.node.directives.len() as u64);
                    total.add(self.set(&inline.node.selection_set.node)?);
                }
                Selection::FragmentSpread(spread) => {
                    total.directives = total.directives.saturating_add(spread.node.directives.len() as u64);
                    let name = spread.node.fragment_name.node.as_str();
                    // An unknown fragment is left for validation to name.
                    if let Some(fragment) = self.document.fragments.get(&spread.node.fragment_name.node) {
                        total.add(self.fragment(name, &fragment.node.selection_set.node)?);
                    }
                }
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ExecutableDocument {
        async_graphql::parser::parse_query(text).expect("parses")
    }

    /// `levels` fragments, each spreading the next twice.
    fn chain(levels: usize) -> String {
        let mut text = String::from("{ ...F0 }");
        for i in 0..levels {
            text.push_str(&format!(" fragment F{i} on Query {{ ...F{n} ...F{n} }}", n = i + 1));
        }
        text.push_str(&format!(" fragment F{levels} on Query {{ __typename }}"));
        text
    }

    #[test]
    fn a_doubling_chain_is_measured_in_linear_time_and_refused_with_its_figures() {
        let document = parse(&chain(31));
        let error = check_document(&document, &DocumentLimits::SIGNED_IN, true).expect_err("refused");
        let extensions = error.extensions.expect("extensions");
        assert_eq!(extensions.get("code"), Some(&async_graphql::Value::from("DOCUMENT_LIMIT_EXCEEDED")));
        assert_eq!(extensions.get("limit"), Some(&async_graphql::Value::from("selections")));
        // The last fragment is one field; each one before it two spreads of the next.
        let fragment_zero = (0..31).fold(1u64, |next, _| 2 + 2 * next);
        let expected = 1 + fragment_zero;
        assert!(expected > 1 << 32);
        assert_eq!(extensions.get("found"), Some(&async_graphql::Value::from(expected)));
    }

    #[test]
    fn a_fragment_cycle_is_refused_without_looping() {
        let document = parse("{ ...A } fragment A on Query { ...B } fragment B on Query { ...A __typename }");
        let error = check_document(&document, &DocumentLimits::SIGNED_IN, true).expect_err("refused");
        assert!(error.message.contains("spreads itself"), "{}", error.message);
        // An unused fragment that spreads itself is caught too.
        let document = parse("{ __typename } fragment A on Query { ...A }");
        assert!(check_document(&document, &DocumentLimits::SIGNED_IN, true).is_err());
    }

    #[test]
    fn anonymous_callers_get_the_smaller_budget() {
        let document = parse(&chain(10));
        assert!(check_document(&document, &DocumentLimits::SIGNED_IN, true).is_ok());
        let error = check_document(&document, &DocumentLimits::ANONYMOUS, false).expect_err("refused");
        assert!(error.message.contains("without signing in"), "{}", error.message);
    }

    #[test]
    fn aliases_are_counted_at_every_spread() {
        let document = parse("{ ...A ...A } fragment A on Query { a1: __typename a2: __typename } ");
        assert_eq!(check_document(&document, &DocumentLimits::SIGNED_IN, true).map(|e| e.aliases).ok(), Some(4));
        let many = format!(
            "{{ ...A ...A }} fragment A on Query {{ {} }}",
            (0..16).map(|i| format!("a{i}: __typename ")).collect::<String>()
        );
        let error = check_document(&parse(&many), &DocumentLimits::SIGNED_IN, true).expect_err("refused");
        assert!(error.message.contains("aliases"), "{}", error.message);
    }

    #[test]
    fn tokens_skip_whitespace_comments_and_count_strings_once() {
        assert_eq!(count_tokens("{ a(b: \"x y, z\") }", 100), 8);
        assert_eq!(count_tokens("# only a comment\n", 100), 0);
        assert_eq!(count_tokens("{ a(b: \"\"\"block \\\"\"\" still\"\"\") ...F }", 100), 10);
        assert_eq!(count_tokens("query Q($v: [Int!]! = [1, -2.5e3]) { a }", 100), 20);
        assert_eq!(count_tokens(&"a ".repeat(10_000), 50), 50, "counting stops at the limit");
    }

    #[test]
    fn a_long_text_is_refused_before_parsing() {
        let text = format!("{{ {} }}", "a ".repeat(3_000));
        let error = check_text(&text, &DocumentLimits::ANONYMOUS, false).expect_err("refused");
        assert_eq!(error.extensions.and_then(|e| e.get("limit").cloned()), Some(async_graphql::Value::from("tokens")));
        let comment = format!("#{}", "x".repeat(60 * 1024));
        assert!(check_text(&comment, &DocumentLimits::ANONYMOUS, false).is_err(), "60 KB of comment is too long");
        assert!(check_text(&comment, &DocumentLimits::SIGNED_IN, true).is_ok());
    }
}
