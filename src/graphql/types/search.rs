//! Search in the schema's types: `Course.search`, `Query.search`, `Course.similarPosts`,
//! `Course.searchLanguage`, their input and output types and the search cursor (the
//! `setSearchLanguage` mutation is `graphql::search`'s). The SQL and the rules are
//! `forum::search`'s.
//!
//! A search cursor is signed like every cursor (`crate::cursor::CursorKeys`) and bound to the
//! walk it came from: its position starts with a digest of the scope (one course or all the
//! viewer's), the query text and the filter, so a cursor of another query or filter is
//! BAD_USER_INPUT before any SQL runs.

use async_graphql::connection::{Connection, CursorType, Edge};
use async_graphql::{Context, ID, Object, Result};
use sha2::Digest;

use super::{Comment, Post, Reply};
use crate::cache::search::FreshSearches;
use crate::cursor::CursorKeys;
use crate::documents::lowercase_hex;
use crate::error::AppError;
use crate::forum::audience::PostKind;
use crate::forum::courses::Role;
use crate::forum::search::{self, Hit, Language, Matched, Position, Scope, SearchFilter};
use crate::graphql::context::{state, viewer};
use crate::graphql::ids::{self, NodeKind};

/// Hits a page holds by default, and at most.
const DEFAULT_HITS: i32 = 10;
const MAX_HITS: i32 = 50;
/// Similar posts by default, and at most.
const DEFAULT_SIMILAR: i32 = 5;
const MAX_SIMILAR: i32 = 10;

/// A course's search language: how its text is split into searchable words.
#[derive(async_graphql::Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchLanguage {
    /// English (the default): words are stemmed (`running` finds `run`, `runs`) and stop
    /// words (`the`, `of`) are not searchable.
    English,
    /// No language: every word is searchable as written (lowercased), none is stemmed. For
    /// courses not taught in English, or about code.
    Simple,
}

impl SearchLanguage {
    pub(crate) fn language(self) -> Language {
        match self {
            SearchLanguage::English => Language::English,
            SearchLanguage::Simple => Language::Simple,
        }
    }

    fn of(language: Language) -> Self {
        match language {
            Language::English => SearchLanguage::English,
            Language::Simple => SearchLanguage::Simple,
        }
    }
}

/// What a search hit matched.
#[derive(async_graphql::Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchMatch {
    /// A post's title or body.
    Post,
    /// A top-level comment.
    Comment,
    /// A reply.
    Reply,
}

/// What a search is narrowed to: only the hits that match every field given.
#[derive(async_graphql::InputObject, Clone, Debug, Default)]
#[graphql(name = "SearchFilter")]
pub(crate) struct SearchFilterInput {
    /// Hits in posts of this kind only (a comment or reply counts as its post's kind).
    kind: Option<PostKind>,
    /// true: hits in unresolved questions only; false: hits in every other post.
    unresolved: Option<bool>,
    /// Hits written by this user (`User.id`): the post, comment or reply itself. Never
    /// matches what its author wrote anonymously where you would not see who wrote it. Not a
    /// user's id: BAD_USER_INPUT.
    author_id: Option<ID>,
}

impl SearchFilterInput {
    fn parse(self) -> Result<SearchFilter> {
        let author_id = self.author_id.map(|id| ids::decode_one(&id, NodeKind::User)).transpose()?;
        Ok(SearchFilter { kind: self.kind, unresolved: self.unresolved, author_id })
    }
}

/// One search hit (a `SearchHit`).
pub(crate) struct SearchHit(Hit);

