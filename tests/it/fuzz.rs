//! Fuzzing the GraphQL surface: thousands of random and mutated documents, variables,
//! operation names, tokens and raw bodies over HTTP, and mutated protocol messages over the
//! websocket. Whatever comes in: never a 5xx, never an `INTERNAL` error, every error with a
//! known code, never a panic, and the server keeps serving (and its counters stay equal to
//! their rows: `check` passes afterwards).
//!
//! Deterministic by default (a fixed seed, printed); `FUZZ_SEED=<n>` explores other inputs and
//! `FUZZ_CASES=<n>` sets how many HTTP cases run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use course_forum::testing::config::LikeMode;
use futures_util::{SinkExt, StreamExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::Message;

use crate::common::{self, TestApp, World, gid};

const DEFAULT_SEED: u64 = 20_261_203;
const DEFAULT_HTTP_CASES: usize = 4_000;
const WS_CASES: usize = 1_000;

/// The codes a client may ever see (the error table in docs/api.md); INTERNAL never, for any input.
const CODES: &[&str] = &[
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "NOT_FOUND",
    "BAD_USER_INPUT",
    "CONFLICT",
    "RATE_LIMITED",
    "UNAVAILABLE",
    "DOCUMENT_LIMIT_EXCEEDED",
];

/// Valid documents over the whole schema: the seeds every mutation starts from.
const CORPUS: &[&str] = &[
    "{ me { id handle displayName createdAt } }",
    "{ myCourses { id code title myRole memberCount } }",
    "query CoursePosts($course: ID!, $after: String) { course(id: $course) { code posts(first: 5, after: $after) { edges { cursor node { id title likeCount commentCount likedByMe viewCount uniqueViewers author { handle } } } pageInfo { hasNextPage endCursor } } } }",
    "query($course: ID!) { course(id: $course) { posts(last: 3, before: \"azo5\") { nodes { id } pageInfo { hasPreviousPage startCursor } } } }",
    "query PostThread($post: ID!) { post(id: $post) { title body likeCount likedByMe commentCount comments(first: 10) { edges { node { id body likeCount replyCount replies(first: 10) { nodes { id replyTo { handle } body likeCount likedByMe } } } } } } }",
    "query($id: ID!) { node(id: $id) { id __typename ... on User { handle } ... on Course { code } ... on Post { title } ... on Comment { body } ... on Reply { body comment { id } } } }",
    "query($id: ID!) { node(id: $id) { ...F } } fragment F on Post { id title course { code } }",
    "query($id: ID!, $skip: Boolean!) { post(id: $id) { id title @skip(if: $skip) body @include(if: true) } }",
    "{ __schema { types { name fields { name } } } }",
    "{ __type(name: \"Post\") { name fields { name type { name } } } }",
    "{ __typename a: me { id } b: me { handle } }",
    "mutation NewPost($course: ID!, $title: String!, $body: String!) { createPost(courseId: $course, title: $title, body: $body) { id title likeCount author { handle } course { code } } }",
    "mutation($post: ID!, $title: String) { editPost(postId: $post, title: $title) { id title editedAt } }",
    "mutation($post: ID!) { deletePost(postId: $post) { deletedId } }",
    "mutation Comment($post: ID!, $body: String!) { createComment(postId: $post, body: $body) { id body replyCount } }",
    "mutation Reply($comment: ID!, $body: String!) { createReply(commentId: $comment, body: $body) { id body replyTo { handle } comment { replyCount } post { commentCount } } }",
    "mutation($comment: ID!, $body: String!) { editComment(commentId: $comment, body: $body) { __typename id } }",
    "mutation($comment: ID!) { deleteComment(commentId: $comment) { deletedId } }",
    "mutation Like($post: ID!) { likePost(postId: $post) { id likeCount likedByMe } }",
    "mutation($post: ID!) { unlikePost(postId: $post) { id likeCount likedByMe } }",
    "mutation($comment: ID!) { likeComment(commentId: $comment) { __typename id likeCount likedByMe ... on Reply { replyTo { handle } } } }",
    "mutation($comment: ID!) { unlikeComment(commentId: $comment) { id likeCount } }",
    "mutation($post: ID!) { startPostView(postId: $post) { ticket minDwellMs } }",
    "mutation($ticket: String!) { completePostView(ticket: $ticket) { counted reason } }",
    "mutation($title: String!) { createCourse(code: \"FUZZ1\", title: $title) { id code title createdAt } }",
    "mutation($course: ID!) { addCourseMember(courseId: $course, userId: \"VXNlcjox\", role: STUDENT) { course { code } user { handle } role changed } }",
    "mutation($course: ID!) { setCourseMemberRole(courseId: $course, userId: \"VXNlcjox\", role: INSTRUCTOR) { role changed } }",
    "mutation($course: ID!) { removeCourseMember(courseId: $course, userId: \"VXNlcjox\") { role changed } }",
    "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }",
    // Fragments each spreading the next twice: mutations that add a level or a spread must be
    // refused by the pre-pass, never walked for seconds.
    "{ ...F0 } fragment F0 on Query { ...F1 ...F1 } fragment F1 on Query { ...F2 ...F2 } fragment F2 on Query { ...F3 ...F3 } fragment F3 on Query { ...F4 ...F4 } fragment F4 on Query { ...F5 ...F5 } fragment F5 on Query { ...F6 ...F6 } fragment F6 on Query { ...F7 ...F7 } fragment F7 on Query { ...F8 ...F8 } fragment F8 on Query { ...F9 ...F9 } fragment F9 on Query { __typename }",
    "subscription($course: ID!) { courseActivity(courseId: $course) { kind nodeId postId post { title } comment { body } reply { body } } }",
];

/// Pieces of GraphQL (and of what is not GraphQL) that mutations insert.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ":",
    ",",
    "!",
    "=",
    "|",
    "&",
    "$",
    "$post",
    "$undefined",
    "...",
    "... on Post",
    "... on Nope",
    "@skip(if: true)",
    "@include(if: $x)",
    "@deprecated",
    "@nope",
    "fragment F on Post { id }",
    "fragment F on Post { ...F }",
    "...F",
    "query",
    "mutation",
    "subscription",
    "on",
    "null",
    "true",
    "false",
    "\"\\u0000\"",
    "\"\\uD800\"",
    "\"\"\"block\"\"\"",
    "\"unterminated",
    "1e999",
    "-9223372036854775809",
    "18446744073709551616",
    "0x10",
    "-0",
    "NaN",
    "#comment\n",
    "__typename",
    "__schema { types { name } }",
    "node(id: \"x\")",
    "post(id: \"UG9zdDox\")",
    "first: -1",
    "last: 100000",
    "first: 2147483648",
    "after: \"\"",
    "é💥",
    "\u{FEFF}",
    "\u{0}",
    "\t\r\n",
    " ",
    "posts(first: 100) { nodes { id } }",
    "{ id }",
    "id",
    "title",
    "likePost(postId: $post) { id }",
    "createPost(courseId: \"x\", title: \"t\", body: \"b\") { id }",
];

