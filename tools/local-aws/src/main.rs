//! `local`: the local pipeline from the command line; `local --help` lists the commands.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = local::cli::Cli::parse();
    if let Err(e) = cli.apply().await {
        eprintln!("local: {}", local::error::report(&*e));
        std::process::exit(1);
    }
}
