//! GraphQL over HTTP: how a request arrives and how its answer is framed, apart from what it
//! means. Requests: `POST /graphql` with a JSON body (`Content-Type: application/json`, else
//! 415), or `GET /graphql?query=…` for queries only (a mutation or subscription by GET is 405,
//! `Allow: POST`). Answers: the media type the client accepts, `application/graphql-response+json`
//! when it names it, else `application/json` (also for no `Accept` header; 406 when it accepts
//! neither). With `application/json` every well-formed request is answered 200; with
//! `application/graphql-response+json` a request error (nothing executed: parse, validation,
//! cost, authentication, or a request abandoned at its deadline or budget) is answered with a
//! 4xx or 5xx status and no `data` entry, and anything that executed with 200.

use async_graphql::Response as GqlResponse;
use async_graphql::parser::types::{DocumentOperations, OperationType};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub(super) const GRAPHQL_RESPONSE_JSON: &str = "application/graphql-response+json";
const JSON: &str = "application/json";

/// The media type of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MediaType {
    GraphqlResponseJson,
    Json,
}

impl MediaType {
    fn content_type(self) -> &'static str {
        match self {
            MediaType::GraphqlResponseJson => "application/graphql-response+json; charset=utf-8",
            MediaType::Json => "application/json; charset=utf-8",
        }
    }
}

/// A request refused before any GraphQL runs: its status and why, answered as text (`plain`;
/// a 405 also says `Allow: POST`, the only method refusal here being a GET). Returned as an
/// `Err` that stays small; it becomes a `Response` when sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Refusal {
    status: StatusCode,
    why: &'static str,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = plain(self.status, self.why);
        if self.status == StatusCode::METHOD_NOT_ALLOWED {
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        }
        response
    }
}

/// The answer's media type for this `Accept` header, or the 406 to send instead. The first
/// acceptable type the client lists wins; `*/*` and `application/*` mean `application/json`.
pub(super) fn negotiate(headers: &HeaderMap) -> Result<MediaType, Refusal> {
    let Some(accept) = headers.get(header::ACCEPT) else { return Ok(MediaType::Json) };
    let accept = accept.to_str().unwrap_or_default();
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        // `q=0` means "not acceptable".
        if parts.any(|p| p.trim().replace(' ', "") == "q=0") {
            continue;
        }
        match media.as_str() {
            GRAPHQL_RESPONSE_JSON => return Ok(MediaType::GraphqlResponseJson),
            JSON | "application/*" | "*/*" => return Ok(MediaType::Json),
            _ => {}
        }
    }
    Err(Refusal {
        status: StatusCode::NOT_ACCEPTABLE,
        why: "this endpoint answers application/graphql-response+json or application/json",
    })
}

/// Whether a POST body may be read as a GraphQL request: `application/json` (parameters such
/// as `charset` allowed), else the 415 to send.
pub(super) fn require_json(headers: &HeaderMap) -> Result<(), Refusal> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if media == JSON {
        Ok(())
    } else {
        Err(Refusal {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            why: "POST /graphql takes Content-Type: application/json",
        })
    }
}

/// For a GET: refuses an operation that is not a query (405, `Allow: POST`). A document that
/// does not parse, or names no operation it has, is left for execution to report.
pub(super) fn require_query(query: &str, operation_name: Option<&str>) -> Result<(), Refusal> {
    let Ok(document) = async_graphql::parser::parse_query(query) else { return Ok(()) };
    let kind = match (&document.operations, operation_name) {
        (DocumentOperations::Single(operation), _) => Some(operation.node.ty),
        (DocumentOperations::Multiple(operations), Some(name)) => {
            operations.iter().find(|(n, _)| n.as_str() == name).map(|(_, o)| o.node.ty)
        }
        // One named operation and no `operationName`: that operation runs.
        (DocumentOperations::Multiple(operations), None) if operations.len() == 1 => {
            operations.values().next().map(|o| o.node.ty)
        }
        (DocumentOperations::Multiple(_), None) => None,
    };
    match kind {
        Some(OperationType::Mutation) | Some(OperationType::Subscription) => Err(Refusal {
            status: StatusCode::METHOD_NOT_ALLOWED,
            why: "GET /graphql runs queries only; send mutations with POST (subscriptions: /graphql/ws)",
        }),
        _ => Ok(()),
    }
}

/// A GET request from its URL parameters (`query`, `operationName`, `variables` and
/// `extensions` as JSON), or why it cannot be read.
pub(super) fn request_from_url(raw: &str) -> Result<async_graphql::Request, String> {
    let mut query = None;
    let mut request_parts: (Option<String>, Option<String>, Option<String>) = (None, None, None);
    for (name, value) in url::form_urlencoded::parse(raw.as_bytes()) {
        match name.as_ref() {
            "query" => query = Some(value.into_owned()),
            "operationName" => request_parts.0 = Some(value.into_owned()),
            "variables" => request_parts.1 = Some(value.into_owned()),
            "extensions" => request_parts.2 = Some(value.into_owned()),
            _ => {}
        }
    }
    let mut request = async_graphql::Request::new(query.unwrap_or_default());
    if let Some(name) = request_parts.0.filter(|n| !n.is_empty()) {
        request = request.operation_name(name);
    }
    if let Some(variables) = request_parts.1 {
        let value: serde_json::Value =
            serde_json::from_str(&variables).map_err(|e| format!("`variables` is not JSON: {e}"))?;
        request = request.variables(async_graphql::Variables::from_json(value));
    }
    if let Some(extensions) = request_parts.2 {
        request.extensions =
            serde_json::from_str(&extensions).map_err(|e| format!("`extensions` is not a JSON object: {e}"))?;
    }
    // Empty only for a persisted query named by its hash (`documents::persisted` checks it).
    if request.query.trim().is_empty() && !request.extensions.0.contains_key("persistedQuery") {
        return Err("the `query` parameter is missing or empty".into());
    }
    Ok(request)
}

