//! Anonymity and privacy as a reader receives them. A classmate (B) records every byte the
//! server sends them, HTTP answers (status, headers, bodies) and websocket frames alike, while
//! an anonymous author (A) writes posts, comments and replies, asks a private question, mentions
//! and answers B, is liked, endorsed and accepted, and has things deleted; B meanwhile reads
//! everything a member can (the course's posts in every order and both directions, the home
//! feed, every thread, every id they were ever given through `node` and `nodes`, their
//! notifications, live activity, live like counts and notifications, cursors, the errors of
//! touching A's content, guesses at the private question's id). A's global id, handle and
//! display name must be nowhere in that recording, nor the private question's title, body or
//! id. Staff (S) record the same scenario side by side and do receive them: the check can fail.
//! docs/api.md ("Anonymity and privacy: who sees what") lists each path and where it is checked.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use course_forum::testing::config::LikeMode;
use serde_json::{Value as Json, json};
use tokio::sync::mpsc;

use crate::common::likes::drain_all;
use crate::common::ws::GqlSocket;
use crate::common::{TestApp, error_code, gid, raw_id};

const USER: &str = "fragment U on User { id handle displayName createdAt }";
const POST: &str = "fragment P on Post { id kind title body anonymous pseudonym private pinned resolved answered \
                    commentCount likeCount likedByMe createdAt editedAt author { ...U } \
                    endorsement { by { ...U } at } acceptedAnswer { id body anonymous pseudonym author { ...U } } \
                    tags { id name } course { id code anonymity } }";
const COMMENT: &str = "fragment C on Comment { id body anonymous pseudonym isAcceptedAnswer likeCount replyCount \
                       likedByMe createdAt author { ...U } endorsement { by { ...U } at } \
                       post { id anonymous pseudonym author { ...U } } }";
const REPLY: &str = "fragment R on Reply { id body anonymous pseudonym likeCount likedByMe createdAt author { ...U } \
                     replyTo { ...U } replyToPseudonym endorsement { by { ...U } at } \
                     comment { id anonymous pseudonym author { ...U } } post { id anonymous pseudonym author { ...U } } }";
const NOTIFICATION: &str = "fragment N on Notification { id kind milestone read createdAt actor { ...U } \
                            actorPseudonym course { id } post { ...P } \
                            comment { __typename ... on Comment { ...C } ... on Reply { ...R } } }";

/// `query` with the fragments it spreads (and the ones those spread), each once.
fn doc(query: &str) -> String {
    let fragments = [("N", NOTIFICATION), ("P", POST), ("C", COMMENT), ("R", REPLY), ("U", USER)];
    let mut text = query.to_owned();
    let mut added = BTreeSet::new();
    loop {
        let before = added.len();
        for (name, fragment) in fragments {
            if !added.contains(name) && text.contains(&format!("...{name} ")) {
                added.insert(name);
                text = format!("{text} {fragment}");
            }
        }
        if added.len() == before {
            return text;
        }
    }
}

const ACTIVITY: &str = "subscription($c: ID!) { courseActivity(courseId: $c) { kind nodeId postId post { ...P } \
                        comment { ...C } reply { ...R } } }";
const LIVE_NOTIFICATIONS: &str = "subscription { notifications { unreadCount notification { ...N } } }";
const LIKE_COUNTS: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { __typename id likeCount likeVersion \
                           likeCountCommittedAt ... on Post { ...P } ... on Comment { ...C } ... on Reply { ...R } } }";

const POSTS: &str = "query($c: ID!, $o: PostOrder!, $after: String) { course(id: $c) { id code anonymity memberCount \
                     myRole tags { id name } posts(orderBy: $o, first: 2, after: $after) { edges { cursor node { ...P } } \
                     pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }";
const POSTS_BACK: &str = "query($c: ID!, $before: String) { course(id: $c) { posts(last: 2, before: $before) { \
                          edges { cursor node { ...P } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }";
const FEED: &str = "query($after: String) { homeFeed(first: 2, after: $after) { edges { cursor node { ...P } } \
                    pageInfo { hasNextPage endCursor } } }";
const THREAD: &str = "query($p: ID!) { post(id: $p) { ...P comments(first: 10) { edges { cursor node { ...C \
                      replies(first: 10) { edges { cursor node { ...R } } pageInfo { hasNextPage startCursor endCursor } } } } \
                      pageInfo { hasNextPage startCursor endCursor } } } }";
const NOTIFICATIONS: &str = "query($after: String) { notifications(first: 2, after: $after) { unreadCount \
                             edges { cursor node { ...N } } pageInfo { hasNextPage endCursor } } }";
const NODE: &str = "query($id: ID!) { node(id: $id) { __typename id ... on User { ...U } ... on Post { ...P } \
                    ... on Comment { ...C } ... on Reply { ...R } ... on Notification { ...N } ... on Course { code } \
                    ... on Tag { name } } }";
const NODES: &str = "query($ids: [ID!]!) { nodes(ids: $ids) { __typename id ... on User { ...U } ... on Post { ...P } \
                     ... on Comment { ...C } ... on Reply { ...R } ... on Notification { ...N } ... on Course { code } \
                     ... on Tag { name } } }";
const ME: &str = "query { me { ...U } myCourses { id code anonymity myRole memberCount } }";

/// What A is known by, and what the private question says: none of it may reach a classmate.
const A_HANDLE: &str = "quillon_zenbrook";
const A_NAME: &str = "Wilhelmina Zenbrook-Quill";
const B_HANDLE: &str = "bea_recorder";
const PRIVATE_TITLE: &str = "Sealed question about the quasar-7731 lab";
const PRIVATE_BODY: &str = "Only staff should read this, @bea_recorder too must not: nebula-5520 grade appeal";
const PRIVATE_ANSWER: &str = "Staff answer under the sealed question: orbit-9184";

/// One member receiving: every byte of every HTTP answer and websocket frame, in order.
struct Reader {
    user: i64,
    token: String,
    log: Arc<Mutex<String>>,
    /// Every JSON document received (answers and frames), to find ids and cursors in.
    received: Arc<Mutex<Vec<Json>>>,
    /// To the task that owns the socket: protocol messages to send.
    socket: mpsc::UnboundedSender<Json>,
}

