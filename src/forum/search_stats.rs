//! How many rows a search's words are expected to match, from the lexeme statistics PostgreSQL
//! keeps of posts' and comments' search vectors (`pg_stats.most_common_elems` of `search_doc`,
//! refreshed by every ANALYZE): each process keeps a copy, read again every `STATS_TTL`, and
//! estimates a query from its `tsquery` as the planner would. The estimate decides whether a
//! kind is looked up in one pass of the words' index or in windows of ids
//! (`forum::search::OnePass`); it never changes an answer, only what finding it costs.
//!
//! Why in the server: asking the planner (`EXPLAIN` of the match, in a function) cost about
//! 0.6 ms per search on `bench search`'s course, as much as one pass saved on average. Here an
//! estimate is a few map lookups.
//!
//! Memory: the statistics' lexemes and frequencies, at most `default_statistics_target × 10`
//! lexemes per table (1,000 at the default target: about 150 KB for both tables, map entries
//! included).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::stmt;
use crate::error::AppResult;

/// How long a process's copy of the statistics serves before it is read again.
const STATS_TTL: Duration = Duration::from_secs(600);

/// The lexeme statistics of one table's `search_doc`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ColumnStats {
    /// The table's row count as the planner has it (`pg_class.reltuples`).
    rows: f64,
    /// The fraction of rows holding each of the most common lexemes.
    frequencies: HashMap<String, f64>,
    /// The least of those fractions: at most what a lexeme outside the list may hold (as far
    /// as the sample ANALYZE read can tell).
    least: f64,
}

impl ColumnStats {
    /// Statistics from `pg_stats`: `lexemes` and their `frequencies`, which for a tsvector
    /// column carry two more entries, the least and the greatest frequency. `None` when they
    /// do not fit together (a table never analyzed has none).
    pub(crate) fn new(rows: f64, lexemes: Vec<String>, frequencies: &[f32]) -> Option<Self> {
        if frequencies.len() != lexemes.len() + 2 || lexemes.is_empty() {
            return None;
        }
        let least = f64::from(frequencies[lexemes.len()]);
        let frequencies = lexemes.into_iter().zip(frequencies.iter().map(|f| f64::from(*f))).collect();
        Some(ColumnStats { rows: rows.max(0.0), frequencies, least })
    }

    /// The rows expected to match `query`.
    fn expected(&self, query: &Query) -> f64 {
        self.rows * self.selectivity(query)
    }

    /// As the planner reckons it: words independent, a phrase as its words together.
    fn selectivity(&self, query: &Query) -> f64 {
        match query {
            Query::Lexeme(lexeme) => self.frequencies.get(lexeme).copied().unwrap_or(self.least),
            Query::Not(inner) => 1.0 - self.selectivity(inner),
            Query::And(a, b) | Query::Phrase(a, b) => self.selectivity(a) * self.selectivity(b),
            Query::Or(a, b) => {
                let (a, b) = (self.selectivity(a), self.selectivity(b));
                a + b - a * b
            }
        }
    }
}

/// Both tables' statistics, as one process last read them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchStats {
    pub(crate) posts: Option<ColumnStats>,
    pub(crate) comments: Option<ColumnStats>,
}

impl SearchStats {
    /// The posts and comments expected to match a query, from its `tsquery` as text (as
    /// `websearch_to_tsquery(...)::text` gives it). `None` for a kind without statistics, a
    /// query that names a lexeme twice (the planner's product would take `index index` for
    /// as rare as a word squared, though it matches as often as `index`), or text that does
    /// not parse.
    pub fn expected(&self, tsquery: &str) -> (Option<f64>, Option<f64>) {
        let Some(query) = Query::parse(tsquery) else {
            return (None, None);
        };
        let mut lexemes = Vec::new();
        query.lexemes(&mut lexemes);
        let count = lexemes.len();
        lexemes.sort_unstable();
        lexemes.dedup();
        if lexemes.len() != count {
            return (None, None);
        }
        (self.posts.as_ref().map(|s| s.expected(&query)), self.comments.as_ref().map(|s| s.expected(&query)))
    }

    /// Reads both tables' statistics of `search_doc` and row counts.
    pub async fn read(db: &impl ConnectionTrait) -> AppResult<Self> {
        #[derive(FromQueryResult)]
        struct Row {
            table_name: String,
            row_count: f64,
            lexemes: Option<Vec<String>>,
            frequencies: Option<Vec<f32>>,
        }
        let rows = Row::find_by_statement(stmt(
            "SELECT c.relname::text AS table_name, greatest(c.reltuples, 0)::float8 AS row_count, \
                    s.most_common_elems::text::text[] AS lexemes, s.most_common_elem_freqs AS frequencies \
             FROM pg_class c \
             LEFT JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = c.relname \
                                 AND s.attname = 'search_doc' \
             WHERE c.relnamespace = current_schema()::regnamespace AND c.relname IN ('posts', 'comments')",
            [],
        ))
        .all(db)
        .await?;
        let mut stats = SearchStats::default();
        for row in rows {
            let column = match (row.lexemes, row.frequencies) {
                (Some(lexemes), Some(frequencies)) => ColumnStats::new(row.row_count, lexemes, &frequencies),
                _ => None,
            };
            match row.table_name.as_str() {
                "posts" => stats.posts = column,
                "comments" => stats.comments = column,
                _ => {}
            }
        }
        Ok(stats)
    }
}