/// Field and argument names to swap in for identifiers.
const WORDS: &[&str] = &[
    "me",
    "myCourses",
    "course",
    "post",
    "node",
    "posts",
    "comments",
    "replies",
    "likeCount",
    "likedByMe",
    "title",
    "body",
    "author",
    "handle",
    "id",
    "edges",
    "nodes",
    "cursor",
    "pageInfo",
    "createPost",
    "likePost",
    "deleteComment",
    "likeCounts",
    "courseActivity",
    "first",
    "last",
    "after",
    "before",
    "password",
    "users",
    "x",
    "__type",
    "__schema",
    "__typename",
    "Post",
    "Comment",
    "Reply",
    "User",
    "Course",
    "Query",
    "Mutation",
];

struct Ids {
    course: String,
    other_course: String,
    post: String,
    other_post: String,
    comment: String,
    reply: String,
    user: String,
}

/// A random JSON value, `depth` levels at most.
fn random_value(rng: &mut StdRng, ids: &Ids, depth: usize) -> Value {
    match rng.random_range(0..14) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(rng.random::<i64>()),
        3 => json!(rng.random::<f64>() * 1e300),
        4 => json!(rng.random_range(-3..200)),
        5 => json!(random_id(rng, ids)),
        6 => json!("x".repeat(rng.random_range(0..70_000))),
        7 => json!(String::from_utf8_lossy(
            &(0..rng.random_range(0..64)).map(|_| rng.random::<u8>()).collect::<Vec<_>>()
        )),
        8 => json!(
            ["\u{0}", "💥", "\u{202E}", "<script>", "' OR 1=1 --", "%s%s%n", "../../etc/passwd"]
                [rng.random_range(0..7)]
        ),
        9 if depth > 0 => {
            Value::Array((0..rng.random_range(0..5)).map(|_| random_value(rng, ids, depth - 1)).collect())
        }
        10 if depth > 0 => {
            let mut object = serde_json::Map::new();
            for _ in 0..rng.random_range(0..4) {
                object.insert(WORDS[rng.random_range(0..WORDS.len())].to_owned(), random_value(rng, ids, depth - 1));
            }
            Value::Object(object)
        }
        11 => {
            // Deep nesting: serde's and async-graphql's recursion limits must hold.
            let mut value = json!(1);
            for _ in 0..rng.random_range(10..300) {
                value = json!([value]);
            }
            value
        }
        _ => json!(random_id(rng, ids)),
    }
}

