//! The `course-forum` binary: parse the command line, run it, turn an error into one sentence
//! and a non-zero exit.

use clap::Parser;

/// A request allocates many small, short-lived objects; mimalloc serves them faster than the
/// system allocator (see Cargo.toml and docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = course_forum::Cli::parse();
    course_forum::install_crypto_provider();
    match course_forum::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("course-forum: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
