//! Browsers from other origins: `CORS_ALLOWED_ORIGINS` (plus the server's own origin) decides
//! who gets CORS answers on `/graphql` and who may open the websocket. A request without
//! `Origin` (not a browser) is never refused for that.
//!
//! These are HTTP-level checks of what a browser would be told (the headers it enforces);
//! no browser runs here.

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::json;

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World};

const ALLOWED: &str = "http://app.example";
const OTHER: &str = "http://evil.example";

async fn app() -> TestApp {
    TestApp::spawn_with(|s| s.cors_allowed_origins = vec![ALLOWED.to_owned(), "https://second.example".into()]).await
}

fn own_origin(app: &TestApp) -> String {
    format!("http://{}", app.addr)
}

async fn preflight(app: &TestApp, origin: &str) -> (u16, HeaderMap) {
    let response = app
        .http
        .request(Method::OPTIONS, app.url("/graphql"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "authorization, content-type")
        .send()
        .await
        .expect("preflight");
    (response.status().as_u16(), response.headers().clone())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn the_preflight_of_an_allowed_origin_is_answered_with_what_post_graphql_needs() {
    let app = app().await;
    for origin in [ALLOWED, "https://second.example", own_origin(&app).as_str()] {
        let (status, headers) = preflight(&app, origin).await;
        assert!((200..300).contains(&status), "{origin}: preflight answered, not {status}");
        assert_eq!(header(&headers, "access-control-allow-origin"), Some(origin), "{origin}");
        let methods = header(&headers, "access-control-allow-methods").unwrap_or_default().to_ascii_uppercase();
        assert!(methods.contains("POST"), "{origin}: {methods}");
        let allowed = header(&headers, "access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
        assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{origin}: {allowed}");
        assert!(header(&headers, "access-control-max-age").is_some(), "{origin}: cacheable");
        assert!(header(&headers, "access-control-allow-credentials").is_none(), "{origin}: no credentials");
    }
}

#[tokio::test]
async fn the_preflight_of_another_origin_gets_no_allowance() {
    let app = app().await;
    for origin in [OTHER, "null", "http://app.example:8080", "https://app.example"] {
        let (_, headers) = preflight(&app, origin).await;
        assert_eq!(header(&headers, "access-control-allow-origin"), None, "{origin}: a browser refuses the call");
    }
}

#[tokio::test]
async fn the_own_origin_is_allowed_without_configuration() {
    let app = TestApp::spawn().await;
    let own = own_origin(&app);
    let (_, headers) = preflight(&app, &own).await;
    assert_eq!(header(&headers, "access-control-allow-origin"), Some(own.as_str()));
    let (_, headers) = preflight(&app, ALLOWED).await;
    assert_eq!(header(&headers, "access-control-allow-origin"), None, "nothing else by default");
}

#[tokio::test]
async fn the_actual_post_carries_the_allowance_for_an_allowed_origin_only() {
    let app = app().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    for (origin, allowed) in [(ALLOWED, true), (OTHER, false)] {
        let response = app
            .http
            .post(app.url("/graphql"))
            .header("Origin", origin)
            .header("Authorization", format!("Bearer {token}"))
            .json(&json!({ "query": "{ me { handle } }" }))
            .send()
            .await
            .expect("post");
        let headers = response.headers().clone();
        let body: serde_json::Value = response.json().await.expect("json");
        // CORS is the browser's to enforce: the server answers either way.
        assert_eq!(body["data"]["me"]["handle"], "alice", "{origin}: {body}");
        if allowed {
            assert_eq!(header(&headers, "access-control-allow-origin"), Some(origin));
            let exposed = header(&headers, "access-control-expose-headers").unwrap_or_default();
            assert!(exposed.contains("x-request-id"), "{exposed}");
        } else {
            assert_eq!(header(&headers, "access-control-allow-origin"), None, "{origin}");
        }
    }
}

#[tokio::test]
async fn the_websocket_refuses_another_origin_and_accepts_allowed_own_and_none() {
    let app = app().await;
    let world = World::create(&app).await;
    let token = app.token(world.alice);
    let refused = GqlSocket::open(app.addr, "graphql-transport-ws", Some(OTHER)).await.err();
    assert_eq!(refused, Some(403), "a page from another origin may not open the socket");
    let own = own_origin(&app);
    for origin in [Some(ALLOWED), Some(own.as_str()), None] {
        let socket = GqlSocket::open(app.addr, "graphql-transport-ws", origin).await.expect("upgraded");
        socket
            .init(json!({ "authorization": format!("Bearer {token}") }))
            .await
            .unwrap_or_else(|refused| panic!("{origin:?}: {refused:?}"));
    }
}

#[test]
fn origins_are_read_the_way_browsers_write_them() {
    use course_forum::testing::config::parse_origin;
    assert_eq!(parse_origin("https://Forum.Example.edu").as_deref(), Ok("https://forum.example.edu"));
    assert_eq!(parse_origin("https://forum.example.edu:443/").as_deref(), Ok("https://forum.example.edu"));
    assert_eq!(parse_origin("http://localhost:5173").as_deref(), Ok("http://localhost:5173"));
    for bad in ["forum.example.edu", "https://forum.example.edu/app", "ftp://x.edu", "*", "", "https://u@x.edu"] {
        let err = parse_origin(bad).expect_err(bad);
        assert!(err.contains("is not an origin like"), "{bad}: {err}");
    }
}

#[test]
fn the_setting_is_a_comma_separated_list_and_a_bad_entry_names_it() {
    use clap::Parser;
    use course_forum::testing::cli::Cli;
    let cli = Cli::try_parse_from([
        "course-forum",
        "--cors-allowed-origins",
        "https://Forum.Example.edu, http://localhost:5173",
        "serve",
    ])
    .expect("parses");
    assert_eq!(cli.settings.cors_allowed_origins, ["https://forum.example.edu", "http://localhost:5173"]);
    let err = Cli::try_parse_from(["course-forum", "--cors-allowed-origins", "https://a.edu,a.edu/x", "serve"])
        .expect_err("refused");
    let message = err.to_string();
    assert!(message.contains("cors-allowed-origins") && message.contains("`a.edu/x` is not an origin"), "{message}");
}
