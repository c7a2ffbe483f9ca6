//! The `course-forum` binary: parse the command line, run it, turn an error into one sentence
//! and a non-zero exit.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = course_forum::cli::Cli::parse();
    match course_forum::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("course-forum: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
