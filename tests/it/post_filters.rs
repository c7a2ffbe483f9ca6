//! Finding what needs attention in a course: `Course.posts(filter:)` narrows the list (kind,
//! unresolved, unanswered, endorsed, pinned, tag, mine, private; AND-ed) in every order, and
//! pinned posts lead the page that opens it. Every walk here pages with a small `first` (and,
//! in NEW order, backward with `last`) and must show exactly the expected posts in the
//! expected order: each once, none skipped. The expectation is computed from what the test
//! wrote (a model of every post), the ranked orders' ties from the database. A cursor serves
//! only the filter it came from; private questions reach their author and staff only.

use std::collections::HashSet;

use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};
use serde_json::{Value as Json, json};

use crate::common::{TestApp, World, error_code, gid, raw_id};

const POSTS: &str = "query($c: ID!, $o: PostOrder!, $f: PostFilter, $n: Int, $a: String, $l: Int, $b: String) {
  course(id: $c) {
    posts(orderBy: $o, filter: $f, first: $n, after: $a, last: $l, before: $b) {
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      edges { cursor node { id pinned } }
    }
  }
}";

const ORDERS: [&str; 3] = ["NEW", "HOT", "TOP"];

/// One post as the test wrote it.
#[derive(Clone, Debug)]
struct Modeled {
    id: i64,
    author: i64,
    kind: &'static str,
    private: bool,
    /// Minutes ago it was pinned (smaller: pinned more recently).
    pinned: Option<i32>,
    accepted: bool,
    resolved: bool,
    endorsed: bool,
    tagged: bool,
    /// A live comment or reply by someone other than its author.
    answered: bool,
}

impl Modeled {
    fn unresolved(&self) -> bool {
        self.kind == "question" && !self.accepted && !self.resolved
    }
}

struct Forum {
    world: World,
    posts: Vec<Modeled>,
    tag: i64,
    foreign_tag: i64,
}

async fn exec(app: &TestApp, sql: &str, values: Vec<Value>) {
    app.db.execute_raw(Statement::from_sql_and_values(DbBackend::Postgres, sql, values)).await.expect(sql);
}

async fn comment(app: &TestApp, post: i64, author: i64, parent: Option<(i64, i64)>, deleted: bool) -> i64 {
    let (parent_id, reply_to) = parent.unzip();
    app.scalar_i64(
        "INSERT INTO comments (post_id, user_id, parent_id, reply_to_user_id, body, deleted_at) \
         VALUES ($1, $2, $3, $4, 'c', CASE WHEN $5 THEN now() END) RETURNING id AS v",
        [post.into(), author.into(), parent_id.into(), reply_to.into(), deleted.into()],
    )
    .await
}

/// 30 posts of every kind and state, written by SQL before any page is read (so no page this
/// instance keeps predates them): authors alice, bob and the instructor in turn; private
/// questions by both students; four pins (one a private question of bob's); accepted answers,
/// staff resolutions, endorsements, a tag, and comments by the author only, by others, deleted,
/// or as a reply.
async fn forum(app: &TestApp) -> Forum {
    let world = World::create(app).await;
    let tag = app
        .scalar_i64(
            "INSERT INTO course_tags (course_id, name) VALUES ($1, 'week 1') RETURNING id AS v",
            [world.course.into()],
        )
        .await;
    let foreign_tag = app
        .scalar_i64(
            "INSERT INTO course_tags (course_id, name) VALUES ($1, 'week 1') RETURNING id AS v",
            [world.other_course.into()],
        )
        .await;
    let mut posts = Vec::new();
    for n in 0..30i64 {
        let author = [world.alice, world.bob, world.instructor][(n % 3) as usize];
        let kind = match (n % 2 == 0, author == world.instructor) {
            (true, true) => "announcement",
            (true, false) => "question",
            (false, _) => "discussion",
        };
        let private = kind == "question" && n % 4 == 0;
        let pinned = [5, 12, 16, 21].contains(&n).then_some(n as i32);
        let resolved = kind == "question" && n % 10 == 4;
        let endorsed = n % 5 == 0;
        let id = app
            .scalar_i64(
                "INSERT INTO posts (course_id, user_id, title, body, kind, private, pinned_at, resolved_at, \
                 endorsed_by, endorsed_at, like_count, comment_count) \
                 VALUES ($1, $2, 'post ' || $3, 'body', $4, $5, now() - make_interval(mins => $6), \
                 CASE WHEN $7 THEN now() END, $8, CASE WHEN $9 THEN now() END, $10, $11) RETURNING id AS v",
                [
                    world.course.into(),
                    author.into(),
                    n.into(),
                    kind.into(),
                    private.into(),
                    pinned.into(),
                    resolved.into(),
                    endorsed.then_some(world.instructor).into(),
                    endorsed.into(),
                    ((n * 7 % 11) as i32).into(),
                    ((n % 5) as i32).into(),
                ],
            )
            .await;
        let other = if author == world.alice { world.bob } else { world.alice };
        let mut answered = false;
        match n % 8 {
            1 | 5 => {
                comment(app, id, author, None, false).await;
            }
            2 | 6 => {
                comment(app, id, other, None, false).await;
                answered = true;
            }
            3 => {
                comment(app, id, other, None, true).await;
            }
            7 => {
                let own = comment(app, id, author, None, false).await;
                comment(app, id, other, Some((own, author)), false).await;
                answered = true;
            }
            _ => {}
        }
        let accepted = kind == "question" && n % 6 == 0;
        if accepted {
            let answer = comment(app, id, other, None, false).await;
            exec(app, "UPDATE posts SET accepted_comment_id = $2 WHERE id = $1", vec![id.into(), answer.into()]).await;
            answered = true;
        }
        let tagged = n % 3 == 0 || n % 7 == 0;
        if tagged {
            exec(app, "INSERT INTO post_tags (post_id, tag_id) VALUES ($1, $2)", vec![id.into(), tag.into()]).await;
        }
        posts.push(Modeled { id, author, kind, private, pinned, accepted, resolved, endorsed, tagged, answered });
    }
    Forum { world, posts, tag, foreign_tag }
}

