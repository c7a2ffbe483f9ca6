//! `bench live --flood N`: websocket connection attempts past the server's descriptor cap,
//! from a second process.
//!
//! The server and the bench share the machine's hard `RLIMIT_NOFILE` (20,000 here), so the
//! bench process cannot hold its subscribers and the flood too. The flood runs in a child
//! process, the bench binary itself (`bench flood`, hidden). It opens N websockets at a steady
//! rate, each inited with a member's token and held, and tells every attempt apart:
//! - accepted: the upgrade succeeded and `connection_ack` came;
//! - refused: an HTTP answer instead of the upgrade, by status (503 is the clean refusal at
//!   the descriptor cap), with how long the refusal took;
//! - failed: no answer at all (connect error, reset, or nothing within `ATTEMPT_TIMEOUT`).
//!
//! When every attempt has settled, it prints one JSON line (`FloodOpened`) and holds the
//! accepted sockets, answering the server's pings, until its stdin closes. Then it prints a
//! second line (`FloodHeld`: how many of them the server closed meanwhile) and exits. The
//! parent (`live`) measures the server's CPU while it holds its cap and runs the storm meanwhile,
//! so the existing subscribers' latency is measured with the server full.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use course_forum::testing::error::{AppError, AppResult};
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::protocol::{Message, WebSocketConfig};

use crate::live::{connection_init, graphql_ws_request, pong};
use crate::percentile;
use crate::server::internal;

/// Longest one attempt may wait for the upgrade and `connection_ack`.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts in flight at once.
const IN_FLIGHT: usize = 200;

/// What the attempts came to, once all settled.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FloodOpened {
    pub attempts: usize,
    /// Upgraded and acknowledged: held open until the flood ends.
    pub accepted: usize,
    /// Refused with 503 (the descriptor cap).
    pub refused_503: usize,
    /// Refused with another status.
    pub refused_other: usize,
    /// The body of the first 503, as the client saw it.
    pub refusal_body: Option<String>,
    /// Time from the start of an attempt to its 503, p50 and p99 (NaN when none).
    pub refusal_p50_ms: f64,
    pub refusal_p99_ms: f64,
    /// No answer: a connect error, a reset, or nothing within `ATTEMPT_TIMEOUT`.
    pub failed: usize,
    /// The first of those errors, as the client saw it.
    pub first_failure: Option<String>,
    /// From the first attempt until every attempt settled.
    pub seconds: f64,
}

/// What became of the accepted sockets while they were held.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FloodHeld {
    /// Accepted sockets the server closed before the flood ended (none expected).
    pub closed_by_server: usize,
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

enum Attempt {
    Accepted(Box<Socket>),
    Refused { status: u16, body: String, took: Duration },
    Failed(String),
}

async fn attempt(url: &str, token: &str) -> Attempt {
    let started = Instant::now();
    let outcome = tokio::time::timeout(ATTEMPT_TIMEOUT, async {
        let request = graphql_ws_request(url)?;
        let config = WebSocketConfig::default().read_buffer_size(1024);
        let mut ws = match tokio_tungstenite::connect_async_with_config(request, Some(config), false).await {
            Ok((ws, _)) => ws,
            Err(WsError::Http(response)) => {
                let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default().into_owned();
                return Ok(Attempt::Refused { status: response.status().as_u16(), body, took: started.elapsed() });
            }
            Err(err) => return Err(err.to_string()),
        };
        ws.send(connection_init(token)).await.map_err(|e| e.to_string())?;
        while let Some(message) = ws.next().await {
            if let Message::Text(text) = message.map_err(|e| e.to_string())?
                && text.contains("connection_ack")
            {
                return Ok(Attempt::Accepted(Box::new(ws)));
            }
        }
        Err("closed before connection_ack".to_owned())
    })
    .await;
    match outcome {
        Ok(Ok(attempt)) => attempt,
        Ok(Err(err)) => Attempt::Failed(err),
        Err(_) => Attempt::Failed(format!("no answer within {ATTEMPT_TIMEOUT:?}")),
    }
}

