//! GraphQL over HTTP, rule by rule: media types negotiated from `Accept`, status codes per
//! media type, request errors without a `data` entry, POST only with a JSON body, GET for
//! queries only.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{TestApp, World, gid};

const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";

struct Answer {
    status: StatusCode,
    content_type: String,
    allow: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("send");
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, content_type, allow) =
        (response.status(), header("content-type").unwrap_or_default(), header("allow"));
    Answer { status, content_type, allow, body: response.text().await.expect("body") }
}

fn post(app: &TestApp, accept: Option<&str>, token: Option<&str>, body: Value) -> reqwest::RequestBuilder {
    let mut request = app.http.post(app.url("/graphql")).json(&body);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request
}

#[tokio::test]
async fn without_accept_the_answer_is_application_json_and_200() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let ok = send(post(&app, None, Some(&token), json!({ "query": "{ me { handle } }" }))).await;
    assert_eq!((ok.status, ok.content_type.as_str()), (StatusCode::OK, "application/json; charset=utf-8"));
    assert_eq!(ok.json()["data"]["me"]["handle"], "alice");
    // A request error is 200 too in application/json, with errors and no data entry.
    let invalid = send(post(&app, None, Some(&token), json!({ "query": "{ nope }" }))).await;
    assert_eq!(invalid.status, StatusCode::OK);
    let body = invalid.json();
    assert!(body.get("data").is_none(), "a request error has no data entry: {body}");
    assert_eq!(body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT");
}

#[tokio::test]
async fn graphql_response_json_uses_status_codes_for_request_errors() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let accept = Some("application/graphql-response+json, application/json;q=0.9");
    let ok = send(post(&app, accept, Some(&token), json!({ "query": "{ me { handle } }" }))).await;
    assert_eq!(
        (ok.status, ok.content_type.as_str()),
        (StatusCode::OK, "application/graphql-response+json; charset=utf-8")
    );
    // Validation, parse and cost errors: 400, no data entry.
    for query in [
        "{ nope }",
        "{ me { ",
        &format!("{{ {} }}", (0..40).map(|i| format!("a{i}: __typename")).collect::<Vec<_>>().join(" ")),
    ] {
        let refused = send(post(&app, accept, Some(&token), json!({ "query": query }))).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{query}: {}", refused.body);
        assert!(refused.json().get("data").is_none(), "{}", refused.body);
        assert!(refused.content_type.starts_with(GRAPHQL_RESPONSE));
    }
    // A bad token: 401.
    let unauthenticated = send(post(&app, accept, Some("not-a-token"), json!({ "query": "{ me { id } }" }))).await;
    assert_eq!(unauthenticated.status, StatusCode::UNAUTHORIZED, "{}", unauthenticated.body);
    // An executed operation with a field error: 200 with data.
    let foreign = send(post(
        &app,
        accept,
        Some(&token),
        json!({ "query": "query($c: ID!) { me { handle } course(id: $c) { id } }", "variables": { "c": gid("Course", world.other_course) } }),
    ))
    .await;
    assert_eq!(foreign.status, StatusCode::OK, "{}", foreign.body);
    let body = foreign.json();
    assert_eq!(body["errors"][0]["extensions"]["code"], "FORBIDDEN");
    assert!(body.get("data").is_some(), "{body}");
}

#[tokio::test]
async fn an_unacceptable_accept_is_406() {
    let app = TestApp::spawn().await;
    let answer = send(post(&app, Some("text/html"), None, json!({ "query": "{ __typename }" }))).await;
    assert_eq!(answer.status, StatusCode::NOT_ACCEPTABLE);
    let wildcard = send(post(&app, Some("*/*"), None, json!({ "query": "{ __typename }" }))).await;
    assert_eq!((wildcard.status, wildcard.content_type.as_str()), (StatusCode::OK, "application/json; charset=utf-8"));
}