/// Ids: real ones (this course, the other course), of the wrong kind, malformed, huge.
fn random_id(rng: &mut StdRng, ids: &Ids) -> String {
    use base64::Engine;
    let b64 = |s: String| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    match rng.random_range(0..12) {
        0 => ids.course.clone(),
        1 => ids.other_course.clone(),
        2 => ids.post.clone(),
        3 => ids.other_post.clone(),
        4 => ids.comment.clone(),
        5 => ids.reply.clone(),
        6 => ids.user.clone(),
        7 => b64(format!("Post:{}", rng.random::<i64>())),
        8 => b64(format!("{}:{}", WORDS[rng.random_range(0..WORDS.len())], rng.random_range(-5..100))),
        9 => b64("Post:1:2".into()),
        10 => "!!not-base64!!".into(),
        _ => String::new(),
    }
}

/// Variables for a document: mostly the right names with plausible or hostile values.
fn random_variables(rng: &mut StdRng, ids: &Ids) -> Value {
    if rng.random_ratio(1, 20) {
        return random_value(rng, ids, 2);
    }
    let mut vars = serde_json::Map::new();
    for name in ["course", "post", "id", "comment", "ids", "title", "body", "after", "skip", "ticket"] {
        if rng.random_ratio(3, 4) {
            // Half the time the right kind of real id, so resolvers run and check access.
            let plausible = rng.random_ratio(1, 2);
            let value = match name {
                "course" if plausible => json!(if rng.random() { &ids.course } else { &ids.other_course }),
                "post" if plausible => json!(if rng.random() { &ids.post } else { &ids.other_post }),
                "comment" if plausible => json!(if rng.random() { &ids.comment } else { &ids.reply }),
                "ids" if rng.random_ratio(2, 3) => {
                    Value::Array((0..rng.random_range(0..120)).map(|_| json!(random_id(rng, ids))).collect())
                }
                "title" | "body" | "ticket" if rng.random_ratio(1, 2) => json!(format!("fuzz {}", rng.random::<u32>())),
                "skip" if rng.random_ratio(1, 2) => json!(rng.random::<bool>()),
                _ if rng.random_ratio(2, 3) => json!(random_id(rng, ids)),
                _ => random_value(rng, ids, 3),
            };
            vars.insert(name.to_owned(), value);
        }
    }
    Value::Object(vars)
}

