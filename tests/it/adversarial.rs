//! Adversarial documents, one test each: deep nesting, fragment fan-out, alias and directive
//! bombs, huge pages, introspection abuse, many operations in one document, long strings. Each
//! is either refused with its code (and writes nothing) or runs within a small statement
//! budget that the test asserts. The world: one course with 5 posts, each with 3 comments with
//! 2 replies, and the viewer's memberships in memory.

use serde_json::{Value, json};

use crate::common::{self, TestApp, World, gid};

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

// The linear pre-pass (graphql::document_limits): shapes whose cost is in the expansion of
// their fragments, not in their leaves, refused before async-graphql walks them.

/// `{ ...F0 }` and `levels` fragments each spreading the next twice, ending in `__typename`:
/// about 1 KB at 25 levels, 2^levels selections once expanded.
fn doubling_chain(levels: usize) -> String {
    let mut text = String::from("{ ...F0 }");
    for i in 0..levels {
        text.push_str(&format!(" fragment F{i} on Query {{ ...F{n} ...F{n} }}", n = i + 1));
    }
    text + &format!(" fragment F{levels} on Query {{ __typename }}")
}

/// Answers within `seconds`, or fails the test (6b52d0b spent 13 to 16 s of CPU on 24 levels,
/// and doubled that with each level).
async fn answered_within(seconds: u64, answer: impl std::future::Future<Output = Value>) -> Value {
    tokio::time::timeout(std::time::Duration::from_secs(seconds), answer)
        .await
        .unwrap_or_else(|_| panic!("not answered within {seconds} s"))
}

#[tokio::test]
async fn doubling_fragment_chains_are_refused_in_milliseconds_with_their_figures() {
    let case = world().await;
    let app = &case.app;
    let bob = app.token(case.world.bob);
    // A stranger meets the limit on fragments first (20), a member the one on selections.
    for (levels, token, limit) in [
        (15, None, "selections"),
        (24, None, "fragments"),
        (31, None, "fragments"),
        (24, Some(bob.as_str()), "selections"),
        (31, Some(bob.as_str()), "selections"),
    ] {
        let response = answered_within(5, app.gql(token, &doubling_chain(levels), json!({}))).await;
        let error = &response["errors"][0];
        assert_eq!(error["extensions"]["code"], "DOCUMENT_LIMIT_EXCEEDED", "{levels} levels: {response}");
        assert_eq!(error["extensions"]["limit"], limit, "{response}");
        let found = error["extensions"]["found"].as_u64().expect("found");
        if limit == "selections" {
            assert!(found > 1 << levels, "the expansion is counted in full: {found}");
            let max = if token.is_some() { 5_000 } else { 1_000 };
            assert_eq!(error["extensions"]["max"], max, "{response}");
        }
        assert!(response.get("data").is_none() || response["data"].is_null(), "nothing ran: {response}");
    }
    // The server still answers at once afterwards: nothing was left running.
    let health = answered_within(2, async {
        app.http.get(app.url("/healthz")).send().await.expect("healthz").text().await.map(Value::from).expect("text")
    })
    .await;
    assert_eq!(health, "ok");
}

#[tokio::test]
async fn a_fragment_cycle_and_an_unused_bomb_are_refused_before_validation() {
    let case = world().await;
    let app = &case.app;
    let bob = app.token(case.world.bob);
    // Two fragments spreading each other twice: every walk that follows spreads loops, or
    // (async-graphql's depth check) doubles 32 times before stopping.
    let cycle = "{ ...A } fragment A on Query { ...B ...B } fragment B on Query { ...A ...A __typename }";
    let response = answered_within(5, app.gql(Some(&bob), cycle, json!({}))).await;
    assert_eq!(response["errors"][0]["extensions"]["code"], "BAD_USER_INPUT", "{response}");
    assert!(response["errors"][0]["message"].as_str().unwrap_or_default().contains("spreads itself"), "{response}");
}

