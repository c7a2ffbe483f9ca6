//! The command line: subcommands and what each one runs.

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::auth::TokenKeys;
use crate::config::{Settings, parse_duration};
use crate::error::{AppError, AppResult};
use crate::graphql::ids::{self, NodeKind};
use crate::startup::{Application, shutdown_signal};
use crate::{db, graphql, seed, telemetry};

#[derive(Debug, Parser)]
#[command(
    name = "course-forum",
    version,
    about = "A GraphQL forum for every course"
)]
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
                return Err(AppError::Config(
                    "only `seed --demo` exists: pass --demo".into(),
                ));
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
                _ => ids::decode_one(&async_graphql::ID(user), NodeKind::User).map_err(|_| {
                    AppError::Config(
                        "--user must be a user id (a number or a User global id)".into(),
                    )
                })?,
            };
            println!("{}", tokens.mint(user_id, ttl)?);
            Ok(())
        }
        Command::ExportSchema => {
            print!("{}", graphql::sdl());
            Ok(())
        }
    }
}
