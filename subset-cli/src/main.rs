//! `subset`: find unbounded arrays, migrate a collection to the MongoDB Subset Pattern, check or
//! repair the drift between an embedded subset and its child collection, follow the child
//! collection to keep the subset true while other programs write it, and remove or patch every
//! child that matches a filter.
//!
//! The tool works at the BSON level on the same engine as `#[derive(Subset)]`
//! (`subset_runtime::raw::Store`): without view flags, on the application's model as the
//! registry keeps it (every view, with its types), so that a run does what the application
//! would; with flags, on the one view they describe. A collection it migrates is one the derive
//! can use, and its reconcile is the derive's reconcile.
//!
//! Exit codes: 0 on success, 1 when a command finds problems (drift, invalid documents), 2 on
//! usage or connection errors.

mod args;
mod bulk;
mod connect;
mod error;
mod follow;
mod inspect;
mod migrate;
mod model;
mod output;
mod progress;
mod rebuild;
mod repair;
mod scan;
mod shape;
mod status;

use std::process::ExitCode;

use clap::Parser;
use mongodb::Client;

use args::{Cli, Command};
use error::CliError;
use output::Outcome;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.command.json();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return output::fail(&CliError::Runtime(e), json),
    };
    let result = runtime.block_on(async {
        let mut client = None;
        let result = run(cli.command, &mut client).await;
        // When its last handle goes, the driver ends the server sessions in a task of its own;
        // left to the runtime's shutdown, that task finds the pool gone and panics. Shut the
        // client down while the runtime still runs.
        if let Some(client) = client {
            client.shutdown().await;
        }
        result
    });
    match result {
        Ok(outcome) => outcome.print(json),
        Err(e) => output::fail(&e, json),
    }
}

/// Runs `command`, leaving in `client` the client it connected, for `main` to shut down.
async fn run(command: Command, client: &mut Option<Client>) -> Result<Outcome, CliError> {
    match command {
        Command::Inspect(args) => {
            let db = connect::database(&args.conn, client).await?;
            inspect::run(&db, &args).await
        }
        Command::Migrate(args) => {
            args.subset.view()?;
            let db = connect::database(&args.subset.conn, client).await?;
            let model = model::of(&db, &args.subset).await?;
            migrate::run(&db, model, &args).await
        }
        Command::Check(args) => {
            args.view()?;
            let db = connect::database(&args.conn, client).await?;
            let model = model::of(&db, &args).await?;
            repair::run(&db, model, &args, repair::Mode::Check).await
        }
        Command::Reconcile(args) => {
            args.subset.view()?;
            let db = connect::database(&args.subset.conn, client).await?;
            let model = model::of(&db, &args.subset).await?;
            let mode = if args.dry_run {
                repair::Mode::Check
            } else {
                repair::Mode::Reconcile
            };
            repair::run(&db, model, &args.subset, mode).await
        }
        Command::Follow(args) => {
            args.subset.view()?;
            let db = connect::database(&args.subset.conn, client).await?;
            let model = model::of(&db, &args.subset).await?;
            follow::run(&db, model, &args).await
        }
        Command::Remove(args) => {
            args.subset.view()?;
            let filter = args.job.filter()?;
            let db = connect::database(&args.subset.conn, client).await?;
            let model = model::of(&db, &args.subset).await?;
            bulk::run(
                &db,
                model,
                &args.subset,
                &args.job,
                filter,
                args::Job::Remove,
            )
            .await
        }
        Command::Patch(args) => {
            args.subset.view()?;
            let filter = args.job.filter()?;
            let job = args.job()?;
            let db = connect::database(&args.subset.conn, client).await?;
            let model = model::of(&db, &args.subset).await?;
            bulk::run(&db, model, &args.subset, &args.job, filter, job).await
        }
        Command::Rebuild(args) => {
            if args.subset.view()?.is_some() {
                return Err(CliError::Usage(
                    "`subset rebuild` works on the application's registered model: give --parent without the view flags".to_owned(),
                ));
            }
            let db = connect::database(&args.subset.conn, client).await?;
            let model =
                model::registered_model(&db, &args.subset.conn, &args.subset.parent).await?;
            rebuild::run(&db, model, &args).await
        }
        Command::Status(args) => {
            let db = connect::database(&args.conn, client).await?;
            status::run(&db, &args).await
        }
    }
}
