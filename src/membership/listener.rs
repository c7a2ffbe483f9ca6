//! The one LISTEN of each server process: `course_members_changed` notifications (sent by the
//! trigger of migration 0007 after every commit that touched `course_members`) turned into
//! `Memberships::changed`, and a lost connection into "stop trusting memory", then, once it
//! listens again, "everything changed".

use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm::sqlx::postgres::PgListener;

use super::Memberships;
use crate::backoff::Backoff;
use crate::hooks::Gate;
use crate::telemetry::names;

/// The channel the trigger notifies.
pub(crate) const CHANNEL: &str = "course_members_changed";

/// Points where a test can hold the listener (`crate::hooks::Gate`).
#[derive(Default)]
pub struct ListenerHooks {
    /// After a connection was lost and before the listener connects again: notifications sent
    /// while it is held are lost, as they would be during a real outage.
    pub before_reconnect: Gate,
    /// After the warm read a chunk of members and before it keeps them (`warm::warm`): a
    /// change heard while it is held must make the warm read the chunk again.
    pub after_warm_read: Gate,
}

/// Listens for as long as the task runs (it is aborted at shutdown), reconnecting with backoff
/// whenever the connection is lost. Memory is trusted only between a successful LISTEN and the
/// next failure.
/// `warm_db`, the background jobs' pool, serves the warm (`warm::warm`), so its statements
/// neither take the requests' connections nor count as theirs.
pub(crate) async fn run(db: DatabaseConnection, warm_db: DatabaseConnection, memberships: Memberships) {
    let hooks = memberships.listener_hooks();
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
    let mut first = true;
    loop {
        if !first {
            hooks.before_reconnect.pass().await;
        }
        first = false;
        let mut listener = match listen(&db).await {
            Ok(listener) => listener,
            Err(err) => {
                tracing::warn!(error = %err, "cannot LISTEN for membership changes; memberships come from PostgreSQL meanwhile");
                tokio::time::sleep(backoff.failed()).await;
                continue;
            }
        };
        backoff.reset();
        memberships.start_trusting();
        // Concurrent with the notifications below: a change heard while a chunk is read
        // discards that chunk (`warm::warm`).
        let warming = tokio::spawn({
            let (db, memberships) = (warm_db.clone(), memberships.clone());
            async move {
                if let Err(err) = super::warm::warm(&db, &memberships).await {
                    tracing::warn!(error = %err, "warming the membership cache failed; memberships are read on first use");
                }
                memberships.warm_ended();
            }
        });
        metrics::gauge!(names::MEMBERSHIP_LISTENER_CONNECTED).set(1.0);
        tracing::debug!("listening for membership changes");
        let lost = loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    metrics::counter!(names::MEMBERSHIP_NOTIFICATIONS).increment(1);
                    apply(&memberships, notification.payload());
                }
                Ok(None) => break "the connection was lost".to_owned(),
                Err(err) => break err.to_string(),
            }
        };
        warming.abort();
        memberships.stop_trusting();
        metrics::gauge!(names::MEMBERSHIP_LISTENER_CONNECTED).set(0.0);
        tracing::warn!(why = %lost, "stopped hearing membership changes; reconnecting (memberships come from PostgreSQL meanwhile)");
    }
}

async fn listen(db: &DatabaseConnection) -> Result<PgListener, sea_orm::sqlx::Error> {
    // A connection of the pool, kept for as long as it lives.
    let mut listener = PgListener::connect_with(db.get_postgres_connection_pool()).await?;
    // A lost connection is handled here (a new listener), not inside try_recv.
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// One notification: `<user_id>:<course_id>`, `*` for "anything may have changed", or
/// `barrier:<n>`, which changes nothing (see `Memberships::barrier_passed`).
fn apply(memberships: &Memberships, payload: &str) {
    match parse(payload) {
        Some(Change::User(user_id)) => memberships.changed(user_id),
        Some(Change::Everything) => memberships.everything_changed(),
        Some(Change::Barrier(n)) => memberships.pass_barrier(n),
        None => {
            tracing::warn!(payload, "unreadable membership notification: treating everything as changed");
            memberships.everything_changed();
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Change {
    User(i64),
    Everything,
    Barrier(u64),
}

fn parse(payload: &str) -> Option<Change> {
    if payload == "*" {
        return Some(Change::Everything);
    }
    if let Some(n) = payload.strip_prefix("barrier:") {
        return n.parse().ok().map(Change::Barrier);
    }
    let (user, course) = payload.split_once(':')?;
    course.parse::<i64>().ok()?;
    user.parse::<i64>().ok().map(Change::User)
}

#[cfg(test)]
mod tests {
    use super::{Change, parse};

    #[test]
    fn payloads_name_a_user_or_everything() {
        assert_eq!(parse("12:7"), Some(Change::User(12)));
        assert_eq!(parse("*"), Some(Change::Everything));
        assert_eq!(parse("barrier:42"), Some(Change::Barrier(42)));
        assert_eq!(parse("barrier:x"), None);
        assert_eq!(parse("12"), None);
        assert_eq!(parse("x:7"), None);
        assert_eq!(parse("12:y"), None);
    }
}
