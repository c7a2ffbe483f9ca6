//! Membership is read for every operation on a websocket, not once for the connection: a member
//! removed from a course (here by a direct SQL delete, as an LMS sync job would) gets FORBIDDEN
//! on the next query or mutation over the socket they already had open, and nothing changes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::ws::GqlSocket;
use crate::common::{TestApp, World, gid};

const CREATE_POST: &str = "mutation($c: ID!) { createPost(courseId: $c, title: \"over ws\", body: \"b\") { id } }";
const READ_COURSE: &str = "query($c: ID!) { course(id: $c) { id } }";

/// Runs one operation over the socket; returns its first result message's payload.
async fn operate(socket: &mut GqlSocket, id: &str, query: &str, variables: Value) -> Value {
    socket.subscribe(id, query, variables).await;
    let message = socket.next_message(Duration::from_secs(10)).await.expect("a result");
    message["payload"].clone()
}

fn error_code(payload: &Value) -> Option<String> {
    let errors = payload.get("errors").unwrap_or(payload);
    errors.get(0)?.get("extensions")?.get("code")?.as_str().map(str::to_owned)
}

async fn removed_member_is_refused_on_the_open_socket(protocol: &str) {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let course = json!({ "c": gid("Course", world.course) });
    let mut socket =
        GqlSocket::connect_with(app.addr, Some(&app.token(world.alice)), protocol).await.expect("connected");
    let first = operate(&mut socket, "1", CREATE_POST, course.clone()).await;
    assert!(first["data"]["createPost"]["id"].is_string(), "{protocol}: a member may post: {first}");
    let _ = socket.next_message(Duration::from_secs(5)).await; // complete
    let posts_before = app.scalar_i64("SELECT count(*) AS v FROM posts", []).await;

    // A direct SQL delete; the instance hears of it through the trigger's notification.
    app.unenroll(world.course, world.alice).await;

    let refused = operate(&mut socket, "2", CREATE_POST, course.clone()).await;
    assert_eq!(error_code(&refused).as_deref(), Some("FORBIDDEN"), "{protocol}: {refused}");
    let _ = socket.next_message(Duration::from_secs(5)).await;
    let read = operate(&mut socket, "3", READ_COURSE, course).await;
    assert_eq!(error_code(&read).as_deref(), Some("FORBIDDEN"), "{protocol}: {read}");
    assert_eq!(
        app.scalar_i64("SELECT count(*) AS v FROM posts", []).await,
        posts_before,
        "{protocol}: nothing written"
    );
}

#[tokio::test]
async fn graphql_transport_ws_reads_membership_for_every_operation() {
    removed_member_is_refused_on_the_open_socket("graphql-transport-ws").await;
}

#[tokio::test]
async fn legacy_graphql_ws_reads_membership_for_every_operation() {
    removed_member_is_refused_on_the_open_socket("graphql-ws").await;
}
