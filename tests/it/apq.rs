//! Automatic persisted queries (Apollo's protocol) over real HTTP: an unknown hash, a hash that
//! does not match its text, a query registered by POST and then run by its hash alone (by GET,
//! and on another instance sharing Redis), a persisted mutation that runs by POST and is refused
//! by GET, and a repeated document parsed once.

use course_forum::testing::documents::sha256_hex;
use serde_json::{Value, json};

use crate::common::{self, TestApp, World, gid};

const ME: &str = "query Me { me { handle } }";

fn persisted(hash: &str) -> Value {
    json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } })
}

async fn post(app: &TestApp, addr: std::net::SocketAddr, token: &str, body: Value) -> (u16, Value) {
    let response = app
        .http
        .post(format!("http://{addr}/graphql"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .json(&body)
        .send()
        .await
        .expect("POST /graphql");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(app: &TestApp, addr: std::net::SocketAddr, token: &str, params: &[(&str, String)]) -> (u16, Value) {
    let query = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish();
    let response = app
        .http
        .get(format!("http://{addr}/graphql?{query}"))
        .bearer_auth(token)
        .header("accept", "application/json")
        .send()
        .await
        .expect("GET /graphql");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn code(body: &Value) -> Option<&str> {
    body["errors"][0]["extensions"]["code"].as_str()
}

#[tokio::test]
async fn an_unknown_hash_is_persisted_query_not_found_by_post_and_by_get() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let hash = sha256_hex(ME);
    let (_, body) = post(&app, app.addr, &token, json!({ "extensions": persisted(&hash) })).await;
    assert_eq!(code(&body), Some("PERSISTED_QUERY_NOT_FOUND"), "{body}");
    assert_eq!(body["errors"][0]["message"], "PersistedQueryNotFound", "the message Apollo clients look for");
    assert!(body["data"].is_null(), "nothing ran: {body}");
    let (_, body) = get(&app, app.addr, &token, &[("extensions", persisted(&hash).to_string())]).await;
    assert_eq!(code(&body), Some("PERSISTED_QUERY_NOT_FOUND"), "{body}");
    for bad in [json!({ "persistedQuery": { "version": 2, "sha256Hash": hash } }), persisted("not-a-hash")] {
        let (_, body) = post(&app, app.addr, &token, json!({ "extensions": bad })).await;
        assert_eq!(code(&body), Some("BAD_USER_INPUT"), "{body}");
    }
}

#[tokio::test]
async fn a_hash_that_is_not_the_query_s_is_refused_and_stores_nothing() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let other = sha256_hex("query Other { me { id } }");
    let (_, body) = post(&app, app.addr, &token, json!({ "query": ME, "extensions": persisted(&other) })).await;
    assert_eq!(code(&body), Some("BAD_USER_INPUT"), "{body}");
    assert!(body["data"].is_null(), "nothing ran: {body}");
    for hash in [other, sha256_hex(ME)] {
        let (_, body) = post(&app, app.addr, &token, json!({ "extensions": persisted(&hash) })).await;
        assert_eq!(code(&body), Some("PERSISTED_QUERY_NOT_FOUND"), "nothing was stored under either hash: {body}");
    }
}

#[tokio::test]
async fn a_registered_query_runs_by_its_hash_by_get_and_on_another_instance() {
    let app = TestApp::spawn().await;
    let peer = app.spawn_peer(|_| {}).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let hash = sha256_hex(ME);
    let (_, body) = post(&app, app.addr, &token, json!({ "query": ME, "extensions": persisted(&hash) })).await;
    assert_eq!(body["data"]["me"]["handle"], "alice", "registered and run: {body}");
    let (status, body) = get(&app, app.addr, &token, &[("extensions", persisted(&hash).to_string())]).await;
    assert_eq!((status, &body["data"]["me"]["handle"]), (200, &json!("alice")), "by GET, hash alone: {body}");
    let (_, body) = get(&app, peer.addr, &token, &[("extensions", persisted(&hash).to_string())]).await;
    assert_eq!(body["data"]["me"]["handle"], "alice", "another instance knows it (Redis): {body}");
    let (_, body) = post(&app, peer.addr, &app.token(world.bob), json!({ "extensions": persisted(&hash) })).await;
    assert_eq!(body["data"]["me"]["handle"], "bob", "the document is shared, not its answer: {body}");
}

#[tokio::test]
async fn a_persisted_mutation_runs_by_post_and_is_refused_by_get() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let create = "mutation Create($c: ID!) { createPost(courseId: $c, title: \"apq\", body: \"b\") { id } }";
    let hash = sha256_hex(create);
    let variables = json!({ "c": gid("Course", world.course) });
    let posts = || app.scalar_i64("SELECT count(*) AS v FROM posts", []);
    let (_, body) = post(
        &app,
        app.addr,
        &token,
        json!({ "query": create, "variables": variables, "extensions": persisted(&hash) }),
    )
    .await;
    assert!(body["data"]["createPost"]["id"].is_string(), "{body}");
    assert_eq!(posts().await, 1);
    let (status, got) = get(
        &app,
        app.addr,
        &token,
        &[("extensions", persisted(&hash).to_string()), ("variables", variables.to_string())],
    )
    .await;
    assert_eq!(status, 405, "a persisted mutation is POST-only: {got}");
    assert_eq!(posts().await, 1, "the GET changed nothing");
    let (_, body) =
        post(&app, app.addr, &token, json!({ "variables": variables, "extensions": persisted(&hash) })).await;
    assert!(body["data"]["createPost"]["id"].is_string(), "by hash, by POST: {body}");
    assert_eq!(posts().await, 2);
}

#[tokio::test]
async fn a_repeated_document_is_parsed_once() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let documents = &app.state.parsed_documents;
    let (parses, hits) = (documents.parses(), documents.hits());
    let hash = sha256_hex(ME);
    post(&app, app.addr, &token, json!({ "query": ME, "extensions": persisted(&hash) })).await;
    for _ in 0..3 {
        let (_, body) = post(&app, app.addr, &token, json!({ "extensions": persisted(&hash) })).await;
        assert_eq!(body["data"]["me"]["handle"], "alice");
    }
    let (_, body) = post(&app, app.addr, &token, json!({ "query": ME })).await;
    assert_eq!(body["data"]["me"]["handle"], "alice", "the same text without a hash shares the parse");
    assert_eq!((documents.parses() - parses, documents.hits() - hits), (1, 4));
}

