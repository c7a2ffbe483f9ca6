//! GraphQL subscriptions over websockets, speaking `graphql-transport-ws` and the legacy
//! `graphql-ws`. The token comes in `connection_init` (`{"authorization": "Bearer …"}`); a
//! missing or bad one closes the socket with 4403 and the reason, as the protocol says, and so
//! does the token's expiry (`exp`) on an open socket: a connection never outlives its token.
//! When the process shuts down, every socket is closed with 1001 (going away) so clients
//! reconnect to another instance instead of holding the shutdown up.
//!
//! Every socket is bounded before it costs a query: the upgrade first checks that the process
//! has descriptors to spare (`ops::descriptors`: 503 `UNAVAILABLE` at its capacity), then
//! `Origin` (403) and the client address's socket cap; a socket that sends no connection_init in time is closed with
//! 4408; the user's socket cap is checked as soon as the token names the user; every message
//! (pings included) is counted against the connection's message rate, and each subscribe
//! against its operation rate, as it is read, before it executes (both caps and both rates
//! close with 4429). A frame that cannot leave within WS_SEND_TIMEOUT (a client that stopped
//! reading, its buffers full) closes the socket with 1008, or drops it when even that cannot be
//! written. Acknowledged sockets are pinged, on either protocol, and a peer that
//! answers nothing for a whole interval is closed with 3008.
//!
//! What an operation may spend once it runs is bounded as over HTTP (`graphql::socket`): each
//! query or mutation gets REQUEST_STATEMENT_BUDGET and REQUEST_TIMEOUT, each event of a
//! subscription SUBSCRIPTION_EVENT_STATEMENT_BUDGET and REQUEST_TIMEOUT, and a subscription's
//! selection may cost at most SUBSCRIPTION_MAX_COST. For that, each subscribe's operation type
//! is found once the schema has parsed the document (`graphql::socket::mark_subscription`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use async_graphql::Data;
use async_graphql::http::{ClientMessage, WebSocket as GqlWebSocket, WebSocketProtocols, WsMessage};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::task::AtomicWaker;
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::str::FromStr;
use std::task::Poll;
use std::time::SystemTime;
use tokio::sync::Notify;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::Instrument;

use super::HttpState;
use super::ws_limits::{OperationRate, Slot};
use crate::auth::Viewer;
use crate::error::AppError;
use crate::graphql::loaders::Loaders;
use crate::graphql::shared_live::{OperationId, SocketExecutor, SocketFrames};
use crate::graphql::socket::{SocketLimits, from_socket};
use crate::graphql::subscription::SubscriptionBudget;
use crate::live::fanout::Mailbox;
use crate::live::hub::Hub;

/// Per-connection read buffer: what one read of the socket takes at most. A client sends
/// little (connection_init, a few subscribes, pongs) and a longer message is read in several
/// reads into room reserved for it, so an idle socket keeps only this much.
const WS_READ_BUFFER_BYTES: usize = 512;
/// Per-connection write buffer target: frames are written once this much is buffered, or
/// at each flush (every send).
const WS_WRITE_BUFFER_BYTES: usize = 4 * 1024;
/// Largest client message (a subscribe with its query and variables).
const WS_MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Marks connection_init refusals so their close code can be set to the protocol's 4403.
const AUTH_REFUSED: &str = "authentication failed: ";
/// Marks connection_init refusals for the user's socket cap (closed with 4429).
const TOO_MANY_SOCKETS: &str = "too many sockets: ";
/// graphql-transport-ws: the token was refused (missing, bad, or expired).
const TOKEN_REFUSED: u16 = 4403;
/// graphql-transport-ws: no connection_init within WS_INIT_TIMEOUT.
const INIT_TIMEOUT: u16 = 4408;
/// graphql-transport-ws's "too many requests": over a socket cap or the operation rate.
const TOO_MANY: u16 = 4429;
/// Registered websocket close code "timeout": a ping went unanswered for a whole interval
/// (graphql-transport-ws's `ping`, or on the legacy protocol the websocket Ping frame sent
/// with each `ka`).
const KEEPALIVE_TIMEOUT: u16 = 3008;
/// RFC 6455: the endpoint is going away (server shutdown).
const GOING_AWAY: u16 = 1001;
/// RFC 6455 "policy violation": the client did not read its frames (one stayed unsent for
/// WS_SEND_TIMEOUT).
const SLOW_CONSUMER: u16 = 1008;
/// Most frames one write carries: the frames a socket has ready together go out in one flush,
/// up to this many.
const FRAMES_PER_WRITE: usize = 64;
/// How long the close frame of a slow consumer may take before the connection is dropped.
const SLOW_CONSUMER_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

