//! The command line: subcommands and what each one runs.

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::auth::TokenKeys;
use crate::config::{Settings, parse_duration};
use crate::error::{AppError, AppResult};
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
    /// Recount every post's and comment's like counter from its rows; prints what it fixed.
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
}

pub async fn run(cli: Cli) -> AppResult<()> {
    let settings = cli.settings;
    match cli.command {
        Command::Serve => {
            telemetry::init(settings.log_format);
            let app = Application::build(settings).await?;
            app.run_until_stopped(shutdown_signal()).await
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
            telemetry::init(settings.log_format);
            settings.validate_for_serve()?;
            let state = connect_state(settings).await?;
            run_worker_until_stopped(state, shutdown_signal()).await
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
            let redis = kv::connect(settings.redis_url()?, settings.connect_timeout, "check").await?;
            let keys = Keys::new(settings.redis_key_prefix.clone(), settings.like_stream_shards);
            let report = ops::check::run(&db, &redis, &keys, max_lag).await?;
            print!("{report}");
            match report.failed() {
                0 => Ok(()),
                failed => Err(AppError::CheckFailed { failed }),
            }
        }
        Command::ExportSchema => {
            print!("{}", graphql::sdl());
            Ok(())
        }
    }
}
