//! Checking a cursor against the field it is used on: made for this parent and field, and
//! holding values its sort keys can hold. A token is not signed, so every cursor a client
//! hands back is checked before it reaches a query.

use crate::bson::Bson;

use super::Cursor;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;
use crate::order;
use crate::values;

impl Cursor {
    /// Checks that this cursor was made for `parent`'s subset `spec`, and that each value of its
    /// position is one the key can hold ([`crate::spec::SortValues`]): a position no stored child can
    /// have is a forged cursor, refused here, before any query (a value of another type bracket
    /// would match no child, and the end of the walk would look for the children it missed).
    pub(crate) fn check(&self, spec: &SubsetSpec, parent: &Bson) -> Result<&[Bson]> {
        let field = spec.field;
        let keys = spec.order().count();
        let misfit = spec
            .order()
            .zip(&self.position)
            .find(|(key, value)| !key.values.admits(value));
        let reason = if self.field != field {
            format!("it pages `{}`, not `{field}`", self.field)
        } else if &self.parent != parent {
            format!("it was made for parent {}, not {parent}", self.parent)
        } else if self.position.len() != keys {
            format!(
                "it holds {} sort values where `{field}` sorts by {keys}",
                self.position.len()
            )
        } else if let Some((key, value)) = misfit {
            format!(
                "its `{}` is {}, where the children's `{}` is {}",
                key.field,
                values::describe(value),
                key.field,
                key.values
            )
        } else {
            return Ok(&self.position);
        };
        Err(Error::InvalidCursor { reason })
    }

    /// At the end of a walk over well-typed children: fails when this cursor's position is of
    /// other type brackets than `stored`, the position of a stored child of the same parent
    /// (keys missing or null in `stored` are not compared). Such a cursor was forged (a real one
    /// is the position of a child); for descriptors without Rust types, [`Cursor::check`] could
    /// not tell before the query.
    pub(crate) fn check_brackets(&self, spec: &SubsetSpec, stored: &[Bson]) -> Result<()> {
        let differs =
            spec.order()
                .zip(self.position.iter().zip(stored))
                .find(|(_, (mine, theirs))| {
                    // A missing or null stored value says nothing of the others.
                    let theirs = order::type_bracket(theirs);
                    theirs.is_some() && order::type_bracket(mine) != theirs
                });
        match differs {
            Some((key, (mine, theirs))) => Err(Error::InvalidCursor {
                reason: format!(
                    "its `{}` is {}, where the children's `{}` is {}",
                    key.field,
                    values::describe(mine),
                    key.field,
                    values::describe(theirs)
                ),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bson::{self, doc};
    use crate::model::TEST_SPEC as SPEC;

    fn position() -> Vec<Bson> {
        vec![
            Bson::Int32(3),
            Bson::DateTime(bson::DateTime::from_millis(1)),
            Bson::ObjectId(bson::oid::ObjectId::new()),
        ]
    }

    /// A cursor of `TEST_SPEC` for parent 7 with `position`.
    fn at(position: Vec<Bson>) -> Cursor {
        Cursor {
            field: "recent".into(),
            parent: Bson::Int32(7),
            position,
        }
    }

    #[test]
    fn check_names_the_mismatch() {
        let c = at(position());
        assert!(c.check(&SPEC, &Bson::Int32(7)).is_ok());
        let other = SubsetSpec {
            field: "questions",
            ..SPEC
        };
        let err = c.check(&other, &Bson::Int32(7)).unwrap_err();
        assert!(err.to_string().contains("questions"), "{err}");
        let err = c.check(&SPEC, &Bson::Int32(8)).unwrap_err();
        assert!(err.to_string().contains("parent"), "{err}");
        assert!(at(position()[..2].to_vec())
            .check(&SPEC, &Bson::Int32(7))
            .is_err());
    }

    #[test]
    fn check_refuses_values_the_keys_cannot_hold() {
        let with = |i: usize, value: Bson| {
            let mut p = position();
            p[i] = value;
            at(p)
        };
        for (i, value, said) in [
            (
                1,
                Bson::Int32(5),
                "its `date` is an int32, where the children's `date` is a date",
            ),
            (1, Bson::Double(f64::NAN), "a double (NaN)"),
            (1, Bson::String("2024".into()), "a string"),
            (1, Bson::Null, "null"),
            (0, Bson::Double(3.0), "`rating` is a double"),
            (
                0,
                Bson::Int64(1 << 40),
                "an int32 or int64 from -2147483648 to 2147483647",
            ),
            (
                2,
                Bson::Undefined,
                "its `_id` is undefined, where the children's `_id` is an ObjectId",
            ),
        ] {
            match with(i, value).check(&SPEC, &Bson::Int32(7)) {
                Err(Error::InvalidCursor { reason }) => assert!(reason.contains(said), "{reason}"),
                other => panic!("{said}: {other:?}"),
            }
        }
        // Run-time descriptors know no types: any scalar, and any `_id` but the unsortable.
        let untyped = crate::spec::SpecBuilder::new("recent", "reviews", "product_id")
            .sort("rating asc, date desc")
            .build()
            .unwrap();
        assert!(with(1, Bson::Int32(5))
            .check(untyped, &Bson::Int32(7))
            .is_ok());
        let compound = with(2, Bson::Document(doc! { "a": 1 }));
        assert!(compound.check(untyped, &Bson::Int32(7)).is_ok());
        for bad in [
            Bson::Undefined,
            Bson::Null,
            Bson::MinKey,
            Bson::Array(vec![]),
        ] {
            let err = with(2, bad).check(untyped, &Bson::Int32(7)).unwrap_err();
            assert!(err.to_string().contains("`_id`"), "{err}");
        }
    }

    #[test]
    fn check_brackets_names_the_key_and_both_types() {
        let c = at(vec![Bson::Int32(3), Bson::Int32(5), Bson::Int32(1)]);
        let stored = [
            Bson::Int64(4),
            Bson::DateTime(bson::DateTime::from_millis(1)),
            Bson::Int32(2),
        ];
        let err = c.check_brackets(&SPEC, &stored).unwrap_err().to_string();
        assert!(
            err.contains("its `date` is an int32, where the children's `date` is a date"),
            "{err}"
        );
        let same = [Bson::Double(4.5), Bson::Int64(7), Bson::Int32(2)];
        assert!(c.check_brackets(&SPEC, &same).is_ok());
    }
}
