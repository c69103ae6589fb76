//! Children that no subset may embed: written around this crate with a sort key missing or of a
//! type the key cannot hold (a string `date` among dates), a filter flag that is not a `bool`,
//! or a summed field that is not a number. Embedded, such a child would make every `get` of
//! its parent fail; a resync leaves it out of the subset and reports it instead.
//!
//! The rules are plain functions of a document (tested without a server); the query that finds
//! a parent's malformed children is built from the same rules.

use crate::bson::{doc, Bson, Document};

use crate::engine::sums::Num;
use crate::model::SubsetSpec;
use crate::order::{self, Expected};
use crate::values;

/// How many malformed children one resync names; more are left for the next, once these are
/// fixed.
pub(super) const MALFORMED_LISTED: i64 = 100;

/// A stored child that no subset embeds, and why.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MalformedChild {
    /// The child's `_id`.
    pub child: Bson,
    /// The `_id` of its parent (the value of the view's key in the child).
    pub parent: Bson,
    /// BSON name of the field at fault.
    pub field: String,
    /// What is wrong, naming the stored type and the type expected: "is a string where the
    /// child type holds dates, so it has no place in the subset's order".
    pub problem: String,
}

/// The `$type` operand of a number a sum adds.
fn numeric() -> Bson {
    Bson::Array(vec!["int".into(), "long".into(), "double".into()])
}

/// What a stored child must hold to be embedded by any view of its collection and key. The
/// views share one child type, so a field one view sorts, filters or sums by is a field every
/// view's copy holds: a string `date` breaks the `get` of a view sorted by rating as much as
/// that of the view sorted by date.
pub(super) struct Rules<'s> {
    /// Every sort key of every view (`_id` included), with the bracket its type holds it to;
    /// `None` when a run-time descriptor knows no type: only a missing or null value is wrong.
    sort: Vec<(&'static str, Option<Expected>)>,
    /// This view's own sort keys, which even its embedded form holds.
    own: Vec<&'static str>,
    /// Every view's filter flag, which must be a `bool` where present.
    flags: Vec<&'static str>,
    /// Every summed child field, which must be a number.
    summed: Vec<(&'static str, &'static str)>,
    spec: &'s SubsetSpec,
}

/// Whether `child`, whole, breaks no rule of `spec`'s children, among `views` (see [`Rules`]):
/// a recompute of `spec` would embed it where it ranks, and so may a re-rank in place.
pub(crate) fn embeddable(spec: &SubsetSpec, views: &[SubsetSpec], child: &Document) -> bool {
    Rules::of(spec, views).problem(child, true).is_none()
}

impl<'s> Rules<'s> {
    /// The rules of `spec`'s children, from every view of them (`spec` among `views`).
    pub(super) fn of(spec: &'s SubsetSpec, views: &[SubsetSpec]) -> Self {
        let mut rules = Rules {
            sort: Vec::new(),
            own: spec.order().map(|k| k.field).collect(),
            flags: Vec::new(),
            summed: Vec::new(),
            spec,
        };
        for view in views.iter().chain(std::iter::once(spec)) {
            for (key, expected) in view.order().zip(order::expected(view, None)) {
                if !rules.sort.iter().any(|(f, _)| *f == key.field) {
                    rules.sort.push((key.field, expected));
                }
            }
            if let Some(f) = view.filter {
                if !rules.flags.contains(&f.field) {
                    rules.flags.push(f.field);
                }
            }
            for sum in view.sums {
                if !rules.summed.iter().any(|(child, _)| *child == sum.child) {
                    rules.summed.push((sum.child, sum.parent));
                }
            }
        }
        rules
    }

    /// The children of `parent` that break a rule, among all of its children: the filter of
    /// a filtered view plays no part, since its own query could not match a flag of the wrong
    /// type.
    pub(super) fn filter(&self, parent: &Bson) -> Document {
        let mut branches: Vec<Bson> = Vec::new();
        for (field, expected) in &self.sort {
            branches.push(Bson::Document(match expected {
                Some(e) => doc! { *field: { "$not": { "$type": e.bracket.clone() } } },
                None => doc! { *field: null },
            }));
        }
        for flag in &self.flags {
            branches.push(Bson::Document(
                doc! { *flag: { "$exists": true, "$not": { "$type": "bool" } } },
            ));
        }
        for (child, _) in &self.summed {
            branches.push(Bson::Document(
                doc! { *child: { "$not": { "$type": numeric() } } },
            ));
        }
        doc! { self.spec.key: { "$eq": parent.clone() }, "$or": branches }
    }

