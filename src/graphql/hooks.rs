//! The schema's one extension: what runs around every request, in order, over HTTP and over
//! the websocket alike:
//! 1. before anything is parsed: the text's size and tokens are limited (`document_limits`),
//!    and a trusted-documents server refuses a text not in its manifest (`trusted`);
//! 2. the document is taken from the parsed documents kept (`persisted::ParsedDocuments`) or
//!    parsed here (timed: `graphql_parse_duration_seconds`), then measured by the linear
//!    pre-pass (`document_limits`) before async-graphql's own checks and validation, which
//!    walk fragments without memoizing;
//! 3. validation (timed: `graphql_validation_duration_seconds`) and the cost limit
//!    (`limits`); a document that validated for a signed-in caller is kept parsed;
//! 4. errors get their codes (`errors`), and the metrics observe the request (`metrics`).
//!
//! One extension rather than one per concern, because async-graphql wraps the resolution of
//! every field in a future of every extension, hooked or not: with four, a course page of about
//! 180 fields ran 720 more futures, and `bench page` measured 3,574 / 3,640 pages/s against
//! 4,220 / 4,222 with this one (same run, two rounds).

use std::any::TypeId;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextExecute, NextParseQuery, NextPrepareRequest, NextRequest,
    NextResolve, NextSubscribe, NextValidation, ResolveInfo,
};
use async_graphql::parser::types::ExecutableDocument;
use async_graphql::{Request, Response, ServerError, ServerResult, ValidationResult, Value, Variables};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use super::document_limits::{self, DocumentLimits};
use super::metrics::Observed;
use super::shared_live::SharedShapes;
use super::{errors, limits, socket};
use crate::auth::Viewer;
use crate::documents::{sha256_hex, trusted};
use crate::state::AppState;
use crate::telemetry::{names, otel};
use tracing::Instrument;

pub(crate) struct RequestHooks;

impl ExtensionFactory for RequestHooks {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(Hooks::default())
    }
}

/// One per request.
#[derive(Default)]
struct Hooks {
    observed: Arc<Observed>,
    /// A document this request parsed for a signed-in caller, kept once it validates: its
    /// hash, the parsed form and the length of its text.
    /// Boxed: a subscription keeps its request's hooks for its life, and this is empty after
    /// validation.
    to_keep: Mutex<Option<Box<(String, ExecutableDocument, usize)>>>,
}

impl Hooks {
    /// Steps 1 and 2 of the module doc: refuses what must not be parsed or validated, and
    /// attaches the parsed document to the request.
    fn screen(
        &self,
        app: Option<&AppState>,
        shapes: Option<&SharedShapes>,
        request: &mut Request,
        signed_in: bool,
    ) -> ServerResult<()> {
        let limits = DocumentLimits::for_caller(signed_in);
        document_limits::check_text(&request.query, &limits, signed_in)?;
        // One hash of the text serves the manifest and the parsed documents.
        let hash = app.map(|_| sha256_hex(&request.query));
        if let (Some(trusted), Some(hash)) = (app.and_then(|app| app.persisted_queries.trusted()), &hash)
            && !trusted.allows_hash(hash)
        {
            return Err(trusted::refusal());
        }
        let kept = app.zip(hash.as_deref()).and_then(|(app, hash)| app.parsed_documents.get(hash));
        let parsed_here = kept.is_none();
        let document = match kept {
            Some(kept) => kept.document.clone(),
            None => {
                let started = Instant::now();
                let parsed = async_graphql::parser::parse_query(&request.query);
                metrics::histogram!(names::GRAPHQL_PARSE_DURATION).record(started.elapsed().as_secs_f64());
                if let Some(app) = app {
                    app.parsed_documents.parsed();
                }
                parsed.map_err(ServerError::from)?
            }
        };
        // A kept document was kept for a signed-in caller: it is measured against this one's budget.
        document_limits::check_document(&document, &limits, signed_in)?;
        if let (true, true, Some(hash)) = (parsed_here, signed_in, hash) {
            *self.to_keep.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Box::new((hash, document.clone(), request.query.len())));
        }
        socket::mark_subscription(request, &document, shapes);
        request.set_parsed_query(document);
        Ok(())
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for Hooks {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let started = Instant::now();
        let mut response = next.run(ctx).await;
        errors::assign_codes(&mut response);
        self.observed.answered(started, &response);
        response
    }