impl Reader {
    /// Connects the member's websocket; a task records every frame until the reader is dropped.
    async fn connect(app: &TestApp, user: i64) -> Reader {
        let token = app.token(user);
        let mut socket = GqlSocket::connect(app.addr, Some(&token)).await.expect("websocket");
        let (tx, mut rx) = mpsc::unbounded_channel::<Json>();
        let log = Arc::new(Mutex::new(String::new()));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (task_log, task_received) = (log.clone(), received.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    outgoing = rx.recv() => match outgoing {
                        Some(message) => socket.send_json(message).await,
                        None => break,
                    },
                    text = socket.next_text(Duration::from_secs(600)) => match text {
                        Some(text) => {
                            task_log.lock().expect("log").push_str(&format!("\nWS {text}"));
                            if let Ok(frame) = serde_json::from_str::<Json>(&text) {
                                task_received.lock().expect("received").push(frame);
                            }
                        }
                        None => break,
                    },
                }
            }
            socket.close().await;
        });
        Reader { user, token, log, received, socket: tx }
    }

    fn subscribe(&self, id: &str, query: &str, variables: Json) {
        let payload = json!({ "query": doc(query), "variables": variables });
        self.socket.send(json!({ "id": id, "type": "subscribe", "payload": payload })).expect("socket task");
    }

    /// One GraphQL request over HTTP, recorded whole (status, headers, body).
    async fn ask(&self, app: &TestApp, query: &str, variables: Json) -> Json {
        let response = app
            .http
            .post(app.url("/graphql"))
            .bearer_auth(&self.token)
            .json(&json!({ "query": doc(query), "variables": variables }))
            .send()
            .await
            .expect("send");
        let mut record = format!("\nHTTP {}\n", response.status());
        for (name, value) in response.headers() {
            record.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())));
        }
        let body = response.bytes().await.expect("body");
        record.push_str(&String::from_utf8_lossy(&body));
        self.log.lock().expect("log").push_str(&record);
        let answer: Json = serde_json::from_slice(&body).expect("a JSON answer");
        self.received.lock().expect("received").push(answer.clone());
        answer
    }

    async fn ask_ok(&self, app: &TestApp, query: &str, variables: Json) -> Json {
        let answer = self.ask(app, query, variables).await;
        assert!(answer.get("errors").is_none(), "{answer}");
        answer["data"].clone()
    }

    fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// The `data` of every `next` frame of subscription `id` received so far.
    fn events(&self, id: &str) -> Vec<Json> {
        let received = self.received.lock().expect("received");
        received.iter().filter(|f| f["type"] == "next" && f["id"] == id).map(|f| f["payload"]["data"].clone()).collect()
    }

    /// Waits (10 s at most) for an event of subscription `id` that `matches`; returns it.
    async fn until(&self, id: &str, what: &str, matches: impl Fn(&Json) -> bool) -> Json {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(event) = self.events(id).into_iter().find(|e| matches(e)) {
                return event;
            }
            let errors: Vec<Json> = {
                let received = self.received.lock().expect("received");
                received.iter().filter(|f| f["type"] == "error" && f["id"] == id).cloned().collect()
            };
            assert!(errors.is_empty(), "subscription {id} failed: {errors:?}");
            assert!(tokio::time::Instant::now() < deadline, "no {what} on `{id}` within 10 s: {:?}", self.events(id));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every global id received (what a client could pass back).
    fn seen_ids(&self) -> BTreeSet<String> {
        fn walk(value: &Json, into: &mut BTreeSet<String>) {
            match value {
                Json::Object(map) => {
                    for (key, value) in map {
                        if matches!(key.as_str(), "id" | "nodeId" | "postId" | "deletedId")
                            && let Some(id) = value.as_str()
                            && kind_of(id).is_some()
                        {
                            into.insert(id.to_owned());
                        }
                        walk(value, into);
                    }
                }
                Json::Array(items) => items.iter().for_each(|item| walk(item, into)),
                _ => {}
            }
        }
        let mut ids = BTreeSet::new();
        for document in self.received.lock().expect("received").iter() {
            walk(document, &mut ids);
        }
        ids
    }
}

/// The kind a global id names (`Post` of `Post:12`); None for anything else (a subscription's
/// protocol id).
fn kind_of(id: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(id).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (kind, number) = text.split_once(':')?;
    number.parse::<i64>().ok()?;
    Some(kind.to_owned())
}

/// Whether `needle` occurs in `haystack` as a whole token (not inside a longer id: the global
/// id of user 5 is a prefix of user 50's).
fn occurs(haystack: &str, needle: &str) -> bool {
    let token = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    haystack.match_indices(needle).any(|(at, _)| {
        !haystack[..at].chars().next_back().is_some_and(token)
            && !haystack[at + needle.len()..].chars().next().is_some_and(token)
    })
}

/// The position a cursor holds: `k:<id>`, or a ranked walk's shown post ids.
enum Position {
    Key(i64),
    Ranked(Vec<i64>),
}

/// Opens a cursor as the server writes it (`base64url(position ‖ 16-byte tag)`).
fn open_cursor(cursor: &str) -> Position {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).expect("a base64 cursor");
    let position = &bytes[..bytes.len() - 16];
    if let Some(id) = position.strip_prefix(b"k:") {
        return Position::Key(std::str::from_utf8(id).expect("utf8").parse().expect("a keyset id"));
    }
    let mut rest =
        position.strip_prefix(b"r:hot:").or_else(|| position.strip_prefix(b"r:top:")).expect("a ranked walk");
    let (mut ids, mut previous) = (Vec::new(), 0i64);
    while !rest.is_empty() {
        let (mut delta, mut shift) = (0u64, 0);
        loop {
            let (&byte, tail) = rest.split_first().expect("a whole varint");
            rest = tail;
            delta |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        previous += delta as i64;
        ids.push(previous);
    }
    Position::Ranked(ids)
}

