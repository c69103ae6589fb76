use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::Child;

mod as_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(n: &i32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    #[serde(with = "as_text")]
    rating: i32,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: bson::DateTime,
    // Embeds the stored string, which a plain `i32` cannot read.
    rating: i32,
}

fn main() {}
