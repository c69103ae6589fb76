//! A child that holds the parent key as a field of its own: the descriptor says so
//! (`embed_key`), whatever the field's Rust name, `Option` or not, and for previews by what the
//! preview itself holds.

use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::DateTime;
use subset::{Child, Subset};

#[derive(Serialize, Deserialize, Child)]
struct Comment {
    #[serde(rename = "_id")]
    id: ObjectId,
    movie_id: ObjectId,
    date: DateTime,
}

#[derive(Serialize, Deserialize, Child)]
struct MaybeKeyed {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[serde(rename = "movieRef")]
    movie: Option<ObjectId>,
    date: DateTime,
}

#[derive(Serialize, Deserialize, Child)]
struct Unkeyed {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: DateTime,
}

/// A preview of `Comment` without the key, and one with it.
#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Comment)]
struct Short {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: DateTime,
}

#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Comment)]
struct ShortKeyed {
    #[serde(rename = "_id")]
    id: ObjectId,
    movie_id: ObjectId,
    date: DateTime,
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "movies")]
struct Movie {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "comments", keep = 3, sort = "date desc")]
    comments: Vec<Comment>,
    #[subset(child = "maybe", key = "movieRef", keep = 3, sort = "date desc")]
    maybe: Vec<MaybeKeyed>,
    #[subset(child = "plain", keep = 3, sort = "date desc")]
    plain: Vec<Unkeyed>,
    #[subset(child = "comments", keep = 2, sort = "date desc")]
    short: Vec<Short>,
    #[subset(child = "comments", keep = 1, sort = "date desc")]
    short_keyed: Vec<ShortKeyed>,
}

#[test]
fn embed_key_is_set_where_the_child_holds_the_key() {
    let by_field = |field: &str| {
        Movie::SUBSETS
            .iter()
            .find(|s| s.field == field)
            .unwrap_or_else(|| panic!("no subset `{field}`"))
    };
    let comments = by_field("comments");
    assert_eq!(comments.key, "movie_id");
    assert!(comments.embed_key);
    assert!(by_field("maybe").embed_key, "an `Option` key, renamed");
    assert!(!by_field("plain").embed_key);
    // A preview: by what it holds, whatever its full type does.
    let short = by_field("short");
    assert!(!short.embed_key);
    let short_keyed = by_field("short_keyed");
    assert!(short_keyed.embed_key);
    let embedded: Vec<&str> = short_keyed.embed.unwrap().iter().map(|f| f.bson).collect();
    assert!(embedded.contains(&"movie_id"), "{embedded:?}");
}

#[test]
fn the_marker_the_derive_refuses_is_the_runtimes() {
    // The derive holds its own copy (it cannot depend on the runtime), compared in its unit
    // tests; `subset-ui/tests/ui/parent-field-marker.stderr` shows the name it refuses.
    assert_eq!(subset::bookkeeping::Names::default().marker(), "_subset");
    let refused = include_str!("../../subset-ui/tests/ui/parent-field-marker.stderr");
    assert!(refused.contains(&format!(
        "`{}`",
        subset::bookkeeping::Names::default().marker()
    )));
}
