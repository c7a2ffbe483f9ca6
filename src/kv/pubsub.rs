//! Pub/Sub through the same settings as every other Redis use: on one node a classic
//! SUBSCRIBE/PUBLISH; on a Redis Cluster the sharded kind (SSUBSCRIBE/SPUBLISH, Redis 7), where a
//! message travels only within the shard that owns the channel's slot instead of being
//! broadcast to every node over the cluster bus.

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use redis::RedisResult;

use super::Redis;
use crate::config::RedisTarget;

/// Publishes `payload` on `channel`; returns how many subscribers the node reached.
pub(crate) async fn publish(redis: &Redis, channel: &str, payload: &str) -> RedisResult<i64> {
    let command = if redis.cluster().is_some() { "SPUBLISH" } else { "PUBLISH" };
    redis::cmd(command).arg(channel).arg(payload).query_async(&mut redis.clone()).await
}

/// One subscription to one channel. `next` yields its messages until the connection under it
/// is lost; then the caller subscribes again.
pub(crate) struct Subscription {
    messages: BoxStream<'static, String>,
    /// The cluster connection the subscription lives on (dropping it ends the subscription).
    _cluster: Option<redis::cluster_async::ClusterConnection>,
}

impl Subscription {
    /// The next message, or None once the subscription is lost.
    pub(crate) async fn next(&mut self) -> Option<String> {
        self.messages.next().await
    }
}

/// Subscribes to `channel` where `target` says Redis is. On a cluster, the subscription ends
/// when the node holding it disconnects: that node may be a killed master, which the client
/// would keep redialling, while a new subscription finds where the slot is served now.
pub(crate) async fn subscribe(target: &RedisTarget, channel: &str) -> RedisResult<Subscription> {
    match target {
        RedisTarget::Node(url) => {
            let mut pubsub = redis::Client::open(url.as_str())?.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            let messages = pubsub.into_on_message().filter_map(|m| async move { m.get_payload::<String>().ok() });
            Ok(Subscription { messages: messages.boxed(), _cluster: None })
        }
        RedisTarget::Cluster(nodes) => {
            let (pushes, received) = tokio::sync::mpsc::unbounded_channel();
            let client = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(pushes)
                .build()?;
            let mut conn = client.get_async_connection().await?;
            conn.ssubscribe(channel).await?;
            let messages = tokio_stream::wrappers::UnboundedReceiverStream::new(received)
                .take_while(|push| std::future::ready(push.kind != redis::PushKind::Disconnection))
                .filter_map(|push| async move {
                    // An SMESSAGE carries [channel, payload].
                    (push.kind == redis::PushKind::SMessage)
                        .then(|| push.data.get(1).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()))
                        .flatten()
                });
            Ok(Subscription { messages: messages.boxed(), _cluster: Some(conn) })
        }
    }
}