#[tokio::test]
async fn post_takes_only_a_json_body() {
    let app = TestApp::spawn().await;
    let body = r#"{"query":"{ __typename }"}"#;
    for content_type in [Some("text/plain"), Some("application/x-www-form-urlencoded"), None] {
        let mut request = app.http.post(app.url("/graphql")).body(body);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let answer = send(request).await;
        assert_eq!(answer.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{content_type:?}");
    }
    let with_charset =
        send(app.http.post(app.url("/graphql")).header("content-type", "application/json; charset=utf-8").body(body))
            .await;
    assert_eq!(with_charset.status, StatusCode::OK, "{}", with_charset.body);
    // Not JSON, or not a request: 400 in either media type.
    for (accept, broken) in [(None, "{"), (Some(GRAPHQL_RESPONSE), "[1, 2]"), (None, r#"{"variables": {}}"#)] {
        let mut request = app.http.post(app.url("/graphql")).header("content-type", "application/json").body(broken);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let answer = send(request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{broken}: {}", answer.body);
        assert_eq!(answer.json()["errors"][0]["extensions"]["code"], "BAD_USER_INPUT");
    }
}

/// `/graphql?name=value&…`, encoded.
fn with_params(app: &TestApp, params: &[(&str, String)]) -> url::Url {
    url::Url::parse_with_params(&app.url("/graphql"), params).expect("url")
}

#[tokio::test]
async fn get_runs_queries_only() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let get = |query: &str, variables: Option<Value>| {
        let mut params = vec![("query", query.to_owned())];
        if let Some(variables) = variables {
            params.push(("variables", variables.to_string()));
        }
        app.http.get(with_params(&app, &params)).bearer_auth(&token)
    };
    let read =
        send(get("query($c: ID!) { course(id: $c) { code } }", Some(json!({ "c": gid("Course", world.course) }))))
            .await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.body);
    assert_eq!(read.json()["data"]["course"]["code"], "CS101");
    let posts = app.scalar_i64("SELECT count(*) AS v FROM posts", []).await;
    let mutation = send(get(
        "mutation($c: ID!) { createPost(courseId: $c, title: \"by GET\", body: \"b\") { id } }",
        Some(json!({ "c": gid("Course", world.course) })),
    ))
    .await;
    assert_eq!(mutation.status, StatusCode::METHOD_NOT_ALLOWED, "{}", mutation.body);
    assert_eq!(mutation.allow.as_deref(), Some("POST"));
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts", []).await, posts, "nothing written by GET");
    // Several operations: the one named decides.
    let named = send(
        app.http
            .get(with_params(
                &app,
                &[
                    (
                        "query",
                        "query Q { me { id } } mutation M { createCourse(code: \"X\", title: \"x\") { id } }"
                            .to_owned(),
                    ),
                    ("operationName", "M".to_owned()),
                ],
            ))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(named.status, StatusCode::METHOD_NOT_ALLOWED);
    // One named mutation and no operationName: it is the one that would run.
    let lone = send(get(
        "mutation Lone($c: ID!) { createPost(courseId: $c, title: \"by GET\", body: \"b\") { id } }",
        Some(json!({ "c": gid("Course", world.course) })),
    ))
    .await;
    assert_eq!(lone.status, StatusCode::METHOD_NOT_ALLOWED, "{}", lone.body);
    assert_eq!(app.scalar_i64("SELECT count(*) AS v FROM posts", []).await, posts, "nothing written by GET");
    // Without a query, a browser gets GraphiQL.
    let page = send(app.http.get(app.url("/graphql"))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.content_type.starts_with("text/html"), "{}", page.content_type);
}

#[tokio::test]
async fn get_answers_say_who_may_cache_them() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let headers_of = |response: &reqwest::Response| {
        let cache_control =
            response.headers().get("cache-control").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let vary: Vec<String> = response
            .headers()
            .get_all("vary")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(',').map(|part| part.trim().to_ascii_lowercase()).collect::<Vec<_>>())
            .collect();
        (cache_control, vary)
    };
    let course = || {
        vec![
            ("query", "query($c: ID!) { course(id: $c) { code } }".to_owned()),
            ("variables", json!({ "c": gid("Course", world.course) }).to_string()),
        ]
    };
    // A signed-in answer is the caller's alone.
    let response = app.http.get(with_params(&app, &course())).bearer_auth(&token).send().await.expect("GET");
    let (cache_control, vary) = headers_of(&response);
    assert_eq!(cache_control, "private, no-store");
    assert!(vary.contains(&"authorization".to_owned()), "{vary:?}");
    assert_eq!(response.json::<Value>().await.expect("json")["data"]["course"]["code"], "CS101");
    // A stranger's refused answer is not shared either.
    let response = app.http.get(with_params(&app, &course())).send().await.expect("GET");
    let (cache_control, vary) = headers_of(&response);
    assert_eq!(cache_control, "private, no-store");
    assert!(vary.contains(&"authorization".to_owned()), "{vary:?}");
    // An answer no viewer shaped (no token, no error) may be shared, still varying on the token.
    let response =
        app.http.get(with_params(&app, &[("query", "{ __typename }".to_owned())])).send().await.expect("GET");
    let (cache_control, vary) = headers_of(&response);
    assert_eq!(cache_control, "public, max-age=60");
    assert!(vary.contains(&"authorization".to_owned()), "{vary:?}");
    // A refused mutation by GET (405, a status caches may keep by default) is not kept.
    let response = app
        .http
        .get(with_params(&app, &[("query", "mutation { createCourse(code: \"X\", title: \"x\") { id } }".to_owned())]))
        .bearer_auth(&token)
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers_of(&response).0, "private, no-store");
}

/// An object's fields come in the order the query asked for them (the GraphQL spec's ordered
/// response map), in the raw body: `handle` before `id`, then `id` before `handle`, as written.
#[tokio::test]
async fn the_answer_keeps_the_order_of_the_selection() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    for (query, first, second) in [("{ me { handle id } }", "handle", "id"), ("{ me { id handle } }", "id", "handle")] {
        let answer = send(post(&app, None, Some(&token), json!({ "query": query }))).await;
        assert_eq!(answer.status, StatusCode::OK);
        let at =
            |key: &str| answer.body.find(&format!("\"{key}\"")).unwrap_or_else(|| panic!("{key} in {}", answer.body));
        assert!(at(first) < at(second), "{query}: {}", answer.body);
    }
}
