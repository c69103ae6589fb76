//! Typed partial updates: [`Children::patch`](crate::Children::patch) sets, unsets and increments
//! fields of one child, named by the constants `#[derive(Child)]` generates (`Review::HELPFUL`),
//! in the child collection and in every embedded copy.
//!
//! ```no_run
//! # use subset_runtime as subset;
//! # use subset::{Child, Subset, Children};
//! # use subset::patch::Field;
//! # async fn demo<P: Subset<Id = i32>, R: Child<Id = i32>>(
//! #     reviews: Children<'_, P, R>, helpful: Field<R, i32>, hidden: Field<R, bool>,
//! # ) -> subset::Result<()> {
//! // One "helpful" vote: `$inc` on the review and on each embedded copy, in one transaction.
//! reviews.patch(&7, &42).inc(helpful, 1).await?;
//! // A moderator hides it: it leaves the views filtered by `!hidden`, which backfill.
//! reviews.patch(&7, &42).set(hidden, true).await?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::IntoFuture;
use std::marker::PhantomData;

use futures::future::BoxFuture;
use mongodb::ClientSession;
use serde::Serialize;

use crate::action::Action;
use crate::bson::{Bson, Decimal128, Document};
use crate::engine::{BulkProgress, BulkReport, ByChild, ChildPatch, Range, RawChildren};
use crate::error::{Error, Result};
use crate::job::Progress;
use crate::job::SweepOptions;
use crate::model::Child;

/// One stored field of child type `C`, whose Rust type is `T`: the constants `#[derive(Child)]`
/// generates, one per stored field, named after it in upper case (`Review::HELPFUL` for
/// `helpful`), with the field's visibility.
///
/// `A` says whether a patch may change it: [`Mutable`] for most fields; [`Identity`] for the
/// `_id`; [`Reformed`] for a field serde stores through `with` or `serialize_with`, whose
/// stored form a patch could not produce.
pub struct Field<C, T, A = Mutable> {
    bson: &'static str,
    _types: PhantomData<Types<C, T, A>>,
}

/// What a [`Field`] is typed by, held by none of it (so that it is `Send`, `Sync` and `Copy`).
type Types<C, T, A> = fn() -> (C, T, A);

impl<C, T, A> Field<C, T, A> {
    /// Used by the derive: the field stored under `bson`.
    #[doc(hidden)]
    pub const fn __new(bson: &'static str) -> Self {
        Field {
            bson,
            _types: PhantomData,
        }
    }

    /// The field's name in the stored document (after serde's renames).
    pub const fn name(&self) -> &'static str {
        self.bson
    }
}

impl<C, T, A> Clone for Field<C, T, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C, T, A> Copy for Field<C, T, A> {}

impl<C, T, A> fmt::Debug for Field<C, T, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Field").field(&self.bson).finish()
    }
}

/// A field a patch may change.
#[derive(Debug, Clone, Copy)]
pub enum Mutable {}

/// The child's `_id`: its identity, which no patch changes.
#[derive(Debug, Clone, Copy)]
pub enum Identity {}

/// A field serde stores through `with` or `serialize_with`: a patch would store the plain
/// value, not the form serde writes, so it is changed by replacing the child.
#[derive(Debug, Clone, Copy)]
pub enum Reformed {}

/// The fields a patch may change: [`Mutable`] ones.
#[diagnostic::on_unimplemented(
    message = "this field cannot be changed by a patch: it is {Self}",
    label = "not a field a patch may change",
    note = "a child's `_id` (`Identity`) is its identity: remove the child and push it with the new `_id`",
    note = "a field serde stores through `with` or `serialize_with` (`Reformed`) would be stored in its plain form: replace the whole child with `update`"
)]
pub trait Changeable {}

impl Changeable for Mutable {}

/// The field types `inc` and `dec` take: numbers, stored as int32, int64, double or decimal128.
///
/// Sealed: the library implements it for the types whose stored form the server's `$inc`
/// adds to and keeps, and a type of another crate would serialize as anything.
#[diagnostic::on_unimplemented(
    message = "`inc` and `dec` take a numeric field, not `{Self}`",
    label = "not a number the server can increment",
    note = "increment an integer (up to `i64` or `u32`), a float or a `Decimal128` field; `set` a field of any other type, an `Option` included"
)]
pub trait Increment: Serialize + sealed::Sealed {
    /// The values an integer type holds, `(MIN, MAX)`; `None` for a float or a decimal. An
    /// `inc` or `dec` that would take a field out of them is refused: the server would store a
    /// value (an int32 widened to an int64, a negative number) the field cannot read back.
    const RANGE: Option<(i64, i64)>;
}

mod sealed {
    /// What keeps [`Increment`](super::Increment) to the library's own impls.
    #[diagnostic::on_unimplemented(
        message = "`Increment` cannot be implemented for `{Self}`: the library implements it for the numbers the server increments",
        label = "not one of the library's numeric types",
        note = "`inc` and `dec` take `i8` to `i64`, `u8` to `u32`, `f32`, `f64` and `Decimal128` fields; give the field one of these types, or change it with `set`"
    )]
    pub trait Sealed {}
}