pub(super) async fn upgrade(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    // First, before any other work: a process out of descriptors refuses with 503 while it
    // still has the reserve for PostgreSQL, Redis and HTTP (`ops::descriptors`).
    if let Err(full) = crate::ops::descriptors::admit_socket(state.app.settings.ws_descriptor_reserve) {
        tracing::debug!(error = %full, "websocket refused: descriptor capacity reached");
        count_refusal("descriptors");
        return at_capacity(full);
    }
    let Some(protocol) = negotiated_protocol(&headers) else {
        return (StatusCode::BAD_REQUEST, "Sec-WebSocket-Protocol must be graphql-transport-ws or graphql-ws")
            .into_response();
    };
    // A browser always sends Origin; a page from an origin not allowed may not use a
    // visitor's browser to open sockets here. Other clients send none and are not refused.
    if let Some(origin) = headers.get(header::ORIGIN)
        && !state.origins.allows(origin, &headers)
    {
        tracing::debug!(origin = ?origin, "websocket refused: origin not allowed");
        count_refusal("origin");
        return (StatusCode::FORBIDDEN, "this Origin may not open a websocket here (CORS_ALLOWED_ORIGINS)")
            .into_response();
    }
    let address = crate::views::client_ip(peer, &headers, state.app.settings.trusted_proxy);
    let address_slot = state.sockets.address(address);
    upgrade
        .protocols(async_graphql::http::ALL_WEBSOCKET_PROTOCOLS)
        // Subscribers mostly idle: small buffers (the default 128 KiB each way would cost more
        // than a gigabyte at 10,000 connections; the read buffer is allocated up front, the
        // write buffer grows with what is written), and bounded messages.
        .read_buffer_size(WS_READ_BUFFER_BYTES)
        .write_buffer_size(WS_WRITE_BUFFER_BYTES)
        .max_write_buffer_size(WS_MAX_MESSAGE_BYTES * 4)
        .max_message_size(WS_MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| {
            // The connection outlives the upgrade request: its own span, child of the request's.
            let span = tracing::info_span!("websocket", connection_id = %uuid::Uuid::now_v7());
            async move {
                // Refused after the upgrade, so a browser client sees the code and the reason.
                let Some(address_slot) = address_slot else {
                    tracing::debug!(%address, "websocket refused: the address is at its socket cap");
                    count_refusal("address_cap");
                    let reason = format!(
                        "{TOO_MANY_SOCKETS}at most {} open per client address",
                        state.sockets.max_per_address()
                    );
                    refuse(socket, TOO_MANY, &reason).await;
                    return;
                };
                // On the connections' own runtime when there is one (`live::runtime`); this
                // task then ends, and keeps nothing per socket.
                match state.lifecycle.connections.clone() {
                    Some(connections) => {
                        drop(connections.spawn(serve(socket, state, protocol, address_slot).in_current_span()))
                    }
                    None => serve(socket, state, protocol, address_slot).await,
                }
            }
            .instrument(span)
        })
        .into_response()
}

/// 503 with a GraphQL error body (`extensions.code` `UNAVAILABLE`) and `Retry-After`, before
/// the upgrade: every websocket client sees the status, and a retry may land on another
/// instance.
fn at_capacity(full: AppError) -> Response {
    let body = axum::Json(super::error_response(full));
    (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], body).into_response()
}

