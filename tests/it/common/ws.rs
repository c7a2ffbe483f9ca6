//! A real websocket GraphQL client for tests (graphql-transport-ws, or the legacy graphql-ws).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub struct GqlSocket {
    ws: WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>,
    legacy: bool,
}

/// How a connection attempt ended when it was refused.
#[derive(Debug)]
pub struct Refused {
    pub code: u16,
    pub reason: String,
}

impl GqlSocket {
    /// Connects and completes connection_init (with the token when given).
    pub async fn connect(addr: std::net::SocketAddr, token: Option<&str>) -> Result<GqlSocket, Refused> {
        Self::connect_with(addr, token, "graphql-transport-ws").await
    }

    pub async fn connect_with(
        addr: std::net::SocketAddr,
        token: Option<&str>,
        protocol: &str,
    ) -> Result<GqlSocket, Refused> {
        let payload = match token {
            Some(token) => json!({ "authorization": format!("Bearer {token}") }),
            None => json!({}),
        };
        Self::connect_with_payload(addr, payload, protocol).await
    }

    /// Connects and sends `payload` as the connection_init payload, whatever it holds.
    pub async fn connect_with_payload(
        addr: std::net::SocketAddr,
        payload: Value,
        protocol: &str,
    ) -> Result<GqlSocket, Refused> {
        let socket = Self::open(addr, protocol, None).await.expect("websocket handshake");
        socket.init(payload).await
    }

    /// Only the websocket handshake (with `Origin` when given); the HTTP status when the
    /// server refuses the upgrade.
    pub async fn open(addr: std::net::SocketAddr, protocol: &str, origin: Option<&str>) -> Result<GqlSocket, u16> {
        let mut request = format!("ws://{addr}/graphql/ws").into_client_request().expect("request");
        request.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().expect("header"));
        if let Some(origin) = origin {
            request.headers_mut().insert("Origin", origin.parse().expect("origin header"));
        }
        match tokio_tungstenite::connect_async(request).await {
            Ok((ws, _)) => Ok(GqlSocket { ws, legacy: protocol == "graphql-ws" }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
            Err(other) => panic!("websocket handshake failed: {other}"),
        }
    }