    /// The first rule `child` breaks, if any: `(field, problem)`. `whole` says whether `child`
    /// is the whole child (from the child collection) or its embedded form, which may lack
    /// every field but `_id` and this view's sort keys.
    pub(super) fn problem(&self, child: &Document, whole: bool) -> Option<(String, String)> {
        for (field, expected) in &self.sort {
            let value = child.get(*field);
            if value.is_none() && !whole && !self.own.contains(field) {
                continue;
            }
            let value = value.cloned().unwrap_or(Bson::Null);
            let found = match &value {
                Bson::Null if child.contains_key(*field) => "null".to_owned(),
                Bson::Null => "missing".to_owned(),
                other => values::describe(other),
            };
            let wrong = match expected {
                Some(e) => order::type_bracket(&value).as_ref() != Some(&e.bracket),
                None => order::type_bracket(&value).is_none(),
            };
            if wrong {
                let want = expected
                    .as_ref()
                    .map_or("a value".to_owned(), |e| e.what.clone());
                return Some((
                    (*field).to_owned(),
                    format!("is {found} where {want}, so it has no place in the subset's order"),
                ));
            }
        }
        for flag in &self.flags {
            if let Some(value) = child.get(*flag).filter(|v| !matches!(v, Bson::Boolean(_))) {
                return Some((
                    (*flag).to_owned(),
                    format!(
                        "is {} where a filtered view needs a bool",
                        values::type_name(value.element_type())
                    ),
                ));
            }
        }
        for (field, sum) in &self.summed {
            let found = match child.get(*field) {
                Some(value) if Num::of(value).is_some() => continue,
                Some(value) => values::type_name(value.element_type()).to_owned(),
                None if !whole => continue,
                None => "missing".to_owned(),
            };
            return Some((
                (*field).to_owned(),
                format!(
                    "is {found} where the running sum `{sum}` needs a number (int32, int64, double or finite decimal)"
                ),
            ));
        }
        None
    }

    /// `children` as reports, those that break no rule left out.
    pub(super) fn reports(&self, children: &[Document]) -> Vec<MalformedChild> {
        children
            .iter()
            .filter_map(|child| {
                let (field, problem) = self.problem(child, true)?;
                Some(MalformedChild {
                    child: child.get("_id").cloned().unwrap_or(Bson::Null),
                    parent: child.get(self.spec.key).cloned().unwrap_or(Bson::Null),
                    field,
                    problem,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson::DateTime;
    use crate::model::TEST_SPEC;
    use crate::spec::{FilterSpec, SortValues, SumSpec};

    /// Two views of one collection: the test descriptor (typed `rating asc, date desc`) with a
    /// sum of `stars`, and a filtered view on `verified`.
    fn views() -> [SubsetSpec; 2] {
        const SUMS: &[SumSpec] = &[SumSpec {
            parent: "total",
            child: "stars",
            ty: crate::model::NumberType::Unknown,
        }];
        [
            SubsetSpec {
                sums: SUMS,
                ..TEST_SPEC
            },
            SubsetSpec {
                field: "verified_only",
                filter: Some(FilterSpec {
                    field: "verified",
                    equals: true,
                }),
                ..TEST_SPEC
            },
        ]
    }

    fn found(child: Document) -> Option<(String, String)> {
        let views = views();
        Rules::of(&views[1], &views).problem(&child, true)
    }

    fn id() -> Bson {
        Bson::ObjectId(crate::bson::oid::ObjectId::from_bytes([7; 12]))
    }

    fn good() -> Document {
        doc! { "_id": id(), "rating": 4, "date": DateTime::from_millis(1), "verified": true, "stars": 2 }
    }

    #[test]
    fn a_well_formed_child_breaks_no_rule() {
        assert_eq!(found(good()), None);
        let mut unflagged = good();
        unflagged.remove("verified");
        assert_eq!(found(unflagged), None);
    }

    #[test]
    fn each_rule_names_its_field_and_the_types() {
        let with = |field: &str, value: Bson| {
            let mut child = good();
            child.insert(field, value);
            found(child).expect("a broken rule")
        };
        let (field, problem) = with("date", Bson::String("2024".into()));
        assert_eq!(field, "date");
        assert!(problem.starts_with("is a string where"), "{problem}");
        let (field, problem) = with("verified", Bson::String("yes".into()));
        assert_eq!(field, "verified");
        assert!(
            problem.contains("string") && problem.contains("bool"),
            "{problem}"
        );
        // Another view's sum: the views share the child type.
        let (field, problem) = with("stars", Bson::String("4".into()));
        assert_eq!(field, "stars");
        assert!(
            problem.contains("string") && problem.contains("`total`"),
            "{problem}"
        );
        let mut missing = good();
        missing.remove("date");
        let (field, problem) = found(missing).expect("a broken rule");
        assert_eq!(
            (field.as_str(), problem.starts_with("is missing")),
            ("date", true)
        );
    }

    #[test]
    fn an_embedded_form_needs_only_its_own_sort_keys() {
        let views = views();
        let rules = Rules::of(&views[0], &views);
        let preview = doc! { "_id": id(), "rating": 3, "date": DateTime::from_millis(1) };
        assert_eq!(rules.problem(&preview, false), None);
        let odd = doc! { "_id": id(), "rating": "3", "date": DateTime::from_millis(1) };
        assert!(rules.problem(&odd, false).is_some());
        let keyless = doc! { "_id": id(), "rating": 3 };
        assert!(rules.problem(&keyless, false).is_some());
    }

    #[test]
    fn a_run_time_descriptor_holds_sort_keys_only_to_being_there() {
        let untyped = SubsetSpec {
            sort: &[crate::spec::SortKey {
                field: "date",
                direction: crate::spec::Direction::Desc,
                values: SortValues::Scalar,
            }],
            id_values: SortValues::Id,
            ..TEST_SPEC
        };
        let rules = Rules::of(&untyped, &[]);
        assert_eq!(
            rules.problem(&doc! { "_id": id(), "date": "2024" }, true),
            None
        );
        assert!(rules.problem(&doc! { "_id": 1 }, true).is_some());
    }

    #[test]
    fn the_query_asks_for_every_rule_of_every_view() {
        let views = views();
        let text = Rules::of(&views[0], &views)
            .filter(&Bson::Int32(7))
            .to_string();
        for part in [
            "rating",
            "date",
            "stars",
            "verified",
            "\"bool\"",
            "product_id",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }
}