/// Counts a socket refused or closed by one of its limits (`websocket_refusals_total`).
fn count_refusal(reason: &'static str) {
    metrics::counter!(crate::telemetry::names::WEBSOCKET_REFUSALS, "reason" => reason).increment(1);
}

/// Ends a socket whose client did not read a frame within WS_SEND_TIMEOUT: a 1008 close frame
/// if it can still be written at once, else the connection is just dropped (by the caller
/// returning, without the close handshake a non-reading peer would hold up).
async fn close_slow_consumer<S>(sink: &mut S)
where
    S: futures_util::Sink<Message, Error = axum::Error> + Unpin,
{
    tracing::debug!("closing the websocket: the client did not read its frames in time");
    count_refusal("slow_consumer");
    let frame = Message::Close(Some(CloseFrame {
        code: SLOW_CONSUMER,
        reason: "slow consumer: frames not read in time".into(),
    }));
    let _ = tokio::time::timeout(SLOW_CONSUMER_CLOSE_WAIT, sink.send(frame)).await;
}

/// What a write left behind.
enum Written {
    /// The socket stays open.
    Open,
    /// A close frame was sent, or the outgoing stream ended: the socket is done.
    Done,
}

/// Feeds `first` and every frame `outgoing` has ready now (never waiting for one, at most
/// `FRAMES_PER_WRITE`), then flushes them in one write.
async fn write_ready<S, O>(sink: &mut S, first: Message, outgoing: &mut O) -> Result<Written, axum::Error>
where
    S: futures_util::Sink<Message, Error = axum::Error> + Unpin,
    O: futures_util::Stream<Item = Message> + Unpin,
{
    let mut next = Some(first);
    let mut frames = 0u64;
    let mut written = Written::Open;
    while let Some(message) = next.take() {
        let closing = matches!(message, Message::Close(_));
        sink.feed(message).await?;
        frames += 1;
        if closing {
            written = Written::Done;
            break;
        }
        if frames < FRAMES_PER_WRITE as u64 {
            match outgoing.next().now_or_never() {
                Some(Some(message)) => next = Some(message),
                Some(None) => written = Written::Done,
                None => {}
            }
        }
    }
    sink.flush().await?;
    metrics::counter!(crate::telemetry::names::WEBSOCKET_FRAMES_SENT).increment(frames);
    metrics::counter!(crate::telemetry::names::WEBSOCKET_WRITES).increment(1);
    Ok(written)
}

/// The first GraphQL websocket protocol the client offers.
fn negotiated_protocol(headers: &HeaderMap) -> Option<WebSocketProtocols> {
    headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|value| value.to_str().ok())
        .and_then(|offered| offered.split(',').find_map(|p| WebSocketProtocols::from_str(p.trim()).ok()))
}

/// What the socket reader tells the connection loop. Atomics and one `Notify`: the loop
/// waits on one thing for all of them (a socket is mostly idle, and every waiter it holds is
/// memory per subscriber).
#[derive(Default)]
struct Heard {
    /// connection_init arrived (the init timeout no longer applies).
    init: AtomicBool,
    /// connection_init succeeded: the socket is acknowledged and gets keepalive pings.
    acknowledged: AtomicBool,
    /// When the verified token expires, in milliseconds since the Unix epoch; set before
    /// `acknowledged`.
    expires_at_ms: AtomicU64,
    /// Anything arrived since the last keepalive tick (a pong, a message, a frame).
    anything: AtomicBool,
    /// Why the reader asks the connection to close (`OVER_*`), 0 for no reason.
    over: AtomicU8,
    /// Told when `over` is set.
    over_told: Notify,
}

/// `Heard::over`: the connection went over its operation rate.
const OVER_OPERATIONS: u8 = 1;
/// `Heard::over`: the connection went over its message rate.
const OVER_MESSAGES: u8 = 2;

impl Heard {
    fn over(&self, reason: u8) {
        self.over.store(reason, Ordering::SeqCst);
        self.over_told.notify_one();
    }

