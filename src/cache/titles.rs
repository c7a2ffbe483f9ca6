//! Similar titles (`Course.similarPosts`): each course's live titles indexed in this process,
//! and the lookup that reads them (or, when a course's index does not fit, the SQL lookup of
//! `forum::search`, whose rules and constants it shares).
//!
//! Why in memory: suggestions are asked for on every pause in typing, so they must cost about
//! a millisecond, server and database together. The SQL lookup (`forum::search::similar_posts_by_sql`, over
//! the lexicon of migration 0015) spent 2.5 ms in PostgreSQL alone on a course of 100,000
//! posts: a trigram walk to correct the typed words, the candidates' rows, and a trigram
//! comparison per candidate. Here the words are corrected, the candidates picked and compared
//! in memory, and one statement by primary key reads the few posts that win.
//!
//! What a course's index holds: each live post's id, author, privacy, whether it is a resolved
//! question, its title's words (as lexicon ids) and how many trigrams the title has; the
//! lexicon of title words with how many live titles hold each; a trigram index over the
//! lexicon (to correct a typed word) and each word's titles (to pick candidates). Words and
//! trigrams are pg_trgm's: runs of letters and digits, lowercased. A title's trigrams are the
//! union of its words', so its similarity to the typed text is counted from its words' shared
//! trigrams (`SharedTrigrams`), without its text.
//!
//! How it stays exact: every post row carries `title_xid`, the transaction that last wrote a
//! field kept here, and `title_version`, how many such writes it has had (migration 0017).
//! The index remembers the xmin of the snapshot of the last statement that read it up to
//! date: every transaction older than that had ended, so every row version it wrote was read.
//! Each lookup's one statement reads, besides the winners, the course's rows stamped at or
//! after that xmin (usually none), applies them (a version replaces the one held only if its
//! count is higher: transaction ids do not order one row's writes, its row lock does) and
//! moves the xmin on. So a lookup sees every post committed before it started, on whichever
//! instance it was written, and the winners' fields come from that same statement: the answer
//! never shows anything deleted, made private or moved, whatever the index holds.
//!
//! A write transaction held open for long holds the xmin back: until it ends, each lookup
//! reads again the course's rows changed since it began (the server's own transactions last
//! milliseconds). A post moved to another course or deleted for good (neither is an operation
//! of the API) stays a dead candidate until its primary-key read first finds nothing.
//!
//! Memory: the indexes share `CacheName::CourseTitles` of the cache budget, weighed in bytes;
//! the least recently used course goes first. A course whose index alone would exceed the
//! share is served by the SQL lookup instead (for `OVERSIZED_RETRY` before it is tried again),
//! and so is a course dropped to make room (for `EVICTED_COOLDOWN`): courses competing for the
//! share rebuild each other's index at most once a minute, not on every keystroke.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, FromQueryResult, QueryResult};

use super::budget::{CacheBudget, CacheFigures, CacheName, Measured};
use crate::db::stmt;
use crate::error::{AppError, AppResult};
use crate::forum::audience::may_read;
use crate::forum::courses::Role;
use crate::forum::posts::{self, PostRow};
use crate::forum::search::{
    CANDIDATE_BUDGET, MAX_CANDIDATES, MIN_SIMILARITY, MIN_WORD_SIMILARITY, similar_posts_by_sql,
};

/// How long a course too big for its share is served by SQL before it is tried again.
const OVERSIZED_RETRY: Duration = Duration::from_secs(600);
/// How long a course whose index was dropped to make room is served by SQL.
const EVICTED_COOLDOWN: Duration = Duration::from_secs(60);
/// What an allocation costs beyond its bytes (allocator rounding and bookkeeping), roughly.
const ALLOCATION_OVERHEAD: usize = 16;
/// Dead entries (edited, deleted, moved) tolerated before an index is compacted, as a
/// fraction of its live ones (and at least `MIN_DEAD_TO_COMPACT`).
const DEAD_SHARE_TO_COMPACT: usize = 4;
const MIN_DEAD_TO_COMPACT: usize = 1024;

/// The words of a text as titles are indexed: runs of letters and digits, lowercased.
pub(crate) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// One trigram: three characters packed into 63 bits.
type Trigram = u64;

fn pack(chars: &[char]) -> Trigram {
    (u64::from(chars[0]) << 42) | (u64::from(chars[1]) << 21) | u64::from(chars[2])
}

