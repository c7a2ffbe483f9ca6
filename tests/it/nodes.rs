//! `nodes(ids:)`: several objects by global id in one request, each through its type's access
//! check, each failing on its own: one forbidden, deleted or malformed id is null with its own
//! error at its index, and its siblings are still served.

use serde_json::{Value, json};

use crate::common::{TestApp, World, error_code, gid};

const NODES: &str = "query($ids: [ID!]!) { nodes(ids: $ids) { __typename id \
    ... on Post { title } ... on User { handle } } }";

/// The error at `["nodes", index]`, if any.
fn error_at(response: &Value, index: usize) -> Option<&Value> {
    response["errors"].as_array()?.iter().find(|e| e["path"] == json!(["nodes", index]))
}

#[tokio::test]
async fn each_id_succeeds_or_fails_on_its_own() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let mine = app.create_post(&alice, world.course, "visible").await;
    let gone = app.create_post(&alice, world.course, "deleted").await;
    app.gql_ok(
        Some(&alice),
        "mutation($id: ID!) { deletePost(postId: $id) { deletedId } }",
        json!({ "id": gid("Post", gone) }),
    )
    .await;
    let elsewhere = app.create_post(&app.token(world.outsider), world.other_course, "not alice's course").await;

    let ids = json!([
        gid("Post", mine),
        gid("Post", elsewhere),
        "not-a-global-id",
        gid("Post", gone),
        gid("User", world.bob),
        gid("Post", mine),
    ]);
    let response = app.gql(Some(&alice), NODES, json!({ "ids": ids })).await;
    let nodes = response["data"]["nodes"].as_array().unwrap_or_else(|| panic!("a list: {response}"));
    assert_eq!(nodes.len(), 6, "{response}");
    assert_eq!(nodes[0]["title"], "visible");
    assert_eq!(nodes[4]["handle"], "bob");
    assert_eq!(nodes[5]["id"], nodes[0]["id"], "repeats are served");
    for (index, code) in [(1, "FORBIDDEN"), (2, "BAD_USER_INPUT"), (3, "NOT_FOUND")] {
        assert!(nodes[index].is_null(), "item {index}: {response}");
        let error = error_at(&response, index).unwrap_or_else(|| panic!("no error at item {index}: {response}"));
        assert_eq!(error["extensions"]["code"], code, "item {index}: {response}");
    }
    assert_eq!(response["errors"].as_array().map(Vec::len), Some(3), "one error per failing id: {response}");
}

#[tokio::test]
async fn the_list_is_bounded_and_needs_a_signed_in_user() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let user = gid("User", world.bob);

    let too_many: Vec<String> = (0..101).map(|_| user.clone()).collect();
    let response = app.gql(Some(&alice), NODES, json!({ "ids": too_many })).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    let response = app.gql(Some(&alice), NODES, json!({ "ids": [] })).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");

    let hundred: Vec<String> = (0..100).map(|_| user.clone()).collect();
    let data = app.gql_ok(Some(&alice), NODES, json!({ "ids": hundred })).await;
    assert_eq!(data["nodes"].as_array().map(Vec::len), Some(100));

    let response = app.gql(None, NODES, json!({ "ids": [user] })).await;
    assert_eq!(error_code(&response).as_deref(), Some("UNAUTHENTICATED"), "{response}");
}
