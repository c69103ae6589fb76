//! The double write of a push as one would write it with the driver alone: the baseline the
//! overhead and hot-parent experiments hold the library's `push` and `push_many` against.

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use futures::FutureExt;
use mongodb::{Client, Collection, Database};
use subset::bson;
use subset::bson_compat;
use subset::WriteMode;

use crate::data::{Review, PAGE_REVIEWS, REVIEWS, SUBSET};
use crate::Res;

/// The recipe on the benchmark's product and review collections, in one write mode.
#[derive(Clone)]
pub struct HandPush {
    client: Client,
    products: Collection<Document>,
    reviews: Collection<Document>,
    mode: WriteMode,
}

impl HandPush {
    /// The recipe on `db`'s collections, writing in `mode`.
    pub fn new(db: &Database, mode: WriteMode) -> HandPush {
        HandPush {
            client: db.client().clone(),
            products: db.collection(SUBSET),
            reviews: db.collection(REVIEWS),
            mode,
        }
    }

    /// Pushes `reviews` to product `id`: each review serialized once, the product key added for
    /// the review collection, one capped `$push` with the count's `$inc`. In transactions the
    /// update and the insert run in one, through the driver's own runner
    /// (`start_transaction().and_run`), which retries on `TransientTransactionError` (a write
    /// conflict) with its backoff: without it a contended parent only fails. Ordered: the
    /// insert, then the update, nothing coordinating concurrent writers.
    ///
    /// # Errors
    ///
    /// The driver's, and serialization's.
    pub async fn push(&self, id: ObjectId, reviews: &[Review]) -> Res<()> {
        let embedded = reviews
            .iter()
            .map(bson_compat::to_document)
            .collect::<Result<Vec<Document>, _>>()?;
        let stored: Vec<Document> = embedded
            .iter()
            .map(|d| {
                let mut d = d.clone();
                d.insert("product_id", id);
                d
            })
            .collect();
        let update = doc! {
            "$push": { "recent_reviews": {
                "$each": embedded.into_iter().map(Bson::Document).collect::<Vec<_>>(),
                "$sort": { "date": -1, "_id": -1 },
                "$slice": PAGE_REVIEWS as i32,
            } },
            "$inc": { "total_reviews": reviews.len() as i64 },
        };
        match self.mode {
            WriteMode::Transactional => {
                let mut session = self.client.start_session().await?;
                session
                    .start_transaction()
                    .and_run(
                        (&self.products, &self.reviews, &update, &stored),
                        |session, (products, children, update, stored)| {
                            async move {
                                products
                                    .update_one(doc! { "_id": id }, (*update).clone())
                                    .session(&mut *session)
                                    .await?;
                                if let [one] = stored.as_slice() {
                                    children.insert_one(one).session(&mut *session).await?;
                                } else {
                                    children.insert_many(stored.iter()).session(session).await?;
                                }
                                Ok(())
                            }
                            .boxed()
                        },
                    )
                    .await?;
            }
            WriteMode::Ordered => {
                if let [one] = stored.as_slice() {
                    self.reviews.insert_one(one).await?;
                } else {
                    self.reviews.insert_many(&stored).await?;
                }
                self.products.update_one(doc! { "_id": id }, update).await?;
            }
        }
        Ok(())
    }
}
