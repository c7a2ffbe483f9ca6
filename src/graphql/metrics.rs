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
//! `hooks::RequestHooks` reports to `Observed` after the errors got their codes.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, OperationType, Selection, SelectionSet};
use async_graphql::{Request, Response, ServerError, ValidationResult};

use crate::telemetry::names;

/// The label of requests refused before GraphQL read them.
pub(crate) const UNPARSED: &str = "unparsed";
const INVALID: &str = "invalid";
const MULTIPLE: &str = "multiple";

/// What a request's pipeline learned about its operation on the way through, for its metrics
/// (one per request, created by `hooks::RequestHooks`; shared so that a subscription's stream
/// can keep it).
#[derive(Default)]
pub(crate) struct Observed {
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

    /// The request as it arrives: its operation name selects the operation later.
    pub(crate) fn request(&self, request: &Request) {
        *lock(&self.operation_name) = request.operation_name.clone();
    }

    /// The document parsed: the selected operation's root fields.
    pub(crate) fn parsed(&self, document: &ExecutableDocument) {
        let operation_name = lock(&self.operation_name).clone();
        *lock(&self.parsed) = selected_root_fields(document, operation_name.as_deref());
    }

    /// Validation decided: the label is the root field, or `invalid`.
    pub(crate) fn validated(&self, result: &Result<ValidationResult, Vec<ServerError>>) {
        let parsed = lock(&self.parsed).clone();
        let label = match (result, &parsed) {
            (Ok(_), Some((_, label))) => label.clone(),
            _ => INVALID.to_owned(),
        };
        *lock(&self.label) = Some(label);
        if matches!(parsed, Some((OperationType::Subscription, _))) {
            self.count_once();
        }
    }

    /// A query or mutation answered (its errors already coded).
    pub(crate) fn answered(&self, started: Instant, response: &Response) {
        self.counted.store(true, Ordering::Relaxed);
        record(&self.label(), Some(started.elapsed()), &response.errors);
    }

    /// One response of a subscription's stream (its errors already coded). Parsing and
    /// validation run when the stream is first polled; a subscription refused before
    /// validation is counted at its (error) response.
    pub(crate) fn streamed(&self, response: &Response) {
        self.count_once();
        record_errors(&self.label(), &response.errors);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records one answered request: its count, its errors by code, and (for queries and
/// mutations) its duration.
pub(crate) fn record(operation: &str, elapsed: Option<Duration>, errors: &[ServerError]) {
    metrics::counter!(names::GRAPHQL_REQUESTS, "operation" => operation.to_owned()).increment(1);
    record_errors(operation, errors);
    if let Some(elapsed) = elapsed {
        metrics::histogram!(names::GRAPHQL_DURATION, "operation" => operation.to_owned()).record(elapsed.as_secs_f64());
    }
}

/// Counts `errors` by code under `operation` (its label: the root field's name).
pub(crate) fn record_errors(operation: &str, errors: &[ServerError]) {
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
