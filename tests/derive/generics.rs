//! Generic parents: a child type that names none of the parent's parameters is checked as in
//! any parent (its sums read the full type a preview stands for), and one that names them is
//! checked through its impls, the parent key included.

use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::{Child, Subset, SubsetField};

#[derive(Serialize, Deserialize, Child)]
struct Note {
    #[serde(rename = "_id")]
    id: ObjectId,
    board_id: ObjectId,
    rank: i32,
    title: String,
}

/// Embeds the title only: the sum of `rank` reads the stored `Note`.
#[derive(Serialize, Deserialize, Child)]
#[subset(preview_of = Note)]
struct NoteTitle {
    #[serde(rename = "_id")]
    id: ObjectId,
    title: String,
}

#[derive(Serialize, Deserialize, Child)]
struct Pin<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    board_id: Option<ObjectId>,
    at: i64,
    extra: T,
}

mod elsewhere {
    use serde::{Deserialize, Serialize};
    use subset::bson::oid::ObjectId;
    use subset::Child;

    /// Its key field is private here: a generic parent elsewhere cannot see its type, and
    /// leaves it unchecked rather than failing.
    #[derive(Serialize, Deserialize, Child)]
    pub struct Tag<T> {
        #[serde(rename = "_id")]
        pub id: ObjectId,
        board_id: ObjectId,
        pub name: String,
        pub extra: T,
    }
}

#[derive(Serialize, Deserialize, Subset)]
#[subset(collection = "boards")]
struct Board<T> {
    #[serde(rename = "_id")]
    id: ObjectId,
    extra: T,
    #[subset(
        child = "notes",
        keep = 3,
        sort = "title asc",
        sum = "rank_total = rank"
    )]
    titles: Vec<NoteTitle>,
    #[serde(default)]
    rank_total: i64,
    #[subset(child = "pins", keep = 2, sort = "at desc")]
    pins: Vec<Pin<T>>,
    #[subset(child = "tags", keep = 5, sort = "name asc")]
    tags: Vec<elsewhere::Tag<T>>,
}

#[test]
fn generic_parents_with_and_without_parameters_in_their_children() {
    let specs = <Board<String> as Subset>::SUBSETS;
    let titles = &specs[0];
    let embedded: Vec<&str> = titles.embed.unwrap().iter().map(|f| f.bson).collect();
    assert_eq!(embedded, ["_id", "title"]);
    assert_eq!(
        (titles.sums[0].parent, titles.sums[0].child),
        ("rank_total", "rank")
    );
    // The preview leaves the key out of its copies; `Pin` keeps it in its own.
    assert!(!titles.embed_key);
    let pins = &specs[1];
    assert_eq!(
        (pins.key, pins.keep, pins.sort[0].field),
        ("board_id", 2, "at")
    );
    assert!(pins.embed_key);
    let _: SubsetField<Board<String>, Note> = Board::<String>::TITLES;
    let _: SubsetField<Board<u8>, Pin<u8>> = Board::<u8>::PINS;
    assert!(specs[2].embed_key);
}