/// pg_trgm's trigrams of a text: each word padded with two blanks before and one after, every
/// three consecutive characters of it; sorted and distinct.
pub(crate) fn trigrams(text: &str) -> Vec<Trigram> {
    let mut out = Vec::new();
    let mut padded: Vec<char> = Vec::new();
    for word in words(text) {
        padded.clear();
        padded.extend(['\u{20}', '\u{20}']);
        padded.extend(word.chars());
        padded.push('\u{20}');
        out.extend(padded.windows(3).map(pack));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// pg_trgm's `similarity`: shared trigrams over the trigrams of either (0 when both have none).
pub(crate) fn similarity(a: &[Trigram], b: &[Trigram]) -> f64 {
    let shared = shared_count(a, b);
    let union = a.len() + b.len() - shared;
    if union == 0 { 0.0 } else { shared as f64 / union as f64 }
}

fn shared_count(a: &[Trigram], b: &[Trigram]) -> usize {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    shared
}

/// What the index reads of a post.
#[derive(Clone, Debug)]
struct TitleRow {
    id: i64,
    course_id: i64,
    author: i64,
    title: String,
    private: bool,
    resolved: bool,
    live: bool,
    /// `title_xid`.
    xid: u64,
    /// `title_version`.
    version: i64,
}

/// The SQL of a post's "resolved question" (as `Post.resolved` reads for questions).
const RESOLVED_SQL: &str = "(p.kind = 'question' AND (p.accepted_comment_id IS NOT NULL OR p.resolved_at IS NOT NULL))";

fn parse_xid(raw: &str) -> AppResult<u64> {
    raw.parse().map_err(|_| AppError::Internal(format!("a transaction id that is not a number: {raw:?}")))
}

impl TitleRow {
    fn read(row: &QueryResult) -> AppResult<Option<Self>> {
        let Some(xid) = row.try_get::<Option<String>>("", "title_xid")? else { return Ok(None) };
        Ok(Some(Self {
            id: row.try_get("", "id")?,
            course_id: row.try_get("", "course_id")?,
            author: row.try_get("", "user_id")?,
            title: row.try_get("", "title")?,
            private: row.try_get("", "private")?,
            resolved: row.try_get("", "resolved")?,
            live: row.try_get("", "live")?,
            xid: parse_xid(&xid)?,
            version: row.try_get("", "title_version")?,
        }))
    }

    fn readable_by(&self, viewer: i64, role: Role) -> bool {
        may_read(viewer, role, self.author, self.private)
    }
}

/// A post live in the course, as indexed. Dead entries (replaced or removed) stay until the
/// next compaction; the postings skip them.
struct Entry {
    post_id: i64,
    author: i64,
    /// The lexicon ids of the title's distinct words.
    words: Box<[u32]>,
    /// How many distinct trigrams the title has (the size of its set, for the similarity).
    trigram_count: u32,
    private: bool,
    resolved: bool,
    live: bool,
}

/// A word of the course's titles.
struct Word {
    text: Box<str>,
    /// Live titles that hold it.
    titles: u32,
    /// How many distinct trigrams it has, for the similarity of a typed word to it.
    trigram_count: u32,
}

/// The newest version of a post the index has applied, and its entry while live.
#[derive(Clone, Copy)]
struct Version {
    /// `title_xid`: the transaction that wrote it.
    xid: u64,
    /// `title_version`: which write of the row it is.
    version: i64,
    slot: Option<u32>,
}

/// One course's titles (see the module doc).
struct TitleIndex {
    course_id: i64,
    entries: Vec<Entry>,
    /// Bytes of the entries' word lists.
    word_list_bytes: usize,
    dead: usize,
    versions: HashMap<i64, Version>,
    word_ids: HashMap<Box<str>, u32>,
    lexicon: Vec<Word>,
    /// Each trigram's lexicon words.
    word_trigrams: HashMap<Trigram, Vec<u32>>,
    /// Each word's entries (slots, ascending), dead ones included until compaction.
    postings: Vec<Vec<u32>>,
    /// Every row version written by a transaction older than this has been applied. Moved on
    /// (never back) after the rows read with it are applied.
    xmin: AtomicU64,
}

impl TitleIndex {
    fn new(course_id: i64, xmin: u64) -> Self {
        Self {
            course_id,
            entries: Vec::new(),
            word_list_bytes: 0,
            dead: 0,
            versions: HashMap::new(),
            word_ids: HashMap::new(),
            lexicon: Vec::new(),
            word_trigrams: HashMap::new(),
            postings: Vec::new(),
            xmin: AtomicU64::new(xmin),
        }
    }

    fn word_id(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.word_ids.get(word) {
            return id;
        }
        let id = self.lexicon.len() as u32;
        let own = trigrams(word);
        for &t in &own {
            self.word_trigrams.entry(t).or_default().push(id);
        }
        self.lexicon.push(Word { text: word.into(), titles: 0, trigram_count: own.len() as u32 });
        self.word_ids.insert(word.into(), id);
        self.postings.push(Vec::new());
        id
    }

    /// The distinct lexicon ids of a title's words (adding new words).
    fn title_word_ids(&mut self, title: &str) -> Vec<u32> {
        let mut ids: Vec<u32> = words(title).map(|w| self.word_id(&w)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn add_entry(&mut self, row: &TitleRow) -> u32 {
        let slot = self.entries.len() as u32;
        let words = self.title_word_ids(&row.title);
        for &id in &words {
            self.lexicon[id as usize].titles += 1;
            self.postings[id as usize].push(slot);
        }
        self.word_list_bytes += words.len() * 4 + ALLOCATION_OVERHEAD;
        self.entries.push(Entry {
            post_id: row.id,
            author: row.author,
            words: words.into_boxed_slice(),
            trigram_count: trigrams(&row.title).len() as u32,
            private: row.private,
            resolved: row.resolved,
            live: true,
        });
        slot
    }

    fn kill(&mut self, slot: u32) {
        let entry = &mut self.entries[slot as usize];
        if !entry.live {
            return;
        }
        entry.live = false;
        for &id in &entry.words {
            let word = &mut self.lexicon[id as usize];
            word.titles = word.titles.saturating_sub(1);
        }
        self.dead += 1;
    }

    /// Whether `apply` would change anything for this row version.
    fn is_news(&self, row: &TitleRow) -> bool {
        self.versions.get(&row.id).is_none_or(|v| v.version < row.version)
    }

    /// Applies a row version read from the database, unless the index holds the same or a
    /// later write of the row. Returns whether anything changed.
    fn apply(&mut self, row: &TitleRow) -> bool {
        if !self.is_news(row) {
            return false;
        }
        if let Some(slot) = self.versions.get(&row.id).and_then(|v| v.slot) {
            self.kill(slot);
        }
        let slot = (row.live && row.course_id == self.course_id).then(|| self.add_entry(row));
        self.versions.insert(row.id, Version { xid: row.xid, version: row.version, slot });
        true
    }

    /// Whether `forget` would drop the post.
    fn would_forget(&self, post_id: i64, xmin: u64) -> bool {
        self.versions.get(&post_id).is_some_and(|v| v.slot.is_some() && v.xid < xmin)
    }

    /// Drops a post a statement with snapshot xmin `xmin` did not find in the course (deleted
    /// for good, or moved to another course), unless a newer version was applied since.
    fn forget(&mut self, post_id: i64, xmin: u64) -> bool {
        if !self.would_forget(post_id, xmin) {
            return false;
        }
        if let Some(slot) = self.versions.get_mut(&post_id).and_then(|v| v.slot.take()) {
            self.kill(slot);
        }
        true
    }

    /// Rebuilds the entries and postings from the live entries once the dead ones are many.
    fn compact_if_worth_it(&mut self) {
        let live = self.entries.len() - self.dead;
        if self.dead < MIN_DEAD_TO_COMPACT || self.dead * DEAD_SHARE_TO_COMPACT < live {
            return;
        }
        let entries = std::mem::take(&mut self.entries);
        let mut moved: HashMap<i64, u32> = HashMap::with_capacity(live);
        for postings in &mut self.postings {
            postings.clear();
        }
        self.dead = 0;
        self.word_list_bytes = 0;
        for entry in entries.into_iter().filter(|e| e.live) {
            self.word_list_bytes += entry.words.len() * 4 + ALLOCATION_OVERHEAD;
            let slot = self.entries.len() as u32;
            for &id in &entry.words {
                self.postings[id as usize].push(slot);
            }
            moved.insert(entry.post_id, slot);
            self.entries.push(entry);
        }
        for (post_id, version) in self.versions.iter_mut() {
            version.slot = moved.get(post_id).copied();
        }
        for postings in &mut self.postings {
            postings.shrink_to_fit();
        }
        self.entries.shrink_to_fit();
    }

    /// The lexicon word a typed word stands for: itself when some live title holds it, else
    /// the nearest by trigram similarity (at least `MIN_WORD_SIMILARITY`; ties go to the word
    /// in more titles).
    fn correct(&self, typed: &str, shared: &mut Vec<u16>) -> Option<u32> {
        if let Some(&id) = self.word_ids.get(typed)
            && self.lexicon[id as usize].titles > 0
        {
            return Some(id);
        }
        let own = trigrams(typed);
        shared.clear();
        shared.resize(self.lexicon.len(), 0);
        let mut touched: Vec<u32> = Vec::new();
        for t in &own {
            for &id in self.word_trigrams.get(t).map(Vec::as_slice).unwrap_or_default() {
                if shared[id as usize] == 0 {
                    touched.push(id);
                }
                shared[id as usize] = shared[id as usize].saturating_add(1);
            }
        }
        let mut best: Option<(f64, u32, u32)> = None;
        for id in touched {
            let word = &self.lexicon[id as usize];
            if word.titles == 0 {
                continue;
            }
            let common = usize::from(shared[id as usize]);
            let union = own.len() + word.trigram_count as usize - common;
            let alike = if union == 0 { 0.0 } else { common as f64 / union as f64 };
            let better = match best {
                None => true,
                Some((b, titles, b_id)) => {
                    alike > b
                        || (alike == b
                            && (word.titles > titles
                                || (word.titles == titles && word.text < self.lexicon[b_id as usize].text)))
                }
            };
            if better {
                best = Some((alike, word.titles, id));
            }
        }
        best.filter(|(alike, _, _)| *alike >= MIN_WORD_SIMILARITY).map(|(_, _, id)| id)
    }

    /// The posts most like `text` that `viewer` may read, best first, at most `keep`:
    /// resolved questions first, then the most alike (at least `MIN_SIMILARITY`), then the
    /// newest.
    fn lookup(&self, text: &str, text_trigrams: &[Trigram], viewer: i64, role: Role, keep: usize) -> Vec<i64> {
        let mut typed: Vec<String> = words(text).collect();
        typed.sort_unstable();
        typed.dedup();
        let mut shared = Vec::new();
        let mut known: Vec<u32> = typed.iter().filter_map(|w| self.correct(w, &mut shared)).collect();
        known.sort_unstable();
        known.dedup();
        known.sort_by(|&a, &b| {
            let (a, b) = (&self.lexicon[a as usize], &self.lexicon[b as usize]);
            a.titles.cmp(&b.titles).then_with(|| a.text.cmp(&b.text))
        });
        let mut through = 0u64;
        let chosen: Vec<u32> = known
            .into_iter()
            .enumerate()
            .take_while(|(n, id)| {
                through += u64::from(self.lexicon[*id as usize].titles);
                *n == 0 || through <= CANDIDATE_BUDGET
            })
            .map(|(_, id)| id)
            .collect();

        let readable = |entry: &Entry| entry.live && may_read(viewer, role, entry.author, entry.private);
        // The newest (by post id) readable titles holding a chosen word, at most MAX_CANDIDATES.
        let mut slots: Vec<(i64, u32)> = chosen
            .iter()
            .flat_map(|&id| self.postings[id as usize].iter())
            .map(|&s| (self.entries[s as usize].post_id, s))
            .filter(|&(_, s)| readable(&self.entries[s as usize]))
            .collect();
        // A title is in at most one posting list per chosen word, so the newest
        // MAX_CANDIDATES distinct ones are among the newest MAX_CANDIDATES × that many: only
        // those are sorted.
        let newest = MAX_CANDIDATES.saturating_mul(chosen.len());
        if slots.len() > newest {
            slots.select_nth_unstable_by(newest, |a, b| b.cmp(a));
            slots.truncate(newest);
        }
        slots.sort_unstable_by(|a, b| b.cmp(a));
        slots.dedup();
        slots.truncate(MAX_CANDIDATES);

        let shared = SharedTrigrams::new(self.lexicon.len(), &self.word_trigrams, text_trigrams);
        let mut held = Vec::new();
        let mut ranked: Vec<(bool, f64, i64)> = slots
            .into_iter()
            .filter_map(|(_, s)| {
                let entry = &self.entries[s as usize];
                let alike = shared.similarity(entry, &mut held);
                (alike >= MIN_SIMILARITY).then_some((entry.resolved, alike, entry.post_id))
            })
            .collect();
        ranked.sort_by(rank_order);
        ranked.into_iter().take(keep).map(|(_, _, id)| id).collect()
    }

    /// Approximate heap bytes (the module's share of the cache budget is weighed with it).
    fn bytes(&self) -> u64 {
        use std::mem::size_of;
        let entries = self.entries.capacity() * (size_of::<Entry>() + ALLOCATION_OVERHEAD) + self.word_list_bytes;
        let versions = self.versions.capacity() * (size_of::<(i64, Version)>() + 1);
        let words: usize = self.lexicon.iter().map(|w| 2 * (w.text.len() + ALLOCATION_OVERHEAD)).sum::<usize>()
            + self.lexicon.capacity() * size_of::<Word>()
            + self.word_ids.capacity() * (size_of::<(Box<str>, u32)>() + 1);
        let trigram_lists: usize = self.word_trigrams.values().map(|v| v.capacity() * 4 + ALLOCATION_OVERHEAD).sum();
        let trigrams = self.word_trigrams.capacity() * (size_of::<(Trigram, Vec<u32>)>() + 1) + trigram_lists;
        let postings: usize = self.postings.iter().map(|p| p.capacity() * 4 + ALLOCATION_OVERHEAD).sum::<usize>()
            + self.postings.capacity() * size_of::<Vec<u32>>();
        (entries + versions + words + trigrams + postings) as u64
    }
}

/// Which of a text's trigrams each lexicon word holds, as bits (bit `j` for the text's `j`th
/// trigram): a title's trigram set is the union of its words' (pg_trgm pads and splits each
/// word alone), so the trigrams a title shares with the text are the OR of its words' bits,
/// and its similarity needs neither its text nor its trigrams, only its word ids and how many
/// trigrams it has. Built per lookup from the index's trigram → words lists, in time of the
/// text's trigrams' lists.
struct SharedTrigrams {
    /// The text's trigrams.
    count: usize,
    /// `u64`s per word's bits.
    stride: usize,
    /// Where each lexicon word's bits start in `bits`, by word id (`NO_BITS`: it shares no
    /// trigram with the text). Dense: a title's words are looked up here hundreds of times
    /// per lookup, and the lexicon is a few thousand words.
    offsets: Vec<u32>,
    bits: Vec<u64>,
}

/// `SharedTrigrams::offsets` of a word that shares no trigram with the text.
const NO_BITS: u32 = u32::MAX;

impl SharedTrigrams {
    fn new(lexicon_size: usize, word_trigrams: &HashMap<Trigram, Vec<u32>>, text_trigrams: &[Trigram]) -> Self {
        let stride = text_trigrams.len().div_ceil(64).max(1);
        let mut offsets: Vec<u32> = vec![NO_BITS; lexicon_size];
        let mut bits: Vec<u64> = Vec::new();
        for (j, t) in text_trigrams.iter().enumerate() {
            for &word in word_trigrams.get(t).map(Vec::as_slice).unwrap_or_default() {
                let offset = &mut offsets[word as usize];
                if *offset == NO_BITS {
                    *offset = bits.len() as u32;
                    bits.resize(bits.len() + stride, 0);
                }
                bits[*offset as usize + j / 64] |= 1 << (j % 64);
            }
        }
        Self { count: text_trigrams.len(), stride, offsets, bits }
    }

    /// pg_trgm's similarity of the entry's title to the text (`similarity` of their trigram
    /// sets); `held` is scratch space, reused from one entry to the next.
    fn similarity(&self, entry: &Entry, held: &mut Vec<u64>) -> f64 {
        held.clear();
        held.resize(self.stride, 0);
        for &word in entry.words.iter() {
            let at = self.offsets[word as usize];
            if at != NO_BITS {
                let at = at as usize;
                for (h, b) in held.iter_mut().zip(&self.bits[at..at + self.stride]) {
                    *h |= b;
                }
            }
        }
        let shared = held.iter().map(|h| h.count_ones() as usize).sum::<usize>();
        let union = entry.trigram_count as usize + self.count - shared;
        if union == 0 { 0.0 } else { shared as f64 / union as f64 }
    }
}

/// Resolved questions first, then the most alike, then the newest.
fn rank_order(a: &(bool, f64, i64), b: &(bool, f64, i64)) -> std::cmp::Ordering {
    b.0.cmp(&a.0).then_with(|| b.1.total_cmp(&a.1)).then_with(|| b.2.cmp(&a.2))
}

/// A course's index once built, and when it was last used.
struct CourseSlot {
    index: tokio::sync::OnceCell<RwLock<TitleIndex>>,
    bytes: AtomicU64,
    last_used: AtomicU64,
}

impl CourseSlot {
    fn read(&self) -> Option<RwLockReadGuard<'_, TitleIndex>> {
        self.index.get().map(|i| i.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn write(&self) -> Option<RwLockWriteGuard<'_, TitleIndex>> {
        self.index.get().map(|i| i.write().unwrap_or_else(|p| p.into_inner()))
    }
}

#[derive(Default)]
struct Slots {
    courses: HashMap<i64, Arc<CourseSlot>>,
    /// Courses served by SQL (too big for the share, or dropped to make room), and until when.
    by_sql: HashMap<i64, Instant>,
}

struct Shared {
    share_bytes: u64,
    slots: Mutex<Slots>,
    clock: AtomicU64,
}

/// Every course's title index in this process (cheap to clone: shared).
#[derive(Clone)]
pub struct CourseTitles(Arc<Shared>);

impl Measured for Shared {
    fn figures(&self) -> CacheFigures {
        let slots = self.lock();
        CacheFigures {
            used_bytes: slots.courses.values().map(|s| s.bytes.load(Ordering::Relaxed)).sum(),
            entries: slots.courses.len() as u64,
            capacity_bytes: self.share_bytes,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl CourseTitles {
    pub fn with_budget(budget: &CacheBudget) -> Self {
        let shared = Arc::new(Shared {
            share_bytes: budget.share(CacheName::CourseTitles),
            slots: Mutex::default(),
            clock: AtomicU64::new(0),
        });
        budget.register(CacheName::CourseTitles, shared.clone());
        Self(shared)
    }

    /// The course's slot, made if absent; `None` while the course is known to be too big.
    fn slot(&self, course_id: i64) -> Option<Arc<CourseSlot>> {
        let now = self.0.clock.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.0.lock();
        if let Some(&until) = slots.by_sql.get(&course_id) {
            if Instant::now() < until {
                return None;
            }
            slots.by_sql.remove(&course_id);
        }
        let slot = slots.courses.entry(course_id).or_insert_with(|| {
            Arc::new(CourseSlot {
                index: tokio::sync::OnceCell::new(),
                bytes: AtomicU64::new(0),
                last_used: AtomicU64::new(now),
            })
        });
        slot.last_used.store(now, Ordering::Relaxed);
        Some(slot.clone())
    }

    /// Records a slot's new size; drops the least recently used courses while the share is
    /// exceeded (each served by SQL for `EVICTED_COOLDOWN`), and the course itself (served by
    /// SQL for `OVERSIZED_RETRY`) when it alone exceeds the share.
    fn weigh(&self, course_id: i64, slot: &Arc<CourseSlot>, bytes: u64) {
        slot.bytes.store(bytes, Ordering::Relaxed);
        let mut slots = self.0.lock();
        if bytes > self.0.share_bytes {
            if slots.courses.get(&course_id).is_some_and(|s| Arc::ptr_eq(s, slot)) {
                slots.courses.remove(&course_id);
            }
            slots.by_sql.insert(course_id, Instant::now() + OVERSIZED_RETRY);
            tracing::info!(
                course_id,
                bytes,
                share = self.0.share_bytes,
                "similar titles: the course's index exceeds its share; served by SQL"
            );
            return;
        }
        loop {
            let used: u64 = slots.courses.values().map(|s| s.bytes.load(Ordering::Relaxed)).sum();
            if used <= self.0.share_bytes {
                break;
            }
            let coldest = slots
                .courses
                .iter()
                .filter(|(_, s)| !Arc::ptr_eq(s, slot))
                .min_by_key(|(_, s)| s.last_used.load(Ordering::Relaxed))
                .map(|(&id, _)| id);
            match coldest {
                Some(id) => {
                    slots.courses.remove(&id);
                    slots.by_sql.insert(id, Instant::now() + EVICTED_COOLDOWN);
                    metrics::counter!(crate::telemetry::names::CACHE_EVICTIONS, "cache" => CacheName::CourseTitles.label()).increment(1);
                }
                None => break,
            }
        }
    }
}

async fn build(db: &impl ConnectionTrait, course_id: i64) -> AppResult<TitleIndex> {
    let sql = format!(
        "WITH snap AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS snapshot_xmin) \
         SELECT snap.snapshot_xmin, p.id, p.course_id, p.user_id, p.title, p.private, {RESOLVED_SQL} AS resolved, \
                TRUE AS live, p.title_xid::text AS title_xid, p.title_version \
         FROM snap LEFT JOIN posts p ON p.course_id = $1 AND p.deleted_at IS NULL ORDER BY p.id"
    );
    let rows = db.query_all_raw(stmt(&sql, [course_id.into()])).await?;
    let xmin = snapshot_xmin(&rows)?;
    let mut index = TitleIndex::new(course_id, xmin);
    for row in &rows {
        if let Some(title) = TitleRow::read(row)? {
            index.apply(&title);
        }
    }
    Ok(index)
}

fn snapshot_xmin(rows: &[QueryResult]) -> AppResult<u64> {
    let first = rows.first().ok_or_else(|| AppError::Internal("no snapshot row".into()))?;
    parse_xid(&first.try_get::<String>("", "snapshot_xmin")?)
}

/// Posts of a course whose title is like `text`, readable by the viewer, at least
/// `MIN_SIMILARITY` alike, resolved questions first, then the most alike: from the course's
/// index in this process (see the module doc), or by SQL when it does not fit.
pub(crate) async fn similar_posts(
    titles: &CourseTitles,
    db: &impl ConnectionTrait,
    course_id: i64,
    viewer: i64,
    role: Role,
    text: &str,
    limit: usize,
) -> AppResult<Vec<(PostRow, f64)>> {
    let Some(slot) = titles.slot(course_id) else {
        return similar_posts_by_sql(db, course_id, viewer, role, text, limit as i64).await;
    };
    if slot.index.get().is_none() {
        let mut built = false;
        slot.index
            .get_or_try_init(|| async {
                built = true;
                build(db, course_id).await.map(RwLock::new)
            })
            .await?;
        if built {
            let bytes = slot.read().map_or(0, |i| i.bytes());
            titles.weigh(course_id, &slot, bytes);
        }
    }
    let text_trigrams = trigrams(text);
    // Twice as many as asked: the fresh rows may rank a few differently than the index did.
    let (candidates, xmin) = match slot.read() {
        Some(index) => {
            let candidates = index.lookup(text, &text_trigrams, viewer, role, 2 * limit);
            (candidates, index.xmin.load(Ordering::Acquire))
        }
        None => return Err(AppError::Internal("a course's title index was not built".into())),
    };
    let columns = posts::columns_of("p");
    // `title_rows` (migration 0019) keeps one plan per connection; the same statement written
    // here was planned anew on every lookup.
    let sql = format!(
        "WITH snap AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS snapshot_xmin) \
         SELECT snap.snapshot_xmin, {columns}, {RESOLVED_SQL} AS resolved, p.deleted_at IS NULL AS live, \
                p.title_xid::text AS title_xid, p.title_version \
         FROM snap LEFT JOIN LATERAL title_rows($1, $2, $3::text::xid8) p ON TRUE"
    );
    let ids: Vec<sea_orm::Value> = candidates.iter().map(|&id| id.into()).collect();
    let array = sea_orm::Value::Array(sea_orm::sea_query::ArrayType::BigInt, Some(Box::new(ids)));
    let rows = db.query_all_raw(stmt(&sql, [course_id.into(), array, xmin.to_string().into()])).await?;
    let xmin = snapshot_xmin(&rows)?;

    let mut fresh: HashMap<i64, (TitleRow, &QueryResult)> = HashMap::new();
    for row in &rows {
        if let Some(title) = TitleRow::read(row)? {
            fresh.insert(title.id, (title, row));
        }
    }
    let missing = || candidates.iter().filter(|id| !fresh.contains_key(id));
    // The write lock only when something is new (rarely); else the xmin alone moves on. It
    // moves after the rows read with it are applied, never before.
    let news = slot.read().is_some_and(|index| {
        fresh.values().any(|(title, _)| index.is_news(title)) || missing().any(|&id| index.would_forget(id, xmin))
    });
    let changed = if news {
        slot.write().and_then(|mut index| {
            let mut changed = false;
            for (title, _) in fresh.values() {
                changed |= index.apply(title);
            }
            for &id in missing() {
                changed |= index.forget(id, xmin);
            }
            if changed {
                index.compact_if_worth_it();
            }
            index.xmin.fetch_max(xmin, Ordering::AcqRel);
            changed.then(|| index.bytes())
        })
    } else {
        if let Some(index) = slot.read() {
            index.xmin.fetch_max(xmin, Ordering::AcqRel);
        }
        None
    };
    if let Some(bytes) = changed {
        titles.weigh(course_id, &slot, bytes);
    }

    let mut ranked: Vec<(bool, f64, i64)> = fresh
        .values()
        .filter(|(t, _)| t.live && t.course_id == course_id && t.readable_by(viewer, role))
        .filter_map(|(t, _)| {
            let alike = similarity(&trigrams(&t.title), &text_trigrams);
            (alike >= MIN_SIMILARITY).then_some((t.resolved, alike, t.id))
        })
        .collect();
    ranked.sort_by(rank_order);
    ranked
        .into_iter()
        .take(limit)
        .map(|(_, alike, id)| {
            let (_, row) = &fresh[&id];
            Ok((PostRow::from_query_result(row, "")?, alike))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, title: &str, xid: u64) -> TitleRow {
        let version = xid as i64;
        TitleRow {
            id,
            course_id: 1,
            author: 10,
            title: title.into(),
            private: false,
            resolved: false,
            live: true,
            xid,
            version,
        }
    }

    #[test]
    fn a_later_write_by_an_older_transaction_replaces_the_earlier_one() {
        // Transaction 100 took its id first, but wrote the row after transaction 101 did.
        let mut index = TitleIndex::new(1, 0);
        let mut resolved = row(1, "walrus question", 101);
        resolved.version = 2;
        assert!(index.apply(&resolved));
        let mut renamed = row(1, "narwhal question", 100);
        renamed.version = 3;
        assert!(index.apply(&renamed), "the third write of the row, whatever its transaction id");
        assert_eq!(index.lookup("narwhal question", &trigrams("narwhal question"), 10, Role::Student, 5), vec![1]);
        assert!(index.lookup("walrus", &trigrams("walrus"), 10, Role::Student, 5).is_empty());
    }

    #[test]
    fn similarity_is_pg_trgms() {
        // SELECT similarity('word', 'words') = 0.571429 (4 shared of 7).
        assert!((similarity(&trigrams("word"), &trigrams("words")) - 4.0 / 7.0).abs() < 1e-9);
        // Case and punctuation do not count; a word's trigrams are its own.
        assert_eq!(trigrams("Hello, World!"), trigrams("hello world"));
        assert_eq!(similarity(&trigrams("abc"), &trigrams("abc")), 1.0);
        assert_eq!(similarity(&trigrams(""), &trigrams("")), 0.0);
        // "  a" and " a " for a one-letter word.
        assert_eq!(trigrams("a").len(), 2);
    }

    #[test]
    fn a_titles_similarity_from_its_words_bits_is_the_similarity_of_its_trigrams() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        // Short words that share trigrams, a repeated one, digits, letters outside ASCII, and
        // texts long enough for more than 64 trigrams.
        let vocabulary =
            ["ab", "abc", "abcd", "bcd", "x", "x1", "2024", "héllo", "hello", "Ünïcode", "walrus", "walrusses"];
        let text_of = |rng: &mut rand::rngs::StdRng, most: usize| -> String {
            let n = rng.random_range(0..=most);
            (0..n).map(|_| vocabulary[rng.random_range(0..vocabulary.len())]).collect::<Vec<_>>().join(" ")
        };
        for _ in 0..300 {
            let mut index = TitleIndex::new(1, 0);
            let titles: Vec<String> = (0..8).map(|_| text_of(&mut rng, 6)).collect();
            for (id, title) in titles.iter().enumerate() {
                index.apply(&row(id as i64, title, 5));
            }
            let text = match rng.random_range(0..3) {
                0 => text_of(&mut rng, 3),
                1 => text_of(&mut rng, 12),
                _ => format!("{} walrusses{}", text_of(&mut rng, 30), rng.random_range(0..1000)),
            };
            let text_trigrams = trigrams(&text);
            let shared = SharedTrigrams::new(index.lexicon.len(), &index.word_trigrams, &text_trigrams);
            let mut held = Vec::new();
            for (slot, title) in titles.iter().enumerate() {
                let expected = similarity(&trigrams(title), &text_trigrams);
                let got = shared.similarity(&index.entries[slot], &mut held);
                assert_eq!(got, expected, "{title:?} against {text:?}");
            }
        }
    }

    #[test]
    fn a_typo_is_corrected_to_the_nearest_live_word() {
        let mut index = TitleIndex::new(1, 0);
        index.apply(&row(1, "Recursion in Python", 5));
        index.apply(&row(2, "Matrix multiplication", 5));
        let found = index.lookup("recusion in pyhton", &trigrams("recusion in pyhton"), 10, Role::Student, 5);
        assert_eq!(found, vec![1]);
    }

    #[test]
    fn an_older_version_never_replaces_a_newer_one() {
        let mut index = TitleIndex::new(1, 0);
        assert!(index.apply(&row(1, "zeppelin", 7)));
        assert!(!index.apply(&row(1, "walrus", 6)), "older");
        let found = |index: &TitleIndex, text: &str| index.lookup(text, &trigrams(text), 10, Role::Student, 5);
        assert_eq!(found(&index, "zeppelin"), vec![1]);
        assert!(found(&index, "walrus").is_empty());
        let mut deleted = row(1, "zeppelin", 8);
        deleted.live = false;
        assert!(index.apply(&deleted));
        assert!(found(&index, "zeppelin").is_empty());
        assert!(!index.apply(&row(1, "zeppelin", 7)), "a late read of the live version");
        assert!(found(&index, "zeppelin").is_empty());
        assert_eq!(index.lexicon[index.word_ids["zeppelin"] as usize].titles, 0);
    }

    #[test]
    fn a_missing_post_is_forgotten_only_when_no_newer_version_was_applied() {
        let mut index = TitleIndex::new(1, 0);
        index.apply(&row(1, "zeppelin", 7));
        assert!(!index.forget(1, 7), "a version from the statement's own horizon stays");
        assert!(index.forget(1, 8));
        assert!(index.lookup("zeppelin", &trigrams("zeppelin"), 10, Role::Student, 5).is_empty());
    }

    #[test]
    fn private_posts_are_for_their_author_and_staff() {
        let mut index = TitleIndex::new(1, 0);
        let mut private = row(1, "zeppelin question", 5);
        private.private = true;
        index.apply(&private);
        let text = "zeppelin question";
        assert!(index.lookup(text, &trigrams(text), 11, Role::Student, 5).is_empty());
        assert_eq!(index.lookup(text, &trigrams(text), 10, Role::Student, 5), vec![1]);
        assert_eq!(index.lookup(text, &trigrams(text), 11, Role::Instructor, 5), vec![1]);
    }

    #[test]
    fn compaction_keeps_every_live_post_findable() {
        let mut index = TitleIndex::new(1, 0);
        for id in 0..3000 {
            index.apply(&row(id, &format!("walrus number{id}"), 5));
        }
        for id in 0..2500 {
            let mut gone = row(id, "walrus", 6);
            gone.live = false;
            index.apply(&gone);
        }
        index.compact_if_worth_it();
        assert_eq!(index.dead, 0);
        assert_eq!(index.entries.len(), 500);
        let text = "walrus number2999";
        assert_eq!(index.lookup(text, &trigrams(text), 10, Role::Student, 1), vec![2999]);
        assert_eq!(index.lexicon[index.word_ids["walrus"] as usize].titles, 500);
        index.apply(&row(2999, "narwhal", 9));
        assert_eq!(index.lookup("narwhal", &trigrams("narwhal"), 10, Role::Student, 5), vec![2999]);
    }
}