/// A process's copy of the statistics and when it was read.
type Held = Option<(Instant, Arc<SearchStats>)>;

/// The copy `held` holds while it is younger than `STATS_TTL`.
fn fresh(held: &Held) -> Option<Arc<SearchStats>> {
    held.as_ref().filter(|(at, _)| at.elapsed() < STATS_TTL).map(|(_, stats)| stats.clone())
}

/// A process's copy of the statistics, read again once older than `STATS_TTL`. Cheap to clone
/// (shared).
#[derive(Clone, Default)]
pub(crate) struct SearchStatsCache {
    held: Arc<Mutex<Held>>,
    /// Taken by the one search that reads them again; the others keep the copy they have.
    reading: Arc<tokio::sync::Mutex<()>>,
}

impl SearchStatsCache {
    /// The statistics, read now if this process has none or its copy is older than
    /// `STATS_TTL` (by one caller at a time: the others use the old copy meanwhile, or wait
    /// for the first).
    pub(crate) async fn get(&self, db: &impl ConnectionTrait) -> AppResult<Arc<SearchStats>> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(stats) = fresh(&held) {
            return Ok(stats);
        }
        let reading = match (held, self.reading.try_lock()) {
            (Some((_, stats)), Err(_)) => return Ok(stats),
            (_, Ok(reading)) => reading,
            (None, Err(_)) => self.reading.lock().await,
        };
        // Read by the caller this one waited for.
        if let Some(stats) = fresh(&self.held.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(stats);
        }
        let stats = Arc::new(SearchStats::read(db).await?);
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), stats.clone()));
        drop(reading);
        Ok(stats)
    }
}

/// A text query as PostgreSQL prints a `tsquery`: quoted lexemes (weights and prefix marks
/// after a colon), `!`, `<->` (or `<N>`), `&`, `|`, binding in that order, and parentheses.
#[derive(Clone, Debug, PartialEq)]
enum Query {
    Lexeme(String),
    Not(Box<Query>),
    And(Box<Query>, Box<Query>),
    Or(Box<Query>, Box<Query>),
    Phrase(Box<Query>, Box<Query>),
}

impl Query {
    /// `None` for the empty query (only stop words) and for text that does not parse.
    fn parse(text: &str) -> Option<Query> {
        let mut parser = Parser { rest: text };
        let query = parser.or()?;
        parser.rest.trim_start().is_empty().then_some(query)
    }

    fn lexemes<'a>(&'a self, into: &mut Vec<&'a str>) {
        match self {
            Query::Lexeme(lexeme) => into.push(lexeme),
            Query::Not(inner) => inner.lexemes(into),
            Query::And(a, b) | Query::Or(a, b) | Query::Phrase(a, b) => {
                a.lexemes(into);
                b.lexemes(into);
            }
        }
    }
}

/// A recursive-descent reader of a `tsquery`'s text.
struct Parser<'a> {
    rest: &'a str,
}

