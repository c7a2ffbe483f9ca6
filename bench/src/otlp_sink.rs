//! `--otlp-sink`: an OTLP/HTTP receiver that accepts every export and keeps nothing but counts,
//! so a scenario can run each server a second time with traces on (every span made, batched,
//! encoded and sent) and print both side by side, without a collector's own CPU in the numbers.
//!
//! It speaks just enough HTTP/1.1 for the SDK's exporter: keep-alive requests with a
//! `Content-Length` body, each answered `200` with an empty protobuf response.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Exports and bytes received so far.
#[derive(Default)]
pub struct SinkCounts {
    pub exports: AtomicU64,
    pub bytes: AtomicU64,
}

/// Starts the sink on a free loopback port; its base URL (for `OTEL_EXPORTER_OTLP_ENDPOINT`)
/// and its counts.
pub async fn start() -> std::io::Result<(String, Arc<SinkCounts>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let counts = Arc::new(SinkCounts::default());
    let shared = counts.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, shared.clone()));
        }
    });
    Ok((url, counts))
}

async fn serve(mut stream: TcpStream, counts: Arc<SinkCounts>) {
    let mut buffer = Vec::with_capacity(64 * 1024);
    loop {
        // Headers: up to the blank line.
        let header_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            if buffer.len() > 64 * 1024 || !read_more(&mut stream, &mut buffer).await {
                return;
            }
        };
        let headers = String::from_utf8_lossy(&buffer[..header_end]).to_ascii_lowercase();
        let length: usize = headers
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        while buffer.len() < header_end + length {
            if !read_more(&mut stream, &mut buffer).await {
                return;
            }
        }
        buffer.drain(..header_end + length);
        counts.exports.fetch_add(1, Ordering::Relaxed);
        counts.bytes.fetch_add(length as u64, Ordering::Relaxed);
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            true
        }
    }
}
