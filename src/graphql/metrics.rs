//! Request metrics per GraphQL operation: how many, how many errors by code, how long
//! (`graphql_requests_total`, `graphql_errors_total`, `graphql_request_duration_seconds`).
//!
//! The `operation` label must stay low-cardinality, so it never carries what a client typed
//! freely (operation names, aliases). It is one of:
//! - the schema name of the one root field the operation selects (`post`, `likePost`, …),
//!   known only once the document validated, so it is always a field of the schema;
//! - `multiple` when the operation selects several different root fields;
//! - `invalid` when the document did not parse or validate;
//! - `unparsed` when the request was refused before GraphQL read it (a bad token).
//!
//! Registered before `ErrorCodes`, so this extension runs outermost and sees the final codes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextPrepareRequest, NextRequest, NextSubscribe,
    NextValidation,
};
use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, OperationType, Selection, SelectionSet};
use async_graphql::{Request, Response, ServerError, ServerResult, ValidationResult, Variables};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use crate::telemetry::names;

/// The label of requests refused before GraphQL read them.
pub const UNPARSED: &str = "unparsed";
const INVALID: &str = "invalid";
const MULTIPLE: &str = "multiple";

pub struct RequestMetrics;

impl ExtensionFactory for RequestMetrics {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(Observer::default())
    }
}

/// One per request. The state is shared so that a subscription's stream can keep it.
#[derive(Default)]
struct Observer {
    state: Arc<Observed>,
}

/// What a request's pipeline learned about its operation on the way through.
#[derive(Default)]
struct Observed {
    operation_name: Mutex<Option<String>>,
    /// Root fields and type of the selected operation, once parsed (not yet validated).
    parsed: Mutex<Option<(OperationType, String)>>,
    /// The label, once validation decided it.
    label: Mutex<Option<String>>,
    /// Subscriptions are counted once, when validated or at their first response.
    counted: AtomicBool,
}

impl Observed {
    fn label(&self) -> String {
        lock(&self.label).clone().unwrap_or_else(|| INVALID.to_owned())
    }

    fn count_once(&self) {
        if !self.counted.swap(true, Ordering::Relaxed) {
            metrics::counter!(names::GRAPHQL_REQUESTS, "operation" => self.label()).increment(1);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_graphql::async_trait::async_trait]
impl Extension for Observer {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let started = Instant::now();
        let response = next.run(ctx).await;
        self.state.counted.store(true, Ordering::Relaxed);
        record(&self.state.label(), Some(started.elapsed()), &response.errors);
        response
    }

    fn subscribe<'s>(
        &self,
        ctx: &ExtensionContext<'_>,
        stream: BoxStream<'s, Response>,
        next: NextSubscribe<'_>,
    ) -> BoxStream<'s, Response> {
        // Parsing and validation run when the stream is first polled; a subscription refused
        // before validation is counted at its (error) response.
        let state = self.state.clone();
        next.run(ctx, stream)
            .map(move |response| {
                state.count_once();
                record_errors(&state.label(), &response.errors);
                response
            })
            .boxed()
    }

    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        *lock(&self.state.operation_name) = request.operation_name.clone();
        next.run(ctx, request).await
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let document = next.run(ctx, query, variables).await?;
        let operation_name = lock(&self.state.operation_name).clone();
        *lock(&self.state.parsed) = selected_root_fields(&document, operation_name.as_deref());
        Ok(document)
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await;
        let parsed = lock(&self.state.parsed).clone();
        let label = match (&result, &parsed) {
            (Ok(_), Some((_, label))) => label.clone(),
            _ => INVALID.to_owned(),
        };
        *lock(&self.state.label) = Some(label);
        if matches!(parsed, Some((OperationType::Subscription, _))) {
            self.state.count_once();
        }
        result
    }
}

/// Records one answered request: its count, its errors by code, and (for queries and
/// mutations) its duration.
pub fn record(operation: &str, elapsed: Option<Duration>, errors: &[ServerError]) {
    metrics::counter!(names::GRAPHQL_REQUESTS, "operation" => operation.to_owned()).increment(1);
    record_errors(operation, errors);
    if let Some(elapsed) = elapsed {
        metrics::histogram!(names::GRAPHQL_DURATION, "operation" => operation.to_owned()).record(elapsed.as_secs_f64());
    }
}

fn record_errors(operation: &str, errors: &[ServerError]) {
    for error in errors {
        let code = error
            .extensions
            .as_ref()
            .and_then(|ext| ext.get("code"))
            .and_then(|code| match code {
                async_graphql::Value::String(code) => Some(code.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "UNKNOWN".to_owned());
        metrics::counter!(names::GRAPHQL_ERRORS, "operation" => operation.to_owned(), "code" => code).increment(1);
    }
}

/// The type of the operation the request runs and its label: the one root field's name,
/// or `multiple`. None when the document does not say which operation runs.
fn selected_root_fields(
    document: &ExecutableDocument,
    operation_name: Option<&str>,
) -> Option<(OperationType, String)> {
    let operation = match (&document.operations, operation_name) {
        (DocumentOperations::Single(operation), _) => &operation.node,
        (DocumentOperations::Multiple(operations), Some(name)) => &operations.get(name)?.node,
        (DocumentOperations::Multiple(operations), None) if operations.len() == 1 => &operations.values().next()?.node,
        (DocumentOperations::Multiple(_), None) => return None,
    };
    let mut fields = BTreeSet::new();
    collect_fields(document, &operation.selection_set.node, &mut fields, 0);
    if fields.len() > 1 {
        fields.remove("__typename");
    }
    let label = match fields.len() {
        0 => INVALID.to_owned(),
        1 => fields.into_iter().next().unwrap_or_default(),
        _ => MULTIPLE.to_owned(),
    };
    Some((operation.ty, label))
}

/// Root fields, through fragments; the depth bound guards against fragment cycles, which
/// validation refuses later anyway.
fn collect_fields(document: &ExecutableDocument, set: &SelectionSet, out: &mut BTreeSet<String>, depth: usize) {
    if depth > 8 {
        return;
    }
    for selection in &set.items {
        match &selection.node {
            Selection::Field(field) => {
                out.insert(field.node.name.node.to_string());
            }
            Selection::FragmentSpread(spread) => {
                if let Some(fragment) = document.fragments.get(&spread.node.fragment_name.node) {
                    collect_fields(document, &fragment.node.selection_set.node, out, depth + 1);
                }
            }
            Selection::InlineFragment(inline) => {
                collect_fields(document, &inline.node.selection_set.node, out, depth + 1);
            }
        }
    }
}