    /// When the acknowledged token expires (the epoch when it was not acknowledged).
    fn expires_at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(self.expires_at_ms.load(Ordering::SeqCst))
    }

    /// What the connection's timer waits for once acknowledged: the token's expiry, at most
    /// FAR_FUTURE away.
    fn expiry_deadline(&self) -> Instant {
        Instant::now() + self.expires_at().duration_since(SystemTime::now()).unwrap_or_default().min(FAR_FUTURE)
    }
}

async fn serve(
    socket: WebSocket,
    state: HttpState,
    protocol: WebSocketProtocols,
    _address_slot: Slot<std::net::IpAddr>,
) {
    let init_deadline = Instant::now() + state.app.settings.ws_init_timeout;
    let (mut sink, stream) = socket.split();
    let heard = Arc::new(Heard::default());
    let settings = &state.app.settings;
    let rates = Rates {
        operations: OperationRate::new(settings.ws_operations_per_minute),
        messages: OperationRate::new(settings.ws_messages_per_minute),
    };
    let input = read_messages(stream, heard.clone(), rates, settings.subscription_max_cost, state.app.live.clone());
    // The API's shared state is one pointer: the boxed stream below keeps this closure for
    // the socket's life.
    let shared = state.clone();
    let acknowledged = heard.clone();
    // Shared subscriptions (`graphql::shared_live`) leave their frames in this mailbox, written
    // beside the schema's messages.
    let frames = SocketFrames::new(protocol == WebSocketProtocols::SubscriptionsTransportWS);
    let mailbox = frames.mailbox();
    let outgoing = GqlWebSocket::from_message_stream(
        SocketExecutor::new(state.schema.clone(), state.home.clone()),
        input,
        protocol,
    )
    .on_connection_init(move |payload| {
        let shared = shared.clone();
        async move {
            let (app, sockets) = (&shared.app, &shared.sockets);
            // On the handlers' runtime: verifying may provision the user (PostgreSQL) or
            // fetch keys, on connections these lower-priority threads must not drive.
            let verifying = {
                let app = app.clone();
                shared.home.spawn(async move { verify(&app, payload).await })
            };
            let token = verifying
                .await
                .map_err(|e| AppError::Internal(format!("the token's verification failed: {e}")))
                .and_then(|verified| verified)
                .map_err(|e| async_graphql::Error::new(format!("{AUTH_REFUSED}{e}")))?;
            // Before anything is built for the connection. The slot lives in the
            // connection's data, so it is freed when the socket ends.
            let slot = sockets.user(token.user_id).ok_or_else(|| {
                tracing::debug!(user_id = token.user_id, "websocket refused: the user is at their socket cap");
                count_refusal("user_cap");
                async_graphql::Error::new(format!("{TOO_MANY_SOCKETS}at most {} open per user", sockets.max_per_user()))
            })?;
            let mut data = connection_data(app, token.user_id);
            data.insert(slot);
            data.insert(frames.clone());
            let expires_at_ms = token.expires_at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis();
            acknowledged.expires_at_ms.store(u64::try_from(expires_at_ms).unwrap_or(u64::MAX), Ordering::SeqCst);
            acknowledged.acknowledged.store(true, Ordering::SeqCst);
            Ok(data)
        }
    })
    .map(|message| match message {
        WsMessage::Text(text) => Message::Text(text.into()),
        WsMessage::Close(code, reason) => {
            let code = if reason.starts_with(AUTH_REFUSED) {
                count_refusal("token");
                TOKEN_REFUSED
            } else if reason.starts_with(TOO_MANY_SOCKETS) {
                TOO_MANY
            } else {
                code
            };
            Message::Close(Some(CloseFrame { code, reason: close_reason(&reason).into() }))
        }
    });
    let outgoing = outgoing_messages(Box::pin(outgoing), mailbox);
    futures_util::pin_mut!(outgoing);
    let _open = OpenConnection::new();
    // Each wait is made once and polled on every turn of the loop: a socket delivering a frame
    // every 100 ms must not register and drop a timer and waiters per frame. One timer serves
    // both deadlines: connection_init's until the socket is acknowledged, then the token's.
    let deadline = tokio::time::sleep_until(init_deadline);
    let mut deadline_is_expiry = false;
    let over = heard.over_told.notified();
    let stopping = shutting_down(state.lifecycle.shutdown.clone());
    futures_util::pin_mut!(deadline, over, stopping);
    let mut keepalive = keepalive_interval(state.app.settings.ws_keepalive);
    let mut ping_unanswered = false;
    let close = |code: u16, reason: &str| Message::Close(Some(CloseFrame { code, reason: reason.into() }));
    let send_timeout = state.app.settings.ws_send_timeout;
    loop {
        tokio::select! {
            message = outgoing.next() => {
                let Some(message) = message else { break };
                // Every frame already ready (several subscriptions updated in the same tick)
                // joins this one in a single write. A client that stops reading fills its
                // socket's buffers and the write waits; meanwhile nothing else of this socket
                // runs (pings, the token's expiry), and its subscriptions coalesce upstream.
                // So the wait is bounded.
                match tokio::time::timeout(send_timeout, write_ready(&mut sink, message, &mut outgoing)).await {
                    Ok(Ok(Written::Open)) => {}
                    Ok(_) => break,
                    Err(_) => return close_slow_consumer(&mut sink).await,
                }
                // The acknowledgement went out with this write (connection_init succeeds
                // before it is sent): from now on the deadline is the token's.
                if !deadline_is_expiry && heard.acknowledged.load(Ordering::SeqCst) {
                    deadline_is_expiry = true;
                    deadline.as_mut().reset(heard.expiry_deadline());
                }
            }
            () = &mut deadline => {
                // A far expiry is waited for in steps of at most FAR_FUTURE; and the
                // acknowledgement may have come in this very turn.
                let expired = deadline_is_expiry && SystemTime::now() >= heard.expires_at();
                if expired {
                    tracing::debug!("closing the websocket: its token expired");
                    count_refusal("token");
                    let _ = sink.send(close(TOKEN_REFUSED, "authentication failed: the token expired")).await;
                    break;
                }
                if deadline_is_expiry || heard.acknowledged.load(Ordering::SeqCst) {
                    deadline_is_expiry = true;
                    deadline.as_mut().reset(heard.expiry_deadline());
                    continue;
                }
                if heard.init.load(Ordering::SeqCst) {
                    // connection_init arrived and is being verified: no deadline until it is
                    // acknowledged (the verification has its own timeouts).
                    deadline.as_mut().reset(Instant::now() + FAR_FUTURE);
                    continue;
                }
                tracing::debug!("closing the websocket: no connection_init in time");
                count_refusal("init_timeout");
                let _ = sink.send(close(INIT_TIMEOUT, "Connection initialisation timeout")).await;
                break;
            }
            () = &mut over => {
                let reason = if heard.over.load(Ordering::SeqCst) == OVER_OPERATIONS {
                    tracing::debug!("closing the websocket: over its operation rate");
                    count_refusal("operation_rate");
                    format!(
                        "too many operations: at most {} a minute per connection",
                        state.app.settings.ws_operations_per_minute
                    )
                } else {
                    tracing::debug!("closing the websocket: over its message rate");
                    count_refusal("message_rate");
                    format!(
                        "too many messages: at most {} a minute per connection",
                        state.app.settings.ws_messages_per_minute
                    )
                };
                let _ = sink.send(close(TOO_MANY, &reason)).await;
                break;
            }
            () = tick(&mut keepalive) => {
                if !heard.acknowledged.load(Ordering::SeqCst) {
                    continue;
                }
                let answered = heard.anything.swap(false, Ordering::SeqCst);
                if ping_unanswered && !answered {
                    tracing::debug!("closing the websocket: a keepalive ping went unanswered");
                    count_refusal("keepalive");
                    let _ = sink.send(close(KEEPALIVE_TIMEOUT, "keepalive timeout: no pong")).await;
                    break;
                }
                ping_unanswered = true;
                let ping = async {
                    match protocol {
                        // graphql-transport-ws peers must answer a ping with a pong.
                        WebSocketProtocols::GraphQLWS => sink.send(Message::Text(r#"{"type":"ping"}"#.into())).await,
                        // The legacy protocol's `ka` has no answer (it keeps proxies from timing
                        // the socket out); the websocket Ping frame beside it does: RFC 6455 has
                        // every peer answer Pong (browsers and websocket libraries do it
                        // themselves), so a dead legacy peer is noticed too.
                        WebSocketProtocols::SubscriptionsTransportWS => {
                            match sink.send(Message::Text(r#"{"type":"ka"}"#.into())).await {
                                Ok(()) => sink.send(Message::Ping(Default::default())).await,
                                Err(err) => Err(err),
                            }
                        }
                    }
                };
                match tokio::time::timeout(send_timeout, ping).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break,
                    Err(_) => return close_slow_consumer(&mut sink).await,
                }
            }
            // Also when the sender is gone: the process is going away either way.
            () = &mut stopping => {
                tracing::debug!("closing the websocket: the server is shutting down");
                let _ = sink.send(close(GOING_AWAY, "server shutting down")).await;
                break;
            }
        }
    }
    // A peer that does not read would hold the close handshake up forever.
    let _ = tokio::time::timeout(send_timeout, sink.close()).await;
}

/// The socket's outgoing messages: the schema's (acknowledgements, results, errors, completes,
/// closes), then the frames its shared subscriptions left in `mailbox`. Ends with the schema's.
///
/// The schema's come first whenever they may have changed: a membership change is seen there
/// (and holds the subscriptions it concerns back in the mailbox) before any shared frame is
/// taken, and a subscription the schema completed has left the mailbox before its `complete` is
/// written. They are polled only when something of theirs woke the socket (`SchemaWake`): a
/// frame from the mailbox does not poll the schema's socket reader and every subscription's
/// stream again.
fn outgoing_messages(
    mut schema_messages: impl futures_util::Stream<Item = Message> + Unpin,
    mailbox: Arc<Mailbox>,
) -> impl futures_util::Stream<Item = Message> {
    let schema_wake = Arc::new(SchemaWake { woken: AtomicBool::new(true), task: AtomicWaker::new() });
    let schema_waker = futures_util::task::waker(schema_wake.clone());
    futures_util::stream::poll_fn(move |cx| {
        schema_wake.task.register(cx.waker());
        if schema_wake.woken.swap(false, Ordering::SeqCst) {
            let mut schema_cx = std::task::Context::from_waker(&schema_waker);
            if let Poll::Ready(message) = schema_messages.poll_next_unpin(&mut schema_cx) {
                // It may have more ready: poll it again next time.
                schema_wake.woken.store(true, Ordering::SeqCst);
                return Poll::Ready(message);
            }
        }
        mailbox.poll_frame(cx).map(|frame| Some(Message::Text(frame.into())))
    })
}

/// Whether the schema's side of a socket woke it since it was last polled, and the socket's
/// task to wake.
struct SchemaWake {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl futures_util::task::ArcWake for SchemaWake {
    fn wake_by_ref(this: &Arc<Self>) {
        this.woken.store(true, Ordering::SeqCst);
        this.task.wake();
    }
}

/// The per-connection rates (None: no limit).
struct Rates {
    /// Subscribe messages (`WS_OPERATIONS_PER_MINUTE`).
    operations: Option<OperationRate>,
    /// Every message and control frame but Close (`WS_MESSAGES_PER_MINUTE`).
    messages: Option<OperationRate>,
}

/// The client's messages, read once, as `GqlWebSocket` reads them: notes what the
/// connection loop needs to know (`Heard`), counts every message against the message rate and
/// each subscribe against the operation rate before it can execute, and marks subscriptions
/// for their cost cap (`subscription_max_cost`). Over a rate, the connection is told to close
/// and nothing more is read. Ends at the socket's first error.
///
/// Written as one `poll_fn` rather than stream combinators: those keep a slot for a pending
/// item (a parsed message, about 370 bytes) inside every connection's protocol stream.
fn read_messages(
    mut stream: impl futures_util::Stream<Item = Result<Message, axum::Error>> + Unpin,
    heard: Arc<Heard>,
    mut rates: Rates,
    subscription_max_cost: usize,
    hub: Arc<Hub>,
) -> impl futures_util::Stream<Item = serde_json::Result<ClientMessage>> {
    let mut over_rate = false;
    let mut ended = false;
    futures_util::stream::poll_fn(move |cx| {
        loop {
            if ended {
                return Poll::Ready(None);
            }
            let message = match stream.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(message))) => message,
                Poll::Ready(Some(Err(_)) | None) => {
                    ended = true;
                    continue;
                }
            };
            heard.anything.store(true, Ordering::SeqCst);
            // Pings and pongs too, at either level: a flood of them costs a pong each. A Close
            // is not counted: it ends the connection anyway.
            let counted = !over_rate && !matches!(message, Message::Close(_));
            if counted && rates.messages.as_mut().is_some_and(|rate| !rate.allow()) {
                over_rate = true;
                heard.over(OVER_MESSAGES);
            }
            let bytes = match &message {
                Message::Text(text) => text.as_bytes(),
                Message::Binary(bytes) => bytes.as_ref(),
                _ => continue,
            };
            if over_rate {
                continue;
            }
            let parsed = match ClientMessage::from_bytes(bytes) {
                Ok(ClientMessage::ConnectionInit { payload }) => {
                    heard.init.store(true, Ordering::SeqCst);
                    Ok(ClientMessage::ConnectionInit { payload })
                }
                Ok(ClientMessage::Start { id, mut payload }) => {
                    if rates.operations.as_mut().is_some_and(|rate| !rate.allow()) {
                        over_rate = true;
                        heard.over(OVER_OPERATIONS);
                        continue;
                    }
                    // Before connection_init succeeded the subscribe only closes the socket
                    // (1011): it is not worth marking.
                    if heard.acknowledged.load(Ordering::SeqCst) {
                        from_socket(&mut payload, subscription_max_cost);
                        payload.data.insert(OperationId(id.as_str().into()));
                        payload.data.insert(hub.hold_execution());
                    }
                    Ok(ClientMessage::Start { id, payload })
                }
                other => other,
            };
            return Poll::Ready(Some(parsed));
        }
    })
}

