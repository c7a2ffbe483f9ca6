//! GraphQL subscriptions over websockets, speaking `graphql-transport-ws` and the legacy
//! `graphql-ws`. The token comes in `connection_init` (`{"authorization": "Bearer …"}`); a
//! missing or bad one closes the socket with 4403 and the reason, as the protocol says, and so
//! does the token's expiry (`exp`) on an open socket: a connection never outlives its token.
//! When the process shuts down, every socket is closed with 1001 (going away) so clients
//! reconnect to another instance instead of holding the shutdown up.

use async_graphql::Data;
use async_graphql::http::{WebSocket as GqlWebSocket, WebSocketProtocols, WsMessage};
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt, future};
use std::str::FromStr;
use std::time::SystemTime;
use tokio::sync::watch;
use tracing::Instrument;

use super::HttpState;
use crate::auth::Viewer;
use crate::error::AppError;
use crate::graphql::loaders::Loaders;
use crate::graphql::subscription::SubscriptionBudget;

/// Per-connection socket buffer, each way.
const WS_BUFFER_BYTES: usize = 4 * 1024;
/// Largest client message (a subscribe with its query and variables).
const WS_MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Marks connection_init refusals so their close code can be set to the protocol's 4403.
const AUTH_REFUSED: &str = "authentication failed: ";
/// graphql-transport-ws: the token was refused (missing, bad, or expired).
const TOKEN_REFUSED: u16 = 4403;
/// RFC 6455: the endpoint is going away (server shutdown).
const GOING_AWAY: u16 = 1001;

pub async fn upgrade(State(state): State<HttpState>, headers: HeaderMap, upgrade: WebSocketUpgrade) -> Response {
    let Some(protocol) = negotiated_protocol(&headers) else {
        return (StatusCode::BAD_REQUEST, "Sec-WebSocket-Protocol must be graphql-transport-ws or graphql-ws")
            .into_response();
    };
    upgrade
        .protocols(async_graphql::http::ALL_WEBSOCKET_PROTOCOLS)
        // Subscribers mostly idle: small buffers (the default 128 KiB each way would cost more
        // than a gigabyte at 10,000 connections), and bounded messages.
        .read_buffer_size(WS_BUFFER_BYTES)
        .write_buffer_size(WS_BUFFER_BYTES)
        .max_write_buffer_size(WS_MAX_MESSAGE_BYTES * 4)
        .max_message_size(WS_MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| {
            // The connection outlives the upgrade request: its own span, child of the request's.
            let span = tracing::info_span!("websocket", connection_id = %uuid::Uuid::now_v7());
            serve(socket, state, protocol).instrument(span)
        })
        .into_response()
}

/// The first GraphQL websocket protocol the client offers.
fn negotiated_protocol(headers: &HeaderMap) -> Option<WebSocketProtocols> {
    headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|value| value.to_str().ok())
        .and_then(|offered| offered.split(',').find_map(|p| WebSocketProtocols::from_str(p.trim()).ok()))
}