/// One search hit: a post, comment or reply whose text matches, with a snippet.
#[Object]
impl SearchHit {
    /// Whether the post itself, one of its comments or one of its replies matched.
    async fn matched(&self) -> SearchMatch {
        match self.0.matched {
            Matched::Post => SearchMatch::Post,
            Matched::Comment => SearchMatch::Comment,
            Matched::Reply => SearchMatch::Reply,
        }
    }
    /// The post that matched, or the post of the comment or reply that matched.
    async fn post(&self) -> Post {
        Post::from(self.0.post.clone())
    }
    /// The comment that matched, when `matched` is COMMENT.
    async fn comment(&self) -> Option<Comment> {
        self.0.comment.clone().filter(|_| self.0.matched == Matched::Comment).map(Comment::from)
    }
    /// The reply that matched, when `matched` is REPLY.
    async fn reply(&self) -> Option<Reply> {
        self.0.comment.clone().filter(|_| self.0.matched == Matched::Reply).map(Reply::from)
    }
    /// HTML: an excerpt of the matched text (a post's title and body), HTML-escaped, with the
    /// matching words wrapped in `<mark>…</mark>`; no other markup.
    async fn snippet(&self) -> String {
        search::snippet_html(&self.0.headline)
    }
    /// The rank hits are ordered by, highest first (see the API guide: text rank, recency,
    /// endorsement and resolution).
    async fn score(&self) -> f64 {
        self.0.score
    }
}

/// One similar post (a `SimilarPost`).
pub(crate) struct SimilarPost {
    post: Post,
    similarity: f64,
}

/// A post whose title is like the text given, and how alike.
#[Object]
impl SimilarPost {
    /// The post.
    async fn post(&self) -> &Post {
        &self.post
    }
    /// Trigram similarity of its title and the text, from 0 (nothing alike) to 1 (the same).
    async fn similarity(&self) -> f64 {
        self.similarity
    }
}

/// A position in a search walk, signed when written out.
pub(crate) struct SearchCursor {
    walk: [u8; 16],
    at: Position,
    keys: CursorKeys,
}

const CURSOR_PREFIX: &str = "s:";

impl SearchCursor {
    fn position(&self) -> String {
        let at = &self.at;
        format!(
            "{CURSOR_PREFIX}{};{:016x};{};{};{};{}",
            lowercase_hex(&self.walk),
            at.score.to_bits(),
            at.kind,
            at.id,
            at.post_floor,
            at.comment_floor
        )
    }

    /// The position of `raw`, refused unless it belongs to the walk `walk`.
    fn open(keys: &CursorKeys, raw: &str, walk: &[u8; 16]) -> Result<Position> {
        let invalid = || AppError::bad_input("invalid cursor: pass back a cursor this search returned");
        let position = keys.open(raw)?;
        let text = std::str::from_utf8(&position).map_err(|_| invalid())?;
        let rest = text.strip_prefix(CURSOR_PREFIX).ok_or_else(invalid)?;
        let parts: Vec<&str> = rest.split(';').collect();
        let [digest, score, kind, id, post_floor, comment_floor] = parts[..] else { return Err(invalid().into()) };
        if digest != lowercase_hex(walk) {
            return Err(AppError::bad_input(
                "this cursor belongs to another search (another query, filter or scope): pass one this search returned",
            )
            .into());
        }
        let number = |s: &str| s.parse::<i64>().map_err(|_| invalid());
        Ok(Position {
            score: f64::from_bits(u64::from_str_radix(score, 16).map_err(|_| invalid())?),
            kind: kind.parse::<i16>().map_err(|_| invalid())?,
            id: number(id)?,
            post_floor: number(post_floor)?,
            comment_floor: number(comment_floor)?,
        })
    }
}

impl CursorType for SearchCursor {
    type Error = AppError;

    fn decode_cursor(_: &str) -> Result<Self, Self::Error> {
        // Opened by `SearchCursor::open` with the state's keys only.
        Err(AppError::bad_input("invalid cursor: pass back a cursor this API returned"))
    }

    fn encode_cursor(&self) -> String {
        self.keys.seal(self.position().as_bytes())
    }
}