/// Every connection in `value` (an object with `edges`): each edge's cursor names its own node
/// and nothing else; a ranked walk's cursor names only posts in `visible_posts`; `pageInfo`'s
/// cursors are the edges'.
fn check_cursors(value: &Json, visible_posts: &BTreeSet<i64>) {
    match value {
        Json::Object(map) => {
            if let Some(edges) = map.get("edges").and_then(Json::as_array) {
                let mut cursors = BTreeSet::new();
                for edge in edges {
                    let cursor = edge["cursor"].as_str().expect("an edge cursor");
                    cursors.insert(cursor.to_owned());
                    let node = raw_id(edge["node"]["id"].as_str().expect("an edge node id"));
                    match open_cursor(cursor) {
                        Position::Key(id) => assert_eq!(id, node, "a cursor names its own edge: {edge}"),
                        Position::Ranked(ids) => {
                            assert!(ids.contains(&node), "a ranked cursor holds its edge: {edge}");
                            assert!(ids.iter().all(|id| visible_posts.contains(id)), "{ids:?} ⊄ {visible_posts:?}");
                        }
                    }
                }
                for end in ["startCursor", "endCursor"] {
                    if let Some(cursor) = map.get("pageInfo").and_then(|p| p[end].as_str()) {
                        assert!(cursors.contains(cursor), "pageInfo.{end} is an edge's cursor");
                    }
                }
            }
            map.values().for_each(|v| check_cursors(v, visible_posts));
        }
        Json::Array(items) => items.iter().for_each(|item| check_cursors(item, visible_posts)),
        _ => {}
    }
}

/// The people and the course.
struct Cast {
    course: i64,
    a: i64,
    b: i64,
    s: i64,
    c: i64,
}

async fn insert_user(app: &TestApp, handle: &str, name: &str) -> i64 {
    app.scalar_i64(
        "INSERT INTO users (handle, display_name) VALUES ($1, $2) RETURNING id AS v",
        [handle.into(), name.into()],
    )
    .await
}

impl Cast {
    async fn create(app: &TestApp, anonymity: &str) -> Cast {
        let course = app.create_course("ANON101").await;
        app.scalar_i64(
            "UPDATE courses SET anonymity = $2 WHERE id = $1 RETURNING id AS v",
            [course.into(), anonymity.into()],
        )
        .await;
        let s = insert_user(app, "prof_sterling", "Professor Sterling").await;
        let b = insert_user(app, B_HANDLE, "Bea Recorder").await;
        let c = insert_user(app, "carl_classmate", "Carl Classmate").await;
        let a = insert_user(app, A_HANDLE, A_NAME).await;
        app.enroll(course, s, "instructor").await;
        for student in [a, b, c] {
            app.enroll(course, student, "student").await;
        }
        Cast { course, a, b, s, c }
    }
}

/// `createPost` as `user`; returns the post's id.
async fn post(app: &TestApp, user: i64, course: i64, title: &str, body: &str, options: &str) -> i64 {
    let query = format!(
        "mutation($c: ID!, $t: String!, $b: String!) {{ createPost(courseId: $c, title: $t, body: $b{options}) {{ id }} }}"
    );
    let data =
        app.gql_ok(Some(&app.token(user)), &query, json!({ "c": gid("Course", course), "t": title, "b": body })).await;
    raw_id(data["createPost"]["id"].as_str().expect("post id"))
}

async fn comment(app: &TestApp, user: i64, post: i64, body: &str, anonymous: bool) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($p: ID!, $b: String!, $a: Boolean!) { createComment(postId: $p, body: $b, anonymous: $a) { id } }",
            json!({ "p": gid("Post", post), "b": body, "a": anonymous }),
        )
        .await;
    raw_id(data["createComment"]["id"].as_str().expect("comment id"))
}

/// A reply to `target` (a Comment's or Reply's global id).
async fn reply(app: &TestApp, user: i64, target: &str, body: &str, anonymous: bool) -> i64 {
    let data = app
        .gql_ok(
            Some(&app.token(user)),
            "mutation($c: ID!, $b: String!, $a: Boolean!) { createReply(commentId: $c, body: $b, anonymous: $a) { id } }",
            json!({ "c": target, "b": body, "a": anonymous }),
        )
        .await;
    raw_id(data["createReply"]["id"].as_str().expect("reply id"))
}

async fn delete(app: &TestApp, user: i64, mutation: &str, id: &str) {
    let query = if mutation == "deletePost" {
        "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }"
    } else {
        "mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }"
    };
    app.gql_ok(Some(&app.token(user)), query, json!({ "id": id })).await;
}

/// Likes what `id` names, answered with the liked object.
fn like_mutation(id: &str) -> &'static str {
    if kind_of(id).as_deref() == Some("Post") {
        "mutation($id: ID!) { likePost(postId: $id) { ...P } }"
    } else {
        "mutation($id: ID!) { likeComment(commentId: $id) { __typename ... on Comment { ...C } ... on Reply { ...R } } }"
    }
}

