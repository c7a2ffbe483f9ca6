//! PostgreSQL: connecting with bounded timeouts, running migrations, and the small helpers
//! that turn visible SQL into statements.

pub(crate) mod budget;
pub(crate) mod migrator;

use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement, Value};
use sea_orm_migration::MigratorTrait;

use crate::config::Settings;
use crate::error::{AppError, AppResult};

/// Opens the pool. Fails within `connect_timeout` with one sentence when PostgreSQL is not there
/// (sea-orm would otherwise wait ~30 s).
pub(crate) async fn connect(settings: &Settings) -> AppResult<DatabaseConnection> {
    let url = settings.database_url()?;
    connect_url(url, settings.connect_timeout, settings.db_max_connections).await
}

/// The requests' pool: every statement under `STATEMENT_TIMEOUT`.
pub(crate) async fn connect_api(settings: &Settings) -> AppResult<DatabaseConnection> {
    let url = settings.database_url()?;
    connect_with(url, settings.connect_timeout, settings.db_max_connections, Some(settings.statement_timeout)).await
}

/// The background jobs' own pool (`JOBS_DB_MAX_CONNECTIONS`), apart from the requests'.
pub(crate) async fn connect_jobs(settings: &Settings) -> AppResult<DatabaseConnection> {
    let url = settings.database_url()?;
    connect_with(url, settings.connect_timeout, settings.jobs_db_max_connections, None).await
}

/// The searches' own pool (`SEARCH_DB_MAX_CONNECTIONS`, under `STATEMENT_TIMEOUT`), whose
/// connections plan every statement for its parameters (`plan_cache_mode =
/// force_custom_plan`).
///
/// The driver prepares each statement once per connection, and PostgreSQL switches a prepared
/// statement to a generic plan after five executions when it looks no dearer. For a text search
/// that plan is blind to the words: it walks the newest rows testing each one whatever the
/// query, which for a rare word (or `a or b` of two) reads the whole table, where the query's
/// own plan takes the few matches from the GIN index. Planning costs a fraction of a
/// millisecond here, against hundreds for the wrong plan; the other pools keep their cached
/// plans, which suit their point lookups.
///
/// They run no parallel workers (`max_parallel_workers_per_gather = 0`): a search reads a few
/// hundred rows, where starting workers costs more CPU than it saves time, and under load the
/// cores are busy with other requests anyway.
///
/// They price a page read out of order almost as one read in order (`random_page_cost =
/// 1.1`, against the default 4): the rows a search reads are hot in memory, and at the
/// default the planner ANDs a word's GIN bitmap with a bitmap of tens of thousands of
/// primary-key entries (5 ms for 30,000 on `bench search`'s course) to spare itself a few
/// hundred heap reads that cost less. `bench search`, the two builds interleaved on one course:
/// 129 and 132 searches/s (15.2 and 14.9 ms of CPU each) at 4, 137 and 137 (14.2 and 14.4
/// ms) at 1.1.
pub(crate) async fn connect_search(settings: &Settings) -> AppResult<DatabaseConnection> {
    connect_search_planned(settings, "force_custom_plan").await
}

/// The pool of searches from kept candidates (`cache::search`): `connect_search`'s, but every
/// statement on a generic plan (`plan_cache_mode = force_generic_plan`).
///
/// That statement matches text only on the rows stamped since the candidates were found,
/// reached through the `search_xid` indexes, and takes every other hit from its arrays: no
/// plan of it depends on the words. Planned for its parameters it was planned on every
/// search, and planning was most of its cost. `bench search --kinds search --searches 12000`,
/// both builds in one run on the kept course, every search from kept candidates: 739
/// searches/s, p99 52.5 ms, 2.51 ms of CPU each, planned per search; 1,282/s, p99 32.9 ms,
/// 1.49 ms on the generic plan.
pub(crate) async fn connect_search_kept(settings: &Settings) -> AppResult<DatabaseConnection> {
    connect_search_planned(settings, "force_generic_plan").await
}