/// Whether a post matches a filter as the API takes it (JSON), for `reader`.
fn matches(post: &Modeled, filter: &Json, reader: i64, tag: i64) -> bool {
    let flag = |name: &str, has: bool| filter.get(name).and_then(Json::as_bool).is_none_or(|wanted| wanted == has);
    let kind = filter.get("kind").and_then(Json::as_str).is_none_or(|k| k.eq_ignore_ascii_case(post.kind));
    let tagged = filter.get("tagId").and_then(Json::as_str).is_none_or(|t| post.tagged && *t == gid("Tag", tag));
    kind && tagged
        && flag("unresolved", post.unresolved())
        && flag("unanswered", !post.answered)
        && flag("endorsed", post.endorsed)
        && flag("pinned", post.pinned.is_some())
        && flag("mine", post.author == reader)
        && flag("private", post.private)
}

fn is_empty(filter: &Json) -> bool {
    filter.as_object().is_none_or(|fields| fields.is_empty())
}

/// The list `reader` must see: the pins (most recently pinned first), then the others in
/// `order` (ranked ties broken by the database's own order of the expected set).
async fn expected(app: &TestApp, forum: &Forum, reader: i64, filter: &Json, order: &str) -> (Vec<i64>, usize) {
    let staff = reader == forum.world.instructor;
    let visible = |p: &&Modeled| staff || !p.private || (p.author == reader && !is_empty(filter));
    let listed: Vec<&Modeled> =
        forum.posts.iter().filter(visible).filter(|p| matches(p, filter, reader, forum.tag)).collect();
    let mut pins: Vec<&Modeled> = listed.iter().copied().filter(|p| p.pinned.is_some()).collect();
    pins.sort_by_key(|p| p.pinned);
    let rest: Vec<i64> = listed.iter().filter(|p| p.pinned.is_none()).map(|p| p.id).collect();
    let order_by = match order {
        "NEW" => "id DESC",
        "HOT" => "hot_score DESC, id DESC",
        _ => "like_count DESC, id DESC",
    };
    let rows = app
        .db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("SELECT id FROM posts WHERE id = ANY($1) ORDER BY {order_by}"),
            [rest.into()],
        ))
        .await
        .expect("the expected order");
    let ordered = rows.iter().map(|row| row.try_get::<i64>("", "id").expect("id"));
    (pins.iter().map(|p| p.id).chain(ordered).collect(), pins.len())
}

/// One page as the API answered it.
struct Shown {
    ids: Vec<i64>,
    cursors: Vec<String>,
    has_next: bool,
    has_prev: bool,
    start: Option<String>,
    end: Option<String>,
}

