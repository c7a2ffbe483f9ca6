//! Automatic persisted queries (Apollo's protocol) over real HTTP: an unknown hash, a hash that
//! does not match its text, a query registered by POST and then run by its hash alone (by GET,
//! and on another instance sharing Redis), a persisted mutation that runs by POST and is refused
//! by GET, and a repeated document parsed once.

mod common;

use common::{TestApp, World, gid};
use course_forum::graphql::persisted::sha256_hex;
use serde_json::{Value, json};

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
