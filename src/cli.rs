//! The command line: subcommands and what each one runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use sea_orm::{ConnectionTrait, TransactionTrait};

use crate::auth::TokenKeys;
use crate::config::{Settings, parse_duration};
use crate::error::{AppError, AppResult};
use crate::forum::roster::{self, import, people};
use crate::forum::users::{self, UserRow};
use crate::graphql::ids::{self, NodeKind};
use crate::kv::keys::Keys;
use crate::likes::recount;
use crate::startup::{Application, connect_state, run_worker_until_stopped, shutdown_signal};
use crate::{db, graphql, kv, ops, seed, telemetry};

#[derive(Debug, Parser)]
#[command(name = "course-forum", version, about = "A GraphQL forum for every course")]
pub struct Cli {
    #[command(flatten)]
    pub settings: Settings,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve GraphQL (POST /graphql) and GraphiQL (GET /).
    Serve,
    /// Apply pending database migrations (idempotent).
    Migrate,
    /// Load data; `--demo` writes the demo forum and prints its ids and tokens as JSON.
    Seed {
        #[arg(long)]
        demo: bool,
    },
    /// Mint a bearer token for a user (development and tests).
    Token {
        /// The user's id: a number, or its global id.
        #[arg(long)]
        user: String,
        /// How long the token is valid.
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Print the GraphQL schema (SDL).
    ExportSchema,
    /// Run only the workers: the like worker (stream consumer, or recount job), the view aggregator
    /// and the feed fan-out.
    Worker,
    /// Recount every post's and comment's like counter, and every post's comment count, from
    /// their rows (which rebuilds the HOT and TOP orders); prints what it fixed.
    Reconcile,
    /// Drop every liked-set in Redis so each reloads from PostgreSQL on next use.
    ResetLikeCache,
    /// Drop every cached post, timeline and celebrity list in Redis (they rebuild from PostgreSQL).
    ResetFeedCache,
    /// Verify the invariants (every counter equals its rows, no dead letters waiting, like lag
    /// under --max-lag); prints a report and exits non-zero when one fails.
    Check {
        /// The oldest unapplied like may be at most this old.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        max_lag: Duration,
    },
    /// Course rosters from a file (an LMS export).
    Roster {
        #[command(subcommand)]
        command: RosterCommand,
    },
    /// Administrators: who may create courses and manage every course's roster.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum RosterCommand {
    /// Make the database match a roster CSV (header
    /// `course_code,course_title,handle,display_name,role[,issuer,subject]`): every course the
    /// file names gets exactly the members it lists, with their roles; missing courses and users
    /// are created. Idempotent. A file with bad lines is refused whole, every bad line listed.
    Import {
        /// The CSV file.
        file: PathBuf,
        /// Print the difference and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Make a user an administrator. A person is found by their identity (--issuer and
    /// --subject) or their id; a handle names only a user an operator made (roster import,
    /// seed), never one who signed themselves up, whose handle is their own choice.
    Grant {
        /// A user id (number or User global id), or a handle (`alice` or `@alice`) of a user an
        /// operator made. With --issuer/--subject and an identity nobody has yet: the user to
        /// link it to (one an operator made, with no identity yet).
        #[arg(long, required_unless_present = "issuer")]
        user: Option<String>,
        /// The person's issuer (`iss`) at the identity provider; with --subject.
        #[arg(long, requires = "subject")]
        issuer: Option<String>,
        /// The person's subject (`sub`) at the identity provider; with --issuer.
        #[arg(long, requires = "issuer")]
        subject: Option<String>,
    },
    /// Take the administrator role away from a user.
    Revoke {
        /// A user id (number or User global id), or a handle (`alice` or `@alice`).
        #[arg(long)]
        user: String,
    },
    /// List the administrators.
    List,
}

pub async fn run(cli: Cli) -> AppResult<()> {
    let settings = cli.settings;
    match cli.command {
        Command::Serve => {
            let traces = telemetry::init_service(settings.log_format)?;
            let app = Application::build(settings).await?;
            let served = app.run_until_stopped(shutdown_signal()).await;
            if let Some(traces) = traces {
                traces.shutdown();
            }
            served
        }
        Command::Migrate => {
            telemetry::init(settings.log_format);
            let db = db::connect(&settings).await?;
            db::migrate(&db).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Seed { demo } => {
            if !demo {
                return Err(AppError::Config("only `seed --demo` exists: pass --demo".into()));
            }
            telemetry::init(settings.log_format);
            let tokens = TokenKeys::new(settings.jwt_secret()?)?;
            let db = db::connect(&settings).await?;
            db::migrate(&db).await?;
            let url = format!("http://{}/graphql", settings.bind);
            let summary = seed::seed_demo(&db, &tokens, url).await?;
            let json = serde_json::to_string_pretty(&summary)
                .map_err(|e| AppError::Internal(format!("cannot encode the summary: {e}")))?;
            println!("{json}");
            Ok(())
        }
        Command::Token { user, ttl } => {
            let tokens = TokenKeys::new(settings.jwt_secret()?)?;
            let user_id = match user.parse::<i64>() {
                Ok(id) if id > 0 => id,
                _ => ids::decode_one(&async_graphql::ID(user), NodeKind::User)
                    .map_err(|_| AppError::Config("--user must be a user id (a number or a User global id)".into()))?,
            };
            println!("{}", tokens.mint(user_id, ttl)?);
            Ok(())
        }
        Command::Worker => {
            let traces = telemetry::init_service(settings.log_format)?;
            settings.validate_for_serve()?;
            let state = connect_state(settings).await?;
            let worked = run_worker_until_stopped(state, shutdown_signal()).await;
            if let Some(traces) = traces {
                traces.shutdown();
            }
            worked
        }
        Command::Reconcile => {
            telemetry::init(settings.log_format);
            let db = db::connect(&settings).await?;
            let fixed = recount::reconcile_all(&db, 1000).await?;
            for change in &fixed {
                println!(
                    "fixed {} {} -> like_count {}",
                    change.target.kind_name(),
                    change.target.member(),
                    change.like_count
                );
            }
            println!("reconcile: {} counter(s) fixed", fixed.len());
            // Comment counts too: HOT order is computed from them (and TOP from the like
            // counts just fixed), so this rebuilds both rankings.
            let comments_fixed = crate::forum::comments::recount_post_comments(&db, 1000).await?;
            for (post_id, comment_count) in &comments_fixed {
                println!("fixed post p:{post_id} -> comment_count {comment_count}");
            }
            println!("reconcile: {} comment count(s) fixed; HOT and TOP follow the counts", comments_fixed.len());
            Ok(())
        }
        Command::ResetLikeCache => {
            telemetry::init(settings.log_format);
            settings.validate_for_serve()?;
            let state = connect_state(settings).await?;
            // Orphans first: a set reloaded between the two steps would overlay them again.
            let orphans = ops::liked_sets::pending_orphans(&state.redis, &state.keys, true).await?;
            let dropped = state.likes.liked_sets().drop_all().await?;
            println!(
                "reset-like-cache: dropped {dropped} liked-set(s), which reload from PostgreSQL and the pending events \
                 on next use, and {} pending record(s) whose event was no longer in its stream",
                orphans.len()
            );
            Ok(())
        }
        Command::ResetFeedCache => {
            telemetry::init(settings.log_format);
            settings.validate_for_serve()?;
            let state = connect_state(settings).await?;
            let mut dropped = 0;
            for pattern in state.keys.feed_and_cache_patterns() {
                dropped += kv::unlink_matching(&state.redis, &pattern).await?;
            }
            println!(
                "reset-feed-cache: dropped {dropped} key(s); posts, timelines and celebrity lists rebuild from PostgreSQL"
            );
            Ok(())
        }
        Command::Check { max_lag } => {
            telemetry::init(settings.log_format);
            let db = db::connect(&settings).await?;
            let redis = kv::connect_to(&settings.redis_target()?, settings.connect_timeout, "check").await?;
            let keys = Keys::new(settings.redis_key_prefix.clone(), settings.like_stream_shards);
            let report = ops::check::run(&db, &redis, &keys, max_lag).await?;
            print!("{report}");
            match report.failed() {
                0 => Ok(()),
                failed => Err(AppError::CheckFailed { failed }),
            }
        }
        Command::Roster { command: RosterCommand::Import { file, dry_run } } => {
            telemetry::init(settings.log_format);
            roster_import(&settings, &file, dry_run).await
        }
        Command::Admin { command } => {
            telemetry::init(settings.log_format);
            let db = db::connect(&settings).await?;
            admin(&db, command).await
        }
        Command::ExportSchema => {
            print!("{}", graphql::sdl());
            Ok(())
        }
    }
}

/// `roster import`: check the whole file first (every bad line reported, nothing applied), then
/// plan and apply in one transaction; `--dry-run` prints the same difference and rolls back.
async fn roster_import(settings: &crate::config::Settings, path: &Path, dry_run: bool) -> AppResult<()> {
    let name = path.display().to_string();
    let reader =
        std::fs::File::open(path).map_err(|e| AppError::Config(format!("cannot open the roster file {name}: {e}")))?;
    let file = import::parse(std::io::BufReader::new(reader)).map_err(|errors| import::bad_file(&name, errors))?;
    let db = db::connect(settings).await?;
    let txn = db.begin().await?;
    let plan = match import::plan(&txn, &file).await {
        Ok(plan) => plan,
        Err(import::ImportError::Failed(err)) => return Err(err),
    };
    print!("{plan}");
    if dry_run {
        txn.rollback().await?;
        println!("roster import --dry-run: nothing was written; {}", plan.summary());
        return Ok(());
    }
    import::apply(&txn, &plan).await?;
    txn.commit().await?;
    // Serving instances hear of every membership change from the trigger on course_members.
    println!("roster import: {}", plan.summary());
    Ok(())
}

async fn admin(db: &sea_orm::DatabaseConnection, command: AdminCommand) -> AppResult<()> {
    match command {
        AdminCommand::Grant { user, issuer, subject } => {
            let identity = issuer.zip(subject);
            // One transaction, under the lock `roster import` takes: the user checked is the
            // user linked and granted.
            let txn = db.begin().await?;
            txn.execute_unprepared(&format!("SELECT pg_advisory_xact_lock({})", people::LINK_LOCK)).await?;
            let (grantee, linked) = grantee(&txn, user.as_deref(), identity.as_ref()).await?;
            let granted = roster::grant_admin(&txn, grantee).await?;
            txn.commit().await?;
            let user = users::find(db, grantee).await?.ok_or_else(|| AppError::NotFound("the user is gone".into()))?;
            if let Some((issuer, subject)) = linked {
                println!("admin grant: linked {issuer} {subject} to {}", describe(&user));
            }
            if granted {
                println!("admin grant: {} is now an administrator", describe(&user));
            } else {
                println!("admin grant: {} was an administrator already; nothing changed", describe(&user));
            }
        }
        AdminCommand::Revoke { user } => {
            let user = find_user(db, &user).await?;
            if roster::revoke_admin(db, user.id).await? {
                println!("admin revoke: {} is no longer an administrator", describe(&user));
            } else {
                println!("admin revoke: {} was not an administrator; nothing changed", describe(&user));
            }
        }
        AdminCommand::List => {
            let admins = roster::admins(db).await?;
            for user in &admins {
                println!("{}", describe(user));
            }
            println!("admin list: {} administrator(s)", admins.len());
        }
    }
    Ok(())
}

/// Who `admin grant` names, by the rule of `forum::roster::people`: an identity finds the user
/// linked to it (and must agree with `--user`, if given); an identity nobody has is linked to
/// `--user` if that user may take it; a handle alone names only a user an operator made.
/// Returns the user's id, and the identity linked now.
async fn grantee(
    db: &impl ConnectionTrait,
    user: Option<&str>,
    identity: Option<&(String, String)>,
) -> AppResult<(i64, Option<(String, String)>)> {
    let named = match user {
        Some(raw) => Some(find_known(db, raw).await?),
        None => None,
    };
    let Some((issuer, subject)) = identity else {
        let Some((known, by_handle)) = named else {
            return Err(AppError::Config("admin grant needs --user, or --issuer and --subject".into()));
        };
        if by_handle {
            people::may_name_by_handle(&known).map_err(|refusal| AppError::Conflict(format!("refused: {refusal}")))?;
        }
        return Ok((known.id, None));
    };
    let issuer = roster::check_text("--issuer", issuer, roster::MAX_ISSUER_CHARS).map_err(AppError::BadUserInput)?;
    let subject =
        roster::check_text("--subject", subject, roster::MAX_SUBJECT_CHARS).map_err(AppError::BadUserInput)?;
    if let Some(owner) = people::by_identity(db, issuer, subject).await? {
        if let Some((known, _)) = &named
            && known.id != owner.id
        {
            return Err(AppError::Conflict(format!(
                "refused: {issuer} {subject} is @{}'s identity, not @{}'s",
                owner.handle, known.handle
            )));
        }
        return Ok((owner.id, None));
    }
    let Some((known, _)) = named else {
        return Err(AppError::NotFound(format!(
            "nobody has {issuer} {subject} yet: let them sign in first, or give --user to name the account an \
             operator made for them"
        )));
    };
    people::may_link(&known).map_err(|refusal| {
        AppError::Conflict(format!("refused: {refusal}; {issuer} {subject} was not linked and nobody was granted"))
    })?;
    people::link_all(db, &[(issuer.to_owned(), subject.to_owned(), known.id)]).await?;
    Ok((known.id, Some((issuer.to_owned(), subject.to_owned()))))
}

/// `--user` as `people` sees them, and whether it was a handle (a name) rather than an id.
async fn find_known(db: &impl ConnectionTrait, raw: &str) -> AppResult<(people::Known, bool)> {
    let raw = raw.trim();
    let found = if let Some(handle) = raw.strip_prefix('@') {
        (people::by_handle(db, handle).await?, true)
    } else if let Ok(id) = raw.parse::<i64>() {
        (people::by_id(db, id).await?, false)
    } else if let Ok(id) = ids::decode_one(&async_graphql::ID(raw.to_owned()), NodeKind::User) {
        (people::by_id(db, id).await?, false)
    } else {
        (people::by_handle(db, raw).await?, true)
    };
    match found {
        (Some(known), by_handle) => Ok((known, by_handle)),
        (None, _) => Err(AppError::NotFound(format!("--user `{raw}`: no such user"))),
    }
}

/// `--user`: `@handle` or a handle, a number (an id), or a User global id. A handle made only
/// of digits needs its `@`, since the bare number is taken as an id.
async fn find_user(db: &sea_orm::DatabaseConnection, raw: &str) -> AppResult<UserRow> {
    let raw = raw.trim();
    let row = if let Some(handle) = raw.strip_prefix('@') {
        users::find_by_handle(db, handle).await?
    } else if let Ok(id) = raw.parse::<i64>() {
        users::find(db, id).await?
    } else if let Ok(id) = ids::decode_one(&async_graphql::ID(raw.to_owned()), NodeKind::User) {
        users::find(db, id).await?
    } else {
        users::find_by_handle(db, raw).await?
    };
    row.ok_or_else(|| AppError::NotFound(format!("--user `{raw}`: no such user")))
}

fn describe(user: &UserRow) -> String {
    format!("@{} ({}, id {}, {})", user.handle, user.display_name, user.id, ids::encode(NodeKind::User, user.id).0)
}
