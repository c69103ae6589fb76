//! Where a follower keeps its place: one document per follower name and child collection, in a
//! small collection of the store's database.
//!
//! ```text
//! { _id: { follower: "reviews-sync", collection: "reviews" },
//!   token: { _data: "82…" }, parent: "products", saved_at: ISODate(…) }
//! ```
//!
//! A token is written only once every parent its events concern has been resynced, so the
//! saved place is never ahead of the work: a follower stopped at any point redoes at most one
//! batch.

use crate::bson::{doc, DateTime, Document};
use mongodb::change_stream::event::ResumeToken;
use mongodb::options::WriteConcern;
use mongodb::{Collection, Database};

use crate::error::{Error, Result};

/// The saved places of one follower.
#[derive(Debug, Clone)]
pub(super) struct Tokens {
    collection: Collection<Document>,
    follower: String,
    parent: &'static str,
}

impl Tokens {
    pub(super) fn new(
        db: &Database,
        collection: &str,
        follower: &str,
        parent: &'static str,
    ) -> Self {
        Tokens {
            collection: db.collection(collection),
            follower: follower.to_owned(),
            parent,
        }
    }

    fn key(&self, child_collection: &str) -> Document {
        doc! { "follower": &self.follower, "collection": child_collection }
    }

    fn mongo(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(self.collection.name(), e)
    }

    /// The place saved for `child_collection`, if any.
    pub(super) async fn load(&self, child_collection: &str) -> Result<Option<ResumeToken>> {
        let saved = self
            .collection
            .find_one(doc! { "_id": self.key(child_collection) })
            .await
            .map_err(|e| self.mongo(e))?;
        let Some(token) = saved.and_then(|mut d| d.remove("token")) else {
            return Ok(None);
        };
        crate::bson_compat::from_bson(token)
            .map(Some)
            .map_err(|e| Error::FollowUnsupported {
                collection: self.collection.name().to_owned(),
                reason: format!(
                    "the resume token saved for follower `{}` on `{child_collection}` is unreadable ({e}); delete that document to start afresh",
                    self.follower
                ),
                source: None,
            })
    }

    /// Saves `token` as the place of `child_collection`, durably (majority): a place that a
    /// failover rolled back would only make the follower redo work, but one that outlived the
    /// resyncs it stands for would skip changes.
    pub(super) async fn save(&self, child_collection: &str, token: &ResumeToken) -> Result<()> {
        let token = crate::bson_compat::to_bson(token).map_err(|e| Error::Serialize {
            what: "a resume token",
            source: Box::new(e),
        })?;
        self.collection
            .update_one(
                doc! { "_id": self.key(child_collection) },
                doc! { "$set": {
                    "token": token,
                    "parent": self.parent,
                    "saved_at": DateTime::now(),
                } },
            )
            .upsert(true)
            .write_concern(WriteConcern::majority())
            .await
            .map_err(|e| self.mongo(e))?;
        Ok(())
    }
}
