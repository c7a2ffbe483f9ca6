//! Speaking to a Redis Cluster through the same `Redis` type as to one node: connecting from a
//! list of seed nodes, sending a pipeline whose commands live in many hash slots as one
//! sub-pipeline per slot (the cluster refuses a pipeline that crosses slots), and listing the
//! masters so that a SCAN can visit every one of them.
//!
//! A script or a transaction (MULTI/EXEC) is never split: its keys must share one slot, which
//! the key layout (`keys`) guarantees with hash tags.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::try_join_all;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Arg, Cmd, Pipeline, RedisResult, Value};

use crate::error::{AppError, AppResult};

/// Opens a cluster connection from seed nodes (`redis://host:port` each), failing within
/// `timeout` with one sentence.
pub(crate) async fn connect(nodes: &[String], timeout: Duration) -> AppResult<ClusterConnection> {
    let list = nodes.join(",");
    let client = ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(3)
        .build()
        .map_err(|e| AppError::Config(format!("REDIS_CLUSTER_NODES `{list}` is not a list of Redis URLs ({e})")))?;
    let connect = client.get_async_connection();
    let mut conn = tokio::time::timeout(timeout + Duration::from_millis(500), connect)
        .await
        .map_err(|_| AppError::Config(format!("cannot reach the Redis Cluster at {list} (timed out)")))?
        .map_err(|e| AppError::Config(format!("cannot reach the Redis Cluster at {list} ({e})")))?;
    let _: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(|e| AppError::Config(format!("cannot reach the Redis Cluster at {list} ({e})")))?;
    Ok(conn)
}

/// The hash slot of a command's first key, or None for a command without one. Most commands
/// name it first; scripts (`EVALSHA sha numkeys key…`) after the digest and the count;
/// container commands (`XINFO GROUPS key`, `XGROUP CREATE key …`, `OBJECT`, `MEMORY`) after
/// their subcommand; stream reads after `STREAMS`.
pub(crate) fn slot_of(cmd: &Cmd) -> Option<Slot> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()??.to_ascii_uppercase();
    let key = match name.as_slice() {
        b"EVALSHA" | b"EVAL" | b"EVALSHA_RO" | b"EVAL_RO" | b"FCALL" | b"FCALL_RO" => {
            let _script = args.next()?;
            let numkeys = std::str::from_utf8(args.next()??).ok()?.parse::<usize>().ok()?;
            if numkeys == 0 {
                return None;
            }
            args.next()??
        }
        b"XINFO" | b"XGROUP" | b"OBJECT" | b"MEMORY" => {
            let _subcommand = args.next()?;
            args.next()??
        }
        b"XREAD" | b"XREADGROUP" => {
            let mut rest = args.by_ref().skip_while(|arg| !arg.is_some_and(|a| a.eq_ignore_ascii_case(b"STREAMS")));
            let _streams = rest.next()?;
            rest.next()??
        }
        b"PING" | b"TIME" | b"INFO" | b"SCAN" | b"CLUSTER" | b"CONFIG" | b"SCRIPT" => return None,
        _ => args.next()??,
    };
    Some(Slot::for_key(key))
}

/// Sends a non-transactional pipeline as one sub-pipeline per hash slot, all at once, and
/// returns every command's reply in the pipeline's order (as one node would). A command without
/// a key goes with its neighbours: MULTI with the command after it, anything else (EXEC) with
/// the command before it, so a MULTI … EXEC written into the pipeline stays whole on its slot.
pub(crate) async fn send_split(conn: &ClusterConnection, pipeline: &Pipeline) -> RedisResult<Vec<Value>> {
    let commands: Vec<&Cmd> = pipeline.cmd_iter().collect();
    let slots = neighbour_slots(&commands);
    let mut order: Vec<Option<Slot>> = Vec::new();
    let mut groups: HashMap<Option<Slot>, (Pipeline, Vec<usize>)> = HashMap::new();
    for (index, (cmd, slot)) in commands.iter().zip(slots).enumerate() {
        let group = groups.entry(slot).or_insert_with(|| {
            order.push(slot);
            (Pipeline::new(), Vec::new())
        });
        group.0.add_command((*cmd).clone());
        group.1.push(index);
    }
    let sends = order.into_iter().filter_map(|slot| groups.remove(&slot).map(|group| (slot, group))).map(
        |(slot, (sub, indexes))| {
            let conn = conn.clone();
            async move { Ok::<_, redis::RedisError>((indexes, send_to_slot(conn, slot, sub).await?)) }
        },
    );
    let mut replies = vec![Value::Nil; pipeline.len()];
    for (indexes, values) in try_join_all(sends).await? {
        for (index, value) in indexes.into_iter().zip(values) {
            replies[index] = value;
        }
    }
    Ok(replies)
}

/// The slot each command is sent to: its key's, or for a keyless one its neighbour's (see
/// `send_split`).
fn neighbour_slots(commands: &[&Cmd]) -> Vec<Option<Slot>> {
    let own: Vec<Option<Slot>> = commands.iter().map(|cmd| slot_of(cmd)).collect();
    let is_multi =
        |cmd: &Cmd| matches!(cmd.args_iter().next(), Some(Arg::Simple(name)) if name.eq_ignore_ascii_case(b"MULTI"));
    let next_keyed = |from: usize| own[from..].iter().flatten().next().copied();
    let mut previous: Option<Slot> = None;
    let mut slots = Vec::with_capacity(commands.len());
    for (index, cmd) in commands.iter().enumerate() {
        let slot = match own[index] {
            Some(slot) => Some(slot),
            None if is_multi(cmd) => next_keyed(index).or(previous),
            None => previous.or_else(|| next_keyed(index)),
        };
        if own[index].is_some() {
            previous = own[index];
        }
        slots.push(slot);
    }
    slots
}

