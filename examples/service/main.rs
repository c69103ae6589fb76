//! An HTTP service over the product-reviews model: the product page, reviews by cursor, review
//! writes, helpful votes and moderation, with the store's errors mapped to HTTP statuses (see
//! `app.rs` for the routes).
//!
//! `cargo run --example service --features testkit [ADDRESS]` serves on ADDRESS, else on
//! `SUBSET_SERVICE_ADDR`, else on 127.0.0.1:3000. It starts its own `mongod` unless
//! `MONGODB_URI` names a server. `RUST_LOG` sets the log filter (default `info`).
//!
//! ```text
//! curl -s -XPOST localhost:3000/products -H 'content-type: application/json' -d '{"name":"Grinder"}'
//! curl -s 'localhost:3000/products/<id>/reviews?first=20'
//! curl -s 'localhost:3000/products/<id>/reviews?last=20&before=<start_cursor>'
//! curl -s -XPOST localhost:3000/products/<id>/reviews/<review_id>/votes
//! curl -s -XPUT localhost:3000/products/<id>/reviews/<review_id>/hidden -H 'content-type: application/json' -d true
//! ```

mod app;

use std::net::SocketAddr;

use subset::testkit::{MongoServer, Topology};
use subset::Store;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// Where the service listens when neither the command line nor the environment says.
const DEFAULT_ADDR: &str = "127.0.0.1:3000";
/// The environment variable naming the address to listen on.
const ADDR_VAR: &str = "SUBSET_SERVICE_ADDR";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Returned from `main`, an error would print as its `Debug`, without the advice its `Display`
    // gives: print that, then each cause it does not already quote.
    let Err(error) = run().await else {
        return std::process::ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    let shown = error.to_string();
    std::iter::successors(error.source(), |e| e.source())
        .filter(|cause| !shown.contains(&cause.to_string()))
        .for_each(|cause| eprintln!("caused by: {cause}"));
    std::process::ExitCode::FAILURE
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) => spec
            .parse::<Targets>()
            .map_err(|e| format!("RUST_LOG `{spec}` is not a log filter: {e}"))?,
        Err(_) => Targets::new().with_default(LevelFilter::INFO),
    };
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer())
        .with(filter)
        .init();

    let (addr, from) = match std::env::args().nth(1) {
        Some(arg) => (arg, "the command line"),
        None => match std::env::var(ADDR_VAR) {
            Ok(var) => (var, ADDR_VAR),
            Err(_) => (DEFAULT_ADDR.to_owned(), "the default"),
        },
    };
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| format!("address `{addr}` from {from} is not host:port: {e}"))?;

    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let db = server.client().await?.database("subset_example_service");
    let store = Store::<app::Product>::new(&db);
    store.ensure_indexes().await?;

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(
        addr = %listener.local_addr()?,
        mongodb = server.uri(),
        mode = ?store.mode().await?,
        "serving"
    );
    axum::serve(listener, app::router(store))
        .with_graceful_shutdown(async {
            // Without a signal handler the service runs until it is killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await?;
    Ok(())
}