/// Applies 1 to 4 random edits to a document.
fn mutate(rng: &mut StdRng, document: &str) -> String {
    let mut chars: Vec<char> = document.chars().collect();
    for _ in 0..rng.random_range(1..=4) {
        let len = chars.len();
        let at = rng.random_range(0..=len);
        let span_end = (at + rng.random_range(0..12)).min(len);
        match rng.random_range(0..10) {
            0 => {
                chars.drain(at..span_end);
            }
            1 => {
                let span: Vec<char> = chars[at..span_end].to_vec();
                let times = if rng.random_ratio(1, 10) { rng.random_range(2..400) } else { 2 };
                for _ in 1..times {
                    chars.splice(at..at, span.iter().copied());
                }
            }
            2 | 3 => {
                let token = TOKENS[rng.random_range(0..TOKENS.len())];
                chars.splice(at..at, token.chars());
            }
            4 => {
                // Swap an identifier for another word.
                let text: String = chars.iter().collect();
                let words: Vec<(usize, usize)> = identifier_spans(&text);
                if let Some(&(start, end)) = words.get(rng.random_range(0..words.len().max(1))) {
                    let word = WORDS[rng.random_range(0..WORDS.len())];
                    chars.splice(start..end, word.chars());
                }
            }
            5 => chars.truncate(at),
            6 => {
                let other: Vec<char> = CORPUS[rng.random_range(0..CORPUS.len())].chars().collect();
                let from = rng.random_range(0..=other.len());
                chars.truncate(at);
                chars.extend_from_slice(&other[from..]);
            }
            7 if len > 0 => {
                let at = rng.random_range(0..len);
                chars[at] = match rng.random_range(0..3) {
                    0 => rng.random_range(b' '..=b'~') as char,
                    1 => char::from_u32(rng.random_range(0..0x11_0000)).unwrap_or('\u{FFFD}'),
                    _ => ['{', '}', '(', ')', '"', '$', '@', '.', '#', '\\'][rng.random_range(0..10)],
                };
            }
            8 => {
                // Deeper: wrap a selection in itself.
                let text: String = chars.iter().collect();
                let nested = text.replacen("{ id", &format!("{{ {} {{ id", WORDS[rng.random_range(0..WORDS.len())]), 1);
                chars = nested.chars().collect();
                chars.push('}');
            }
            _ => {
                let aliases: String = (0..rng.random_range(1..300)).map(|i| format!(" a{i}: __typename")).collect();
                chars.splice(at..at, aliases.chars());
            }
        }
    }
    chars.into_iter().collect()
}

fn identifier_spans(text: &str) -> Vec<(usize, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in chars.iter().enumerate() {
        let word = c.is_ascii_alphanumeric() || *c == '_';
        match (word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, chars.len()));
    }
    spans
}

/// One HTTP case: a body, its content type, and the Authorization header.
struct Case {
    body: Vec<u8>,
    content_type: Option<&'static str>,
    authorization: Option<String>,
}

/// Variables every corpus document accepts, each of the right kind, in alice's course.
fn valid_variables(rng: &mut StdRng, ids: &Ids) -> Value {
    let any = [&ids.course, &ids.post, &ids.comment, &ids.reply, &ids.user][rng.random_range(0..5)];
    json!({
        "course": ids.course,
        "post": ids.post,
        "id": any,
        "comment": if rng.random() { &ids.comment } else { &ids.reply },
        "ids": [ids.post, ids.comment],
        "title": format!("fuzz {}", rng.random::<u32>()),
        "body": format!("fuzz {}", rng.random::<u32>()),
        "skip": rng.random::<bool>(),
        "ticket": format!("{:032x}", rng.random::<u128>()),
    })
}

