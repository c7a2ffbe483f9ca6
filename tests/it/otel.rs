//! One buffered like, traced end to end over OpenTelemetry: a real OTLP/HTTP receiver runs in
//! the test (decoding with the protocol's own `opentelemetry-proto` types), a `serve` process
//! and a separate `worker` process export to it, and the test asserts the shape of the trace:
//! the mutation's request, the Lua toggle that appended the stream entry, the worker's batch
//! linked to that like, the batch's SQL and its publication, and each instance's relay and
//! delivery to the subscriber, in the publisher's trace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::routing::post;
use course_forum::testing::config::LikeMode;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;
use serde_json::json;

use crate::common::procs::ServeProcess;
use crate::common::ws::GqlSocket;
use crate::common::{self, TestApp, World, gid};

/// One exported span, flattened: the process that sent it and what it says.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    name: String,
    attributes: HashMap<String, String>,
    links: Vec<(Vec<u8>, Vec<u8>)>,
}

/// An OTLP/HTTP receiver on a loopback port: POST /v1/traces with a protobuf body.
struct Collector {
    addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
    /// Request content types seen, to prove the protocol is OTLP's protobuf.
    content_types: Arc<Mutex<Vec<String>>>,
}

fn text_of(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

impl Collector {
    async fn start() -> Collector {
        let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
        let content_types: Arc<Mutex<Vec<String>>> = Arc::default();
        let (sink, types) = (spans.clone(), content_types.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |headers: axum::http::HeaderMap, body: Bytes| {
                let (sink, types) = (sink.clone(), types.clone());
                async move {
                    let content_type =
                        headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                    types.lock().unwrap().push(content_type);
                    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
                    let mut sink = sink.lock().unwrap();
                    for resource_spans in request.resource_spans {
                        let service = resource_spans
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|kv| kv.key == "service.name")
                            .map(|kv| text_of(&kv.value))
                            .unwrap_or_default();
                        for scope in resource_spans.scope_spans {
                            for span in scope.spans {
                                sink.push(Received {
                                    service: service.clone(),
                                    trace_id: span.trace_id,
                                    span_id: span.span_id,
                                    parent_span_id: span.parent_span_id,
                                    name: span.name,
                                    attributes: span
                                        .attributes
                                        .iter()
                                        .map(|kv| (kv.key.clone(), text_of(&kv.value)))
                                        .collect(),
                                    links: span.links.into_iter().map(|l| (l.trace_id, l.span_id)).collect(),
                                });
                            }
                        }
                    }
                    // An empty ExportTraceServiceResponse.
                    ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the collector");
        let addr = listener.local_addr().expect("collector address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector { addr, spans, content_types }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }
}

/// What each process needs to export to the collector quickly.
fn export_env(collector: &Collector, service: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", collector.addr)),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        ("OTEL_SERVICE_NAME", service.into()),
        ("OTEL_TRACES_SAMPLER", "always_on".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
    ]
}

const LIKE_COUNTS: &str = "subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }";

/// A post, a `serve` process (and for buffered likes a `worker` process) exporting to a
/// collector, a subscriber watching the post on the API, and alice's like: every span the
/// processes exported once the delivery's span arrived, and the post.
async fn traced_like(app: &TestApp, mode: &str) -> (Vec<Received>, i64) {
    let world = World::create(app).await;
    let post = app.create_post(&app.token(world.alice), world.course, "traced").await;
    let collector = Collector::start().await;

    // The API without a worker, and the worker as its own process: the like crosses processes.
    let mut serve_env = export_env(&collector, "forum-api");
    serve_env.push(("WORKER_IN_SERVE", "false".into()));
    serve_env.push(("LIKE_MODE", mode.into()));
    let serve_env: Vec<(&str, &str)> = serve_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut serve = ServeProcess::spawn(app, &common::redis_url(), &serve_env);
    serve.wait_healthy(Duration::from_secs(20)).await;
    let worker = (mode == "buffered").then(|| {
        let worker_env = export_env(&collector, "forum-worker");
        let worker_env: Vec<(&str, &str)> = worker_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ServeProcess::spawn_worker(app, &common::redis_url(), &worker_env)
    });
    let mut worker = worker;
    if let Some(worker) = worker.as_mut() {
        worker.wait_healthy(Duration::from_secs(20)).await;
    }

    let mut socket = GqlSocket::connect(serve.addr, Some(&app.token(world.bob))).await.expect("websocket");
    socket.subscribe("likes", LIKE_COUNTS, json!({ "ids": [gid("Post", post)] })).await;
    // The subscription starts asynchronously; a like before it watches would not be seen.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let response: serde_json::Value = reqwest::Client::new()
        .post(serve.url("/graphql"))
        .bearer_auth(app.token(world.alice))
        .json(&json!({
            "query": "mutation Like($id: ID!) { likePost(postId: $id) { likeCount } }",
            "variables": { "id": gid("Post", post) },
        }))
        .send()
        .await
        .expect("likePost")
        .json()
        .await
        .expect("json");
    assert!(response["errors"].is_null(), "{response}");
    let update = socket.next_data(Duration::from_secs(15)).await.expect("the live count");
    assert_eq!(update["likeCounts"]["likeCount"], 1, "{update}");

    // Every hop's spans reach the collector within the batch delay.
    let deadline = Instant::now() + Duration::from_secs(20);
    let spans = loop {
        let spans = collector.spans();
        let mut awaited = vec!["live.deliver", "live.relay", "Mutation.likePost", "POST /graphql"];
        if worker.is_some() {
            awaited.extend(["like_batch", "live.publish"]);
        }
        if awaited.iter().all(|name| spans.iter().any(|s| s.name == *name)) {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "no complete trace within 20 s; got {:?}\nserve log:\n{}\nworker log:\n{}",
            spans.iter().map(|s| (&s.service, &s.name)).collect::<Vec<_>>(),
            serve.logs(),
            worker.as_ref().map(ServeProcess::logs).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        collector.content_types.lock().unwrap().iter().all(|t| t == "application/x-protobuf"),
        "exports are OTLP protobuf"
    );
    drop(socket);
    (spans, post)
}

/// A span's ancestors' names, nearest first.
fn ancestors(spans: &[Received], span: &Received) -> Vec<String> {
    let by_id: HashMap<&[u8], &Received> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let mut chain = Vec::new();
    let mut current = by_id.get(span.parent_span_id.as_slice()).copied();
    while let Some(parent) = current {
        chain.push(parent.name.clone());
        current = by_id.get(parent.parent_span_id.as_slice()).copied();
    }
    chain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_buffered_like_is_one_trace_from_its_mutation_to_the_subscriber() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Buffered).await;
    let (spans, post) = traced_like(&app, "buffered").await;
    let ancestors = |span: &Received| ancestors(&spans, span);
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();

    // 1. The mutation: request → operation → root field → like → the Lua toggle's EVALSHA.
    // (`otel.name` names a span: the route, the operation, the field, the command.)
    let like_field = named("Mutation.likePost").into_iter().next().unwrap_or_else(|| {
        panic!("a span for the likePost field among {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>())
    });
    assert_eq!(like_field.service, "forum-api");
    let field_chain = ancestors(like_field);
    assert_eq!(field_chain, ["graphql Like", "graphql", "POST /graphql"], "the field's ancestors");
    let mutation_trace = like_field.trace_id.clone();
    let like_span = named("likes.set")
        .into_iter()
        .find(|s| s.trace_id == mutation_trace)
        .expect("the like service's span in the mutation's trace");
    assert!(ancestors(like_span).contains(&"Mutation.likePost".to_owned()));
    let toggle = named("redis EVALSHA")
        .into_iter()
        .find(|s| s.trace_id == mutation_trace)
        .expect("the like toggle's EVALSHA is a span of the mutation's trace");
    assert_eq!(toggle.attributes.get("db.system").map(String::as_str), Some("redis"));
    assert!(ancestors(toggle).contains(&"likes.set".to_owned()));

    // 2. The worker's batch, in the worker process, links to the like it applied: the
    // context the stream entry carried.
    let batch = named("like_batch")
        .into_iter()
        .find(|s| s.links.iter().any(|(trace, _)| *trace == mutation_trace))
        .expect("a batch linked to the mutation's trace");
    assert_eq!(batch.service, "forum-worker");
    let (_, linked_span) = batch.links.iter().find(|(trace, _)| *trace == mutation_trace).expect("the link");
    assert_eq!(*linked_span, like_span.span_id, "the link points at the like's span");
    let batch_trace = batch.trace_id.clone();
    let sql: Vec<_> = spans
        .iter()
        .filter(|s| {
            s.trace_id == batch_trace && s.attributes.get("db.system").map(String::as_str) == Some("postgresql")
        })
        .collect();
    assert!(!sql.is_empty(), "the batch's SQL statements are spans of its trace");
    assert!(
        sql.iter().all(|s| s.attributes.get("db.statement").is_none_or(|q| !q.contains("'"))),
        "statements are exported without literal values"
    );

    // 3. Publication and delivery, in the batch's trace: the worker publishes, the API
    // instance relays, and the subscriber's delivery is a child of the relay.
    let publish =
        named("live.publish").into_iter().find(|s| s.trace_id == batch_trace).expect("the batch's publication");
    assert_eq!(publish.service, "forum-worker");
    assert!(ancestors(publish).contains(&"like_batch".to_owned()));
    let relay = named("live.relay").into_iter().find(|s| s.trace_id == batch_trace).expect("the relay's span");
    assert_eq!(relay.service, "forum-api");
    assert_eq!(relay.parent_span_id, publish.span_id, "the relay continues the publisher's span");
    let deliver = named("live.deliver").into_iter().find(|s| s.trace_id == batch_trace).expect("the delivery");
    assert_eq!(deliver.parent_span_id, relay.span_id);
    assert_eq!(deliver.attributes.get("target").map(String::as_str), Some(format!("p:{post}").as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_like_is_one_trace_from_its_mutation_to_the_subscriber() {
    let app = TestApp::spawn_with(|s| s.like_mode = LikeMode::Sync).await;
    let (spans, _) = traced_like(&app, "sync").await;
    let like_field = spans.iter().find(|s| s.name == "Mutation.likePost").expect("the likePost field");
    let deliver = spans
        .iter()
        .find(|s| s.name == "live.deliver" && s.trace_id == like_field.trace_id)
        .expect("the delivery is in the mutation's own trace: the request commits and publishes");
    let chain = ancestors(&spans, deliver);
    for hop in ["live.relay", "live.publish", "Mutation.likePost", "POST /graphql"] {
        assert!(chain.contains(&hop.to_owned()), "{hop} in {chain:?}");
    }
    assert!(
        spans.iter().any(|s| s.trace_id == like_field.trace_id
            && s.attributes.get("db.system").map(String::as_str) == Some("postgresql")),
        "the like's statement is a span of the trace"
    );
}

#[tokio::test]
async fn an_exporter_this_build_cannot_run_is_refused_at_start_with_the_setting_named() {
    let app = TestApp::spawn().await;
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
    let mut serve = ServeProcess::spawn(&app, &common::redis_url(), &env);
    let status = serve.wait_exit(Duration::from_secs(20)).await.expect("serve exits");
    assert!(!status.success());
    let logs = serve.logs();
    assert!(logs.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"), "{logs}");
}