/// The digest a walk's cursors carry: scope, query and filter.
fn walk_digest(scope: &str, query: &str, filter: &SearchFilter) -> [u8; 16] {
    let mut hasher = sha2::Sha256::new();
    for part in [scope, query, &filter.key()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut walk = [0u8; 16];
    walk.copy_from_slice(&digest[..16]);
    walk
}

/// A page of hits in `courses` (the viewer's roles there), as a connection. Every argument is
/// checked before any SQL.
pub(crate) async fn search_in(
    ctx: &Context<'_>,
    scope_name: &str,
    courses: &[(i64, Role)],
    query: String,
    first: Option<i32>,
    after: Option<String>,
    filter: Option<SearchFilterInput>,
) -> Result<Connection<SearchCursor, SearchHit>> {
    let viewer = viewer(ctx)?;
    let state = state(ctx)?;
    let query = search::validate_query("query", &query)?;
    let first = first.unwrap_or(DEFAULT_HITS);
    if !(1..=MAX_HITS).contains(&first) {
        return Err(AppError::bad_input(format!("`first` must be 1 to {MAX_HITS}")).into());
    }
    let filter = filter.map(SearchFilterInput::parse).transpose()?.unwrap_or_default();
    let walk = walk_digest(scope_name, &query, &filter);
    let keys = &state.cursor_keys;
    let after = after.map(|raw| SearchCursor::open(keys, &raw, &walk)).transpose()?;
    let fresh = FreshSearches::new(&state.search_limit, &state.keys, viewer.user_id);
    let page = match courses {
        // One course: through the kept candidates of its first pages (`cache::search`).
        [course] => {
            state
                .search_candidates
                .search(
                    &state.search_db,
                    &state.search_kept_db,
                    viewer.user_id,
                    *course,
                    &query,
                    &filter,
                    after,
                    i64::from(first),
                    &fresh,
                )
                .await?
        }
        _ => {
            fresh.admit().await?;
            let scope = Scope { viewer: viewer.user_id, courses };
            let one_pass = state.search_candidates.one_pass(&state.search_db).await?;
            search::search(&state.search_db, &scope, &query, &filter, after, i64::from(first), &one_pass).await?
        }
    };
    let mut conn = Connection::new(after.is_some(), page.has_next);
    conn.edges.extend(page.hits.into_iter().map(|hit| {
        let cursor = SearchCursor { walk, at: hit.position, keys: keys.clone() };
        Edge::new(cursor, SearchHit(hit))
    }));
    Ok(conn)
}

/// `Course.search`: the viewer must belong to the course.
pub(crate) async fn course_search(
    ctx: &Context<'_>,
    course_id: i64,
    query: String,
    first: Option<i32>,
    after: Option<String>,
    filter: Option<SearchFilterInput>,
) -> Result<Connection<SearchCursor, SearchHit>> {
    let role = viewer(ctx)?.require_member(&state(ctx)?.db, course_id).await?;
    search_in(ctx, &format!("course:{course_id}"), &[(course_id, role)], query, first, after, filter).await
}

/// `Query.search`: every course the viewer belongs to.
pub(crate) async fn search_everywhere(
    ctx: &Context<'_>,
    query: String,
    first: Option<i32>,
    after: Option<String>,
    filter: Option<SearchFilterInput>,
) -> Result<Connection<SearchCursor, SearchHit>> {
    let roles = viewer(ctx)?.memberships(&state(ctx)?.db).await?;
    let mut courses: Vec<(i64, Role)> = roles.iter().map(|(id, role)| (*id, *role)).collect();
    courses.sort_unstable_by_key(|(id, _)| *id);
    search_in(ctx, "all", &courses, query, first, after, filter).await
}

/// `Course.similarPosts`.
pub(crate) async fn similar_posts(
    ctx: &Context<'_>,
    course_id: i64,
    text: String,
    first: Option<i32>,
) -> Result<Vec<SimilarPost>> {
    let viewer = viewer(ctx)?;
    let state = state(ctx)?;
    let text = search::validate_query("text", &text)?;
    let first = first.unwrap_or(DEFAULT_SIMILAR);
    if !(1..=MAX_SIMILAR).contains(&first) {
        return Err(AppError::bad_input(format!("`first` must be 1 to {MAX_SIMILAR}")).into());
    }
    let role = viewer.require_member(&state.db, course_id).await?;
    let rows = crate::cache::titles::similar_posts(
        &state.course_titles,
        &state.db,
        course_id,
        viewer.user_id,
        role,
        &text,
        first as usize,
    )
    .await?;
    Ok(rows.into_iter().map(|(row, similarity)| SimilarPost { post: Post::from(row), similarity }).collect())
}

/// `Course.searchLanguage`.
pub(crate) async fn course_language(ctx: &Context<'_>, course_id: i64) -> Result<SearchLanguage> {
    Ok(SearchLanguage::of(search::language(&state(ctx)?.db, course_id).await?))
}