impl Parser<'_> {
    /// Consumes `token` after any spaces, if it comes next.
    fn eat(&mut self, token: &str) -> bool {
        let trimmed = self.rest.trim_start();
        match trimmed.strip_prefix(token) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn or(&mut self) -> Option<Query> {
        let mut query = self.and()?;
        while self.eat("|") {
            query = Query::Or(Box::new(query), Box::new(self.and()?));
        }
        Some(query)
    }

    fn and(&mut self) -> Option<Query> {
        let mut query = self.phrase()?;
        while self.eat("&") {
            query = Query::And(Box::new(query), Box::new(self.phrase()?));
        }
        Some(query)
    }

    fn phrase(&mut self) -> Option<Query> {
        let mut query = self.unary()?;
        while self.eat("<") {
            let end = self.rest.find('>')?;
            let distance = &self.rest[..end];
            if !(distance == "-" || distance.chars().all(|c| c.is_ascii_digit())) {
                return None;
            }
            self.rest = &self.rest[end + 1..];
            query = Query::Phrase(Box::new(query), Box::new(self.unary()?));
        }
        Some(query)
    }

    fn unary(&mut self) -> Option<Query> {
        if self.eat("!") {
            return Some(Query::Not(Box::new(self.unary()?)));
        }
        if self.eat("(") {
            let query = self.or()?;
            return self.eat(")").then_some(query);
        }
        self.lexeme()
    }

    /// `'text'`, a quote inside doubled, then any `:` marks (weights, prefix).
    fn lexeme(&mut self) -> Option<Query> {
        if !self.eat("'") {
            return None;
        }
        let mut lexeme = String::new();
        let mut chars = self.rest.char_indices().peekable();
        loop {
            let (at, c) = chars.next()?;
            match c {
                '\'' if chars.peek().is_some_and(|(_, next)| *next == '\'') => {
                    chars.next();
                    lexeme.push('\'');
                }
                '\'' => {
                    self.rest = &self.rest[at + 1..];
                    break;
                }
                '\\' => lexeme.push(chars.next()?.1),
                c => lexeme.push(c),
            }
        }
        if let Some(marks) = self.rest.strip_prefix(':') {
            let end = marks.find(|c: char| !matches!(c, 'A'..='D' | 'a'..='d' | '*')).unwrap_or(marks.len());
            self.rest = &marks[end..];
        }
        Some(Query::Lexeme(lexeme))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexeme(text: &str) -> Box<Query> {
        Box::new(Query::Lexeme(text.to_owned()))
    }

    #[test]
    fn a_tsquery_parses_with_the_planners_precedence() {
        // As `websearch_to_tsquery('english', '"theorem lab" -"quokka seen" or exam -x')` prints.
        let parsed = Query::parse("'theorem' <-> 'lab' & !( 'quokka' <-> 'seen' ) | 'exam' & !'x'");
        let expected = Query::Or(
            Box::new(Query::And(
                Box::new(Query::Phrase(lexeme("theorem"), lexeme("lab"))),
                Box::new(Query::Not(Box::new(Query::Phrase(lexeme("quokka"), lexeme("seen"))))),
            )),
            Box::new(Query::And(lexeme("exam"), Box::new(Query::Not(lexeme("x"))))),
        );
        assert_eq!(parsed, Some(expected));
        assert_eq!(Query::parse("'o''neil':AB* <2> 'x'"), Some(Query::Phrase(lexeme("o'neil"), lexeme("x"))));
        for broken in ["", "   ", "'open", "'a' &", "( 'a'", "'a' 'b'", "'a' <x> 'b'"] {
            assert_eq!(Query::parse(broken), None, "{broken:?}");
        }
    }

    fn stats() -> SearchStats {
        let column = |rows: f64| {
            ColumnStats::new(
                rows,
                vec!["exam".to_owned(), "lab".to_owned(), "grade".to_owned()],
                &[0.10, 0.05, 0.20, 0.01, 0.20],
            )
        };
        SearchStats { posts: column(100_000.0), comments: column(1_000_000.0) }
    }

    #[test]
    fn the_estimate_multiplies_words_and_takes_the_least_frequency_for_a_word_outside_the_list() {
        let stats = stats();
        let close = |got: Option<f64>, want: f64| got.is_some_and(|got| (got - want).abs() < 1e-6 * want.max(1.0));
        let (posts, comments) = stats.expected("'exam'");
        assert!(close(posts, 10_000.0) && close(comments, 100_000.0), "{posts:?} {comments:?}");
        // A word outside the list: the least frequency listed (1 %).
        assert!(close(stats.expected("'quokka'").0, 1_000.0));
        // Words together, and a phrase: the product.
        assert!(close(stats.expected("'exam' & 'lab'").0, 500.0));
        assert!(close(stats.expected("'lab' <-> 'quokka'").0, 50.0));
        // Either: the union; a negation: the rest.
        assert!(close(stats.expected("'exam' | 'lab'").0, 100_000.0 * (0.10 + 0.05 - 0.005)));
        assert!(close(stats.expected("!'exam'").0, 90_000.0));
        assert!(close(stats.expected("'grade' & !'exam'").0, 100_000.0 * 0.20 * 0.90));
    }

    #[test]
    fn no_estimate_for_a_lexeme_twice_an_empty_query_or_a_kind_without_statistics() {
        let stats = stats();
        assert_eq!(stats.expected("'exam' & 'exam'"), (None, None));
        assert_eq!(stats.expected("'exam' <-> 'lab' & !'exam'"), (None, None));
        assert_eq!(stats.expected(""), (None, None));
        let posts_only = SearchStats { comments: None, ..stats };
        assert!(matches!(posts_only.expected("'exam'"), (Some(_), None)));
        // Statistics that do not fit together are none.
        assert_eq!(ColumnStats::new(10.0, vec!["a".to_owned()], &[0.5]), None);
        assert_eq!(ColumnStats::new(10.0, Vec::new(), &[]), None);
    }
}
