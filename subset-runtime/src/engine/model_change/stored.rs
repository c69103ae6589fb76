//! A definition of the model as the registry keeps it, whole: every view with its keys, order
//! and the types its sort keys hold, so that a program without the application's Rust types
//! (the command line) can act as the application would.
//!
//! Each view is stored in the grammars a user writes (`"date desc, rating asc"`, `"!hidden"`,
//! `"total = rating"`) and read back through [`SpecBuilder`], which checks it as it checks any
//! descriptor made at run time: one grammar, one set of rules.

use crate::bson::{doc, Bson, Document};

use crate::dynamic::SpecBuilder;
use crate::model::{Direction, ParentSpec, SubsetSpec};

/// The stored form of `spec`: `{ views: [...] }`.
pub(crate) fn document(spec: &ParentSpec) -> Document {
    let views: Vec<Bson> = spec
        .subsets
        .iter()
        .map(|s| Bson::Document(view(s)))
        .collect();
    doc! { "views": views }
}

fn view(spec: &SubsetSpec) -> Document {
    let sort: Vec<String> = spec
        .sort
        .iter()
        .map(|k| {
            let direction = match k.direction {
                Direction::Asc => "asc",
                Direction::Desc => "desc",
            };
            format!("{} {direction}", k.field)
        })
        .collect();
    let mut types: Document = spec
        .sort
        .iter()
        .map(|k| (k.field.to_owned(), Bson::String(k.values.name())))
        .collect();
    types.insert("_id", spec.id_values.name());
    let mut view = doc! {
        "field": spec.field,
        "child": spec.child_collection,
        "key": spec.key,
        "keep": i64::from(spec.keep),
        "sort": sort.join(", "),
        "types": types,
    };
    if let Some(count) = spec.count {
        view.insert("count", count);
    }
    if !spec.sums.is_empty() {
        let sums: Vec<String> = spec
            .sums
            .iter()
            .map(|s| format!("{} = {}", s.parent, s.child))
            .collect();
        view.insert("sums", sums.join(", "));
    }
    if let Some(filter) = spec.filter {
        let not = if filter.equals { "" } else { "!" };
        view.insert("filter", format!("{not}{}", filter.field));
    }
    if let Some(embed) = spec.embed {
        let names: Vec<&str> = embed.iter().map(|f| f.bson).collect();
        view.insert("embed", names);
    }
    // The Rust types of the count and sums, where known: written only then, as definitions
    // stored before them had none.
    let numbers: Document = spec
        .count
        .map(|c| (c, spec.count_type))
        .into_iter()
        .chain(spec.sums.iter().map(|s| (s.parent, s.ty)))
        .filter_map(|(field, ty)| Some((field.to_owned(), Bson::String(ty.word()?.to_owned()))))
        .collect();
    if !numbers.is_empty() {
        view.insert("numbers", numbers);
    }
    // Written only when set, as definitions stored before it had none.
    if spec.embed_key {
        view.insert("embed_key", true);
    }
    view
}

/// The definition of `collection` stored as `stored`, or what is wrong with it (naming the view
/// and the entry).
pub(crate) fn parse(collection: &str, stored: &Document) -> Result<ParentSpec, String> {
    let views = stored
        .get_array("views")
        .map_err(|_| "it holds no `views` array".to_owned())?;
    let mut subsets = Vec::with_capacity(views.len());
    for (i, view) in views.iter().enumerate() {
        let Bson::Document(view) = view else {
            return Err(format!("view {i} is not a document"));
        };
        let spec = parse_view(view).map_err(|e| {
            let name = view.get_str("field").unwrap_or("?");
            format!("view {i} (`{name}`): {e}")
        })?;
        subsets.push(*spec);
    }
    Ok(ParentSpec::leak(collection, subsets))
}

