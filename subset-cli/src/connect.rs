//! Connecting, with a prompt failure when the server is not there.

use std::time::Duration;

use mongodb::options::ClientOptions;
use mongodb::{Client, Database};
use subset_runtime::bson::doc;
use subset_runtime::raw;
use subset_runtime::spec::{ParentSpec, SubsetSpec};

use crate::args::Conn;
use crate::error::CliError;
use crate::model::Model;

/// How long to look for a server when the URI does not say (the driver's default is 30 s).
const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// The database named by `--db`, after a `ping` proved the server answers; its client is left in
/// `client`, for the caller to shut down.
///
/// # Errors
///
/// [`CliError::Connect`] for a bad URI, an unreachable server or refused credentials;
/// [`CliError::Usage`] for a database name MongoDB rejects.
pub async fn database(conn: &Conn, client: &mut Option<Client>) -> Result<Database, CliError> {
    if conn.db.is_empty() || conn.db.contains(['/', '\\', '.', ' ', '"', '$', '\0']) {
        return Err(CliError::Usage(format!(
            "--db `{}` is not a database name MongoDB accepts",
            conn.db
        )));
    }
    let connect = |e| CliError::Connect(Box::new(e));
    let mut options = ClientOptions::parse(&conn.uri).await.map_err(connect)?;
    options
        .server_selection_timeout
        .get_or_insert(SERVER_SELECTION_TIMEOUT);
    options.app_name.get_or_insert_with(|| "subset-cli".into());
    let db = client
        .insert(Client::with_options(options).map_err(connect)?)
        .database(&conn.db);
    db.run_command(doc! { "ping": 1 }).await.map_err(connect)?;
    Ok(db)
}

/// The store of `fields` of the parent collection `parent`, a store of some fields that leaves
/// the application's definition alone (see [`raw::Store::for_fields`]).
///
/// # Errors
///
/// As [`Model::store`].
pub fn store(
    db: &Database,
    conn: &Conn,
    parent: &str,
    fields: Vec<SubsetSpec>,
) -> Result<raw::Store, CliError> {
    Model {
        spec: ParentSpec::leak(parent.to_owned(), fields),
        registered: false,
    }
    .store(db, conn)
}
