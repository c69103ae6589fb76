//! The derives next to other derives and attributes, user items that shadow common names, a
//! field literally named `_id`, a qualified `Vec` path, generics and macro-generated input.
#![deny(missing_docs, unused)]

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;
use subset::bson::oid::ObjectId;

// Generated code must not pick these up.
#[allow(dead_code)]
mod core {}
#[allow(dead_code)]
struct SubsetSpec;
#[allow(dead_code)]
struct Direction;
#[allow(dead_code)]
struct FieldName;

/// A review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, subset::Child)]
#[serde(deny_unknown_fields)]
pub struct Review<M> {
    _id: ObjectId,
    /// Stars.
    pub rating: i32,
    #[serde(skip)]
    marker: PhantomData<M>,
}

/// A product.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "products")]
pub struct Product<T>
where
    T: Clone,
{
    _id: ObjectId,
    /// Anything.
    pub extra: T,
    /// The best reviews.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[subset(child = "reviews")]
    #[subset(keep = 3, sort = "rating desc")]
    pub best_reviews: std::vec::Vec<Review<T>>,
}

macro_rules! shop {
    ($name:ident, $collection:literal, $keep:literal) => {
        /// A shop.
        #[derive(Serialize, Deserialize, subset::Subset)]
        #[subset(collection = $collection)]
        pub struct $name {
            #[serde(rename = "_id")]
            id: ObjectId,
            /// Reviews.
            #[subset(child = "shop_reviews", keep = $keep, sort = "rating asc")]
            pub reviews: Vec<Review<()>>,
        }
    };
}

shop!(Shop, "shops", 7);

fn check<T>()
where
    T: Clone + Default + Serialize + DeserializeOwned + Send + Sync + Unpin + 'static,
{
    use subset::Subset;
    let spec = &<Product<T> as Subset>::SUBSETS[0];
    assert_eq!(spec.field, "best_reviews");
    assert_eq!(spec.keep, 3);
    assert_eq!(spec.sort[0].field, "rating");
    assert_eq!(Product::<T>::BEST_REVIEWS.spec(), spec);
}

#[test]
fn other_derives() {
    use subset::{Child, Subset};
    check::<String>();
    assert_eq!(<Review<u8> as Child>::FIELDS[0].bson, "_id");
    assert_eq!(<Shop as Subset>::COLLECTION, "shops");
    assert_eq!(<Shop as Subset>::SUBSETS[0].keep, 7);
    assert_eq!(<Shop as Subset>::SUBSETS[0].key, "shop_id");
    assert_eq!(Shop::REVIEWS.spec(), &<Shop as Subset>::SUBSETS[0]);

    let id = ObjectId::new();
    let product = Product {
        _id: id,
        extra: 1u8,
        best_reviews: Vec::new(),
    };
    assert_eq!(*product.id(), id);
    assert_eq!(product.clone(), product);
    let shop = Shop {
        id,
        reviews: vec![Review {
            _id: id,
            rating: 5,
            marker: PhantomData,
        }],
    };
    assert_eq!(shop.id(), &id);
    assert_eq!(shop.reviews[0].rating, 5);
}