/// Keys this app's server keeps in Redis for persisted queries.
async fn persisted_keys(app: &TestApp) -> Vec<String> {
    let mut redis = app.state.redis.clone();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}:apq:*", app.redis_prefix)).query_async(&mut redis).await.expect("KEYS");
    keys
}

async fn post_anonymously(app: &TestApp, body: Value) -> Value {
    let response = app
        .http
        .post(format!("http://{}/graphql", app.addr))
        .header("content-type", "application/json")
        .json(&body)
        .send()
        .await
        .expect("POST /graphql");
    response.json().await.unwrap_or(Value::Null)
}

#[tokio::test]
async fn strangers_run_known_hashes_but_add_none() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let typename = "query T { __typename }";
    let hash = sha256_hex(typename);
    // Offered by a stranger: it runs, and nothing is kept.
    let body = post_anonymously(&app, json!({ "query": typename, "extensions": persisted(&hash) })).await;
    assert_eq!(body["data"]["__typename"], "Query", "{body}");
    let body = post_anonymously(&app, json!({ "extensions": persisted(&hash) })).await;
    assert_eq!(code(&body), Some("PERSISTED_QUERY_NOT_FOUND"), "{body}");
    // A flood of 60 KB comments offered as persisted queries leaves nothing in Redis.
    for i in 0..20 {
        let text = format!("# {i} {}", "x".repeat(60 * 1024));
        let body = post_anonymously(&app, json!({ "query": text, "extensions": persisted(&sha256_hex(&text)) })).await;
        assert!(body["errors"].is_array(), "{body}");
    }
    assert_eq!(persisted_keys(&app).await, Vec::<String>::new(), "a stranger stored nothing");
    // Once a member adds it, strangers run it by its hash.
    let (_, body) =
        post(&app, app.addr, &app.token(world.alice), json!({ "query": typename, "extensions": persisted(&hash) }))
            .await;
    assert_eq!(body["data"]["__typename"], "Query", "{body}");
    let body = post_anonymously(&app, json!({ "extensions": persisted(&hash) })).await;
    assert_eq!(body["data"]["__typename"], "Query", "a known hash runs for anyone: {body}");
}