macro_rules! increment {
    ($($t:ty),*) => { $(
        impl sealed::Sealed for $t {}
        impl Increment for $t {
            // Each converts to `i64` without loss.
            const RANGE: Option<(i64, i64)> = Some((<$t>::MIN as i64, <$t>::MAX as i64));
        }
    )* };
}

increment!(i8, i16, i32, i64, u8, u16, u32);

impl sealed::Sealed for f32 {}
impl Increment for f32 {
    const RANGE: Option<(i64, i64)> = None;
}

impl sealed::Sealed for f64 {}
impl Increment for f64 {
    const RANGE: Option<(i64, i64)> = None;
}

/// Added as IEEE 754-2008 decimal128 adds, by the server and by the running sums alike: exactly
/// while the result fits in 34 digits, rounded to nearest, ties to even, past them.
impl sealed::Sealed for Decimal128 {}
impl Increment for Decimal128 {
    const RANGE: Option<(i64, i64)> = None;
}

/// `V`'s range, as the engine keeps an increment in it.
fn range<V: Increment>() -> Option<Range> {
    V::RANGE.map(|(min, max)| Range {
        min,
        max,
        name: std::any::type_name::<V>(),
    })
}

/// `-d`: its sign bit (bit 127, the high bit of the last of its little-endian bytes) flipped,
/// which every decimal128, however large, has an opposite for.
fn negated_decimal(d: Decimal128) -> Decimal128 {
    let mut bytes = d.bytes();
    bytes[15] ^= 0x80;
    Decimal128::from_bytes(bytes)
}

/// The field types `unset` takes: `Option`s, which read a missing field back as `None`.
#[diagnostic::on_unimplemented(
    message = "only an `Option` field can be unset, not one of `{Self}`",
    label = "every child must hold this field",
    note = "`set` the field to another value instead, or make it an `Option`"
)]
pub trait Unset {}

impl<T> Unset for Option<T> {}

/// A change to some fields of one child, or of every child matching a filter, run when
/// awaited: [`Children::patch`](crate::Children::patch) (target [`ById`]) and
/// [`Children::patch_where`](crate::Children::patch_where) (target [`ByFilter`]).
///
/// Built with [`Patch::set`], [`Patch::unset`], and for one child [`Patch::inc`] and
/// [`Patch::dec`], each taking a field constant of the child type; [`Patch::session`] runs a
/// patch of one child in the caller's session, as [`crate::Action::session`] does.
#[must_use = "a patch does nothing until it is awaited"]
pub struct Patch<'a, C, T = ById<'a>> {
    raw: RawChildren<'a>,
    patch: ChildPatch,
    /// The first value that did not serialize, reported when awaited.
    error: Option<Error>,
    target: T,
    _child: PhantomData<fn() -> C>,
}

/// The target of [`Children::patch`](crate::Children::patch) and
/// [`Children::patch_by_id`](crate::Children::patch_by_id): one child, under its parent (read
/// from the child when not given).
pub struct ById<'a> {
    ids: Result<(Option<Bson>, Bson)>,
    session: Option<&'a mut ClientSession>,
}

/// The target of [`Children::patch_where`](crate::Children::patch_where): every child that matches
/// a filter, across parents.
pub struct ByFilter<'a> {
    filter: Document,
    options: SweepOptions,
    progress: Progress<'a, BulkProgress>,
}

impl<'a, C: Child, T> Patch<'a, C, T> {
    pub(crate) fn new(raw: RawChildren<'a>, target: T) -> Self {
        Patch {
            raw,
            patch: ChildPatch::new(),
            error: None,
            target,
            _child: PhantomData,
        }
    }

    fn value(&mut self, value: &impl Serialize) -> Option<Bson> {
        match crate::bson_compat::to_bson(value) {
            Ok(value) => Some(value),
            Err(source) => {
                self.error.get_or_insert(Error::Serialize {
                    what: "a patched field's value",
                    source: Box::new(source),
                });
                None
            }
        }
    }

    /// Sets `field` to `value`. A sort key re-ranks the child in the views ordered by it, a
    /// filter flag moves it into or out of the views filtered by it, a summed field moves each
    /// sum by the difference.
    pub fn set<V: Serialize, A: Changeable>(mut self, field: Field<C, V, A>, value: V) -> Self {
        if let Some(value) = self.value(&value) {
            self.patch = self.patch.set(field.bson, value);
        }
        self
    }

    /// Removes `field` from the child (it reads back as `None`). A sort key, filter or summed
    /// field cannot be unset: that is [`Error::InvalidPatch`].
    pub fn unset<V: Unset, A: Changeable>(mut self, field: Field<C, V, A>) -> Self {
        self.patch = self.patch.unset(field.bson);
        self
    }
}