/// Waits until this instance has `n` live subscriptions open.
async fn until_subscriptions(app: &TestApp, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while app.state.live.stats.subscriptions_open.load(std::sync::atomic::Ordering::Relaxed) != n {
        assert!(tokio::time::Instant::now() < deadline, "{n} subscriptions never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn fan_out(app: &TestApp) {
    let job = app.feed_fanout().await;
    while job.process_one_batch().await.expect("fan-out step").posts > 0 {}
}

/// Walks a paged query forward through `path` (the connection's place in `data`); the nodes.
async fn walk(reader: &Reader, app: &TestApp, query: &str, mut variables: Json, path: &[&str]) -> Vec<Json> {
    let mut nodes = Vec::new();
    for _ in 0..50 {
        let data = reader.ask_ok(app, query, variables.clone()).await;
        let connection = path.iter().fold(&data, |value, key| &value[*key]);
        nodes.extend(connection["edges"].as_array().expect("edges").iter().map(|e| e["node"].clone()));
        if connection["pageInfo"]["hasNextPage"] != true {
            return nodes;
        }
        variables["after"] = connection["pageInfo"]["endCursor"].clone();
    }
    panic!("a walk of more than 50 pages");
}

/// The course's posts as a member lists them: NEW, HOT, TOP, and NEW backward.
async fn lists(reader: &Reader, app: &TestApp, course: i64) -> BTreeMap<&'static str, Vec<Json>> {
    let mut lists = BTreeMap::new();
    for order in ["NEW", "HOT", "TOP"] {
        let variables = json!({ "c": gid("Course", course), "o": order });
        lists.insert(order, walk(reader, app, POSTS, variables, &["course", "posts"]).await);
    }
    let mut backward = Vec::new();
    let mut before = Json::Null;
    for _ in 0..50 {
        let data = reader.ask_ok(app, POSTS_BACK, json!({ "c": gid("Course", course), "before": before })).await;
        let connection = &data["course"]["posts"];
        let mut page: Vec<Json> =
            connection["edges"].as_array().expect("edges").iter().map(|e| e["node"].clone()).collect();
        page.extend(backward);
        backward = page;
        if connection["pageInfo"]["hasPreviousPage"] != true {
            break;
        }
        before = connection["pageInfo"]["startCursor"].clone();
    }
    lists.insert("NEW backward", backward);
    lists.insert("homeFeed", walk(reader, app, FEED, json!({}), &["homeFeed"]).await);
    lists
}

/// Everything a member can read, once: the lists, every thread listed, their notifications,
/// themselves, and every id they were ever given, one by one and together.
async fn sweep(reader: &Reader, app: &TestApp, course: i64) {
    fan_out(app).await;
    let lists = lists(reader, app, course).await;
    let posts: BTreeSet<String> =
        lists.values().flatten().map(|p| p["id"].as_str().expect("post id").to_owned()).collect();
    for post in &posts {
        reader.ask(app, THREAD, json!({ "p": post })).await;
    }
    walk(reader, app, NOTIFICATIONS, json!({}), &["notifications"]).await;
    reader.ask_ok(app, ME, json!({})).await;
    let ids: Vec<String> = reader.seen_ids().into_iter().collect();
    for id in &ids {
        reader.ask(app, NODE, json!({ "id": id })).await;
    }
    for chunk in ids.chunks(10) {
        reader.ask(app, NODES, json!({ "ids": chunk })).await;
    }
}

/// What a classmate can count: how many posts each list shows, each post's comment count,
/// their unread notifications, the course's members.
async fn countable(reader: &Reader, app: &TestApp, course: i64) -> Json {
    fan_out(app).await;
    let lists = lists(reader, app, course).await;
    let sizes: BTreeMap<&str, usize> = lists.iter().map(|(name, posts)| (*name, posts.len())).collect();
    let comment_counts: BTreeMap<String, Json> =
        lists["NEW"].iter().map(|p| (p["id"].as_str().expect("id").to_owned(), p["commentCount"].clone())).collect();
    let unread = reader.ask_ok(app, NOTIFICATIONS, json!({})).await["notifications"]["unreadCount"].clone();
    let members = reader.ask_ok(app, ME, json!({})).await["myCourses"].clone();
    json!({ "sizes": sizes, "commentCounts": comment_counts, "unread": unread, "courses": members })
}

/// What the scenario made, by database id.
struct Made {
    /// A's anonymous discussion, A's anonymous comment on it, and on C's post.
    p1: i64,
    own_comment: i64,
    c1: i64,
    /// A's anonymous reply to B's comment, A's anonymous post mentioning B.
    r1: i64,
    p2: i64,
    /// A's anonymous question, C's answer to it (endorsed and accepted), B's reply to `c1`.
    question: i64,
    answer: i64,
    b_reply: i64,
    /// A's private question and staff's comment on it.
    private: i64,
    private_answer: i64,
}

/// The scenario, recorded by B (a classmate) and S (staff) side by side.
async fn scenario(mode: LikeMode) -> (TestApp, Cast, Made, Reader, Reader) {
    let app = TestApp::spawn_in(mode).await;
    let cast = Cast::create(&app, "classmates").await;
    let worker = app.worker().await;
    let course = cast.course;

    // Before anything happens: both listen to the course and to their notifications, and have
    // read the (empty) course once, so their home feeds exist and get posts fanned out.
    let b = Reader::connect(&app, cast.b).await;
    let s = Reader::connect(&app, cast.s).await;
    for reader in [&b, &s] {
        reader.subscribe("activity", ACTIVITY, json!({ "c": gid("Course", course) }));
        reader.subscribe("notifications", LIVE_NOTIFICATIONS, json!({}));
    }
    until_subscriptions(&app, 4).await;
    for reader in [&b, &s] {
        sweep(reader, &app, course).await;
    }

    // A classmate's thread, where B comments.
    let other = post(&app, cast.c, course, "Carl asks about recursion", "How deep can it go?", "").await;
    let b_comment = b
        .ask_ok(
            &app,
            "mutation($p: ID!) { createComment(postId: $p, body: \"As deep as the stack allows.\") { ...C } }",
            json!({ "p": gid("Post", other) }),
        )
        .await;
    let b_comment = raw_id(b_comment["createComment"]["id"].as_str().expect("comment id"));

    // A writes anonymously: a post and a comment on it, a comment in C's thread, a reply to
    // B's comment there (B is notified), a post mentioning B (B is notified), a question.
    let p1 = post(&app, cast.a, course, "An anonymous musing on tabs", "Tabs are better.", ", anonymous: true").await;
    let own_comment = comment(&app, cast.a, p1, "And I stand by it.", true).await;
    let c1 = comment(&app, cast.a, other, "Try an explicit stack instead.", true).await;
    let r1 = reply(&app, cast.a, &gid("Comment", b_comment), "Not with tail calls, it does not.", true).await;
    let p2 = post(
        &app,
        cast.a,
        course,
        "Study group?",
        &format!("@{B_HANDLE} wants to form one, who else?"),
        ", anonymous: true",
    )
    .await;
    let question =
        post(&app, cast.a, course, "What is a monad?", "Asking for a friend.", ", kind: QUESTION, anonymous: true")
            .await;
    // C answers; B answers A's anonymous comment (its `replyTo` is A, hidden from B).
    let answer = comment(&app, cast.c, question, "A monoid in the category of endofunctors.", false).await;
    let b_reply = b
        .ask_ok(
            &app,
            "mutation($c: ID!) { createReply(commentId: $c, body: \"Thanks, that worked.\") { ...R } }",
            json!({ "c": gid("Comment", c1) }),
        )
        .await;
    let b_reply = raw_id(b_reply["createReply"]["id"].as_str().expect("reply id"));
    // Staff endorse the answer and the question, and the answer is accepted (as `endorse` and
    // `acceptAnswer` write them); an edit by A refreshes the cached question.
    app.scalar_i64(
        "UPDATE comments SET endorsed_by = $2, endorsed_at = now() WHERE id = $1 RETURNING id AS v",
        [answer.into(), cast.s.into()],
    )
    .await;
    app.scalar_i64(
        "UPDATE posts SET endorsed_by = $2, endorsed_at = now(), accepted_comment_id = $3 WHERE id = $1 \
         RETURNING id AS v",
        [question.into(), cast.s.into(), answer.into()],
    )
    .await;
    app.gql_ok(
        Some(&app.token(cast.a)),
        "mutation($p: ID!) { editPost(postId: $p, body: \"Asking for a friend, really.\") { id } }",
        json!({ "p": gid("Post", question) }),
    )
    .await;

    // B hears the reply and the mention, neither naming A.
    for (kind, cause) in [("REPLY", gid("Reply", r1)), ("MENTION", gid("Post", p2))] {
        let heard = b
            .until("notifications", kind, |e| {
                let n = &e["notifications"]["notification"];
                n["kind"] == kind
                    && (n["comment"]["id"] == cause.as_str() || (n["comment"].is_null() && n["post"]["id"] == cause))
            })
            .await;
        let notification = &heard["notifications"]["notification"];
        assert_eq!(notification["actor"], Json::Null, "{heard}");
        assert!(notification["actorPseudonym"].as_str().is_some_and(|p| p.starts_with("Anonymous ")), "{heard}");
    }

    // A private question (mentioning B, who must not hear of it), answered by staff: nothing a
    // classmate can count moves.
    let before = countable(&b, &app, course).await;
    let private = post(&app, cast.a, course, PRIVATE_TITLE, PRIVATE_BODY, ", kind: QUESTION, private: true").await;
    let private_answer = comment(&app, cast.s, private, PRIVATE_ANSWER, false).await;
    assert_eq!(countable(&b, &app, course).await, before, "a private question changed what a classmate counts");

    // A post after it: once both have heard it, they heard everything before it.
    let sentinel = post(&app, cast.c, course, "Sentinel after the private question", "-", "").await;
    for reader in [&b, &s] {
        reader.until("activity", "the sentinel", |e| e["courseActivity"]["nodeId"] == gid("Post", sentinel)).await;
    }
    let about_private = |reader: &Reader| {
        reader.events("activity").into_iter().filter(|e| e["courseActivity"]["postId"] == gid("Post", private)).count()
    };
    assert_eq!(about_private(&s), 2, "staff hear the private question and its answer live");
    assert_eq!(about_private(&b), 0, "a classmate hears nothing of the private question");

    // Live like counts of everything as it appeared; B, C and S like A's content.
    // The first six are A's, and liked.
    let liked = 6;
    let live_ids: Vec<String> = [
        gid("Post", p1),
        gid("Comment", own_comment),
        gid("Comment", c1),
        gid("Reply", r1),
        gid("Post", p2),
        gid("Post", question),
        gid("Comment", answer),
        gid("Reply", b_reply),
    ]
    .into();
    for reader in [&b, &s] {
        reader.subscribe("likes", LIKE_COUNTS, json!({ "ids": live_ids }));
    }
    until_subscriptions(&app, 6).await;
    // B and S read each like's answer (the liked object, with its author fields).
    for id in &live_ids[..liked] {
        for reader in [&b, &s] {
            reader.ask_ok(&app, like_mutation(id), json!({ "id": id })).await;
        }
        app.gql_ok(Some(&app.token(cast.c)), &doc(like_mutation(id)), json!({ "id": id })).await;
    }
    if mode == LikeMode::Buffered {
        drain_all(&app, &worker).await;
    }
    for reader in [&b, &s] {
        for id in &live_ids[..liked] {
            reader
                .until("likes", "a like count of 3", |e| {
                    e["likeCounts"]["id"] == id.as_str() && e["likeCounts"]["likeCount"] == 3
                })
                .await;
        }
    }

    for reader in [&b, &s] {
        sweep(reader, &app, course).await;
    }

    let made = Made { p1, own_comment, c1, r1, p2, question, answer, b_reply, private, private_answer };
    (app, cast, made, b, s)
}

/// B touches what is not theirs: A's content (FORBIDDEN), and the private question and its
/// answer by guessed ids: answered exactly as ids that do not exist.
async fn trespass(app: &TestApp, b: &Reader, made: &Made) {
    for (query, id) in [
        ("mutation($id: ID!) { editPost(postId: $id, title: \"mine now\") { id } }", gid("Post", made.p1)),
        ("mutation($id: ID!) { deletePost(postId: $id) { deletedId } }", gid("Post", made.p2)),
        ("mutation($id: ID!) { editComment(commentId: $id, body: \"mine now\") { id } }", gid("Comment", made.c1)),
        ("mutation($id: ID!) { editComment(commentId: $id, body: \"mine now\") { id } }", gid("Reply", made.r1)),
        ("mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }", gid("Comment", made.own_comment)),
        ("mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }", gid("Reply", made.r1)),
    ] {
        let answer = b.ask(app, query, json!({ "id": id })).await;
        assert_eq!(error_code(&answer).as_deref(), Some("FORBIDDEN"), "{answer}");
    }

    // The newest post id is the private question's: a guess, answered as a made-up id is.
    let newest = app.scalar_i64("SELECT max(id) AS v FROM posts", []).await;
    assert!(newest > made.private, "the sentinel came after the private question");
    let post_probes = [
        NODE.to_owned(),
        "query($id: ID!) { post(id: $id) { id title } }".to_owned(),
        "query($id: ID!) { nodes(ids: [$id]) { id } }".to_owned(),
        "mutation($id: ID!) { editPost(postId: $id, title: \"x\") { id } }".to_owned(),
        "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }".to_owned(),
        "mutation($id: ID!) { createComment(postId: $id, body: \"x\") { id } }".to_owned(),
        "mutation($id: ID!) { likePost(postId: $id) { id likeCount } }".to_owned(),
        "mutation($id: ID!) { unlikePost(postId: $id) { id likeCount } }".to_owned(),
        "mutation($id: ID!) { startPostView(postId: $id) { ticket } }".to_owned(),
    ];
    let comment_probes = [
        NODE.to_owned(),
        "mutation($id: ID!) { editComment(commentId: $id, body: \"x\") { id } }".to_owned(),
        "mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }".to_owned(),
        "mutation($id: ID!) { createReply(commentId: $id, body: \"x\") { id } }".to_owned(),
        "mutation($id: ID!) { likeComment(commentId: $id) { id likeCount } }".to_owned(),
    ];
    for (probes, kind, hidden) in
        [(&post_probes[..], "Post", made.private), (&comment_probes[..], "Comment", made.private_answer)]
    {
        let (hidden, missing) = (gid(kind, hidden), gid(kind, hidden + 1_000_000));
        for probe in probes {
            let guessed = b.ask(app, probe, json!({ "id": hidden })).await;
            let made_up = b.ask(app, probe, json!({ "id": missing })).await;
            assert_eq!(error_code(&guessed).as_deref(), Some("NOT_FOUND"), "{probe}: {guessed}");
            assert_eq!(
                guessed.to_string().replace(&hidden, "ID"),
                made_up.to_string().replace(&missing, "ID"),
                "{probe}: a hidden {kind} is answered as a missing one"
            );
        }
    }
    // And live: watching the private question's likes is refused as watching nothing is.
    b.subscribe("guess-hidden", LIKE_COUNTS, json!({ "ids": [gid("Post", made.private)] }));
    b.subscribe("guess-missing", LIKE_COUNTS, json!({ "ids": [gid("Post", made.private + 1_000_000)] }));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The refusal: an `error` frame, or a `next` carrying errors.
    let refusal = |id: &str| {
        let received = b.received.lock().expect("received");
        received.iter().filter(|f| f["id"] == id).find_map(|f| match f["type"].as_str() {
            Some("error") => Some(f["payload"].clone()),
            Some("next") if f["payload"]["errors"].is_array() => Some(f["payload"]["errors"].clone()),
            _ => None,
        })
    };
    loop {
        if let (Some(hidden), Some(missing)) = (refusal("guess-hidden"), refusal("guess-missing")) {
            assert_eq!(hidden, missing, "watching a private post is refused as watching a missing one");
            assert_eq!(hidden[0]["extensions"]["code"], "NOT_FOUND", "{hidden}");
            break;
        }
        let frames: Vec<Json> = b
            .received
            .lock()
            .expect("received")
            .iter()
            .filter(|f| f["id"].as_str().is_some_and(|id| id.starts_with("guess")))
            .cloned()
            .collect();
        assert!(tokio::time::Instant::now() < deadline, "the guessed subscriptions were not refused: {frames:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Things are deleted: the private question by A, the mention and the reply by A, A's
/// comment by staff. Both hear what they may.
async fn deletions(app: &TestApp, cast: &Cast, made: &Made, b: &Reader, s: &Reader) {
    // B answers A's anonymous comment and takes it back: the delete's answer (the post and
    // the comment, as they are now) names nobody hidden either.
    let own = b
        .ask_ok(
            app,
            "mutation($c: ID!) { createReply(commentId: $c, body: \"On second thought, no.\") { ...R } }",
            json!({ "c": gid("Comment", made.own_comment) }),
        )
        .await;
    let own = own["createReply"]["id"].as_str().expect("reply id").to_owned();
    let gone = b
        .ask_ok(
            app,
            "mutation($c: ID!) { deleteComment(commentId: $c) { deletedId post { ...P } comment { ...C } } }",
            json!({ "c": own }),
        )
        .await;
    assert_eq!(gone["deleteComment"]["comment"]["id"], gid("Comment", made.own_comment), "{gone}");
    assert_eq!(gone["deleteComment"]["comment"]["author"], Json::Null, "{gone}");
    let unread_before = b.ask_ok(app, NOTIFICATIONS, json!({})).await["notifications"]["unreadCount"].clone();
    assert_eq!(unread_before, 2, "the reply and the mention, not the private question");
    delete(app, cast.a, "deletePost", &gid("Post", made.private)).await;
    delete(app, cast.a, "deletePost", &gid("Post", made.p2)).await;
    delete(app, cast.a, "deleteComment", &gid("Reply", made.r1)).await;
    delete(app, cast.s, "deleteComment", &gid("Comment", made.c1)).await;
    let sentinel = post(app, cast.c, cast.course, "Sentinel after the deletions", "-", "").await;
    for reader in [b, s] {
        reader.until("activity", "the sentinel", |e| e["courseActivity"]["nodeId"] == gid("Post", sentinel)).await;
        let deleted: Vec<Json> = reader
            .events("activity")
            .into_iter()
            .filter(|e| e["courseActivity"]["kind"].as_str().is_some_and(|k| k.ends_with("_DELETED")))
            .map(|e| e["courseActivity"]["nodeId"].clone())
            .collect();
        let mut expected =
            vec![json!(own), json!(gid("Post", made.p2)), json!(gid("Reply", made.r1)), json!(gid("Comment", made.c1))];
        if reader.user == cast.s {
            expected.insert(1, json!(gid("Post", made.private)));
        }
        assert_eq!(deleted, expected);
    }
    b.until("notifications", "the withdrawn count", |e| e["notifications"]["unreadCount"] == 0).await;
}

/// What each reader read of the threads, by the final sweep: pseudonyms, `replyTo`.
fn thread_checks(cast: &Cast, made: &Made, b: &Reader, s: &Reader) {
    // The last answer read of each id.
    let latest = |reader: &Reader| {
        let mut by_id: BTreeMap<String, Json> = BTreeMap::new();
        fn walk(value: &Json, into: &mut BTreeMap<String, Json>) {
            match value {
                Json::Object(map) => {
                    if let (Some(id), Some(_)) = (map.get("id").and_then(Json::as_str), map.get("anonymous")) {
                        let known = into.entry(id.to_owned()).or_insert_with(|| json!({}));
                        for (key, field) in map {
                            known[key] = field.clone();
                        }
                    }
                    map.values().for_each(|v| walk(v, into));
                }
                Json::Array(items) => items.iter().for_each(|i| walk(i, into)),
                _ => {}
            }
        }
        for document in reader.received.lock().expect("received").iter() {
            walk(document, &mut by_id);
        }
        by_id
    };
    let (seen_by_b, seen_by_s) = (latest(b), latest(s));
    let name =
        |seen: &BTreeMap<String, Json>, id: &str| seen[id]["pseudonym"].as_str().expect("a pseudonym").to_owned();
    for seen in [&seen_by_b, &seen_by_s] {
        // Stable within a thread (A's post and A's comment on it), for every reader alike …
        assert_eq!(name(seen, &gid("Post", made.p1)), name(seen, &gid("Comment", made.own_comment)));
        assert_eq!(name(seen, &gid("Comment", made.c1)), name(seen, &gid("Reply", made.r1)));
        // … and another in another thread.
        assert_ne!(name(seen, &gid("Post", made.p1)), name(seen, &gid("Comment", made.c1)));
        assert_ne!(name(seen, &gid("Post", made.p1)), name(seen, &gid("Post", made.question)));
    }
    assert_eq!(name(&seen_by_b, &gid("Post", made.p1)), name(&seen_by_s, &gid("Post", made.p1)));

    // B's reply answers A's anonymous comment: to B, `replyTo` is hidden and named by the
    // comment's pseudonym; staff see A.
    let b_reply = &seen_by_b[&gid("Reply", made.b_reply)];
    assert_eq!(b_reply["replyTo"], Json::Null, "{b_reply}");
    assert_eq!(b_reply["replyToPseudonym"].as_str(), Some(name(&seen_by_b, &gid("Comment", made.c1)).as_str()));
    assert_eq!(b_reply["author"]["id"], gid("User", cast.b));
    assert_eq!(seen_by_s[&gid("Reply", made.b_reply)]["replyTo"]["id"], gid("User", cast.a));
    // A's reply answers B's signed comment: B is named.
    assert_eq!(seen_by_b[&gid("Reply", made.r1)]["replyTo"]["id"], gid("User", cast.b));
    assert_eq!(seen_by_b[&gid("Reply", made.r1)]["author"], Json::Null);
    // Staff's endorsement and the accepted answer are there for B to see, by whom.
    let question = &seen_by_b[&gid("Post", made.question)];
    assert_eq!(question["endorsement"]["by"]["id"], gid("User", cast.s), "{question}");
    assert_eq!(question["acceptedAnswer"]["id"], gid("Comment", made.answer), "{question}");
    assert_eq!(question["author"], Json::Null, "{question}");
    assert_eq!(seen_by_s[&gid("Post", made.question)]["author"]["id"], gid("User", cast.a));
}

async fn a_classmate_receives_nothing_that_names_the_anonymous_author_or_the_private_question(mode: LikeMode) {
    let (app, cast, made, b, s) = scenario(mode).await;
    trespass(&app, &b, &made).await;
    deletions(&app, &cast, &made, &b, &s).await;
    for reader in [&b, &s] {
        sweep(reader, &app, cast.course).await;
    }
    thread_checks(&cast, &made, &b, &s);

    // Cursors carry nothing but the page's own nodes.
    let visible_posts: BTreeSet<i64> =
        b.seen_ids().iter().filter(|id| kind_of(id).as_deref() == Some("Post")).map(|id| raw_id(id)).collect();
    for document in b.received.lock().expect("received").iter() {
        check_cursors(document, &visible_posts);
    }

    let a_id = gid("User", cast.a);
    let private_id = gid("Post", made.private);
    let private_answer_id = gid("Comment", made.private_answer);
    let (heard_by_b, heard_by_s) = (b.log(), s.log());
    // The recording is real: B heard A's anonymous writing, under its pseudonym, and liked it.
    assert!(heard_by_b.contains("An anonymous musing on tabs") && heard_by_b.contains("Anonymous "));
    assert!(heard_by_b.contains("\"likeCounts\"") && heard_by_b.contains("\"courseActivity\""));
    assert!(heard_by_b.contains("\"MENTION\"") && heard_by_b.contains("\"REPLY\""));
    assert!(heard_by_b.len() > 50_000, "a thin recording: {} bytes", heard_by_b.len());
    // Nothing names A …
    assert!(!occurs(&heard_by_b, &a_id), "a classmate received A's global id");
    assert!(!heard_by_b.contains(A_HANDLE), "a classmate received A's handle");
    assert!(!heard_by_b.contains(A_NAME), "a classmate received A's display name");
    // … nor shows the private question or staff's answer in it.
    for secret in [PRIVATE_TITLE, PRIVATE_BODY, PRIVATE_ANSWER] {
        assert!(!heard_by_b.contains(secret), "a classmate received `{secret}`");
    }
    assert!(!occurs(&heard_by_b, &private_id), "a classmate received the private question's id");
    assert!(!occurs(&heard_by_b, &private_answer_id), "a classmate received the private answer's id");

    // Staff, reading the same way, do receive all of it: the checks above can fail.
    assert!(occurs(&heard_by_s, &a_id) && heard_by_s.contains(A_HANDLE) && heard_by_s.contains(A_NAME));
    for secret in [PRIVATE_TITLE, PRIVATE_BODY, PRIVATE_ANSWER] {
        assert!(heard_by_s.contains(secret), "staff did not receive `{secret}`");
    }
    assert!(occurs(&heard_by_s, &private_id) && occurs(&heard_by_s, &private_answer_id));

    // And A sees themselves on their anonymous writing.
    let mine = app
        .gql_ok(
            Some(&app.token(cast.a)),
            "query($p: ID!, $c: ID!, $r: ID!) { post(id: $p) { author { id } pseudonym } \
             c: node(id: $c) { ... on Comment { author { id } } } r: node(id: $r) { ... on Comment { author { id } } } }",
            json!({ "p": gid("Post", made.p1), "c": gid("Comment", made.own_comment), "r": gid("Comment", made.answer) }),
        )
        .await;
    assert_eq!(mine["post"]["author"]["id"], a_id, "{mine}");
    assert!(mine["post"]["pseudonym"].is_string(), "{mine}");
    assert_eq!(mine["c"]["author"]["id"], a_id, "{mine}");
    assert_eq!(mine["r"]["author"]["id"], gid("User", cast.c), "{mine}");
    drop(app);
}

in_each_like_mode!(a_classmate_receives_nothing_that_names_the_anonymous_author_or_the_private_question);

/// `answered` tells whether anyone but the asker wrote under a question. An asker who wrote
/// there with the other face (signed under their anonymous question, or anonymously under their
/// signed one) counts as anyone else: `answered: false` would tell every classmate that the
/// signed commenter is the anonymous asker. With the same face nothing new is told (the name
/// or the pseudonym is the same already), and it does not count.
#[tokio::test]
async fn answered_never_links_an_askers_signed_and_anonymous_writing() {
    let app = TestApp::spawn().await;
    let cast = Cast::create(&app, "classmates").await;
    for (asked_anonymously, commented_anonymously, answered) in
        [(true, false, true), (false, true, true), (true, true, false), (false, false, false)]
    {
        let options = if asked_anonymously { ", kind: QUESTION, anonymous: true" } else { ", kind: QUESTION" };
        let question = post(&app, cast.a, cast.course, "Why is the sky blue?", "Rayleigh?", options).await;
        comment(&app, cast.a, question, "Found it myself.", commented_anonymously).await;
        for reader in [cast.b, cast.s, cast.a] {
            let data = app
                .gql_ok(
                    Some(&app.token(reader)),
                    "query($p: ID!) { post(id: $p) { answered comments { nodes { author { id } pseudonym } } } }",
                    json!({ "p": gid("Post", question) }),
                )
                .await;
            assert_eq!(
                data["post"]["answered"], answered,
                "asked anonymously: {asked_anonymously}, commented anonymously: {commented_anonymously}: {data}"
            );
        }
    }
    // Anyone else's comment answers, whatever the faces.
    let question = post(&app, cast.a, cast.course, "Why?", "Because.", ", kind: QUESTION, anonymous: true").await;
    comment(&app, cast.c, question, "Because.", true).await;
    let data = app
        .gql_ok(
            Some(&app.token(cast.b)),
            "query($p: ID!) { post(id: $p) { answered } }",
            json!({ "p": gid("Post", question) }),
        )
        .await;
    assert_eq!(data["post"]["answered"], true);
}

/// A course hiding writers from everyone hides them from staff too; the author still sees
/// themselves; and turning the setting back later unmasks nothing written under it.
#[tokio::test]
async fn hidden_from_everyone_is_hidden_from_staff_and_stays_hidden() {
    let app = TestApp::spawn().await;
    let cast = Cast::create(&app, "everyone").await;
    let p = post(&app, cast.a, cast.course, "Hidden from all", "Even staff.", ", anonymous: true").await;
    let c = comment(&app, cast.a, p, "Still me.", true).await;
    let read = |reader: i64| {
        let app = &app;
        async move {
            app.gql_ok(
                Some(&app.token(reader)),
                "query($p: ID!, $c: ID!) { post(id: $p) { author { id handle } pseudonym } \
                 c: node(id: $c) { ... on Comment { author { id handle } pseudonym } } }",
                json!({ "p": gid("Post", p), "c": gid("Comment", c) }),
            )
            .await
        }
    };
    for anonymity in ["everyone", "classmates", "off"] {
        app.scalar_i64(
            "UPDATE courses SET anonymity = $2 WHERE id = $1 RETURNING id AS v",
            [cast.course.into(), anonymity.into()],
        )
        .await;
        for reader in [cast.s, cast.b, cast.c] {
            let data = read(reader).await;
            assert_eq!(data["post"]["author"], Json::Null, "{anonymity}: {data}");
            assert_eq!(data["c"]["author"], Json::Null, "{anonymity}: {data}");
            assert_eq!(data["post"]["pseudonym"], data["c"]["pseudonym"], "{data}");
            assert!(!data.to_string().contains(A_HANDLE), "{data}");
        }
        let data = read(cast.a).await;
        assert_eq!(data["post"]["author"]["id"], gid("User", cast.a), "{data}");
        assert_eq!(data["c"]["author"]["id"], gid("User", cast.a), "{data}");
    }
}

/// An instructor demoted to student while they hold what staff may read of a private question
/// (a notification of it, a live like count of it) loses both: the notification leaves their
/// list and count, and the subscription ends with FORBIDDEN.
#[tokio::test]
async fn a_demoted_instructor_reads_nothing_more_of_a_private_question() {
    let app = TestApp::spawn().await;
    let cast = Cast::create(&app, "classmates").await;
    let p = post(
        &app,
        cast.a,
        cast.course,
        "A private matter",
        "Please advise, @prof_sterling.",
        ", kind: QUESTION, private: true",
    )
    .await;
    let token = app.token(cast.s);
    let list = "query { notifications(first: 50) { unreadCount edges { node { post { id title } } } } }";
    let listed = app.gql_ok(Some(&token), list, json!({})).await;
    assert_eq!(
        listed["notifications"]["unreadCount"], 1,
        "staff are told of a mention in a private question: {listed}"
    );
    assert!(listed.to_string().contains("A private matter"), "{listed}");

    let mut socket = GqlSocket::connect(app.addr, Some(&token)).await.expect("socket");
    socket
        .subscribe(
            "likes",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }",
            json!({ "ids": [gid("Post", p)] }),
        )
        .await;
    until_subscriptions(&app, 1).await;

    app.scalar_i64(
        "UPDATE course_members SET role = 'student' WHERE course_id = $1 AND user_id = $2 RETURNING user_id AS v",
        [cast.course.into(), cast.s.into()],
    )
    .await;
    let ended = socket.next_message(Duration::from_secs(5)).await.expect("the subscription ends");
    assert_eq!(ended["type"], "next", "{ended}");
    assert_eq!(ended["payload"]["errors"][0]["extensions"]["code"], "FORBIDDEN", "{ended}");
    let complete = socket.next_message(Duration::from_secs(5)).await.expect("complete");
    assert_eq!(complete["type"], "complete", "{complete}");

    let listed = app.gql_ok(Some(&token), list, json!({})).await;
    assert_eq!(listed["notifications"]["unreadCount"], 0, "{listed}");
    assert!(!listed.to_string().contains("A private matter"), "{listed}");
    let direct =
        app.gql(Some(&token), "query($id: ID!) { post(id: $id) { title } }", json!({ "id": gid("Post", p) })).await;
    assert_eq!(error_code(&direct).as_deref(), Some("NOT_FOUND"), "{direct}");
}
