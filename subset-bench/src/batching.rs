//! Experiment 4, batching: 10,000 reviews over 100 products, one `push` each against
//! `push_many` in batches.

use bson::Document;
use mongodb::Database;
use subset::bson;
use subset::bson_compat;
use subset::Store;

use crate::data::{DataSet, Product, SUBSET};
use crate::measure::{time, Rounds};
use crate::stats::Spread;
use crate::Res;

pub const PRODUCTS: usize = 100;
pub const REVIEWS_EACH: usize = 100;

/// Reviews per second of each way, over `rounds` rounds (alternating which runs first).
#[derive(Debug, Clone)]
pub struct Result {
    pub batch: usize,
    pub one_by_one: Spread,
    pub batched: Spread,
    pub ratio: Spread,
}

async fn fresh(db: &Database, data: &DataSet) -> Res<Store<Product>> {
    db.drop().await?;
    let store = Store::<Product>::new(db);
    store.ensure_indexes().await?;
    store.mode().await?;
    let parents = (0..data.products)
        .map(|i| {
            let info = data.info(i);
            bson_compat::to_document(&Product {
                id: info.id,
                name: info.name,
                description: info.description,
                category: info.category,
                price: info.price,
                recent_reviews: Vec::new(),
                total_reviews: 0,
            })
        })
        .collect::<std::result::Result<Vec<Document>, _>>()?;
    db.collection::<Document>(SUBSET)
        .insert_many(parents)
        .await?;
    Ok(store)
}

pub async fn run(db: &Database, batch: usize, rounds: usize, seed: u64) -> Res<Result> {
    let data = DataSet {
        products: PRODUCTS,
        min_reviews: REVIEWS_EACH,
        max_reviews: REVIEWS_EACH,
        seed,
    };
    let reviews: Vec<_> = (0..PRODUCTS).map(|i| data.reviews(i)).collect();
    let total = (PRODUCTS * REVIEWS_EACH) as f64;
    // Side 0 is `push_many`, side 1 one `push` per review; which goes first alternates.
    let schedule = Rounds {
        rounds,
        sides: 2,
        shift: 1,
    };
    let rates = schedule
        .run(async |turn| {
            let store = fresh(db, &data).await?;
            let handle = store.children(Product::RECENT_REVIEWS);
            let ((), ms) = time(async {
                if turn.side == 0 {
                    for (i, r) in reviews.iter().enumerate() {
                        for chunk in r.chunks(batch) {
                            handle.push_many(&data.product_id(i), chunk).await?;
                        }
                    }
                } else {
                    // Reviews arrive interleaved over products, as single pushes do.
                    for k in 0..REVIEWS_EACH {
                        for (i, r) in reviews.iter().enumerate() {
                            handle.push(&data.product_id(i), &r[k]).await?;
                        }
                    }
                }
                Res::Ok(())
            })
            .await?;
            Ok(Some(total / (ms / 1e3)))
        })
        .await?;
    db.drop().await?;
    Ok(Result {
        batch,
        one_by_one: rates.spread(1, |r| *r),
        batched: rates.spread(0, |r| *r),
        ratio: rates.ratio(0, 1, |r| *r),
    })
}