    fn subscribe<'s>(
        &self,
        ctx: &ExtensionContext<'_>,
        stream: BoxStream<'s, Response>,
        next: NextSubscribe<'_>,
    ) -> BoxStream<'s, Response> {
        let observed = self.observed.clone();
        next.run(ctx, stream)
            .map(move |mut response| {
                errors::assign_codes(&mut response);
                observed.streamed(&response);
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
        let mut request = request;
        self.observed.request(&request);
        // The request's own data is not attached yet: an HTTP caller's `Viewer` is found in it,
        // a websocket's in the connection's data.
        let signed_in = request.data.contains_key(&TypeId::of::<Viewer>()) || ctx.data_opt::<Viewer>().is_some();
        self.screen(ctx.data_opt::<AppState>(), ctx.data_opt::<SharedShapes>(), &mut request, signed_in)?;
        next.run(ctx, request).await
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        // The document was measured by `screen` (the aliases included) before async-graphql's
        // own checks that run inside `next`.
        let document = next.run(ctx, query, variables).await?;
        self.observed.parsed(&document);
        Ok(document)
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let started = Instant::now();
        let result = next
            .run(ctx)
            .await
            .and_then(|result| socket::check_subscription_cost(ctx, result))
            .and_then(limits::check_cost);
        metrics::histogram!(names::GRAPHQL_VALIDATION_DURATION).record(started.elapsed().as_secs_f64());
        self.observed.validated(&result);
        let to_keep = self.to_keep.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let (Ok(_), Some(kept), Some(app)) = (&result, to_keep, ctx.data_opt::<AppState>()) {
            let (hash, document, text_bytes) = *kept;
            app.parsed_documents.keep(hash, document, text_bytes);
        }
        result
    }

    /// On a websocket, each query, mutation and subscription event runs under its own
    /// statement budget and deadline (`socket`); over HTTP the transport does it.
    async fn execute(
        &self,
        ctx: &ExtensionContext<'_>,
        operation_name: Option<&str>,
        next: NextExecute<'_>,
    ) -> Response {
        if !otel::enabled() {
            return socket::execute(ctx, operation_name, next).await;
        }
        let span = tracing::info_span!(
            "graphql.operation",
            // The client names its operation: cut, as every attribute copied from a request.
            otel.name = %format_args!("graphql {}", otel::bounded(operation_name.unwrap_or("anonymous"), 128)),
            graphql.operation.name = otel::bounded(operation_name.unwrap_or(""), 128),
        );
        socket::execute(ctx, operation_name, next).instrument(span).await
    }

    /// With traces on, each root field (a query's entry point, a mutation, a subscription) is
    /// a span: they are where a request's statements and Redis commands happen. Inner fields
    /// are read from what those loaded, and a span each would cost more than they do.
    async fn resolve(
        &self,
        ctx: &ExtensionContext<'_>,
        info: ResolveInfo<'_>,
        next: NextResolve<'_>,
    ) -> ServerResult<Option<Value>> {
        if !otel::enabled() || !matches!(info.parent_type, "Query" | "Mutation" | "Subscription") {
            return next.run(ctx, info).await;
        }
        let span = tracing::info_span!(
            "graphql.resolve",
            otel.name = %format_args!("{}.{}", info.parent_type, info.name),
            graphql.field.path = %info.path_node,
        );
        next.run(ctx, info).instrument(span).await
    }
}
