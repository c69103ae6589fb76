//! Descriptors the resync's unit tests share.

use crate::model::SubsetSpec;
use crate::spec::SpecBuilder;

/// `latest`: the three latest reviews, counted, with their ratings summed.
pub(super) fn latest() -> &'static SubsetSpec {
    SpecBuilder::new("latest", "reviews", "product_id")
        .keep(3)
        .sort("date desc")
        .count("n")
        .sum("stars", "rating")
        .build()
        .expect("a valid descriptor")
}