async fn posts_raw(app: &TestApp, reader: i64, course: i64, order: &str, filter: &Json, page: Json) -> Json {
    let mut variables = json!({ "c": gid("Course", course), "o": order, "f": filter });
    if let (Some(vars), Some(page)) = (variables.as_object_mut(), page.as_object()) {
        vars.extend(page.clone());
    }
    app.gql(Some(&app.token(reader)), POSTS, variables).await
}

async fn page(app: &TestApp, reader: i64, course: i64, order: &str, filter: &Json, args: Json) -> Shown {
    let response = posts_raw(app, reader, course, order, filter, args.clone()).await;
    assert!(response.get("errors").is_none(), "{order} {filter} {args}: {response}");
    let posts = &response["data"]["course"]["posts"];
    let edges = posts["edges"].as_array().expect("edges");
    let text = |v: &Json| v.as_str().map(str::to_owned);
    Shown {
        ids: edges.iter().map(|e| raw_id(e["node"]["id"].as_str().expect("id"))).collect(),
        cursors: edges.iter().map(|e| e["cursor"].as_str().expect("cursor").to_owned()).collect(),
        has_next: posts["pageInfo"]["hasNextPage"].as_bool().expect("hasNextPage"),
        has_prev: posts["pageInfo"]["hasPreviousPage"].as_bool().expect("hasPreviousPage"),
        start: text(&posts["pageInfo"]["startCursor"]),
        end: text(&posts["pageInfo"]["endCursor"]),
    }
}

const FIRST: usize = 3;

/// Walks forward with `first: 3` to the end; checks each page's size (the pins ahead of the
/// first page's three) and that nothing repeats.
async fn walk_forward(app: &TestApp, reader: i64, course: i64, order: &str, filter: &Json, pins: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut after: Option<String> = None;
    for step in 0.. {
        assert!(step < 40, "{order} {filter}: the walk does not end");
        let shown = page(app, reader, course, order, filter, json!({ "n": FIRST, "a": after })).await;
        let room = if step == 0 { FIRST + pins } else { FIRST };
        assert!(shown.ids.len() <= room, "{order} {filter}: page {step} holds {} posts", shown.ids.len());
        if shown.has_next {
            assert_eq!(shown.ids.len(), room, "{order} {filter}: a full page {step} before the end");
        }
        assert_eq!(shown.has_prev, step > 0, "{order} {filter}: hasPreviousPage of page {step}");
        ids.extend(&shown.ids);
        if !shown.has_next {
            break;
        }
        after = Some(shown.end.expect("endCursor"));
    }
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "{order} {filter}: a post shown twice: {ids:?}");
    ids
}

/// Walks NEW order backward with `last: 3` from the end to the top; the posts in list order.
async fn walk_backward(app: &TestApp, reader: i64, course: i64, filter: &Json) -> Vec<i64> {
    let mut pages: Vec<Vec<i64>> = Vec::new();
    let mut before: Option<String> = None;
    for step in 0.. {
        assert!(step < 40, "NEW {filter}: the backward walk does not end");
        let shown = page(app, reader, course, "NEW", filter, json!({ "l": FIRST, "b": before })).await;
        pages.push(shown.ids);
        if !shown.has_prev {
            break;
        }
        before = Some(shown.start.expect("startCursor"));
    }
    pages.into_iter().rev().flatten().collect()
}

fn filters(forum: &Forum) -> Vec<Json> {
    let tag = gid("Tag", forum.tag);
    vec![
        json!({}),
        json!({ "kind": "QUESTION" }),
        json!({ "kind": "DISCUSSION" }),
        json!({ "kind": "ANNOUNCEMENT" }),
        json!({ "unresolved": true }),
        json!({ "unresolved": false }),
        json!({ "unanswered": true }),
        json!({ "unanswered": false }),
        json!({ "endorsed": true }),
        json!({ "endorsed": false }),
        json!({ "pinned": true }),
        json!({ "pinned": false }),
        json!({ "tagId": tag }),
        json!({ "mine": true }),
        json!({ "mine": false }),
        json!({ "private": true }),
        json!({ "private": false }),
        json!({ "kind": "QUESTION", "unresolved": true, "tagId": tag }),
        json!({ "kind": "QUESTION", "unresolved": false }),
        json!({ "unanswered": true, "mine": true }),
        json!({ "endorsed": false, "private": false, "unresolved": false, "pinned": false }),
        json!({ "kind": "DISCUSSION", "unanswered": false, "tagId": tag }),
    ]
}