    /// The websocket handshake over a TCP socket whose receive buffer is `receive_buffer`
    /// bytes: a client that stops reading fills it, and then the server's, quickly.
    pub async fn open_with_receive_buffer(
        addr: std::net::SocketAddr,
        protocol: &str,
        receive_buffer: u32,
    ) -> GqlSocket {
        let tcp = tokio::net::TcpSocket::new_v4().expect("tcp socket");
        tcp.set_recv_buffer_size(receive_buffer).expect("SO_RCVBUF");
        let stream = tcp.connect(addr).await.expect("tcp connect");
        let mut request = format!("ws://{addr}/graphql/ws").into_client_request().expect("request");
        request.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse().expect("header"));
        let (ws, _) =
            tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream)).await.expect("websocket handshake");
        GqlSocket { ws, legacy: protocol == "graphql-ws" }
    }

    /// Sends connection_init with `payload` and waits for the ack (or the refusal).
    pub async fn init(mut self, payload: Value) -> Result<GqlSocket, Refused> {
        self.send(json!({ "type": "connection_init", "payload": payload })).await;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.ws.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let message: Value = serde_json::from_str(&text).expect("json");
                    match message["type"].as_str() {
                        Some("connection_ack") => return Ok(self),
                        Some("connection_error") => {
                            return Err(Refused { code: 0, reason: message["payload"].to_string() });
                        }
                        _ => continue,
                    }
                }
                Ok(Some(Ok(Message::Close(frame)))) => {
                    let (code, reason) =
                        frame.map(|f| (u16::from(f.code), f.reason.to_string())).unwrap_or((0, String::new()));
                    return Err(Refused { code, reason });
                }
                Ok(Some(Ok(_))) => continue,
                other => panic!("connection ended without ack or close: {other:?}"),
            }
        }
    }

    async fn send(&mut self, message: Value) {
        self.ws.send(Message::Text(message.to_string().into())).await.expect("send");
    }

    /// The next raw text message, without answering pings (to see them); None on timeout or
    /// close.
    pub async fn next_raw(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => return Some(serde_json::from_str(&text).expect("json")),
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => return None,
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// Sends a protocol message as it is (a pong, a subscribe without waiting).
    pub async fn send_json(&mut self, message: Value) {
        self.send(message).await;
    }

    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) {
        let kind = if self.legacy { "start" } else { "subscribe" };
        self.send(json!({ "id": id, "type": kind, "payload": { "query": query, "variables": variables } })).await;
    }

    /// The next protocol message (pings answered), or None on timeout or close.
    pub async fn next_message(&mut self, timeout: Duration) -> Option<Value> {
        loop {
            match tokio::time::timeout(timeout, self.ws.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let message: Value = serde_json::from_str(&text).expect("json");
                    if message["type"] == "ping" {
                        self.send(json!({ "type": "pong" })).await;
                        continue;
                    }
                    if message["type"] == "ka" {
                        continue;
                    }
                    return Some(message);
                }
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Err(_) => return None,
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(_))) => return None,
            }
        }
    }

    /// The next text frame exactly as the server sent it (a protocol `ping` is answered, and
    /// returned too), or None on timeout or close: for a test that records every byte a client
    /// receives.
    pub async fn next_text(&mut self, timeout: Duration) -> Option<String> {
        loop {
            match tokio::time::timeout(timeout, self.ws.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let text = text.to_string();
                    if serde_json::from_str::<Value>(&text).is_ok_and(|m| m["type"] == "ping") {
                        self.send(json!({ "type": "pong" })).await;
                    }
                    return Some(text);
                }
                Ok(Some(Ok(Message::Binary(bytes)))) => return Some(String::from_utf8_lossy(&bytes).into_owned()),
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => return None,
                Ok(Some(Ok(_))) => continue,
            }
        }
    }

    /// The payload `data` of the next `next`/`data` message.
    pub async fn next_data(&mut self, timeout: Duration) -> Option<Value> {
        let message = self.next_message(timeout).await?;
        match message["type"].as_str() {
            Some("next") | Some("data") => Some(message["payload"]["data"].clone()),
            _ => panic!("expected data, got {message}"),
        }
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

impl GqlSocket {
    /// Reads until the server closes the socket. None: still open after `timeout`;
    /// `Some(None)`: the connection ended without a close frame; else the frame's code and
    /// reason.
    pub async fn close_frame(&mut self, timeout: Duration) -> Option<Option<(u16, String)>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Ok(Some(Ok(Message::Close(frame)))) => {
                    return Some(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                }
                Ok(Some(Ok(_))) => continue,
                Ok(None) | Ok(Some(Err(_))) => return Some(None),
                Err(_) => return None,
            }
        }
    }

    /// Sends a raw text frame (for malformed and hostile protocol messages).
    pub async fn send_raw(&mut self, text: String) -> bool {
        self.ws.send(Message::Text(text.into())).await.is_ok()
    }

    /// Sends a websocket-level Ping frame (not a protocol message).
    pub async fn send_ping_frame(&mut self) -> bool {
        self.ws.send(Message::Ping(Default::default())).await.is_ok()
    }

    /// Runs a query or mutation over the socket (subscribe, then its one answer and complete):
    /// the answer's `payload` (`data` and/or `errors`). Panics when something else arrives.
    pub async fn run(&mut self, id: &str, query: &str, variables: Value) -> Value {
        self.subscribe(id, query, variables).await;
        let message = self.next_message(Duration::from_secs(10)).await.expect("an answer");
        assert_eq!(message["id"], id, "{message}");
        assert!(matches!(message["type"].as_str(), Some("next") | Some("data")), "{message}");
        let complete = self.next_message(Duration::from_secs(10)).await.expect("complete");
        assert_eq!((&complete["type"], &complete["id"]), (&json!("complete"), &json!(id)), "{complete}");
        message["payload"].clone()
    }
}
