use mongodb::Database;
use rand::distr::Alphanumeric;
use rand::Rng;
use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, DateTime, Document};

/// Large shops: enough that a migration takes long enough to be killed half-way.
pub const LARGE: usize = 40;

/// Reviews embedded in each large shop.
pub const REVIEWS: usize = 800;

/// Small shops, with 3 reviews each.
pub const SMALL: usize = 4;

pub fn word(rng: &mut impl Rng, len: usize) -> String {
    rng.sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

pub fn review(rng: &mut impl Rng, with_id: bool, now: i64) -> Document {
    let mut review = Document::new();
    if with_id {
        review.insert("_id", ObjectId::new());
    }
    review.insert("user", word(rng, 8));
    review.insert("stars", rng.random_range(1..=5_i32));
    review.insert("text", word(rng, 8));
    review.insert(
        "date",
        DateTime::from_millis(now - rng.random_range(0..90 * 24 * 3_600_000_i64)),
    );
    review
}

/// The delivery app before the subset pattern: `LARGE` shops with `REVIEWS` embedded reviews
/// (every other one without review `_id`s), `SMALL` small shops, and one shop with no `reviews`.
pub async fn seed(db: &Database) {
    let mut rng = rand::rng();
    let now = DateTime::now().timestamp_millis();
    let mut shops = Vec::new();
    for i in 0..LARGE {
        let reviews: Vec<Document> = (0..REVIEWS)
            .map(|_| review(&mut rng, i % 2 == 0, now))
            .collect();
        shops.push(
            doc! { "_id": ObjectId::new(), "name": format!("Noodle Bar {i}"), "reviews": reviews },
        );
    }
    for i in 0..SMALL {
        let reviews: Vec<Document> = (0..3).map(|_| review(&mut rng, true, now)).collect();
        shops.push(
            doc! { "_id": ObjectId::new(), "name": format!("Corner Café {i}"), "reviews": reviews },
        );
    }
    shops.push(doc! { "_id": ObjectId::new(), "name": "New Kiosk" });
    db.collection::<Document>("shops")
        .insert_many(shops)
        .await
        .unwrap();
}
