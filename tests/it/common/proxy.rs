//! A TCP proxy the test controls: forwards a loopback port to a real server, and can be cut
//! (every open connection dropped, new ones refused) and restored, to make PostgreSQL
//! "unreachable" without touching the shared server; or paused (connections stay open but
//! nothing passes until `resume`), to keep a request in flight as long as the test wants.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct TcpProxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
    paused: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let (paused, _) = watch::channel(false);
        let accepting_up = up.clone();
        let cut = generation.clone();
        let pause = paused.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                if !accepting_up.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut_signal = cut.subscribe();
                let (up_pause, down_pause) = (pause.subscribe(), pause.subscribe());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::select! {
                        _ = pump(client_read, server_write, up_pause) => {}
                        _ = pump(server_read, client_write, down_pause) => {}
                        _ = cut_signal.changed() => {}
                    }
                });
            }
        });
        TcpProxy { addr, up, generation, paused, task }
    }

    /// Holds every byte (both ways, open and new connections) until `resume`.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Drops every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// Copies one direction, waiting before each write while paused. Ends at EOF or an error.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if paused.wait_for(|paused| !*paused).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