/// Every filter alone and combined, in NEW, HOT and TOP, for a student and for staff: the
/// forward walk (and in NEW the backward one) shows exactly the expected posts, each once, in
/// order, the pins first.
#[tokio::test]
async fn every_filter_walks_every_order_without_repeating_or_skipping_a_post() {
    let app = TestApp::spawn().await;
    let forum = forum(&app).await;
    let course = forum.world.course;
    let mut nonempty = 0;
    for reader in [forum.world.alice, forum.world.instructor] {
        for filter in filters(&forum) {
            for order in ORDERS {
                let (want, pins) = expected(&app, &forum, reader, &filter, order).await;
                nonempty += usize::from(!want.is_empty());
                let got = walk_forward(&app, reader, course, order, &filter, pins).await;
                assert_eq!(got, want, "reader {reader}, {order} {filter}");
                if order == "NEW" {
                    let back = walk_backward(&app, reader, course, &filter).await;
                    assert_eq!(back, want, "reader {reader}, NEW backward {filter}");
                }
            }
        }
    }
    assert!(nonempty > 100, "the fixture gives most walks something to show ({nonempty})");
}

/// The pins lead the first page in every order, ahead of `first` others, obeying the filter
/// and the reader's visibility; a pinned post's cursor (NEW) leads to the newest unpinned post.
#[tokio::test]
async fn pinned_posts_lead_the_first_page_in_every_order_with_a_filter() {
    let app = TestApp::spawn().await;
    let forum = forum(&app).await;
    let course = forum.world.course;
    let by_n = |n: usize| forum.posts[n].id;
    let discussion = json!({ "kind": "DISCUSSION" });
    for order in ORDERS {
        // Pins 5 and 21 are discussions (5 pinned most recently); 12 and 16 private questions.
        let first = page(&app, forum.world.bob, course, order, &discussion, json!({ "n": 2 })).await;
        assert_eq!(first.ids.len(), 4, "{order}: the two pins ahead of two others");
        assert_eq!(&first.ids[..2], &[by_n(5), by_n(21)], "{order}");
        assert!(!first.has_prev && first.has_next, "{order}");
        // Unfiltered, a student's shared page: the public pins only (5, 21).
        let shared = page(&app, forum.world.bob, course, order, &json!({}), json!({ "n": 1 })).await;
        assert_eq!(shared.ids[..2], [by_n(5), by_n(21)], "{order}: shared pins");
        assert_eq!(shared.ids.len(), 3, "{order}");
        // bob's own pinned private question leads his private list; staff see all four pins.
        let private = page(&app, forum.world.bob, course, order, &json!({ "private": true }), json!({ "n": 1 })).await;
        assert_eq!(private.ids[0], by_n(16), "{order}: bob's pinned private question");
        let staff = page(&app, forum.world.instructor, course, order, &json!({}), json!({ "n": 1 })).await;
        assert_eq!(staff.ids[..4], [by_n(5), by_n(12), by_n(16), by_n(21)], "{order}: staff see every pin");
        // No pins when the filter leaves them out.
        let unpinned = page(&app, forum.world.bob, course, order, &json!({ "pinned": false }), json!({ "n": 2 })).await;
        assert_eq!(unpinned.ids.len(), 2, "{order}");
        assert!(unpinned.ids.iter().all(|id| ![by_n(5), by_n(12), by_n(16), by_n(21)].contains(id)), "{order}");
    }
    // NEW: the page after a pin's cursor starts at the newest unpinned discussion, pins not again.
    let first = page(&app, forum.world.bob, course, "NEW", &discussion, json!({ "n": 2 })).await;
    let after_pin =
        page(&app, forum.world.bob, course, "NEW", &discussion, json!({ "n": 2, "a": first.cursors[0] })).await;
    assert_eq!(after_pin.ids, first.ids[2..].to_vec());
    assert!(after_pin.has_prev);
    // And the page before it holds the pins alone.
    let before_pin =
        page(&app, forum.world.bob, course, "NEW", &discussion, json!({ "l": 2, "b": first.cursors[1] })).await;
    assert_eq!(before_pin.ids, first.ids[..2].to_vec());
    assert!(!before_pin.has_prev);
}

