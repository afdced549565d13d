//! `payments-local`: the payments pipeline on the local AWS from the command line;
//! `payments-local --help` lists the commands.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = payments_local::cli::Cli::parse();
    if let Err(e) = cli.apply().await {
        eprintln!("payments-local: {}", local::error::report(&*e));
        std::process::exit(1);
    }
}