fn random_case(rng: &mut StdRng, ids: &Ids, tokens: &[String]) -> Case {
    let document = CORPUS[rng.random_range(0..CORPUS.len())];
    // Some cases are well-formed, so the fuzz also runs the paths that succeed.
    if rng.random_ratio(3, 20) {
        let request = json!({ "query": document, "variables": valid_variables(rng, ids) });
        return Case {
            body: request.to_string().into_bytes(),
            content_type: Some("application/json"),
            authorization: Some(format!("Bearer {}", tokens[0])),
        };
    }
    let document = if rng.random_ratio(4, 5) { mutate(rng, document) } else { document.to_owned() };
    let mut request = json!({ "query": document, "variables": random_variables(rng, ids) });
    match rng.random_range(0..10) {
        0 => request["operationName"] = json!(WORDS[rng.random_range(0..WORDS.len())]),
        1 => request["operationName"] = random_value(rng, ids, 1),
        2 => request["extensions"] = random_value(rng, ids, 2),
        3 => request["query"] = random_value(rng, ids, 1),
        _ => {}
    }
    let body = match rng.random_range(0..40) {
        0 => b"not json at all".to_vec(),
        1 => format!("[{}]", vec![request.to_string(); rng.random_range(1..500)].join(",")).into_bytes(),
        2 => (0..rng.random_range(0..2000)).map(|_| rng.random::<u8>()).collect(),
        3 => format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(),
        4 => request.to_string().into_bytes()[..rng.random_range(0..request.to_string().len())].to_vec(),
        _ => request.to_string().into_bytes(),
    };
    let content_type = match rng.random_range(0..20) {
        0 => None,
        1 => Some("text/plain"),
        2 => Some("application/graphql"),
        3 => Some("multipart/form-data; boundary=x"),
        _ => Some("application/json"),
    };
    let authorization = match rng.random_range(0..10) {
        0 => None,
        1 => Some(format!("Bearer {}", random_id(rng, ids))),
        2 => Some("Basic YWxpY2U6cGFzc3dvcmQ".into()),
        3 => Some(format!("Bearer {}", tokens[0].chars().rev().collect::<String>())),
        4 => Some(format!("Bearer {}", tokens[1])),
        _ => Some(format!("Bearer {}", tokens[0])),
    };
    Case { body, content_type, authorization }
}

/// Codes in a GraphQL response's errors, or a description of what is wrong with it.
fn error_codes(body: &Value) -> Result<Vec<String>, String> {
    let Some(errors) = body.get("errors") else {
        return if body.get("data").is_some() { Ok(Vec::new()) } else { Err("neither data nor errors".into()) };
    };
    let errors = errors.as_array().ok_or("errors is not a list")?;
    errors
        .iter()
        .map(|e| {
            let code = e["extensions"]["code"].as_str().ok_or_else(|| format!("an error without a code: {e}"))?;
            if e["message"].as_str().is_none_or(str::is_empty) {
                return Err(format!("an error without a message: {e}"));
            }
            if CODES.contains(&code) { Ok(code.to_owned()) } else { Err(format!("code {code}: {e}")) }
        })
        .collect()
}