impl<'a, C: Child> Patch<'a, C, ById<'a>> {
    pub(crate) fn one(raw: RawChildren<'a>, ids: Result<(Option<Bson>, Bson)>) -> Self {
        Patch::new(raw, ById { ids, session: None })
    }

    /// Adds `by` to `field` on the server, so that concurrent increments all count. The
    /// increment is sent as the field is stored (an `i32` as an int32, a `Decimal128` as a
    /// decimal128), so the server keeps its BSON type. A decimal adds exactly while the result
    /// fits in 34 digits and is rounded to them past that (to nearest, ties to even), on the
    /// child as in any sum of it.
    ///
    /// # Errors
    ///
    /// Awaited, [`Error::InvalidPatch`] naming the field, with nothing written, when the sum
    /// would leave the range of the field's integer type (past `i32::MAX` for an `i32`, below
    /// 0 for a `u8`): the server would store a value the field cannot read back (an int64
    /// where an int32 was, a negative number); and when `by` is a decimal infinity or NaN, which
    /// no field can be incremented by.
    pub fn inc<V: Increment, A: Changeable>(mut self, field: Field<C, V, A>, by: V) -> Self {
        if let Some(by) = self.value(&by) {
            self.patch = self.patch.inc_within(field.bson, by, range::<V>());
        }
        self
    }

    /// Takes `by` off `field` on the server (an `inc` by `-by`; unsigned fields and decimals
    /// too).
    ///
    /// # Errors
    ///
    /// Awaited, [`Error::InvalidPatch`] naming the field, with nothing written, as for
    /// [`Patch::inc`]: when the difference would leave the range of the field's type (below 0
    /// for an unsigned one), and when `-by` does not fit the type `by` is stored as
    /// (`i64::MIN`, `i32::MIN`), since the server would then change the stored type.
    pub fn dec<V: Increment, A: Changeable>(mut self, field: Field<C, V, A>, by: V) -> Self {
        if let Some(by) = self.value(&by) {
            let negated = match &by {
                Bson::Int32(n) => n.checked_neg().map(Bson::Int32),
                Bson::Int64(n) => n.checked_neg().map(Bson::Int64),
                Bson::Double(f) => Some(Bson::Double(-f)),
                Bson::Decimal128(d) => Some(Bson::Decimal128(negated_decimal(*d))),
                // The other kinds are refused by the engine's check, naming the field.
                other => Some(other.clone()),
            };
            match negated {
                Some(negated) => {
                    self.patch = self.patch.inc_within(field.bson, negated, range::<V>());
                }
                None => {
                    let by = match by {
                        Bson::Int32(n) => n.to_string(),
                        Bson::Int64(n) => n.to_string(),
                        other => other.to_string(),
                    };
                    self.error.get_or_insert(Error::InvalidPatch {
                        collection: self.raw.spec().child_collection.to_owned(),
                        field: field.bson.to_owned(),
                        reason: format!(
                            "is decremented by {by}, whose opposite its stored type cannot hold: \
                             the server would store another type, which the field cannot read back"
                        ),
                    });
                }
            }
        }
        self
    }

    /// Runs the patch in `session` (see [`crate::Action`]).
    pub fn session(mut self, session: &'a mut ClientSession) -> Self {
        self.target.session = Some(session);
        self
    }
}

impl<'a, C: Child> Patch<'a, C, ByFilter<'a>> {
    pub(crate) fn matching(raw: RawChildren<'a>, filter: Document) -> Self {
        let target = ByFilter {
            filter,
            options: SweepOptions::default(),
            progress: Box::new(|_| {}),
        };
        Patch::new(raw, target)
    }

    /// How many parents are read per batch and visited at once, as [`crate::Job::options`].
    pub fn options(mut self, options: SweepOptions) -> Self {
        self.target.options = options;
        self
    }

    /// Calls `progress` after each batch of parents, as [`crate::Job::progress`].
    pub fn progress(mut self, progress: impl FnMut(&BulkProgress) + Send + 'a) -> Self {
        self.target.progress = Box::new(progress);
        self
    }
}

impl<'a, C: Child> IntoFuture for Patch<'a, C, ById<'a>> {
    type Output = Result<()>;
    type IntoFuture = BoxFuture<'a, Result<()>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            if let Some(error) = self.error {
                return Err(error);
            }
            let session = self.target.session;
            let action = match self.target.ids? {
                (Some(parent), child) => Action::of(self.raw.patch_one(parent, child, self.patch)),
                (None, child) => Action::of(ByChild::patch(self.raw, child, self.patch)),
            };
            action.in_session(session).await
        })
    }
}

impl<'a, C: Child> IntoFuture for Patch<'a, C, ByFilter<'a>> {
    type Output = Result<BulkReport>;
    type IntoFuture = BoxFuture<'a, Result<BulkReport>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            if let Some(error) = self.error {
                return Err(error);
            }
            let ByFilter {
                filter,
                options,
                progress,
            } = self.target;
            self.raw
                .patch_where(&filter, &self.patch, &options, progress)
                .await
        })
    }
}

impl<C, T> fmt::Debug for Patch<'_, C, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Patch")
            .field("patch", &self.patch)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ById<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ById")
            .field("ids", &self.ids.as_ref().ok())
            .field("session", &self.session.is_some())
            .finish()
    }
}

impl fmt::Debug for ByFilter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByFilter")
            .field("filter", &self.filter)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}