/// Holds an accepted socket, answering pings, until `stop`; true when the server closed it.
async fn hold(mut ws: Box<Socket>, mut stop: tokio::sync::watch::Receiver<bool>) -> bool {
    loop {
        tokio::select! {
            message = ws.next() => match message {
                Some(Ok(Message::Text(text))) if text.contains("\"ping\"") => {
                    if ws.send(pong()).await.is_err() {
                        return true;
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return true,
                Some(Ok(_)) => {}
            },
            _ = stop.changed() => {
                let _ = SinkExt::close(&mut ws).await;
                return false;
            }
        }
    }
}

/// The child process: `connections` attempts at `open_rate` per second on `url`, the two JSON
/// lines on stdout.
pub async fn run_child(url: &str, token: &str, connections: usize, open_rate: u32) -> AppResult<()> {
    let pace = Duration::from_secs_f64(1.0 / f64::from(open_rate.max(1)));
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let closed_by_server = Arc::new(AtomicUsize::new(0));
    let mut holders = Vec::new();
    let mut attempts = Vec::with_capacity(connections);
    let started = Instant::now();
    for _ in 0..connections {
        tokio::time::sleep(pace).await;
        let permit = in_flight.clone().acquire_owned().await.map_err(|e| internal("semaphore")(e.to_string()))?;
        let (url, token) = (url.to_owned(), token.to_owned());
        attempts.push(tokio::spawn(async move {
            let outcome = attempt(&url, &token).await;
            drop(permit);
            outcome
        }));
    }
    let mut opened = FloodOpened { attempts: connections, ..FloodOpened::default() };
    let mut refusal_ms = Vec::new();
    for handle in attempts {
        match handle.await.map_err(|e| internal("flood attempt")(e.to_string()))? {
            Attempt::Accepted(ws) => {
                opened.accepted += 1;
                let (stop, closed) = (stop_rx.clone(), closed_by_server.clone());
                holders.push(tokio::spawn(async move {
                    if hold(ws, stop).await {
                        closed.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            Attempt::Refused { status: 503, body, took } => {
                opened.refused_503 += 1;
                opened.refusal_body.get_or_insert(body);
                refusal_ms.push(took.as_secs_f64() * 1000.0);
            }
            Attempt::Refused { .. } => opened.refused_other += 1,
            Attempt::Failed(err) => {
                opened.failed += 1;
                opened.first_failure.get_or_insert(err);
            }
        }
    }
    opened.seconds = started.elapsed().as_secs_f64();
    refusal_ms.sort_by(f64::total_cmp);
    opened.refusal_p50_ms = percentile(&refusal_ms, 50.0);
    opened.refusal_p99_ms = percentile(&refusal_ms, 99.0);
    let line = serde_json::to_string(&opened).map_err(|e| internal("flood report")(e.to_string()))?;
    let mut stdout = tokio::io::stdout();
    let io_error = internal("flood stdout");
    stdout.write_all(format!("{line}\n").as_bytes()).await.map_err(|e| io_error(e.to_string()))?;
    stdout.flush().await.map_err(|e| io_error(e.to_string()))?;
    // Held until the parent closes our stdin.
    let mut rest = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut rest).await;
    let _ = stop_tx.send(true);
    for holder in holders {
        let _ = holder.await;
    }
    let held = FloodHeld { closed_by_server: closed_by_server.load(Ordering::Relaxed) };
    let line = serde_json::to_string(&held).map_err(|e| internal("flood report")(e.to_string()))?;
    stdout.write_all(format!("{line}\n").as_bytes()).await.map_err(|e| io_error(e.to_string()))?;
    stdout.flush().await.map_err(|e| io_error(e.to_string()))?;
    Ok(())
}

/// The parent's handle on a running flood.
pub struct Flood {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Flood {
    /// Starts the child and waits until all its attempts settled.
    pub async fn start(url: &str, token: &str, connections: usize, open_rate: u32) -> AppResult<(Flood, FloodOpened)> {
        let exe = std::env::current_exe().map_err(|e| internal("the bench binary")(e.to_string()))?;
        let mut child = tokio::process::Command::new(exe)
            .args(["flood", "--url", url, "--connections", &connections.to_string()])
            .args(["--open-rate", &open_rate.to_string()])
            .env("BENCH_FLOOD_TOKEN", token)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| internal("start the flood process")(e.to_string()))?;
        let stdout = child.stdout.take().ok_or_else(|| AppError::Internal("the flood's stdout".into()))?;
        let mut flood = Flood { child, lines: BufReader::new(stdout).lines() };
        let opened = flood.next_line().await?;
        Ok((flood, opened))
    }

    async fn next_line<T: for<'de> Deserialize<'de>>(&mut self) -> AppResult<T> {
        let line = self
            .lines
            .next_line()
            .await
            .map_err(|e| internal("the flood's report")(e.to_string()))?
            .ok_or_else(|| AppError::Internal("the flood process ended without its report".into()))?;
        serde_json::from_str(&line).map_err(|e| AppError::Internal(format!("the flood's report `{line}`: {e}")))
    }

    /// Closes the held sockets and returns what the server did to them meanwhile.
    pub async fn finish(mut self) -> AppResult<FloodHeld> {
        drop(self.child.stdin.take());
        let held = self.next_line().await?;
        let _ = self.child.wait().await;
        Ok(held)
    }
}
