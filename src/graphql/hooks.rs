//! The schema's one extension: what runs around every request, in order. Errors get their
//! codes (`errors`), the document's aliases and the operation's cost are limited (`limits`),
//! and the metrics observe the request (`metrics`).
//!
//! One extension rather than one per concern, because async-graphql wraps the resolution of
//! every field in a future of every extension, hooked or not: with four, a course page of about
//! 180 fields ran 720 more futures, and `bench page` measured 3,574 / 3,640 pages/s against
//! 4,220 / 4,222 with this one (same run, two rounds).

use std::sync::Arc;
use std::time::Instant;

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextExecute, NextParseQuery, NextPrepareRequest, NextRequest,
    NextSubscribe, NextValidation,
};
use async_graphql::parser::types::ExecutableDocument;
use async_graphql::{Request, Response, ServerError, ServerResult, ValidationResult, Variables};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use super::metrics::Observed;
use super::{errors, limits, socket};

pub struct RequestHooks;

impl ExtensionFactory for RequestHooks {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(Hooks::default())
    }
}

/// One per request.
#[derive(Default)]
struct Hooks {
    observed: Arc<Observed>,
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
        self.observed.request(&request);
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
        limits::check_aliases(&document)?;
        self.observed.parsed(&document);
        Ok(document)
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next
            .run(ctx)
            .await
            .and_then(|result| socket::check_subscription_cost(ctx, result))
            .and_then(limits::check_cost);
        self.observed.validated(&result);
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
        socket::execute(ctx, operation_name, next).await
    }
}