fn parse_view(view: &Document) -> Result<&'static SubsetSpec, String> {
    let text = |key: &str| {
        view.get_str(key)
            .map_err(|_| format!("`{key}` is missing or not a string"))
    };
    let keep = match view.get("keep") {
        Some(Bson::Int32(n)) => u32::try_from(*n).ok(),
        Some(Bson::Int64(n)) => u32::try_from(*n).ok(),
        _ => None,
    }
    .ok_or("`keep` is missing or not a whole number")?;
    let mut builder = SpecBuilder::new(text("field")?, text("child")?, text("key")?)
        .keep(keep)
        .sort(text("sort")?);
    if let Ok(types) = view.get_document("types") {
        for (field, word) in types {
            let values = word
                .as_str()
                .and_then(crate::values::SortValues::parse)
                .ok_or_else(|| {
                    format!("the type of `{field}` is not one the library writes: {word}")
                })?;
            builder = builder.values(field.as_str(), values);
        }
    }
    if let Ok(numbers) = view.get_document("numbers") {
        for (field, word) in numbers {
            let ty = word
                .as_str()
                .and_then(crate::model::NumberType::parse)
                .ok_or_else(|| {
                    format!("the type of `{field}` is not one a count or sum has: {word}")
                })?;
            builder = builder.number_type(field.as_str(), ty);
        }
    }
    if view.contains_key("count") {
        builder = builder.count(text("count")?);
    }
    if view.contains_key("sums") {
        builder = builder.sums(text("sums")?).map_err(|e| e.to_string())?;
    }
    if view.contains_key("filter") {
        builder = builder.filter(text("filter")?);
    }
    if let Some(embed) = view.get("embed") {
        let Bson::Array(names) = embed else {
            return Err("`embed` is not an array".to_owned());
        };
        let names: Option<Vec<&str>> = names.iter().map(Bson::as_str).collect();
        builder = builder.embed(names.ok_or("`embed` holds something other than names")?);
    }
    match view.get("embed_key") {
        None => {}
        Some(Bson::Boolean(embed_key)) => builder = builder.embed_key(*embed_key),
        Some(_) => return Err("`embed_key` is not a boolean".to_owned()),
    }
    builder.build().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model_change::Definition;
    use crate::model::{FieldName, FilterSpec, SumSpec, TEST_SPEC};

    #[test]
    fn a_stored_definition_reads_back_with_its_digest_and_types() {
        let filtered = SubsetSpec {
            field: "verified",
            count: Some("n"),
            count_type: crate::model::NumberType::integer("u32", 0, u32::MAX as i64),
            sums: &[SumSpec {
                parent: "total",
                child: "rating",
                ty: crate::model::NumberType::Decimal,
            }],
            filter: Some(FilterSpec {
                field: "hidden",
                equals: false,
            }),
            embed: Some(&[
                FieldName {
                    rust: "_id",
                    bson: "_id",
                },
                FieldName {
                    rust: "rating",
                    bson: "rating",
                },
                FieldName {
                    rust: "date",
                    bson: "date",
                },
                FieldName {
                    rust: "author",
                    bson: "by",
                },
            ]),
            ..TEST_SPEC
        };
        let keyed = SubsetSpec {
            field: "keyed",
            keep: 3,
            embed_key: true,
            ..TEST_SPEC
        };
        let spec = ParentSpec::leak("products", vec![TEST_SPEC, filtered, keyed]);
        let back = parse("products", &document(&spec)).unwrap();
        assert_eq!(
            Definition::of(&back, false).digest(),
            Definition::of(&spec, false).digest()
        );
        for (a, b) in spec.subsets.iter().zip(back.subsets) {
            assert_eq!(a.sort, b.sort);
            assert_eq!(a.id_values, b.id_values);
            assert_eq!((a.count, a.sums, a.filter), (b.count, b.sums, b.filter));
            assert_eq!(a.count_type, b.count_type);
            assert_eq!(a.embed_key, b.embed_key);
        }
        assert!(back.subsets[2].embed_key);
    }

    #[test]
    fn a_damaged_definition_is_an_error_naming_the_view_and_entry() {
        let damaged = |change: &dyn Fn(&mut Document)| {
            let mut view = view(&TEST_SPEC);
            change(&mut view);
            parse("products", &doc! { "views": [view] }).unwrap_err()
        };
        let e = damaged(&|v| {
            v.insert("keep", "five");
        });
        assert!(e.contains("`recent`") && e.contains("`keep`"), "{e}");
        let e = damaged(&|v| {
            v.get_document_mut("types").unwrap().insert("date", "when");
        });
        assert!(e.contains("`date`") && e.contains("when"), "{e}");
        let e = damaged(&|v| {
            v.insert("count", "n");
            v.insert("numbers", doc! { "n": "i128" });
        });
        assert!(e.contains("`n`") && e.contains("i128"), "{e}");
        let e = damaged(&|v| {
            v.insert("embed_key", "yes");
        });
        assert!(e.contains("`embed_key`"), "{e}");
    }
}