#[tokio::test]
async fn only_a_validated_text_under_the_size_cap_is_kept() {
    let app = TestApp::spawn_with(|settings| settings.persisted_query_max_bytes = 200).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let invalid = ["# a comment and no operation", "query { noSuchField }", "query { me { handle } "];
    for text in invalid {
        let (_, body) =
            post(&app, app.addr, &token, json!({ "query": text, "extensions": persisted(&sha256_hex(text)) })).await;
        assert_eq!(code(&body), Some("BAD_USER_INPUT"), "{text}: {body}");
    }
    // Over the cost limit: it validated as GraphQL but its cost refused it.
    let costly = "{ myCourses { posts(first: 100) { nodes { comments(first: 100) { nodes { replies(first: 100) { nodes { id } } } } } } } }";
    let (_, body) =
        post(&app, app.addr, &token, json!({ "query": costly, "extensions": persisted(&sha256_hex(costly)) })).await;
    assert!(body["errors"].is_array(), "{body}");
    // Valid, but longer than PERSISTED_QUERY_MAX_BYTES: runs, not kept.
    let long = format!("query Long {{ me {{ handle }} }} # {}", "y".repeat(300));
    let (_, body) =
        post(&app, app.addr, &token, json!({ "query": long, "extensions": persisted(&sha256_hex(&long)) })).await;
    assert_eq!(body["data"]["me"]["handle"], "alice", "{body}");
    assert_eq!(persisted_keys(&app).await, Vec::<String>::new(), "nothing kept");
    // Valid and short: kept.
    let (_, body) =
        post(&app, app.addr, &token, json!({ "query": ME, "extensions": persisted(&sha256_hex(ME)) })).await;
    assert_eq!(body["data"]["me"]["handle"], "alice", "{body}");
    assert_eq!(persisted_keys(&app).await.len(), 1);
}

#[tokio::test]
async fn each_member_adds_at_most_their_hourly_share_of_persisted_queries() {
    let app = TestApp::spawn_with(|settings| settings.persisted_query_registrations_per_hour = 2).await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let texts: Vec<String> = (0..3).map(|i| format!("query Q{i} {{ me {{ handle }} }}")).collect();
    for text in &texts {
        let (_, body) =
            post(&app, app.addr, &alice, json!({ "query": text, "extensions": persisted(&sha256_hex(text)) })).await;
        assert_eq!(body["data"]["me"]["handle"], "alice", "the request runs whether kept or not: {body}");
    }
    assert_eq!(persisted_keys(&app).await.len(), 2, "the third was over alice's rate");
    let (_, body) = post(&app, app.addr, &alice, json!({ "extensions": persisted(&sha256_hex(&texts[2])) })).await;
    assert_eq!(code(&body), Some("PERSISTED_QUERY_NOT_FOUND"), "{body}");
    let (_, body) = post(
        &app,
        app.addr,
        &app.token(world.bob),
        json!({ "query": texts[2], "extensions": persisted(&sha256_hex(&texts[2])) }),
    )
    .await;
    assert_eq!(body["data"]["me"]["handle"], "bob", "{body}");
    assert_eq!(persisted_keys(&app).await.len(), 3, "bob's share is his own");
}