/// A POST body as a GraphQL request, or why it is not one (not JSON, not an object, no query).
pub(super) fn request_from_body(body: &[u8]) -> Result<async_graphql::Request, String> {
    let request: async_graphql::Request = serde_json::from_slice(body).map_err(|e| {
        format!("the body must be a JSON object with `query` (and optionally `variables`, `operationName`): {e}")
    })?;
    // A persisted query may name its text by hash alone (`documents::persisted` checks).
    if request.query.trim().is_empty() && !request.extensions.0.contains_key("persistedQuery") {
        return Err("the body has no `query`".into());
    }
    Ok(request)
}

/// A request error: nothing executed, so the answer has errors and no data.
pub(super) fn is_request_error(response: &GqlResponse) -> bool {
    response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|error| error.path.is_empty())
}

/// The status of a request error under `application/graphql-response+json`, by its code.
fn request_error_status(response: &GqlResponse) -> StatusCode {
    let code = response.errors.first().and_then(|error| error.extensions.as_ref()).and_then(|ext| ext.get("code"));
    let Some(async_graphql::Value::String(code)) = code else { return StatusCode::BAD_REQUEST };
    match code.as_str() {
        "UNAUTHENTICATED" => StatusCode::UNAUTHORIZED,
        "RATE_LIMITED" => StatusCode::TOO_MANY_REQUESTS,
        "UNAVAILABLE" => StatusCode::SERVICE_UNAVAILABLE,
        "TIMEOUT" => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// The HTTP answer of a GraphQL response in `media`.
pub(super) fn respond(media: MediaType, response: GqlResponse) -> Response {
    let request_error = is_request_error(&response);
    let status = match media {
        MediaType::GraphqlResponseJson if request_error => request_error_status(&response),
        _ => StatusCode::OK,
    };
    let body = if request_error {
        // Nothing executed: a well-formed response then has no `data` entry.
        let mut body = serde_json::to_value(&response).unwrap_or_else(|_| serde_json::json!({}));
        if let Some(object) = body.as_object_mut() {
            object.remove("data");
        }
        body.to_string().into_bytes()
    } else {
        // Straight to bytes: a page of 20 posts is some 180 values, each of which a detour
        // through `serde_json::Value` would allocate again.
        serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec())
    };
    let mut answer = (status, body).into_response();
    answer.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(media.content_type()));
    answer
}

/// How long a shared cache may keep a GET answer that no viewer shaped.
pub(super) const PUBLIC_MAX_AGE_SECS: u64 = 60;

/// The caching headers of a GET answer: `public, max-age` only when `shareable` (the caller
/// sent no token and nothing failed), else `private, no-store`; and `Vary` on the headers that
/// change the answer, so a cache never serves one caller's answer to another.
pub(super) fn for_get(mut answer: Response, shareable: bool) -> Response {
    let cache_control = if shareable {
        HeaderValue::from_str(&format!("public, max-age={PUBLIC_MAX_AGE_SECS}"))
            .unwrap_or(HeaderValue::from_static("private, no-store"))
    } else {
        HeaderValue::from_static("private, no-store")
    };
    let headers = answer.headers_mut();
    headers.insert(header::CACHE_CONTROL, cache_control);
    headers.append(header::VARY, HeaderValue::from_static("Authorization"));
    headers.append(header::VARY, HeaderValue::from_static("Accept"));
    answer
}

/// A body for refusals before any GraphQL runs (the status says it all; the text says why).
fn plain(status: StatusCode, why: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], why).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::{MediaType, negotiate};

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).expect("header"));
        headers
    }

    #[test]
    fn the_first_acceptable_type_wins() {
        assert_eq!(negotiate(&HeaderMap::new()).ok(), Some(MediaType::Json));
        assert_eq!(
            negotiate(&accept("application/graphql-response+json, application/json")).ok(),
            Some(MediaType::GraphqlResponseJson)
        );
        assert_eq!(
            negotiate(&accept("application/json;q=0.9, application/graphql-response+json")).ok(),
            Some(MediaType::Json)
        );
        assert_eq!(negotiate(&accept("*/*")).ok(), Some(MediaType::Json));
        assert_eq!(
            negotiate(&accept("application/graphql-response+json;q=0, application/json")).ok(),
            Some(MediaType::Json)
        );
        assert!(negotiate(&accept("text/html")).is_err());
    }
}