async fn serve(socket: WebSocket, state: HttpState, protocol: WebSocketProtocols) {
    let (mut sink, stream) = socket.split();
    let input = stream.take_while(|message| future::ready(message.is_ok())).filter_map(|message| {
        future::ready(match message {
            Ok(Message::Text(text)) => Some(text.as_bytes().to_vec()),
            Ok(Message::Binary(bytes)) => Some(bytes.to_vec()),
            _ => None,
        })
    });
    let app = state.app.clone();
    // The token's expiry, once connection_init has verified it.
    let (expiry_tx, mut expiry) = watch::channel::<Option<SystemTime>>(None);
    let outgoing = GqlWebSocket::new(state.schema.clone(), input, protocol)
        .on_connection_init(move |payload| {
            let app = app.clone();
            async move {
                let (data, expires_at) = authenticate(&app, payload)
                    .await
                    .map_err(|e| async_graphql::Error::new(format!("{AUTH_REFUSED}{e}")))?;
                let _ = expiry_tx.send(Some(expires_at));
                Ok(data)
            }
        })
        .map(|message| match message {
            WsMessage::Text(text) => Message::Text(text.into()),
            WsMessage::Close(code, reason) => {
                let code = if reason.starts_with(AUTH_REFUSED) { TOKEN_REFUSED } else { code };
                Message::Close(Some(CloseFrame { code, reason: close_reason(&reason).into() }))
            }
        });
    futures_util::pin_mut!(outgoing);
    let _open = OpenConnection::new();
    let mut shutdown = state.lifecycle.shutdown.clone();
    loop {
        tokio::select! {
            message = outgoing.next() => {
                let Some(message) = message else { break };
                let closing = matches!(message, Message::Close(_));
                if sink.send(message).await.is_err() || closing {
                    break;
                }
            }
            () = token_expired(&mut expiry) => {
                tracing::debug!("closing the websocket: its token expired");
                let frame = CloseFrame { code: TOKEN_REFUSED, reason: "authentication failed: the token expired".into() };
                let _ = sink.send(Message::Close(Some(frame))).await;
                break;
            }
            // Also when the sender is gone: the process is going away either way.
            () = shutting_down(&mut shutdown) => {
                tracing::debug!("closing the websocket: the server is shutting down");
                let frame = CloseFrame { code: GOING_AWAY, reason: "server shutting down".into() };
                let _ = sink.send(Message::Close(Some(frame))).await;
                break;
            }
        }
    }
    let _ = sink.close().await;
}

/// A close frame is a control frame: 125 bytes at most, 2 of them the code. A longer reason
/// (a token error can be) makes the whole frame invalid and the client sees a protocol error
/// instead of the code, so the reason is cut at a character boundary.
fn close_reason(reason: &str) -> &str {
    const MAX_REASON_BYTES: usize = 123;
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// Resolves when the connection's token expires; never before connection_init verified one.
async fn token_expired(expiry: &mut watch::Receiver<Option<SystemTime>>) {
    let expires_at = match expiry.wait_for(Option::is_some).await {
        Ok(expires_at) => *expires_at,
        // connection_init never succeeded: nothing to expire.
        Err(_) => None,
    };
    match expires_at {
        Some(expires_at) => {
            tokio::time::sleep(expires_at.duration_since(SystemTime::now()).unwrap_or_default()).await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Resolves once the process begins to shut down (or its shutdown sender is gone).
async fn shutting_down(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}

/// Counts an open connection in `websocket_connections_open` for as long as it lives.
struct OpenConnection;

impl OpenConnection {
    fn new() -> Self {
        metrics::gauge!(crate::telemetry::names::WEBSOCKET_CONNECTIONS_OPEN).increment(1.0);
        OpenConnection
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!(crate::telemetry::names::WEBSOCKET_CONNECTIONS_OPEN).decrement(1.0);
    }
}

/// Reads `authorization` (or `Authorization`) from the connection_init payload; returns the
/// connection's data and when its token expires. A token from the identity provider may
/// provision its user here, as on HTTP.
async fn authenticate(
    app: &crate::state::AppState,
    payload: serde_json::Value,
) -> Result<(Data, SystemTime), AppError> {
    let header =
        payload.get("authorization").or_else(|| payload.get("Authorization")).and_then(|v| v.as_str()).ok_or_else(
            || AppError::Unauthenticated("connection_init must carry {\"authorization\": \"Bearer <token>\"}".into()),
        )?;
    let token = app.auth.verify_bearer(header).await?;
    let user_id = token.user_id;
    let mut data = Data::default();
    data.insert(Viewer::for_connection(user_id, app.memberships.clone()));
    data.insert(Loaders::new(&app.db, &app.post_cache, &app.likes, &app.views, Some(user_id), None).uncached());
    data.insert(SubscriptionBudget::new(app.settings.live_max_subscriptions));
    Ok((data, token.expires_at))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_close_reason_fits_a_control_frame() {
        assert_eq!(super::close_reason("short"), "short");
        let long = "é".repeat(100);
        let cut = super::close_reason(&long);
        assert!(cut.len() <= 123 && long.starts_with(cut) && cut.len() >= 121);
    }
}
