//! The cost model counts what will run: a fragment's fields and aliases once per spread, and a
//! connection's children times its page size. Over the limit, a request is refused before
//! anything runs, with COST_LIMIT_EXCEEDED and the computed cost and the limit.

use serde_json::json;

use crate::common::{TestApp, World, error_code, gid};

#[tokio::test]
async fn a_fragment_costs_once_per_spread() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let course = json!({ "c": gid("Course", world.course) });
    // One spread of a fragment worth 1 + 50 × (1 + 1 + 100 × 2) = 10,101: accepted.
    let fragment = "fragment Deep on Course { posts(first: 50) { nodes { comments(first: 100) { nodes { id } } } } }";
    let once = format!("query($c: ID!) {{ course(id: $c) {{ ...Deep }} }} {fragment}");
    let response = app.gql(Some(&alice), &once, course.clone()).await;
    assert!(response.get("errors").is_none(), "{response}");
    // Spread twice (under two aliases): twice the cost, over the limit.
    let twice =
        format!("query($c: ID!) {{ a: course(id: $c) {{ ...Deep }} b: course(id: $c) {{ ...Deep }} }} {fragment}");
    let response = app.gql(Some(&alice), &twice, course.clone()).await;
    assert_eq!(error_code(&response).as_deref(), Some("COST_LIMIT_EXCEEDED"), "{response}");
    let cost = response["errors"][0]["extensions"]["cost"].as_u64().expect("cost");
    assert!(cost > 20_000 && cost < 25_000, "about twice one spread: {cost}");
    assert!(response["data"].is_null(), "nothing ran: {response}");
}

#[tokio::test]
async fn a_fragments_aliases_count_once_per_spread() {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    let alice = app.token(world.alice);
    let course = json!({ "c": gid("Course", world.course) });
    let aliases = (0..20).map(|i| format!("m{i}: memberCount")).collect::<Vec<_>>().join(" ");
    let fragment = format!("fragment Counts on Course {{ {aliases} }}");
    let once = format!("query($c: ID!) {{ course(id: $c) {{ ...Counts }} }} {fragment}");
    let response = app.gql(Some(&alice), &once, course.clone()).await;
    assert!(response.get("errors").is_none(), "20 aliases: {response}");
    let thrice = format!(
        "query($c: ID!) {{ x: course(id: $c) {{ ...Counts }} y: course(id: $c) {{ ...Counts }} \
         z: course(id: $c) {{ ...Counts }} }} {fragment}"
    );
    let response = app.gql(Some(&alice), &thrice, course).await;
    assert_eq!(error_code(&response).as_deref(), Some("BAD_USER_INPUT"), "{response}");
    assert!(response["errors"][0]["message"].as_str().is_some_and(|m| m.contains("at most 30 aliases")), "{response}");
}
