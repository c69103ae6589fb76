//! Writing the data set into the three layouts, with a progress bar.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use mongodb::Database;
use subset::bson;
use subset::bson_compat;
use subset::Store;

use crate::data::{DataSet, Product, ProductWithReviews, EMBEDDED, REFERENCED, REVIEWS, SUBSET};
use crate::Res;

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>28} [{bar:40}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

/// Whether `db` already holds this data set (for `--reuse`).
pub async fn present(db: &Database, data: &DataSet) -> Res<bool> {
    for name in [EMBEDDED, SUBSET, REFERENCED] {
        let n = db
            .collection::<Document>(name)
            .estimated_document_count()
            .await?;
        if n != data.products as u64 {
            return Ok(false);
        }
    }
    let reviews = db
        .collection::<Document>(REVIEWS)
        .estimated_document_count()
        .await?;
    Ok(reviews >= data.total_reviews() as u64)
}

/// Drops `db` and writes the three layouts. Returns how long it took.
pub async fn load(db: &Database, data: &DataSet, tasks: usize) -> Res<Duration> {
    let started = Instant::now();
    db.drop().await?;
    let store = Store::<Product>::new(db);
    store.mode().await?;

    // Parents of the subset and referenced layouts, in batches.
    let parents = bar(data.products as u64, "products (subset, referenced)");
    for start in (0..data.products).step_by(1000) {
        let end = (start + 1000).min(data.products);
        let mut subset = Vec::with_capacity(end - start);
        let mut referenced = Vec::with_capacity(end - start);
        for i in start..end {
            let info = data.info(i);
            subset.push(bson_compat::to_document(&Product {
                id: info.id,
                name: info.name.clone(),
                description: info.description.clone(),
                category: info.category.clone(),
                price: info.price,
                recent_reviews: Vec::new(),
                total_reviews: 0,
            })?);
            referenced.push(info);
        }
        db.collection::<Document>(SUBSET)
            .insert_many(subset)
            .await?;
        db.collection(REFERENCED).insert_many(referenced).await?;
        parents.inc((end - start) as u64);
    }
    parents.finish();

    // Every review through the library's `push_many`, chunk `c` of every product before chunk
    // `c + 1` of any, so that each product's reviews are spread over the collection.
    let total = data.total_reviews();
    let reviews = bar(total as u64, "reviews (push_many)");
    let rounds = (0..data.products)
        .map(|i| data.chunks(i))
        .max()
        .unwrap_or(0);
    let handle = store.children(Product::RECENT_REVIEWS);
    let jobs = (0..rounds).flat_map(|c| {
        (0..data.products)
            .filter(move |&i| c < data.chunks(i))
            .map(move |i| (i, c))
    });
    futures::stream::iter(jobs)
        .map(|(i, c)| {
            let handle = &handle;
            let reviews = &reviews;
            async move {
                let chunk = data.chunk(i, c);
                handle.push_many(&data.product_id(i), &chunk).await?;
                reviews.inc(chunk.len() as u64);
                Res::Ok(())
            }
        })
        .buffer_unordered(tasks)
        .try_collect::<()>()
        .await?;
    reviews.finish();
    let indexing = ProgressBar::new_spinner();
    indexing.set_message("indexing reviews");
    indexing.enable_steady_tick(Duration::from_millis(200));
    store.ensure_indexes().await?;
    indexing.finish_and_clear();

    // The fully embedded layout: each product with all its reviews, newest first.
    let embedded = bar(data.products as u64, "products (fully embedded)");
    let batches = (0..data.products).step_by(16).map(|start| {
        let end = (start + 16).min(data.products);
        start..end
    });
    let coll = db.collection::<ProductWithReviews>(EMBEDDED);
    futures::stream::iter(batches)
        .map(|range| {
            let coll = &coll;
            let embedded = &embedded;
            async move {
                let n = range.len() as u64;
                let docs: Vec<ProductWithReviews> = range
                    .map(|i| ProductWithReviews {
                        info: data.info(i),
                        reviews: data.reviews(i),
                    })
                    .collect();
                coll.insert_many(docs).await?;
                embedded.inc(n);
                Res::Ok(())
            }
        })
        .buffer_unordered(tasks.min(2))
        .try_collect::<()>()
        .await?;
    embedded.finish();
    Ok(started.elapsed())
}

/// Size figures of one collection, from `$collStats`.
#[derive(Debug, Clone)]
pub struct CollSize {
    pub name: &'static str,
    pub count: i64,
    pub avg_obj_size: f64,
    pub size: f64,
    pub storage_size: f64,
    pub index_size: f64,
}

fn number(d: &Document, key: &str) -> f64 {
    match d.get(key) {
        Some(bson::Bson::Int32(n)) => f64::from(*n),
        Some(bson::Bson::Int64(n)) => *n as f64,
        Some(bson::Bson::Double(n)) => *n,
        _ => 0.0,
    }
}

pub async fn coll_size(db: &Database, name: &'static str) -> Res<CollSize> {
    let stats: Vec<Document> = db
        .collection::<Document>(name)
        .aggregate([doc! { "$collStats": { "storageStats": {} } }])
        .await?
        .try_collect()
        .await?;
    let s = stats
        .first()
        .and_then(|d| d.get_document("storageStats").ok())
        .cloned()
        .unwrap_or_default();
    Ok(CollSize {
        name,
        count: number(&s, "count") as i64,
        avg_obj_size: number(&s, "avgObjSize"),
        size: number(&s, "size"),
        storage_size: number(&s, "storageSize"),
        index_size: number(&s, "totalIndexSize"),
    })
}