#[tokio::test]
async fn strangers_get_the_smaller_document_budget_and_members_the_larger() {
    let case = world().await;
    let app = &case.app;
    let bob = app.token(case.world.bob);
    // 2^10 spreads: within a member's budget, past a stranger's.
    let chain = doubling_chain(10);
    let member = app.gql(Some(&bob), &chain, json!({})).await;
    assert_eq!(member["data"]["__typename"], "Query", "{member}");
    let stranger = app.gql(None, &chain, json!({})).await;
    assert_eq!(stranger["errors"][0]["extensions"]["code"], "DOCUMENT_LIMIT_EXCEEDED", "{stranger}");
    assert_eq!(stranger["errors"][0]["extensions"]["max"], 1_000, "{stranger}");
    // 60 KB of comment, anonymously: refused on its size before it is parsed.
    let comment = format!("# {}\n{{ __typename }}", "x".repeat(60 * 1024));
    let stranger = app.gql(None, &comment, json!({})).await;
    assert_eq!(stranger["errors"][0]["extensions"]["code"], "DOCUMENT_LIMIT_EXCEEDED", "{stranger}");
    assert_eq!(stranger["errors"][0]["extensions"]["limit"], "bytes", "{stranger}");
    // Many tokens in few bytes: counted before parsing too.
    let tokens = format!("{{ {} }}", repeat(2_500, |_| "a".to_owned()));
    let stranger = app.gql(None, &tokens, json!({})).await;
    assert_eq!(stranger["errors"][0]["extensions"]["limit"], "tokens", "{stranger}");
    let member = app.gql(Some(&bob), &tokens, json!({})).await;
    assert_eq!(
        member["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "a member's budget takes it to validation, which names the unknown field: {member}"
    );
}

/// graphql-js's `getIntrospectionQuery()` (descriptions, `specifiedByURL`, deprecations), as
/// GraphiQL sends it before anyone signs in.
const GRAPHIQL_INTROSPECTION: &str = "query IntrospectionQuery { __schema { queryType { name } mutationType { name } \
    subscriptionType { name } types { ...FullType } directives { name description locations args { ...InputValue } } } } \
    fragment FullType on __Type { kind name description specifiedByURL fields(includeDeprecated: true) { name description \
    args { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason } inputFields { ...InputValue } \
    interfaces { ...TypeRef } enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason } \
    possibleTypes { ...TypeRef } } fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue } \
    fragment TypeRef on __Type { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name \
    ofType { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } } } }";

#[tokio::test]
async fn graphiql_s_introspection_fits_a_stranger_s_budget() {
    let app = TestApp::spawn().await;
    let response = app.gql(None, GRAPHIQL_INTROSPECTION, json!({})).await;
    assert!(response.get("errors").is_none(), "{response}");
    assert_eq!(response["data"]["__schema"]["queryType"]["name"], "Query");
}

#[tokio::test]
async fn parse_and_validation_time_and_refusals_are_metrics() {
    // It reads /metrics, which counts for the whole process.
    if crate::common::ran_alone_elsewhere().await {
        return;
    }
    let case = world().await;
    let app = &case.app;
    app.gql(None, "{ __typename }", json!({})).await;
    app.gql(None, &doubling_chain(15), json!({})).await;
    let metrics = app.http.get(app.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    for name in [
        "graphql_parse_duration_seconds_count",
        "graphql_validation_duration_seconds_count",
        "graphql_document_refusals_total{limit=\"selections\"}",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test]
async fn a_doubling_chain_over_the_websocket_is_refused_as_over_http() {
    let case = world().await;
    let app = &case.app;
    let bob = app.token(case.world.bob);
    let mut socket = common::ws::GqlSocket::connect(app.addr, Some(&bob)).await.expect("connected");
    socket.subscribe("chain", &doubling_chain(31), json!({})).await;
    let message = socket.next_message(std::time::Duration::from_secs(5)).await.expect("answered within 5 s");
    // async-graphql answers a request error of a subscribe as a `next` holding only errors.
    assert_eq!(message["type"], "next", "{message}");
    assert!(message["payload"]["data"].is_null(), "nothing ran: {message}");
    assert_eq!(message["payload"]["errors"][0]["extensions"]["code"], "DOCUMENT_LIMIT_EXCEEDED", "{message}");
    assert_eq!(message["payload"]["errors"][0]["extensions"]["limit"], "selections", "{message}");
    // The socket still serves: the refusal cost nothing lasting.
    socket.subscribe("ok", "{ __typename }", json!({})).await;
    loop {
        let message = socket.next_message(std::time::Duration::from_secs(5)).await.expect("answered");
        if message["id"] == "ok" && message["type"] == "next" {
            assert_eq!(message["payload"]["data"]["__typename"], "Query", "{message}");
            break;
        }
    }
}