/// A private question is read by its author (through a filtered list) and staff, never by
/// another student; a student's unfiltered list is the shared one, public posts only.
#[tokio::test]
async fn private_questions_reach_their_author_through_a_filter_and_staff_always() {
    let app = TestApp::spawn().await;
    let forum = forum(&app).await;
    let course = forum.world.course;
    let private_of = |who: Option<i64>| -> HashSet<i64> {
        forum.posts.iter().filter(|p| p.private && who.is_none_or(|w| p.author == w)).map(|p| p.id).collect()
    };
    let all = |reader: i64, filter: Json| {
        let app = &app;
        async move {
            let mut ids = HashSet::new();
            for order in ORDERS {
                ids.extend(page(app, reader, course, order, &filter, json!({ "n": 100 })).await.ids);
            }
            ids
        }
    };
    let (alice, bob, staff) = (forum.world.alice, forum.world.bob, forum.world.instructor);
    assert!(!private_of(Some(alice)).is_empty() && !private_of(Some(bob)).is_empty());
    for (reader, own) in [(alice, private_of(Some(alice))), (bob, private_of(Some(bob)))] {
        assert!(all(reader, json!({})).await.is_disjoint(&private_of(None)), "{reader}: the shared list is public");
        assert_eq!(all(reader, json!({ "private": true })).await, own, "{reader}: their own private questions");
        let mine = all(reader, json!({ "mine": true })).await;
        assert!(own.is_subset(&mine), "{reader}: `mine` holds their private questions");
        let others = all(reader, json!({ "mine": false })).await;
        assert!(others.is_disjoint(&private_of(None)), "{reader}: never another's private question");
        let questions = all(reader, json!({ "kind": "QUESTION" })).await;
        assert!(questions.intersection(&private_of(None)).all(|id| own.contains(id)), "{reader}");
    }
    assert_eq!(all(staff, json!({ "private": true })).await, private_of(None), "staff read every private question");
    assert!(private_of(None).is_subset(&all(staff, json!({})).await), "staff's unfiltered list holds them");
}

/// Bad filter input is BAD_USER_INPUT; a tag of another course, or one that does not exist,
/// gives an empty page; a cursor serves only the filter (and order) it came from.
#[tokio::test]
async fn bad_filters_and_cursors_of_another_filter_are_refused() {
    let app = TestApp::spawn().await;
    let forum = forum(&app).await;
    let course = forum.world.course;
    let alice = forum.world.alice;
    for (case, filter) in [
        ("a malformed tag id", json!({ "tagId": "not an id" })),
        ("a post's id as a tag", json!({ "tagId": gid("Post", forum.posts[0].id) })),
        ("an unknown kind", json!({ "kind": "RUMOUR" })),
        ("a string for a boolean", json!({ "unresolved": "yes" })),
        ("an unknown field", json!({ "solved": true })),
    ] {
        let response = posts_raw(&app, alice, course, "NEW", &filter, json!({ "n": 2 })).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{case}: {response}");
    }
    for tag in [forum.foreign_tag, forum.foreign_tag + 1_000] {
        for order in ORDERS {
            let shown = page(&app, alice, course, order, &json!({ "tagId": gid("Tag", tag) }), json!({})).await;
            assert!(shown.ids.is_empty() && !shown.has_next, "tag {tag}, {order}: an empty page");
        }
    }
    let questions = json!({ "kind": "QUESTION" });
    let unresolved = json!({ "kind": "QUESTION", "unresolved": true });
    for order in ORDERS {
        let filtered = page(&app, alice, course, order, &questions, json!({ "n": 2 })).await;
        let plain = page(&app, alice, course, order, &json!({}), json!({ "n": 2 })).await;
        let cases = [
            ("a filtered cursor without the filter", json!({}), filtered.end.clone()),
            ("a filtered cursor with another filter", unresolved.clone(), filtered.end.clone()),
            ("an unfiltered cursor with a filter", questions.clone(), plain.end.clone()),
        ];
        for (case, filter, cursor) in cases {
            let response = posts_raw(&app, alice, course, order, &filter, json!({ "n": 2, "a": cursor })).await;
            assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{order}, {case}: {response}");
        }
        // The same filter takes it.
        let next = page(&app, alice, course, order, &questions, json!({ "n": 2, "a": filtered.end })).await;
        assert!(!next.ids.is_empty());
    }
    // A filtered NEW cursor in a ranked walk of the same filter, and the other way round.
    let new = page(&app, alice, course, "NEW", &questions, json!({ "n": 2 })).await;
    let hot = page(&app, alice, course, "HOT", &questions, json!({ "n": 2 })).await;
    for (order, cursor) in [("HOT", new.end.clone()), ("NEW", hot.end.clone())] {
        let response = posts_raw(&app, alice, course, order, &questions, json!({ "n": 2, "a": cursor })).await;
        assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{order}: {response}");
    }
}
