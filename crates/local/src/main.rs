//! `local`: the local pipeline from the command line; see `local::cli` for the commands.

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = local::cli::run(&args).await {
        eprintln!("local: {e}");
        std::process::exit(1);
    }
}
