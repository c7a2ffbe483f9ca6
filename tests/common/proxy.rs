//! A TCP proxy the test controls: forwards a loopback port to a real server, and can be cut
//! (every open connection dropped, new ones refused) and restored, to make PostgreSQL
//! "unreachable" without touching the shared server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct TcpProxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let accepting_up = up.clone();
        let cut = generation.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                if !accepting_up.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut_signal = cut.subscribe();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_signal.changed() => {}
                    }
                });
            }
        });
        TcpProxy { addr, up, generation, task }
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

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
