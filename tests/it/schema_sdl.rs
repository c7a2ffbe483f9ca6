//! `schema.graphql` is the SDL of the running schema: this fails when they drift apart.

#[test]
fn schema_graphql_matches_the_running_schema() {
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schema.graphql"))
        .expect("schema.graphql at the top of the repo");
    let running = course_forum::testing::graphql::sdl();
    assert!(committed == running, "schema.graphql is stale: run `cargo run -- export-schema > schema.graphql`");
}
