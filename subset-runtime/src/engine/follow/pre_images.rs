//! The pre- and post-images the follower needs on each child collection
//! (`changeStreamPreAndPostImages`): checked, and turned on when it may.

use crate::bson::{doc, Bson};

use crate::engine::RawStore;
use crate::error::driver::{self, NAMESPACE_EXISTS};
use crate::error::{Error, Result};

/// Makes sure the server records pre-images (and so post-images) of `collection`'s changes,
/// which tell the parent of a deleted or moved child; creates the collection with them when it
/// does not exist. With `enable` false, only checks.
///
/// # Errors
///
/// [`Error::FollowUnsupported`] when they are off and cannot (or may not) be turned on.
pub(super) async fn ensure_pre_images(
    store: &RawStore,
    collection: &str,
    enable: bool,
) -> Result<()> {
    let db = store.database();
    let mongo = |e| Error::mongo(collection, e);
    let unsupported =
        |reason: String, source: Option<mongodb::error::Error>| Error::FollowUnsupported {
            collection: collection.to_owned(),
            reason,
            source: source.map(Box::new),
        };
    let listed = db
        .run_command(doc! { "listCollections": 1, "filter": { "name": collection } })
        .await
        .map_err(mongo)?;
    let spec = listed
        .get_document("cursor")
        .ok()
        .and_then(|c| c.get_array("firstBatch").ok())
        .and_then(|b| b.first())
        .and_then(Bson::as_document);
    if let Some(spec) = spec {
        if spec.get_str("type").is_ok_and(|t| t != "collection") {
            return Err(unsupported(
                "it is a view, not a collection: change streams and pre-images need a collection"
                    .to_owned(),
                None,
            ));
        }
        let enabled = spec
            .get_document("options")
            .and_then(|o| o.get_document("changeStreamPreAndPostImages"))
            .and_then(|p| p.get_bool("enabled"))
            .unwrap_or(false);
        if enabled {
            return Ok(());
        }
    }
    if !enable {
        return Err(unsupported(
            format!("`changeStreamPreAndPostImages` is off on it, and the follower needs the pre-image of a deleted child to find its parent: run `db.runCommand({{collMod: \"{collection}\", changeStreamPreAndPostImages: {{enabled: true}}}})` (MongoDB 6.0 or later), or let the follower do it"),
            None,
        ));
    }
    let option = doc! { "enabled": true };
    let created = if spec.is_none() {
        let create = doc! { "create": collection, "changeStreamPreAndPostImages": option.clone() };
        match db.run_command(create).await {
            Ok(_) => true,
            // Created meanwhile, by a writer: turn them on below.
            Err(e) if driver::has_code(&e, NAMESPACE_EXISTS) => false,
            Err(e) => return Err(refused(collection, e)),
        }
    } else {
        false
    };
    if !created {
        let coll_mod = doc! { "collMod": collection, "changeStreamPreAndPostImages": option };
        db.run_command(coll_mod)
            .await
            .map_err(|e| refused(collection, e))?;
    }
    tracing::info!(collection, "enabled changeStreamPreAndPostImages");
    Ok(())
}

/// The error of a server that would not turn pre-images on.
fn refused(collection: &str, e: mongodb::error::Error) -> Error {
    Error::FollowUnsupported {
        collection: collection.to_owned(),
        reason: format!("cannot enable `changeStreamPreAndPostImages`, which the follower needs to find the parent of a deleted child (MongoDB 6.0 or later, and the `collMod` privilege): {e}"),
        source: Some(Box::new(e)),
    }
}