/// Attempts at one slot's sub-pipeline while the cluster redirects it.
const REDIRECT_ATTEMPTS: u32 = 5;

/// Sends one slot's sub-pipeline to the slot's master. When the node answers that the slot is
/// elsewhere (MOVED: a replica was promoted, a slot migrated) or not served for now
/// (TRYAGAIN, CLUSTERDOWN, ASK), nothing of it ran there: every command of a sub-pipeline
/// shares the slot, so all of them got the same answer. It is then sent again, to the node
/// MOVED names, after a short pause for the others, at most `REDIRECT_ATTEMPTS` times; the last
/// answer is returned as it is.
async fn send_to_slot(mut conn: ClusterConnection, slot: Option<Slot>, sub: Pipeline) -> RedisResult<Vec<Value>> {
    let mut route = match slot {
        Some(slot) => SingleNodeRoutingInfo::SpecificNode(Route::with_slot(slot, SlotAddr::Master)),
        None => SingleNodeRoutingInfo::RandomPrimary,
    };
    let count = sub.len();
    let mut pause = Duration::from_millis(20);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let replies = conn.route_pipeline(sub.clone(), 0, count, route.clone()).await?;
        let redirect = replies.iter().find_map(|reply| match reply {
            Value::ServerError(err) if matches!(err.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN") => {
                Some((err.code().to_owned(), err.details().map(str::to_owned)))
            }
            _ => None,
        });
        let Some((code, details)) = redirect else { return Ok(replies) };
        if attempt >= REDIRECT_ATTEMPTS {
            return Ok(replies);
        }
        // MOVED <slot> <host>:<port>: go there directly; otherwise ask the slot's master again.
        if let Some((host, port)) = (code == "MOVED")
            .then(|| details.as_deref().and_then(|d| d.split_whitespace().nth(1)).and_then(|a| a.rsplit_once(':')))
            .flatten()
            .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
        {
            route = SingleNodeRoutingInfo::ByAddress { host, port };
        } else {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }
}

/// A master node's address, as `CLUSTER NODES` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeAddress {
    pub host: String,
    pub port: u16,
}

impl NodeAddress {
    /// Routes a command to this node.
    pub(crate) fn route(&self) -> RoutingInfo {
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: self.host.clone(), port: self.port })
    }
}

/// The masters that serve at least one slot.
pub(crate) async fn masters(conn: &ClusterConnection) -> AppResult<Vec<NodeAddress>> {
    let mut conn = conn.clone();
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await?;
    Ok(parse_masters(&nodes))
}

/// Masters with slots from `CLUSTER NODES` text: `<id> <host:port@bus> <flags> <master> … <slots>`.
fn parse_masters(nodes: &str) -> Vec<NodeAddress> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serves_slots = fields.len() > 8;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") || !serves_slots {
                return None;
            }
            let address = fields.get(1)?.split('@').next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some(NodeAddress { host: host.to_owned(), port: port.parse().ok()? })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_is_the_first_key_s_or_a_script_s_first_key() {
        let get = redis::cmd("GET").arg("{s1}:a").clone();
        assert_eq!(slot_of(&get), Some(Slot::for_key("s1")));
        let mut script = redis::cmd("EVALSHA");
        script.arg("0123abcd").arg(2).arg("{s7}:x").arg("{s7}:y").arg("argv");
        assert_eq!(slot_of(&script), Some(Slot::for_key("s7")));
        let mut keyless = redis::cmd("EVALSHA");
        keyless.arg("0123abcd").arg(0).arg("argv");
        assert_eq!(slot_of(&keyless), None);
        let groups = redis::cmd("XINFO").arg("GROUPS").arg("{s3}:likes").clone();
        assert_eq!(slot_of(&groups), Some(Slot::for_key("s3")));
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP").arg("g").arg("c").arg("COUNT").arg(10).arg("STREAMS").arg("{s4}:likes").arg(">");
        assert_eq!(slot_of(&read), Some(Slot::for_key("s4")));
        assert_eq!(slot_of(&redis::cmd("PING")), None);
    }

    #[test]
    fn a_transaction_written_into_a_pipeline_stays_on_its_slot() {
        let mut pipe = redis::pipe();
        for tag in ["{a}", "{b}"] {
            pipe.cmd("MULTI").cmd("DEL").arg(format!("{tag}:x")).cmd("SREM").arg(format!("{tag}:y")).arg(1).cmd("EXEC");
        }
        pipe.cmd("PING");
        let commands: Vec<&Cmd> = pipe.cmd_iter().collect();
        let (a, b) = (Some(Slot::for_key("a")), Some(Slot::for_key("b")));
        assert_eq!(neighbour_slots(&commands), vec![a, a, a, a, b, b, b, b, b]);
    }

    #[test]
    fn masters_are_the_nodes_flagged_master_that_serve_slots() {
        let nodes = "\
a 127.0.0.1:7003@17003 slave c 0 1 3 connected
b 127.0.0.1:7001@17001 master - 0 1 2 connected 5461-10922
c 127.0.0.1:7002@17002 myself,master - 0 1 3 connected 10923-16383
d 127.0.0.1:7006@17006 master - 0 1 4 connected
e 127.0.0.1:7000@17000 master,fail - 0 1 1 disconnected 0-5460
";
        let masters = parse_masters(nodes);
        assert_eq!(
            masters,
            vec![
                NodeAddress { host: "127.0.0.1".into(), port: 7001 },
                NodeAddress { host: "127.0.0.1".into(), port: 7002 }
            ]
        );
    }
}
