//! What one operation on a websocket may spend: the socket's side of the fences HTTP puts
//! around a request (`http::execute`: REQUEST_STATEMENT_BUDGET, REQUEST_TIMEOUT, and a
//! `BatchGate` for its loaders' batches).
//!
//! A websocket connection runs every operation through the schema itself, with the
//! connection's data, so the fences go up in the schema extension's `execute` hook
//! (`hooks::RequestHooks` calls `execute` here). async-graphql calls that hook once for a query
//! or mutation, and once for every event of a subscription (the resolution of its selection for
//! that event). Each of these executions gets a statement budget, a deadline, and loaders
//! charged to that budget of its own; over either, it is abandoned and answered with
//! STATEMENT_BUDGET_EXCEEDED or TIMEOUT, as over HTTP.
//!
//! A subscription is marked when it starts (`http::ws` reads the operation type of each
//! subscribe, `SubscriptionOperation`). Its selection is costed once, at subscribe time, against
//! SUBSCRIPTION_MAX_COST (`check_subscription_cost`, from the validation hook), and each event
//! runs under SUBSCRIPTION_EVENT_STATEMENT_BUDGET; an event over it is answered with that error
//! and the subscription goes on. So what one event costs is bounded by a small selection times
//! the subscribers, never by what a client chose to nest in it.

use std::sync::Arc;
use std::time::Duration;

use async_graphql::extensions::{ExtensionContext, NextExecute};
use async_graphql::parser::types::{ExecutableDocument, OperationType};
use async_graphql::{Data, ErrorExtensionValues, Request, Response, ServerError, ValidationResult};

use super::batch_gate::BatchGate;
use super::errors::assign_code;
use super::loaders::Loaders;
use super::shared_live::SharedShapes;
use crate::config::Settings;
use crate::db::budget::StatementBudget;
use crate::error::AppError;
use crate::state::AppState;

/// Connection data of an acknowledged websocket: what each of its executions may spend.
#[derive(Clone, Debug)]
pub(crate) struct SocketLimits {
    user_id: i64,
    /// REQUEST_STATEMENT_BUDGET: a query or mutation.
    statement_budget: u64,
    /// SUBSCRIPTION_EVENT_STATEMENT_BUDGET: one event of a subscription.
    event_statement_budget: u64,
    /// REQUEST_TIMEOUT: each of them.
    deadline: Duration,
}

impl SocketLimits {
    pub(crate) fn new(settings: &Settings, user_id: i64) -> Self {
        Self {
            user_id,
            statement_budget: settings.request_statement_budget,
            event_statement_budget: settings.subscription_event_statement_budget,
            deadline: settings.request_timeout,
        }
    }
}

/// Request data of a subscription started on a websocket: its executions are events, and its
/// selection may cost at most `max_cost`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SubscriptionOperation {
    max_cost: usize,
}

/// Request data of an operation read from a websocket, before its document is parsed.
#[derive(Clone, Copy, Debug)]
struct SocketOperation {
    max_cost: usize,
}

/// Notes that `request` came over a websocket whose subscriptions may cost at most
/// `max_cost`. Nothing is parsed here: the schema's extension parses the document once, after
/// its limits on the text (`document_limits`), and then calls `mark_subscription`.
pub(crate) fn from_socket(request: &mut Request, max_cost: usize) {
    request.data.insert(SocketOperation { max_cost });
}

/// Marks a request from a websocket as a subscription when the operation it would run is
/// one: its executions are then events, and its selection is costed against `max_cost`.
pub(crate) fn mark_subscription(request: &mut Request, document: &ExecutableDocument, shapes: Option<&SharedShapes>) {
    let Some(SocketOperation { max_cost }) =
        request.data.get(&std::any::TypeId::of::<SocketOperation>()).and_then(|d| d.downcast_ref()).copied()
    else {
        return;
    };
    let operation = super::shared_live::operation(document, request.operation_name.as_deref());
    if operation.is_some_and(|operation| operation.ty == OperationType::Subscription) {
        request.data.insert(SubscriptionOperation { max_cost });
        super::shared_live::mark_shared(request, document, shapes);
    }
}

/// Refuses a subscription whose selection costs more than SUBSCRIPTION_MAX_COST, before it
/// starts, with COST_LIMIT_EXCEEDED and both numbers (as `limits::check_cost` does for
/// MAX_COST). Anything else passes untouched.
pub(crate) fn check_subscription_cost(
    ctx: &ExtensionContext<'_>,
    result: ValidationResult,
) -> Result<ValidationResult, Vec<ServerError>> {
    let Some(subscription) = ctx.data_opt::<SubscriptionOperation>() else {
        return Ok(result);
    };
    if result.complexity <= subscription.max_cost {
        return Ok(result);
    }
    let mut error = ServerError::new(
        format!(
            "this subscription's selection would cost {} for every event (each field once per place it is \
             resolved, connections times their page size); a subscription may cost at most {}: select \
             fewer fields and no long lists, and query the rest when an event arrives",
            result.complexity, subscription.max_cost
        ),
        None,
    );
    let mut extensions = ErrorExtensionValues::default();
    extensions.set("code", "COST_LIMIT_EXCEEDED");
    extensions.set("cost", result.complexity as u64);
    extensions.set("limit", subscription.max_cost as u64);
    error.extensions = Some(extensions);
    Err(vec![error])
}

/// The `execute` hook: on a websocket, runs one query, mutation or subscription event under a
/// statement budget and deadline of its own, with loaders charged to that budget; anywhere else
/// (HTTP puts up its own fences around the whole request), runs it as it is.
pub(crate) async fn execute(
    ctx: &ExtensionContext<'_>,
    operation_name: Option<&str>,
    next: NextExecute<'_>,
) -> Response {
    let (Some(limits), Some(app)) = (ctx.data_opt::<SocketLimits>(), ctx.data_opt::<AppState>()) else {
        return next.run(ctx, operation_name).await;
    };
    let event = ctx.data_opt::<SubscriptionOperation>().is_some();
    let limit = if event { limits.event_statement_budget } else { limits.statement_budget };
    let budget = StatementBudget::new(limit);
    let gate = BatchGate::new();
    // Fresh loaders per execution (they take precedence over the connection's): their batches
    // are charged to this budget and wait for this execution to park, as a request's do.
    let mut data = Data::default();
    data.insert(Loaders::new(app, Some(limits.user_id), Some(&budget), Some(&gate)));
    let deadline = limits.deadline;
    let what = if event { "a subscription event" } else { "an operation" };
    // Abandoned past its deadline or budget, as over HTTP: a statement still in flight is
    // cancelled by PostgreSQL at STATEMENT_TIMEOUT and a transaction dropped unfinished rolls
    // back.
    let stopped = tokio::select! {
        response = tokio::time::timeout(
            deadline,
            gate.run(budget.scope(next.run_with_data(ctx, operation_name, data))),
        ) => match response {
            Ok(response) => return response,
            Err(_) => {
                tracing::warn!(?deadline, "{what} on a websocket ran past REQUEST_TIMEOUT and was abandoned");
                AppError::Timeout(format!("{what} ran past its deadline of {deadline:?} and was stopped"))
            }
        },
        () = budget.exceeded() => {
            tracing::warn!(limit, "{what} on a websocket ran past its statement budget and was abandoned");
            AppError::StatementBudgetExceeded { limit }
        }
    };
    let mut error = ServerError::new(stopped.to_string(), None);
    error.source = Some(Arc::new(stopped));
    assign_code(&mut error);
    Response::from_errors(vec![error])
}