#[tokio::test]
async fn parsed_documents_are_kept_only_when_they_validated_for_a_signed_in_caller() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let documents = &app.state.parsed_documents;
    let held = documents.len();
    // Strangers: parsed every time, never kept.
    for _ in 0..3 {
        post_anonymously(&app, json!({ "query": "query Anonymous { __typename }" })).await;
    }
    // A member's document that does not validate: never kept.
    for _ in 0..3 {
        post(&app, app.addr, &token, json!({ "query": "query Bad { noSuchField }" })).await;
    }
    assert_eq!(documents.len(), held, "nothing kept");
    // 300 distinct 60 KB documents from strangers grow nothing.
    for i in 0..300 {
        let text = format!("query Q{i} {{ __typename }} # {}", "z".repeat(60 * 1024));
        post_anonymously(&app, json!({ "query": text })).await;
    }
    assert_eq!(documents.len(), held, "nothing kept for strangers");
    let (bytes, capacity) = documents.weighed_bytes();
    assert!(bytes <= capacity);
}

#[tokio::test]
async fn a_trusted_documents_server_runs_only_its_manifest() {
    let directory = std::env::temp_dir().join(format!("cf-trusted-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let manifest = directory.join("manifest.json");
    let other = "query Other { me { id } }";
    std::fs::write(&manifest, json!({ sha256_hex(ME): ME }).to_string()).expect("manifest");
    let path = manifest.clone();
    let app = TestApp::spawn_with(move |settings| settings.trusted_documents = Some(path)).await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    // By the manifest's id, and by a text it holds.
    let (_, body) = post(&app, app.addr, &token, json!({ "extensions": persisted(&sha256_hex(ME)) })).await;
    assert_eq!(body["data"]["me"]["handle"], "alice", "{body}");
    let (_, body) = post(&app, app.addr, &token, json!({ "query": ME })).await;
    assert_eq!(body["data"]["me"]["handle"], "alice", "{body}");
    // Anything else is refused before it is parsed, and nothing is kept.
    let (_, body) =
        post(&app, app.addr, &token, json!({ "query": other, "extensions": persisted(&sha256_hex(other)) })).await;
    assert_eq!(code(&body), Some("TRUSTED_DOCUMENT_REQUIRED"), "{body}");
    let (_, body) = post(&app, app.addr, &token, json!({ "query": "{ __typename }" })).await;
    assert_eq!(code(&body), Some("TRUSTED_DOCUMENT_REQUIRED"), "{body}");
    assert_eq!(persisted_keys(&app).await, Vec::<String>::new());
    // Over the websocket too.
    let mut socket = common::ws::GqlSocket::connect(app.addr, Some(&token)).await.expect("connected");
    socket.subscribe("s", "{ __typename }", json!({})).await;
    let message = socket.next_message(std::time::Duration::from_secs(5)).await.expect("answered");
    assert_eq!(message["payload"]["errors"][0]["extensions"]["code"], "TRUSTED_DOCUMENT_REQUIRED", "{message}");
    // A reload takes a new manifest (SIGHUP calls the same reload), keyed by SHA-256 here.
    std::fs::write(&manifest, json!({ sha256_hex(other): other, sha256_hex(ME): ME }).to_string()).expect("manifest");
    let trusted = app.state.persisted_queries.trusted().expect("trusted documents");
    assert_eq!(trusted.reload().expect("reloaded"), 2);
    let (_, body) = post(&app, app.addr, &token, json!({ "extensions": persisted(&sha256_hex(other)) })).await;
    assert_eq!(body["data"]["me"]["id"], gid("User", world.alice), "{body}");
    // A broken manifest is refused and the loaded documents stay.
    std::fs::write(&manifest, "{ not json").expect("manifest");
    assert!(trusted.reload().is_err());
    let (_, body) = post(&app, app.addr, &token, json!({ "query": other })).await;
    assert_eq!(body["data"]["me"]["id"], gid("User", world.alice), "{body}");
    let _ = std::fs::remove_dir_all(&directory);
}
