use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::{Child, Subset, SubsetField};

#[derive(Serialize, Deserialize, Child)]
struct Order {
    #[serde(rename = "_id")]
    id: ObjectId,
    placed_at: bson::DateTime,
}

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    date: bson::DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "delivery_shops")]
pub struct DeliveryShop {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "orders",
        keep = 20,
        sort = "placed_at desc",
        count = "order_count"
    )]
    recent_orders: Vec<Order>,
    #[subset(child = "reviews", keep = 5, sort = "date desc")]
    recent_reviews: Vec<Review>,
    // Same child collection, told apart by their key.
    #[subset(child = "reviews", keep = 3, sort = "rating desc", key = "top_shop_id")]
    top_reviews: Vec<Review>,
    order_count: u32,
}

#[test]
fn two_subsets() {
    let specs = <DeliveryShop as Subset>::SUBSETS;
    assert_eq!(specs.len(), 3);
    assert_eq!(specs[0].child_collection, "orders");
    assert_eq!(specs[0].key, "delivery_shop_id");
    assert_eq!(specs[0].count, Some("order_count"));
    assert_eq!(specs[1].child_collection, "reviews");
    assert_eq!(specs[1].key, "delivery_shop_id");
    assert_eq!(specs[2].child_collection, "reviews");
    assert_eq!(specs[2].key, "top_shop_id");

    let orders: SubsetField<DeliveryShop, Order> = DeliveryShop::RECENT_ORDERS;
    assert_eq!(orders.spec().rust_field, "recent_orders");
    assert_eq!(
        DeliveryShop::RECENT_REVIEWS.spec().rust_field,
        "recent_reviews"
    );
    assert_eq!(DeliveryShop::TOP_REVIEWS.spec().rust_field, "top_reviews");
}
