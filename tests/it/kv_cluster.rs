//! The `kv::Redis` connection speaks to one node and to a real Redis Cluster (the local one
//! `REDIS_CLUSTER=1 script/services` starts: 3 masters, 3 replicas) through the same calls:
//! pipelines whose keys live on every master come back in order, scripts run by EVALSHA and
//! are loaded again on every master after a flush (cluster only: the node is shared), and SCAN-based bulk deletes reach every
//! master. Each test runs in both modes on its own key prefix.

use std::collections::HashSet;
use std::time::Duration;

use course_forum::testing::kv::{self, KeyScan, Redis};

use crate::common;

async fn both() -> [(&'static str, Redis); 2] {
    let timeout = Duration::from_secs(5);
    let node = kv::connect(&common::redis_url(), timeout, "test").await.expect("Redis (script/services starts it)");
    let cluster = kv::connect_cluster(&common::local_cluster_nodes(), timeout, "test")
        .await
        .expect("the local Redis Cluster (REDIS_CLUSTER=1 script/services starts it)");
    [("node", node), ("cluster", cluster)]
}

fn prefix() -> String {
    format!("cfk{}", uuid::Uuid::new_v4().simple())
}

/// How many distinct masters serve these keys, by the cluster's own word (CLUSTER KEYSLOT,
/// CLUSTER SLOTS).
async fn masters_holding(redis: &Redis, keys: &[String]) -> usize {
    common::cluster::master_ports(redis, keys).await.into_iter().collect::<HashSet<_>>().len()
}

#[tokio::test]
async fn a_pipeline_across_slots_answers_every_command_in_order() {
    for (mode, redis) in both().await {
        let prefix = prefix();
        let keys: Vec<String> = (0..300).map(|i| format!("{prefix}:k{i}")).collect();
        let mut conn = redis.clone();
        let mut write = redis::pipe();
        for (i, key) in keys.iter().enumerate() {
            write.cmd("SET").arg(key).arg(i).ignore();
            write.cmd("INCRBY").arg(key).arg(1000);
        }
        let incremented: Vec<i64> = write.query_async(&mut conn).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(incremented, (0..300).map(|i| i + 1000).collect::<Vec<i64>>(), "{mode}");

        let mut read = redis::pipe();
        for key in keys.iter().rev() {
            read.cmd("GET").arg(key);
        }
        let values: Vec<i64> = read.query_async(&mut conn).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(values, (0..300).rev().map(|i| i + 1000).collect::<Vec<i64>>(), "{mode}: replies in order");
        if mode == "cluster" {
            assert_eq!(masters_holding(&redis, &keys).await, 3, "the keys really live on every master");
        }
        kv::unlink_matching(&redis, &format!("{prefix}:*")).await.expect("cleanup");
    }
}

#[tokio::test]
async fn scripts_run_in_every_slot_and_are_loaded_again_after_a_flush() {
    // Each call touches two keys of one hash tag; the tags spread over every master.
    let script =
        redis::Script::new("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCRBY', KEYS[2], ARGV[1])");
    for (mode, redis) in both().await {
        let prefix = prefix();
        let tags: Vec<String> = (0..30).map(|i| format!("{prefix}:{{t{i}}}")).collect();
        if mode == "cluster" {
            // The cluster is this suite's alone; the node is shared with every other test.
            let mut conn = redis.clone();
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.expect("flush scripts");
        }
        let mut pipe = redis::pipe();
        for (i, tag) in tags.iter().enumerate() {
            let mut call = script.prepare_invoke();
            call.key(format!("{tag}:a")).key(format!("{tag}:b")).arg(i + 1);
            pipe.invoke_script(&call);
        }
        let replies: Vec<i64> =
            kv::query_scripts(&redis, &pipe, &[&script]).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(replies, (1..=30).collect::<Vec<i64>>(), "{mode}: loaded after NOSCRIPT, run once each");
        if mode == "cluster" {
            let keys: Vec<String> = tags.iter().map(|t| format!("{t}:a")).collect();
            assert_eq!(masters_holding(&redis, &keys).await, 3, "the tags spread over every master");
        }
        kv::unlink_matching(&redis, &format!("{prefix}:*")).await.expect("cleanup");
    }
}

#[tokio::test]
async fn a_scan_and_a_bulk_delete_reach_every_master() {
    for (mode, redis) in both().await {
        let prefix = prefix();
        let mut conn = redis.clone();
        let mut pipe = redis::pipe();
        for i in 0..2500 {
            pipe.cmd("SET").arg(format!("{prefix}:x{i}")).arg(i).ignore();
        }
        // A key outside the pattern stays.
        pipe.cmd("SET").arg(format!("{prefix}-other")).arg(1).ignore();
        let _: () = pipe.query_async(&mut conn).await.unwrap_or_else(|e| panic!("{mode}: {e}"));

        let mut scan = KeyScan::new(&redis, &format!("{prefix}:*"));
        let mut seen = HashSet::new();
        while let Some(page) = scan.next_page().await.expect("scan") {
            seen.extend(page);
        }
        assert_eq!(seen.len(), 2500, "{mode}: every key, once");

        let dropped = kv::unlink_matching(&redis, &format!("{prefix}:*")).await.expect("unlink");
        assert_eq!(dropped, 2500, "{mode}");
        let mut again = KeyScan::new(&redis, &format!("{prefix}:*"));
        let mut left = 0;
        while let Some(page) = again.next_page().await.expect("scan") {
            left += page.len();
        }
        assert_eq!(left, 0, "{mode}: nothing left");
        let other: Option<i64> =
            redis::cmd("GET").arg(format!("{prefix}-other")).query_async(&mut conn).await.expect("get");
        assert_eq!(other, Some(1), "{mode}: a key outside the pattern is kept");
        let _: () = redis::cmd("UNLINK").arg(format!("{prefix}-other")).query_async(&mut conn).await.expect("unlink");
    }
}

#[tokio::test]
async fn transactions_written_into_one_pipeline_run_whole_on_their_own_slots() {
    for (mode, redis) in both().await {
        let prefix = prefix();
        let tags: Vec<String> = (0..12).map(|i| format!("{prefix}:{{t{i}}}")).collect();
        let mut pipe = redis::pipe();
        for (i, tag) in tags.iter().enumerate() {
            pipe.cmd("MULTI").ignore();
            pipe.cmd("SET").arg(format!("{tag}:a")).arg(i).ignore();
            pipe.cmd("INCRBY").arg(format!("{tag}:b")).arg(i).ignore();
            pipe.cmd("EXEC");
        }
        let mut conn = redis.clone();
        let replies: Vec<(String, i64)> = pipe.query_async(&mut conn).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(
            replies,
            (0..12).map(|i| ("OK".to_owned(), i)).collect::<Vec<_>>(),
            "{mode}: each EXEC answers its own"
        );
        kv::unlink_matching(&redis, &format!("{prefix}:*")).await.expect("cleanup");
    }
}