/// A pool of searches (`SEARCH_DB_MAX_CONNECTIONS`, under `STATEMENT_TIMEOUT`) whose
/// statements are planned as `plan_cache_mode` says.
async fn connect_search_planned(settings: &Settings, plan_cache_mode: &'static str) -> AppResult<DatabaseConnection> {
    let url = settings.database_url()?;
    connect_with_options(
        url,
        settings.connect_timeout,
        settings.search_db_max_connections,
        Some(settings.statement_timeout),
        &[("plan_cache_mode", plan_cache_mode), ("max_parallel_workers_per_gather", "0"), ("random_page_cost", "1.1")],
    )
    .await
}

/// The pool of first-touch reads (`likes::first_touch`): `connections`, one per statement
/// those reads let run at once, under `STATEMENT_TIMEOUT`, and every statement on a generic
/// plan (`plan_cache_mode = force_generic_plan`).
///
/// The read takes arrays of (user, course) pairs. Planned for the parameters, each batch
/// would be planned again (its arrays' lengths make each custom plan look cheaper than the
/// generic one, so PostgreSQL never switches): measured in `bench storm`, planning was then
/// half of PostgreSQL's CPU. The one plan that suits every batch is a nested lookup per pair
/// through the like tables' (user_id, target) indexes, which the statement's `OFFSET 0`
/// fences keep whatever the arrays hold.
pub(crate) async fn connect_first_touch(settings: &Settings, connections: u32) -> AppResult<DatabaseConnection> {
    let url = settings.database_url()?;
    connect_with_options(
        url,
        settings.connect_timeout,
        connections,
        Some(settings.statement_timeout),
        &[("plan_cache_mode", "force_generic_plan")],
    )
    .await
}

pub async fn connect_url(url: &str, timeout: Duration, max_connections: u32) -> AppResult<DatabaseConnection> {
    connect_with(url, timeout, max_connections, None).await
}

/// A pool of at most `max_connections`, each connection's statements cancelled by PostgreSQL
/// after `statement_timeout` when one is given.
async fn connect_with(
    url: &str,
    timeout: Duration,
    max_connections: u32,
    statement_timeout: Option<Duration>,
) -> AppResult<DatabaseConnection> {
    connect_with_options(url, timeout, max_connections, statement_timeout, &[]).await
}

/// `connect_with`, each connection also started with the run-time `parameters` given.
async fn connect_with_options(
    url: &str,
    timeout: Duration,
    max_connections: u32,
    statement_timeout: Option<Duration>,
    parameters: &[(&'static str, &'static str)],
) -> AppResult<DatabaseConnection> {
    let url = &without_tls_on_loopback(url);
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .connect_timeout(timeout)
        .acquire_timeout(timeout)
        .max_connections(max_connections)
        .min_connections(0)
        .sqlx_logging(false);
    // Sent with the connection's start-up parameters: no extra round trip per connection.
    let mut startup: Vec<(&'static str, String)> = parameters.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    if let Some(limit) = statement_timeout {
        startup.push(("statement_timeout", limit.as_millis().to_string()));
    }
    if !startup.is_empty() {
        options.map_sqlx_postgres_opts(move |pg| pg.options(startup.iter().map(|(k, v)| (*k, v.as_str()))));
    }
    let db = tokio::time::timeout(timeout + Duration::from_millis(500), Database::connect(options))
        .await
        .map_err(|_| unreachable_db(url, "timed out"))?
        .map_err(|e| unreachable_db(url, &e.to_string()))?;
    // A pool connects lazily; prove the server answers before anyone relies on it.
    db.execute_unprepared("SELECT 1").await.map_err(|e| unreachable_db(url, &e.to_string()))?;
    Ok(db)
}

