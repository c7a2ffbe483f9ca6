//! Adversarial documents, one test each: deep nesting, fragment fan-out, alias and directive
//! bombs, huge pages, introspection abuse, many operations in one document, long strings. Each
//! is either refused with its code (and writes nothing) or runs within a small statement
//! budget that the test asserts. The world: one course with 5 posts, each with 3 comments with
//! 2 replies, and the viewer's memberships in memory.

mod common;

use common::{TestApp, World, gid};
use serde_json::{Value, json};

/// What a document must come to.
enum Expect {
    /// Refused with this code, at most one statement in (checks before the refusal), nothing
    /// written.
    Refused(&'static str),
    /// Ran without errors within this many SQL statements.
    RunsWithin(u64),
}

struct Case {
    world: World,
    app: TestApp,
}

async fn world() -> Case {
    let app = TestApp::spawn().await;
    let world = World::create(&app).await;
    common::threads(&app, &world, 5).await;
    Case { world, app }
}

async fn rows(app: &TestApp) -> i64 {
    app.scalar_i64(
        "SELECT (SELECT count(*) FROM posts) + (SELECT count(*) FROM comments) + (SELECT count(*) FROM post_likes) \
         + (SELECT count(*) FROM course_members) AS v",
        [],
    )
    .await
}

async fn check(document: String, variables: Value, expect: Expect) {
    let case = world().await;
    let app = &case.app;
    let bob = app.token(case.world.bob);
    let variables = match variables {
        Value::Null => json!({ "c": gid("Course", case.world.course) }),
        other => other,
    };
    // Warm: the viewer's memberships and the post cache, so the count is the document's own.
    app.gql_ok(
        Some(&bob),
        "query($c: ID!) { course(id: $c) { posts(first: 5) { nodes { id } } } }",
        json!({ "c": variables["c"] }),
    )
    .await;
    let written = rows(app).await;
    let before = app.state.sql_statements.get();
    let response = app.gql(Some(&bob), &document, variables).await;
    let statements = app.state.sql_statements.get() - before;
    match expect {
        Expect::Refused(code) => {
            assert_eq!(response["errors"][0]["extensions"]["code"], code, "{response}");
            assert!(statements <= 1, "a refused document ran {statements} statements");
        }
        Expect::RunsWithin(budget) => {
            assert!(response.get("errors").is_none(), "{response}");
            assert!(statements <= budget, "{statements} statements, budget {budget}");
        }
    }
    assert_eq!(rows(app).await, written, "nothing was written");
}

fn repeat(n: usize, f: impl Fn(usize) -> String) -> String {
    (0..n).map(f).collect::<Vec<_>>().join(" ")
}

macro_rules! adversarial {
    ($($name:ident: $document:expr, $variables:expr => $expect:expr;)+) => {
        $(
            #[tokio::test]
            async fn $name() {
                check($document, $variables, $expect).await;
            }
        )+
    };
}

const POSTS: &str = "course(id: $c) { posts(first: 5) { nodes { id title } } }";

adversarial! {
    // Deep nesting.
    nesting_past_the_depth_limit:
        format!("query($c: ID!) {{ course(id: $c) {{ {} }} }}",
            "posts(first: 1) { nodes { course { ".repeat(9) + "id" + &" } } }".repeat(9)),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    nesting_within_the_depth_limit_cycling_post_and_course:
        format!("query($c: ID!) {{ course(id: $c) {{ {} }} }}",
            "posts(first: 2) { nodes { course { ".repeat(3) + "id" + &" } } }".repeat(3)),
        Value::Null => Expect::RunsWithin(12);
    three_levels_of_full_pages:
        "query($c: ID!) { course(id: $c) { posts(first: 100) { nodes { comments(first: 100) { nodes { \
         replies(first: 100) { nodes { id } } } } } } } }".to_owned(),
        Value::Null => Expect::Refused("COST_LIMIT_EXCEEDED");
    nested_threads_at_a_realistic_size:
        "query($c: ID!) { course(id: $c) { posts(first: 5) { nodes { author { handle } comments(first: 10) { \
         nodes { author { handle } post { title } replies(first: 10) { nodes { comment { id } replyTo { handle } } } } } } } } }".to_owned(),
        Value::Null => Expect::RunsWithin(10);
    // Fragment fan-out.
    fragments_doubling_ten_times:
        format!("query($c: ID!) {{ course(id: $c) {{ ...F0 }} }} {} fragment F10 on Course {{ posts(first: 5) {{ nodes {{ id }} }} }}",
            repeat(10, |i| format!("fragment F{i} on Course {{ ...F{n} a{i}: code ...F{n} }}", n = i + 1))),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    one_fragment_spread_in_many_places:
        format!("query($c: ID!) {{ {} }} fragment Page on Course {{ posts(first: 100) {{ nodes {{ comments(first: 100) {{ nodes {{ id }} }} }} }} }}",
            repeat(8, |i| format!("c{i}: course(id: $c) {{ ...Page }}"))),
        Value::Null => Expect::Refused("COST_LIMIT_EXCEEDED");
    a_fragment_cycle:
        "query($c: ID!) { course(id: $c) { ...A } } fragment A on Course { ...B } fragment B on Course { ...A }".to_owned(),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    a_fragment_spread_once_with_its_own_page:
        format!("query($c: ID!) {{ course(id: $c) {{ ...Page }} }} fragment Page on Course {{ {POSTS_FIELDS} }}"),
        Value::Null => Expect::RunsWithin(2);
    // Aliases.
    thirty_one_aliases_of_a_post_page:
        format!("query($c: ID!) {{ {} }}", repeat(31, |i| format!("a{i}: {POSTS}"))),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    thirty_aliases_of_member_count_under_every_comment:
        format!("query($c: ID!) {{ course(id: $c) {{ posts(first: 5) {{ nodes {{ comments(first: 10) {{ nodes {{ post {{ course {{ {} }} }} }} }} }} }} }} }}",
            repeat(29, |i| format!("m{i}: memberCount"))),
        Value::Null => Expect::RunsWithin(8);
    aliases_hidden_in_a_fragment_spread_twice:
        format!("query($c: ID!) {{ a: course(id: $c) {{ ...M }} b: course(id: $c) {{ ...M }} }} fragment M on Course {{ {} }}",
            repeat(16, |i| format!("m{i}: memberCount"))),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    aliases_of_node_lookups:
        format!("query($c: ID!) {{ {} }}", repeat(25, |i| format!("n{i}: node(id: $c) {{ id }}"))),
        Value::Null => Expect::RunsWithin(2);
    // Directives.
    nine_directives_on_one_field:
        format!("query($c: ID!) {{ course(id: $c) {{ id {} }} }}", repeat(9, |_| "@include(if: true)".to_owned())),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    an_unknown_directive:
        "query($c: ID!) { course(id: $c) { id @explode } }".to_owned(),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    skip_on_every_field_still_costs_nothing_to_run:
        format!("query($c: ID!) {{ course(id: $c) {{ {} }} }}", repeat(20, |i| format!("a{i}: code @skip(if: true)"))),
        Value::Null => Expect::RunsWithin(1);
    // Huge pages.
    a_page_of_a_million:
        "query($c: ID!) { course(id: $c) { posts(first: 1000000) { nodes { id } } } }".to_owned(),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    a_negative_page:
        "query($c: ID!) { course(id: $c) { posts(last: -5) { nodes { id } } } }".to_owned(),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    a_page_size_in_a_variable:
        "query($c: ID!, $n: Int!) { course(id: $c) { posts(first: $n) { nodes { comments(first: $n) { nodes { replies(first: $n) { nodes { id } } } } } } } }".to_owned(),
        json!({ "n": 100, "c": "Q291cnNlOjE" }) => Expect::Refused("COST_LIMIT_EXCEEDED");
    // Introspection.
    introspection_nested_past_the_depth_limit:
        format!("{{ __schema {{ types {{ {}name{} }} }} }}", "fields { type { ofType { ".repeat(5), " } } }".repeat(5)),
        json!({ "c": "Q291cnNlOjE" }) => Expect::Refused("BAD_USER_INPUT");
    a_full_introspection_runs_no_statement:
        "{ __schema { queryType { name } types { name kind fields { name args { name type { name kind ofType { name kind } } } type { name kind ofType { name kind } } } } } }".to_owned(),
        json!({ "c": "Q291cnNlOjE" }) => Expect::RunsWithin(0);
    typename_aliases_past_the_cap:
        format!("{{ {} }}", repeat(40, |i| format!("t{i}: __typename"))),
        json!({ "c": "Q291cnNlOjE" }) => Expect::Refused("BAD_USER_INPUT");
    // Many operations in one document.
    a_hundred_operations_without_a_name_to_run:
        repeat(100, |i| format!("query Q{i} {{ me {{ id }} }}")),
        json!({ "c": "Q291cnNlOjE" }) => Expect::Refused("BAD_USER_INPUT");
    operations_mixing_queries_and_mutations:
        "query A { me { id } } mutation B { createCourse(code: \"X\", title: \"x\") { id } }".to_owned(),
        json!({ "c": "Q291cnNlOjE" }) => Expect::Refused("BAD_USER_INPUT");
    // Long strings.
    a_title_of_sixty_thousand_characters:
        format!("mutation($c: ID!) {{ createPost(courseId: $c, title: \"{}\", body: \"b\") {{ id }} }}", "x".repeat(60_000)),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    a_comment_body_past_its_limit_in_a_variable:
        "mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }".to_owned(),
        json!({ "p": "UG9zdDox", "b": "y".repeat(5_001), "c": "Q291cnNlOjE" }) => Expect::Refused("BAD_USER_INPUT");
    a_field_name_of_ten_thousand_characters:
        format!("query($c: ID!) {{ course(id: $c) {{ {} }} }}", "z".repeat(10_000)),
        Value::Null => Expect::Refused("BAD_USER_INPUT");
    an_id_of_ten_thousand_characters:
        "query($p: ID!) { post(id: $p) { id } }".to_owned(),
        json!({ "p": "A".repeat(10_000), "c": "Q291cnNlOjE" }) => Expect::Refused("BAD_USER_INPUT");
}

const POSTS_FIELDS: &str = "posts(first: 5) { nodes { id title likeCount commentCount } }";
