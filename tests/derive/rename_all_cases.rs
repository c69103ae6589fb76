use serde::{Deserialize, Serialize};
use subset::bson::{self, oid::ObjectId};
use subset::Child;

macro_rules! child {
    ($name:ident, $rule:literal) => {
        #[derive(Serialize, Deserialize, Child)]
        #[serde(rename_all = $rule)]
        struct $name {
            #[serde(rename = "_id")]
            id: ObjectId,
            created_at: i64,
        }
    };
}

child!(Lower, "lowercase");
child!(Upper, "UPPERCASE");
child!(Pascal, "PascalCase");
child!(Camel, "camelCase");
child!(Snake, "snake_case");
child!(ScreamingSnake, "SCREAMING_SNAKE_CASE");
child!(Kebab, "kebab-case");
child!(ScreamingKebab, "SCREAMING-KEBAB-CASE");

#[derive(Serialize, Deserialize, Child)]
#[serde(rename_all(serialize = "camelCase", deserialize = "kebab-case"))]
struct SerializeSide {
    #[serde(rename = "_id")]
    id: ObjectId,
    // Read back under its stored name too, as the derive requires.
    #[serde(alias = "createdAt")]
    created_at: i64,
}

fn bson_name<C: Child>() -> &'static str {
    C::FIELDS
        .iter()
        .find(|f| f.rust == "created_at")
        .map_or("", |f| f.bson)
}

#[test]
fn rename_all_cases() {
    assert_eq!(bson_name::<Lower>(), "created_at");
    assert_eq!(bson_name::<Upper>(), "CREATED_AT");
    assert_eq!(bson_name::<Pascal>(), "CreatedAt");
    assert_eq!(bson_name::<Camel>(), "createdAt");
    assert_eq!(bson_name::<Snake>(), "created_at");
    assert_eq!(bson_name::<ScreamingSnake>(), "CREATED_AT");
    assert_eq!(bson_name::<Kebab>(), "created-at");
    assert_eq!(bson_name::<ScreamingKebab>(), "CREATED-AT");
    assert_eq!(bson_name::<SerializeSide>(), "createdAt");

    // Checks that the recorded names are the ones serde writes (through `Serializer`, which
    // bson 2 and 3 both have, unlike `to_document`).
    let doc = Pascal {
        id: ObjectId::new(),
        created_at: 1,
    }
    .serialize(bson::Serializer::new())
    .unwrap();
    assert!(doc.as_document().unwrap().contains_key("CreatedAt"));
    let doc = ScreamingKebab {
        id: ObjectId::new(),
        created_at: 1,
    }
    .serialize(bson::Serializer::new())
    .unwrap();
    assert!(doc.as_document().unwrap().contains_key("CREATED-AT"));
}