/// Adds `sslmode=disable` to a URL that names a loopback host and no `sslmode`.
///
/// sqlx's default, `prefer`, negotiates TLS even on 127.0.0.1, where it protects nothing and
/// costs CPU on both ends of every statement. sqlx 0.9.0's stall (no TCP_NODELAY, about 40 ms
/// per statement larger than one TLS record) is gone in 0.9.1, but the encryption is not: in one
/// `bench suite` each, the like paths that run SQL used 10–18 % more CPU per like with TLS
/// (PostgreSQL's share included), and `bench storm --db-sslmode disable` measures it again. A
/// URL that says `sslmode=…` is left as it is; so is any other host.
pub(crate) fn without_tls_on_loopback(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else { return url.to_owned() };
    let loopback = match parsed.host() {
        // postgres:// is not a scheme the URL standard knows, so its IPv4 hosts stay text.
        Some(url::Host::Domain(name)) => {
            name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if !loopback || parsed.query_pairs().any(|(key, _)| key == "sslmode") {
        return url.to_owned();
    }
    let separator = if parsed.query().is_some() { '&' } else { '?' };
    format!("{url}{separator}sslmode=disable")
}

fn unreachable_db(url: &str, why: &str) -> AppError {
    AppError::Config(format!("cannot reach PostgreSQL at {} ({why})", redact(url)))
}

/// Hides a password in a URL before it is printed.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Applies all pending migrations; a no-op when the schema is current.
pub async fn migrate(db: &DatabaseConnection) -> AppResult<()> {
    migrator::Migrator::up(db, None).await?;
    Ok(())
}

/// Counts the SQL statements a pool has run (benchmarks and tests report statements per page).
/// One count for the process; the `sql_statements_total` metric also says whose statement it
/// was (`role`: `api` for requests, `background` for the worker and the jobs), so a
/// per-request figure is not blurred by a job polling in the same process.
#[derive(Clone, Debug, Default)]
pub struct StatementCounter(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl StatementCounter {
    /// Installs a new counter on `db`, its statements labelled `role`; clones of `db` made
    /// afterwards share it.
    pub fn attach(db: &mut DatabaseConnection, role: &'static str) -> Self {
        let counter = Self::default();
        counter.attach_also(db, role);
        counter
    }

    /// Counts the statements of another handle of the pool (a clone made before `attach`)
    /// here too, labelled `role`.
    pub fn attach_also(&self, db: &mut DatabaseConnection, role: &'static str) {
        let inner = self.0.clone();
        db.set_metric_callback(move |_| {
            inner.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            budget::charge_current();
            metrics::counter!(crate::telemetry::names::SQL_STATEMENTS, "role" => role).increment(1);
        });
    }

    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A PostgreSQL statement with positional `$n` parameters.
pub fn stmt<I: IntoIterator<Item = Value>>(sql: &str, values: I) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

#[cfg(test)]
mod tests {
    use super::without_tls_on_loopback;

    #[test]
    fn loopback_urls_without_an_sslmode_get_sslmode_disable() {
        for (url, expected) in [
            ("postgres://postgres@127.0.0.1:5432/db", "postgres://postgres@127.0.0.1:5432/db?sslmode=disable"),
            (
                "postgres://u:p@localhost/db?application_name=x",
                "postgres://u:p@localhost/db?application_name=x&sslmode=disable",
            ),
            ("postgres://[::1]:5432/db", "postgres://[::1]:5432/db?sslmode=disable"),
        ] {
            assert_eq!(without_tls_on_loopback(url), expected);
        }
    }

    #[test]
    fn other_hosts_and_explicit_sslmodes_are_left_alone() {
        for url in [
            "postgres://postgres@db.example.com:5432/db",
            "postgres://postgres@10.0.0.7/db",
            "postgres://postgres@127.0.0.1/db?sslmode=require",
            "postgres:///db?host=/var/run/postgresql",
            "not a url",
        ] {
            assert_eq!(without_tls_on_loopback(url), url);
        }
    }
}