/// Sends one close frame on a socket nothing else was done with, and lets it go.
async fn refuse(socket: WebSocket, code: u16, reason: &str) {
    let (mut sink, _stream) = socket.split();
    let _ = sink.send(Message::Close(Some(CloseFrame { code, reason: close_reason(reason).into() }))).await;
    let _ = sink.close().await;
}

/// The keepalive clock, first tick one period after the socket opened; None when off.
fn keepalive_interval(period: std::time::Duration) -> Option<Interval> {
    if period.is_zero() {
        return None;
    }
    let mut interval = tokio::time::interval_at(Instant::now() + period, period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    Some(interval)
}

/// The next keepalive tick; never when keepalive is off.
async fn tick(interval: &mut Option<Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
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

/// The longest the connection's timer waits at once: while connection_init is verified (no
/// deadline then), and towards a token's far expiry (it is checked again when this passes).
const FAR_FUTURE: std::time::Duration = std::time::Duration::from_secs(86_400 * 30);

/// Resolves once the process begins to shut down (or its shutdown sender is gone).
async fn shutting_down(mut shutdown: tokio::sync::watch::Receiver<bool>) {
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

/// Reads `authorization` (or `Authorization`) from the connection_init payload and verifies
/// the token. A token from the identity provider may provision its user here, as on HTTP.
async fn verify(
    app: &crate::state::AppState,
    payload: serde_json::Value,
) -> Result<crate::auth::VerifiedToken, AppError> {
    let header =
        payload.get("authorization").or_else(|| payload.get("Authorization")).and_then(|v| v.as_str()).ok_or_else(
            || AppError::Unauthenticated("connection_init must carry {\"authorization\": \"Bearer <token>\"}".into()),
        )?;
    app.auth.verify_bearer(header).await
}

/// What every operation of the connection sees: its viewer, loaders (for what runs when a
/// subscription starts; each execution gets its own, `graphql::socket`), subscription budget,
/// and what each execution may spend.
fn connection_data(app: &crate::state::AppState, user_id: i64) -> Data {
    let mut data = Data::default();
    data.insert(Viewer::for_connection(user_id, app.memberships.clone()));
    data.insert(Loaders::new(app, Some(user_id), None, None).uncached());
    data.insert(SubscriptionBudget::new(app.settings.live_max_subscriptions));
    data.insert(SocketLimits::new(&app.settings, user_id));
    data
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use axum::extract::ws::Message;
    use futures_util::{FutureExt, Sink, StreamExt, stream};

    use super::{FRAMES_PER_WRITE, Written, write_ready};

    /// A socket that records what it was fed and how many times it was flushed.
    #[derive(Default)]
    struct RecordingSink {
        fed: Vec<Message>,
        flushes: usize,
    }

    impl Sink<Message> for RecordingSink {
        type Error = axum::Error;
        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn start_send(mut self: Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
            self.fed.push(item);
            Ok(())
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
    }

    fn text(n: usize) -> Message {
        Message::Text(format!("frame {n}").into())
    }

    /// One write, run to its end without a runtime: it must never wait for a frame.
    fn write(
        sink: &mut RecordingSink,
        first: Message,
        outgoing: &mut (impl futures_util::Stream<Item = Message> + Unpin),
    ) -> Written {
        write_ready(sink, first, outgoing).now_or_never().expect("a write never waits for frames").expect("written")
    }

    #[test]
    fn frames_ready_together_leave_in_one_flush_and_a_pending_one_is_not_waited_for() {
        let mut sink = RecordingSink::default();
        // Four more ready behind the first, then nothing ready yet (the stream stays open).
        let mut outgoing = stream::iter((1..5).map(text)).chain(stream::pending());
        assert!(matches!(write(&mut sink, text(0), &mut outgoing), Written::Open));
        assert_eq!((sink.fed.len(), sink.flushes), (5, 1), "five ready frames, one flush");
    }

    #[test]
    fn a_write_takes_at_most_its_share_of_frames_and_leaves_the_rest_ready() {
        let mut sink = RecordingSink::default();
        let mut outgoing = stream::iter((1..FRAMES_PER_WRITE + 10).map(text)).chain(stream::pending());
        write(&mut sink, text(0), &mut outgoing);
        assert_eq!((sink.fed.len(), sink.flushes), (FRAMES_PER_WRITE, 1));
        let next = outgoing.next().now_or_never().flatten().expect("the rest stay queued");
        write(&mut sink, next, &mut outgoing);
        assert_eq!((sink.fed.len(), sink.flushes), (FRAMES_PER_WRITE + 10, 2));
    }

    #[test]
    fn a_close_frame_or_the_end_of_the_stream_ends_the_socket_after_the_flush() {
        let mut sink = RecordingSink::default();
        let mut outgoing = stream::iter([text(1), Message::Close(None), text(2)]);
        assert!(matches!(write(&mut sink, text(0), &mut outgoing), Written::Done));
        assert_eq!((sink.fed.len(), sink.flushes), (3, 1), "nothing is fed after the close frame");
        let mut ended = stream::iter([text(1)]);
        let mut sink = RecordingSink::default();
        assert!(matches!(write(&mut sink, text(0), &mut ended), Written::Done));
        assert_eq!((sink.fed.len(), sink.flushes), (2, 1));
    }

    #[test]
    fn a_close_reason_fits_a_control_frame() {
        assert_eq!(super::close_reason("short"), "short");
        let long = "é".repeat(100);
        let cut = super::close_reason(&long);
        assert!(cut.len() <= 123 && long.starts_with(cut) && cut.len() >= 121);
    }
}
