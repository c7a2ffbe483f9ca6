//! A websocket never outlives its token: when the token's `exp` passes, the server closes the
//! socket with 4403 (as for a bad token), over both graphql-transport-ws and the legacy
//! graphql-ws, with a subscription open on it.

use std::time::{Duration, Instant};

use course_forum::testing::auth::TokenKeys;
use serde_json::json;

use crate::common::ws::GqlSocket;
use crate::common::{JWT_SECRET, TestApp, World, gid};

async fn closes_at_expiry(protocol: &str) {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let short_lived =
        TokenKeys::new(JWT_SECRET).expect("keys").mint(world.alice, Duration::from_secs(2)).expect("mint");
    let minted = Instant::now();
    let mut socket =
        GqlSocket::connect_with(app.addr, Some(&short_lived), protocol).await.expect("accepted while valid");
    socket
        .subscribe(
            "activity",
            "subscription($c: ID!) { courseActivity(courseId: $c) { kind } }",
            json!({ "c": gid("Course", world.course) }),
        )
        .await;
    assert_eq!(socket.close_frame(Duration::from_millis(300)).await, None, "{protocol}: open while the token is valid");
    let (code, reason) =
        socket.close_frame(Duration::from_secs(5)).await.expect("closed within 5 s").expect("with a close frame");
    assert_eq!(code, 4403, "{protocol}: {reason}");
    assert!(reason.contains("expired"), "{protocol}: {reason}");
    // `exp` has a one-second grain: the close comes between 1 and 2 s after minting, plus
    // scheduling.
    let lived = minted.elapsed();
    assert!(lived >= Duration::from_millis(900) && lived < Duration::from_secs(4), "{protocol}: {lived:?}");
}

#[tokio::test]
async fn graphql_transport_ws_closes_when_the_token_expires() {
    closes_at_expiry("graphql-transport-ws").await;
}

#[tokio::test]
async fn legacy_graphql_ws_closes_when_the_token_expires() {
    closes_at_expiry("graphql-ws").await;
}

#[tokio::test]
async fn a_long_lived_token_keeps_its_socket() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let mut socket = GqlSocket::connect(app.addr, Some(&app.token(world.alice))).await.expect("accepted");
    assert_eq!(socket.close_frame(Duration::from_secs(3)).await, None);
}