fn seed() -> u64 {
    std::env::var("FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED)
}

/// Counts panics anywhere in this test process (nextest runs each test in its own).
fn count_panics() -> Arc<AtomicUsize> {
    let panics = Arc::new(AtomicUsize::new(0));
    let seen = panics.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        seen.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    panics
}

async fn fixture(app: &TestApp) -> (World, Ids) {
    let w = World::create(app).await;
    let alice = app.token(w.alice);
    let data = app
        .gql_ok(
            Some(&alice),
            "mutation($c: ID!) { p: createPost(courseId: $c, title: \"fuzz\", body: \"b\") { id } }",
            json!({ "c": gid("Course", w.course) }),
        )
        .await;
    let post = data["p"]["id"].as_str().expect("post").to_owned();
    let data = app
        .gql_ok(
            Some(&alice),
            "mutation($p: ID!) { createComment(postId: $p, body: \"c\") { id } }",
            json!({ "p": post }),
        )
        .await;
    let comment = data["createComment"]["id"].as_str().expect("comment").to_owned();
    let data = app
        .gql_ok(
            Some(&alice),
            "mutation($c: ID!) { createReply(commentId: $c, body: \"r\") { id } }",
            json!({ "c": comment }),
        )
        .await;
    let reply = data["createReply"]["id"].as_str().expect("reply").to_owned();
    let data = app
        .gql_ok(
            Some(&app.token(w.outsider)),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"other\", body: \"b\") { id } }",
            json!({ "c": gid("Course", w.other_course) }),
        )
        .await;
    let other_post = data["createPost"]["id"].as_str().expect("post").to_owned();
    let ids = Ids {
        course: gid("Course", w.course),
        other_course: gid("Course", w.other_course),
        post,
        other_post,
        comment,
        reply,
        user: gid("User", w.bob),
    };
    (w, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_mutated_requests_never_break_the_server() {
    let panics = count_panics();
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let (w, ids) = fixture(&app).await;
    let tokens = vec![app.token(w.alice), app.token(w.outsider)];
    let cases: usize = std::env::var("FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_HTTP_CASES);
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let generated: Vec<Case> = (0..cases).map(|_| random_case(&mut rng, &ids, &tokens)).collect();
    let started = Instant::now();
    // A fresh connection per case: a connection the server closed after refusing an oversized
    // body must not be reused for the next case (that would blame the server for the client).
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client");
    let body_limit = app.state.settings.max_body_bytes;

    let outcomes = futures_util::stream::iter(generated.into_iter().enumerate())
        .map(|(n, case)| {
            let (client, url) = (client.clone(), app.url("/graphql"));
            async move {
                let mut request = client.post(url).body(case.body.clone()).timeout(Duration::from_secs(30));
                if let Some(content_type) = case.content_type {
                    request = request.header("Content-Type", content_type);
                }
                if let Some(authorization) = &case.authorization {
                    request = request.header("Authorization", authorization);
                }
                let outcome = match request.send().await {
                    // Refused before it was read: the server may close while the client sends.
                    Err(_) if case.body.len() > body_limit => Ok((413, Vec::new())),
                    Err(e) => Err(format!("no answer ({e})")),
                    Ok(response) => {
                        let status = response.status();
                        let text = response.text().await.unwrap_or_default();
                        if status.is_server_error() {
                            Err(format!("HTTP {status}: {text}"))
                        } else if status == 200 {
                            match serde_json::from_str::<Value>(&text) {
                                Err(e) => Err(format!("200 with a body that is not JSON ({e}): {text}")),
                                Ok(body) => error_codes(&body).map(|codes| (status.as_u16(), codes)),
                            }
                        } else {
                            Ok((status.as_u16(), Vec::new()))
                        }
                    }
                };
                (n, String::from_utf8_lossy(&case.body).chars().take(300).collect::<String>(), outcome)
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;

    let mut failures = Vec::new();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (n, body, outcome) in outcomes {
        match outcome {
            Ok((status, codes)) => {
                *tally.entry(format!("HTTP {status}")).or_default() += 1;
                if codes.is_empty() && status == 200 {
                    *tally.entry("answered without errors".into()).or_default() += 1;
                }
                for code in codes {
                    *tally.entry(code).or_default() += 1;
                }
            }
            Err(problem) => failures.push(format!("case {n} (seed {seed}): {problem}\n  request: {body}")),
        }
    }
    eprintln!("fuzz: {cases} HTTP cases (seed {seed}) in {:.1?}: {tally:?}", started.elapsed());
    assert!(failures.is_empty(), "{} of {cases} cases failed:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(panics.load(Ordering::SeqCst), 0, "something panicked");
    // Enough cases got past parsing to run resolvers and access checks, not just the parser.
    let count = |key: &str| tally.get(key).copied().unwrap_or(0);
    assert!(count("answered without errors") > cases / 20, "{tally:?}");
    assert!(count("FORBIDDEN") + count("NOT_FOUND") > cases / 100, "{tally:?}");
    assert!(count("BAD_USER_INPUT") > cases / 4, "{tally:?}");

    // Still serving, and consistent: the likes the fuzz made are applied and counted once.
    let data = app.gql_ok(Some(&tokens[0]), "{ me { handle } }", json!({})).await;
    assert_eq!(data["me"]["handle"], "alice");
    app.worker().await.drain().await.expect("drain");
    let report =
        course_forum::testing::ops::check::run(&app.db, &app.state.redis, &app.state.keys, Duration::from_secs(60))
            .await
            .expect("check");
    assert_eq!(report.failed(), 0, "{report}");
}

/// Close codes a server may use when a client breaks the protocol (graphql-transport-ws:
/// 4400 invalid message, 4401 unauthorized, 4403 forbidden, 4408 init timeout, 4409 duplicate
/// id, 4429 too many inits; async-graphql closes a message it cannot parse with 1002 and an
/// init that never came with 3008; 1003/1007/1009 come from the websocket layer).
const PROTOCOL_CLOSE_CODES: &[u16] = &[1000, 1002, 3008, 1003, 1007, 1009, 4400, 4401, 4403, 4408, 4409, 4429, 4500];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_websocket_messages_get_coded_errors_or_a_protocol_close() {
    let panics = count_panics();
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let (w, ids) = fixture(&app).await;
    let token = app.token(w.alice);
    let seed = seed() ^ 0x5EED;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut sent = 0;
    while sent < WS_CASES {
        let mut request = format!("ws://{}/graphql/ws", app.addr).into_client_request().expect("request");
        request.headers_mut().insert("Sec-WebSocket-Protocol", "graphql-transport-ws".parse().expect("header"));
        let (mut ws, _) = tokio_tungstenite::connect_async(request).await.expect("the server accepts websockets");
        let init = json!({ "type": "connection_init", "payload": { "authorization": format!("Bearer {token}") } });
        ws.send(Message::Text(init.to_string().into())).await.expect("init");
        let mut open = true;
        for _ in 0..100 {
            sent += 1;
            let document = CORPUS[rng.random_range(0..CORPUS.len())];
            let document = if rng.random_ratio(3, 4) { mutate(&mut rng, document) } else { document.to_owned() };
            let mut message = json!({
                "id": format!("{}", rng.random_range(0..60)),
                "type": "subscribe",
                "payload": { "query": document, "variables": random_variables(&mut rng, &ids) },
            });
            match rng.random_range(0..12) {
                0 => message["type"] = json!(WORDS[rng.random_range(0..WORDS.len())]),
                1 => message["type"] = json!("complete"),
                2 => message["payload"] = random_value(&mut rng, &ids, 2),
                3 => message["id"] = random_value(&mut rng, &ids, 1),
                _ => {}
            }
            let frame = match rng.random_range(0..30) {
                0 => Message::Binary(
                    (0..rng.random_range(0..300)).map(|_| rng.random::<u8>()).collect::<Vec<_>>().into(),
                ),
                1 => Message::Text(mutate(&mut rng, &message.to_string()).into()),
                _ => Message::Text(message.to_string().into()),
            };
            if ws.send(frame).await.is_err() {
                open = false;
                break;
            }
        }
        // Ask for a pong, then read everything until it (or a close) arrives.
        if open {
            let _ = ws.send(Message::Text(json!({ "type": "ping" }).to_string().into())).await;
        }
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                Err(_) => {
                    failures.push(format!("seed {seed}: no pong and no close within 10 s"));
                    break;
                }
                Ok(None) | Ok(Some(Err(_))) => {
                    *tally.entry("connection ended".into()).or_default() += 1;
                    break;
                }
                Ok(Some(Ok(Message::Close(frame)))) => {
                    let code = frame.as_ref().map(|f| u16::from(f.code)).unwrap_or(1005);
                    *tally.entry(format!("close {code}")).or_default() += 1;
                    if frame.is_some() && !PROTOCOL_CLOSE_CODES.contains(&code) {
                        failures.push(format!("seed {seed}: closed with {frame:?}"));
                    }
                    break;
                }
                Ok(Some(Ok(Message::Text(text)))) => {
                    let Ok(message) = serde_json::from_str::<Value>(&text) else {
                        failures.push(format!("seed {seed}: a server message that is not JSON: {text}"));
                        continue;
                    };
                    let kind = message["type"].as_str().unwrap_or_default().to_owned();
                    *tally.entry(kind.clone()).or_default() += 1;
                    let errors = match kind.as_str() {
                        "error" => error_codes(&json!({ "errors": message["payload"] })),
                        "next" => error_codes(&message["payload"]),
                        _ => Ok(Vec::new()),
                    };
                    match errors {
                        Ok(codes) => codes.into_iter().for_each(|c| *tally.entry(c).or_default() += 1),
                        Err(problem) => failures.push(format!("seed {seed}: {problem}")),
                    }
                    if kind == "pong" {
                        let _ = ws.close(None).await;
                        break;
                    }
                }
                Ok(Some(Ok(_))) => {}
            }
        }
    }
    eprintln!("fuzz: {sent} websocket messages (seed {seed}): {tally:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(panics.load(Ordering::SeqCst), 0, "something panicked");
    // The fuzz reached the server's error handling: coded errors, or closes for a broken
    // protocol. A frame the server cannot parse closes its socket with 1002, and on a loaded
    // machine that close can overtake the errors of the subscriptions sent before it, so a run
    // may see closes alone.
    assert!(
        tally.iter().any(|(k, n)| *n > 0 && (k == "BAD_USER_INPUT" || k.starts_with("close 44") || k == "close 1002")),
        "{tally:?}"
    );
    // A bad subscription on a socket of its own gets its code whatever the timing.
    let mut probe = common::ws::GqlSocket::connect(app.addr, Some(&token)).await.expect("connect the probe");
    probe
        .subscribe(
            "probe",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }",
            json!({ "ids": ["garbage"] }),
        )
        .await;
    let answer = loop {
        let message = probe.next_message(Duration::from_secs(10)).await.expect("an answer to the probe");
        if message["id"] == "probe" {
            break message;
        }
    };
    let codes = match answer["type"].as_str() {
        Some("error") => error_codes(&json!({ "errors": answer["payload"] })),
        _ => error_codes(&answer["payload"]),
    };
    assert_eq!(codes, Ok(vec!["BAD_USER_INPUT".to_owned()]), "{answer}");
    // Still serving subscriptions. On a fresh post: the fuzzed operations run as alice, who may
    // have deleted the fixture's post along the way.
    let fresh = app
        .gql_ok(
            Some(&token),
            "mutation($c: ID!) { createPost(courseId: $c, title: \"after\", body: \"b\") { id } }",
            json!({ "c": ids.course }),
        )
        .await["createPost"]["id"]
        .clone();
    let mut socket = common::ws::GqlSocket::connect(app.addr, Some(&token)).await.expect("connect after the fuzz");
    socket
        .subscribe(
            "ok",
            "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { likeCount } }",
            json!({ "ids": [fresh] }),
        )
        .await;
    // The like must come after the subscription watches the post (a like published before is
    // not replayed). Starting it may take up to CACHE_LOCK_TTL (10 s here): a fuzzed operation
    // on a random post id, cut off when its socket closed, can leave that id's post-cache lock
    // held until it expires, and the new post may get that id.
    let target = course_forum::testing::like_event::LikeTarget::Post(common::raw_id(fresh.as_str().expect("id")));
    let watching = Instant::now() + Duration::from_secs(30);
    while !app.state.live.watched().contains(&target) {
        if Instant::now() > watching {
            let heard = socket.next_message(Duration::from_secs(1)).await;
            panic!("the subscription after the fuzz never started; the socket said {heard:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.gql_ok(Some(&app.token(w.bob)), "mutation($p: ID!) { likePost(postId: $p) { id } }", json!({ "p": fresh }))
        .await;
    app.worker().await.drain().await.expect("drain");
    assert!(socket.next_data(Duration::from_secs(10)).await.is_some(), "a live update after the fuzz");
}
