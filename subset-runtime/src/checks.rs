//! What the derives check at compile time, and the types a field can have: the traits a sort
//! key, a count, a sum and a filter field must implement, and the hidden constant functions that
//! `#[derive(Subset)]` and `#[derive(Child)]` call (through the hidden module of the crate root).
//!
//! rustc says what it can: the derives access each field a string names in a function that is
//! never called, so that an unknown name is its "no field" error, and check the field's type with
//! a method of the trait it must implement, whose `on_unimplemented` message says what to write.
//! What only the other derive knows (how serde stores a child's fields) is read here, in
//! constant evaluation: each function returns the problem, and the generated code panics with
//! it, so that the error points at the attribute and names nothing of this crate.

use std::marker::PhantomData;

use crate::model::{Child, Direction, FieldName, SubsetSpec};
use crate::values::SortValues;

/// A child field found by Rust name: see [`field_of`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ChildField {
    /// The field's BSON name, or the Rust name asked for when no stored field has it.
    bson: &'static str,
    /// Its index in the child's [`Child::FIELDS`], if it is there.
    index: Option<usize>,
    /// The serde key that keeps the field from being stored, always or as its type, if any.
    blocker: Option<&'static str>,
}

/// Looks up the Rust field `rust` of a child in its lists (its [`Child::FIELDS`],
/// [`Child::__UNSTORED`] and [`Child::__ALTERED`], as read through [`Described`], so that a child
/// type without `#[derive(Child)]` is reported once elsewhere). An unknown name comes back
/// unchanged, without an index.
#[doc(hidden)]
pub const fn field_of(
    fields: &'static [FieldName],
    unstored: &'static [(&'static str, &'static str)],
    altered: &'static [(&'static str, &'static str)],
    rust: &'static str,
) -> ChildField {
    let mut found = ChildField {
        bson: rust,
        index: None,
        blocker: None,
    };
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i].rust, rust) {
            found.bson = fields[i].bson;
            found.index = Some(i);
        }
        i += 1;
    }
    // A field serde never stores under its name is not in `fields`; one it stores only
    // sometimes, or in another form, is.
    found.blocker = match (serde_key(unstored, rust), found.index) {
        (Some(key), _) => Some(key),
        (None, Some(_)) => serde_key(altered, rust),
        (None, None) => None,
    };
    found
}

/// The serde key `list` records for the Rust field `rust`.
const fn serde_key(
    list: &'static [(&'static str, &'static str)],
    rust: &str,
) -> Option<&'static str> {
    let mut i = 0;
    while i < list.len() {
        if str_eq(list[i].0, rust) {
            return Some(list[i].1);
        }
        i += 1;
    }
    None
}

/// What a parent does with a child field it names, for messages: see [`Site`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Role {
    /// A key of `sort`, on the element type of the subset field.
    Sort,
    /// The `bool` field of `filter`, on the full child type; `equals` is the value a child must
    /// hold there.
    Filter {
        /// `true` for `filter = "verified"`, `false` for `filter = "!hidden"`.
        equals: bool,
    },
    /// A child field of `sum`, on the full child type.
    Sum,
}

/// A child field as a parent names it: which field, on which type, in which role. What the
/// messages of [`field_problem`] are made of.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Site {
    /// The Rust field name, as written.
    pub field: &'static str,
    /// The type looked up ([`Child::__NAME`]).
    pub owner: &'static str,
    /// Its full type, whose serde attributes decide how the field is stored (the same type
    /// unless the field is a preview's).
    pub full_owner: &'static str,
    /// What the parent does with the field.
    pub role: Role,
}

impl Site {
    /// The key whose string names the field.
    const fn key(&self) -> &'static str {
        match self.role {
            Role::Sort => "sort",
            Role::Filter { .. } => "filter",
            Role::Sum => "sum",
        }
    }

    /// The field in its role: "`x` cannot be a sort key".
    const fn cannot(&self, message: Message) -> Message {
        let what = match self.role {
            Role::Sort => "` cannot be a sort key: it is `#[serde(",
            Role::Filter { .. } => "` cannot be a filter: it is `#[serde(",
            Role::Sum => "` cannot be summed: it is `#[serde(",
        };
        message.push("`").push(self.field).push(what)
    }

    /// The message for a field that `blocker` keeps from being stored always, or as its type.
    const fn blocked(&self, bson: &str, blocker: &str) -> Message {
        let (field, owner) = (self.field, self.owner);
        let never = str_eq(blocker, "skip") || str_eq(blocker, "skip_serializing");
        if never || str_eq(blocker, "flatten") {
            let m = self
                .cannot(Message::new())
                .push(blocker)
                .push(")]` on `")
                .push(owner);
            let m = if never {
                let m = m.push("`, so it is never stored");
                match self.role {
                    Role::Sort => m
                        .push(" and MongoDB cannot sort by it; sort by a field that `")
                        .push(owner)
                        .push("` stores"),
                    Role::Filter { .. } => m
                        .push("; filter by a field that `")
                        .push(owner)
                        .push("` stores"),
                    Role::Sum => m.push("; sum a field that `").push(owner).push("` stores"),
                }
            } else {
                m.push("`, so its own fields are stored in its place and nothing under `")
                    .push(field)
                    .push("`; name a field declared on `")
                    .push(owner)
                    .push("` itself")
            };
            return m
                .push(", or remove `")
                .push(blocker)
                .push("` from the serde attributes of `")
                .push(field)
                .push("`");
        }
        // How the field is stored is the full type's to say (a preview's `__ALTERED` is its
        // full type's).
        let owner = self.full_owner;
        if str_eq(blocker, "skip_serializing_if") {
            let m = match self.role {
                Role::Sort => Message::new().push("a sort key must always be stored: `"),
                Role::Filter { .. } => {
                    Message::new().push("a filter field must always be stored: `")
                }
                Role::Sum => Message::new().push("a summed field must always be stored: `"),
            };
            let m = m
                .push(field)
                .push("` is `#[serde(skip_serializing_if)]` on `")
                .push(owner)
                .push("`, which leaves it out of some children, and ");
            let m = match self.role {
                Role::Sort => m.push(
                    "a child without a sort value has no place in the order (a page that reaches it fails)",
                ),
                Role::Filter { equals } => m
                    .push("a query for `")
                    .push(bson)
                    .push(if equals { ": true" } else { ": false" })
                    .push("` never matches a missing field, so the view would miss those children"),
                Role::Sum => m.push("a child without it cannot be added up (its push fails)"),
            };
            return m
                .push("; remove `skip_serializing_if` from the serde attributes of `")
                .push(field)
                .push("`");
        }
        // `with` or `serialize_with`.
        let m = self
            .cannot(Message::new())
            .push(blocker)
            .push(")]` on `")
            .push(owner)
            .push("`, so it is stored in a form its Rust type does not tell, ");
        let m = match self.role {
            Role::Sort => m.push("and cursor positions are checked against that type"),
            Role::Filter { .. } => m.push("and the view's query matches a stored boolean"),
            Role::Sum => m.push("and a sum adds up stored numbers"),
        };
        m.push("; name a field stored as its Rust type, or remove `")
            .push(blocker)
            .push("` from the serde attributes of `")
            .push(field)
            .push("`")
    }

    /// The message for a name that is no Rust field but the BSON name of one of `fields`, if it
    /// is: the grammar takes Rust names. (Any other unknown name is rustc's "no field" error.)
    const fn serde_name(&self, fields: &'static [FieldName]) -> Option<Message> {
        let mut i = 0;
        while i < fields.len() {
            if str_eq(fields[i].bson, self.field) {
                let m = Message::new()
                    .push("`")
                    .push(self.field)
                    .push("` is the serde name of `")
                    .push(fields[i].rust)
                    .push("` on `")
                    .push(self.owner)
                    .push("`, and `")
                    .push(self.key())
                    .push("` names Rust fields: write `")
                    .push(fields[i].rust)
                    .push("`");
                return Some(m);
            }
            i += 1;
        }
        None
    }
}

/// The BSON name of a child field found by [`field_of`].
#[doc(hidden)]
pub const fn bson_name(field: ChildField) -> &'static str {
    field.bson
}

/// What is wrong with the child field a parent names at `site`, for the derive to fail the build
/// with, at the string that names it: serde does not always store it as its type (it is `skip`,
/// `skip_serializing`, `flatten`, `skip_serializing_if`, `with` or `serialize_with` on the
/// child), or the name is the BSON name of a field (the grammar takes Rust names). `None` for a
/// name that is no field at all (the derive's field access makes that rustc's "no field"
/// error), and when `is_child` is false: the type does not implement [`Child`], which is
/// reported once elsewhere.
#[doc(hidden)]
pub const fn field_problem(
    is_child: bool,
    fields: &'static [FieldName],
    field: ChildField,
    site: Site,
) -> Option<Message> {
    if !is_child {
        return None;
    }
    if let Some(blocker) = field.blocker {
        return Some(site.blocked(field.bson, blocker));
    }
    match field.index {
        Some(_) => None,
        None => site.serde_name(fields),
    }
}

/// The index in the child's [`Child::FIELDS`] of a field found by [`field_of`], for
/// [`FieldOf`]; 0 for a name that is no stored field, which [`field_found`] then turns into
/// [`FieldOf`]'s `CHILD = false` (the derive reports the name elsewhere).
#[doc(hidden)]
pub const fn field_index(field: ChildField) -> usize {
    match field.index {
        Some(index) => index,
        None => 0,
    }
}

/// Whether `field` is a stored field of a type that is a [`Child`] (`is_child`): the `CHILD`
/// argument of [`FieldOf`].
#[doc(hidden)]
pub const fn field_found(is_child: bool, field: ChildField) -> bool {
    is_child && field.index.is_some()
}

/// `T` is the type of a child's `I`th field of [`Child::FIELDS`]: `#[derive(Child)]` implements
/// it, with `CHILD` true, for each, so that a parent reads a sort key's [`SortValues`] by the
/// index [`field_index`] finds (the helper [`sort_values_at`] infers `T` from the one impl). The
/// type is a parameter, not an associated type: an impl is then as visible as the field's type,
/// so a public child may have fields of private types.
///
/// With `CHILD` false (the name is no stored field, or the type is no [`Child`], each reported
/// elsewhere), every type has it, for [`NotAChild`]: nothing more is reported.
#[doc(hidden)]
pub trait FieldOf<T: ?Sized, const I: usize, const CHILD: bool> {
    /// The field's values: its type's [`SortableField::VALUES`] when the derive can tell
    /// (whether the field can be a sort key is checked on the field itself, where the parent
    /// names it).
    const SORT_VALUES: SortValues;
}

impl<C: ?Sized, const I: usize> FieldOf<NotAChild, I, false> for C {
    const SORT_VALUES: SortValues = SortValues::Scalar;
}

/// [`Child::Full`] where `CHILD` (`Described::<C>::IS_CHILD`) is true, the type itself where it
/// is false: the full type a parent reads a sum's and a filter's field from, named without
/// requiring `C: Child`, which is reported once elsewhere. `#[derive(Child)]` implements it.
#[doc(hidden)]
pub trait FullOf<const CHILD: bool> {
    /// The full child type.
    type Full: ?Sized;
}

impl<T: ?Sized> FullOf<false> for T {
    type Full = T;
}

/// What [`FieldOf`] gives for a name that is no stored field of a [`Child`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct NotAChild;

/// A message built in constant evaluation, where `format!` is not available: a fixed buffer,
/// cut with `…` if it overflows.
#[doc(hidden)]
pub struct Message {
    buf: [u8; MESSAGE_CAP],
    len: usize,
    full: bool,
}

const MESSAGE_CAP: usize = 1536;

impl Message {
    /// An empty message.
    pub const fn new() -> Self {
        Message {
            buf: [0; MESSAGE_CAP],
            len: 0,
            full: false,
        }
    }

    /// The message with `text` appended (whole, or `…` and nothing more once it is full).
    pub const fn push(mut self, text: &str) -> Self {
        let bytes = text.as_bytes();
        if self.full {
            return self;
        }
        let ellipsis = "…".as_bytes();
        let (bytes, full) = if self.len + bytes.len() + ellipsis.len() > MESSAGE_CAP {
            (ellipsis, true)
        } else {
            (bytes, false)
        };
        let mut i = 0;
        while i < bytes.len() {
            self.buf[self.len + i] = bytes[i];
            i += 1;
        }
        self.len += bytes.len();
        self.full = full;
        self
    }

    /// The text so far.
    pub const fn text(&self) -> &str {
        let (text, _) = self.buf.split_at(self.len);
        match core::str::from_utf8(text) {
            Ok(text) => text,
            // Whole strings are appended, so the text is valid UTF-8.
            Err(_) => "",
        }
    }
}

impl Default for Message {
    fn default() -> Self {
        Message::new()
    }
}

/// `Described::<C>::…`: what the derives read of a child type `C` and of its full type, or
/// nothing when `C` is not a [`Child`]. The same inherent-before-trait resolution as
/// `Probe`, so that a type without `#[derive(Child)]` is reported once, by
/// the one item that needs the trait, and not again by each lookup.
#[doc(hidden)]
pub struct Described<C: ?Sized>(PhantomData<fn() -> PhantomData<C>>);

impl<C: Child> Described<C> {
    /// Whether `C` implements [`Child`] by a derive that succeeded (not the stub impl it emits
    /// next to its errors, which lists no fields).
    pub const IS_CHILD: bool = !C::__STUB;
    /// Whether `C` and its full type are children as [`Described::IS_CHILD`] tells.
    pub const FULL_IS_CHILD: bool = !C::__STUB && !<C::Full as Child>::__STUB;
    /// [`Child::__NAME`].
    pub const NAME: &'static str = C::__NAME;
    /// [`Child::__ALTERED`].
    pub const ALTERED: &'static [(&'static str, &'static str)] = C::__ALTERED;
    /// [`Child::__NAME`] of [`Child::Full`].
    pub const FULL_NAME: &'static str = <C::Full as Child>::__NAME;
    /// [`Child::__ALTERED`] of [`Child::Full`].
    pub const FULL_ALTERED: &'static [(&'static str, &'static str)] = <C::Full as Child>::__ALTERED;
    /// [`Child::FIELDS`].
    pub const FIELDS: &'static [FieldName] = C::FIELDS;
    /// [`Child::__UNSTORED`].
    pub const UNSTORED: &'static [(&'static str, &'static str)] = C::__UNSTORED;
    /// [`Child::EMBED`].
    pub const EMBED: Option<&'static [FieldName]> = C::EMBED;
    /// [`Child::FIELDS`] of [`Child::Full`].
    pub const FULL_FIELDS: &'static [FieldName] = <C::Full as Child>::FIELDS;
    /// [`Child::__UNSTORED`] of [`Child::Full`].
    pub const FULL_UNSTORED: &'static [(&'static str, &'static str)] =
        <C::Full as Child>::__UNSTORED;
}

/// The fallback of [`Described`]: a type with no fields, embedded whole.
#[doc(hidden)]
pub trait DescribedFallback {
    /// Not a child.
    const IS_CHILD: bool = false;
    /// Not a child.
    const FULL_IS_CHILD: bool = false;
    /// No name.
    const NAME: &'static str = "";
    /// No fields.
    const ALTERED: &'static [(&'static str, &'static str)] = &[];
    /// No name.
    const FULL_NAME: &'static str = "";
    /// No fields.
    const FULL_ALTERED: &'static [(&'static str, &'static str)] = &[];
    /// No fields.
    const FIELDS: &'static [FieldName] = &[];
    /// No fields.
    const UNSTORED: &'static [(&'static str, &'static str)] = &[];
    /// Embedded whole.
    const EMBED: Option<&'static [FieldName]> = None;
    /// No fields.
    const FULL_FIELDS: &'static [FieldName] = &[];
    /// No fields.
    const FULL_UNSTORED: &'static [(&'static str, &'static str)] = &[];
}

impl<C: ?Sized> DescribedFallback for Described<C> {}

/// Whether one of `fields` is stored under `key`: the derive fails the build when a child
/// field is stored under the parent key, which the library sets on every stored child.
#[doc(hidden)]
pub const fn stores(fields: &'static [FieldName], key: &str) -> bool {
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i].bson, key) {
            return true;
        }
        i += 1;
    }
    false
}

/// What is wrong with a preview field, `rust` stored as `bson`, checked against the full type's
/// field of the same Rust name (`full`, `full_unstored`, `full_altered`: its [`Described`]
/// lists), for the derive to fail the build with at the preview field: `renamed` when the full
/// type stores it under another name, `unstored` when it never stores it under its name
/// (`skip`, `skip_serializing`, `flatten`), `sometimes` when it leaves it out of some children
/// (`skip_serializing_if`) and the preview field cannot read a missing value (`None` when it
/// can: it is an `Option` or `#[serde(default)]`), or `reformed` when it stores it through a
/// function (`with`, `serialize_with`) and the preview field reads it as its plain type (`None`
/// when it has a `with` or `deserialize_with` of its own). A name the full type lacks is left to
/// the derive's field access, which rustc reports.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub const fn preview_problem(
    full: &'static [FieldName],
    full_unstored: &'static [(&'static str, &'static str)],
    full_altered: &'static [(&'static str, &'static str)],
    rust: &'static str,
    bson: &'static str,
    renamed: &'static str,
    unstored: &'static str,
    sometimes: Option<&'static str>,
    reformed: Option<&'static str>,
) -> Option<&'static str> {
    let mut i = 0;
    while i < full.len() {
        if str_eq(full[i].rust, rust) && !str_eq(full[i].bson, bson) {
            return Some(renamed);
        }
        i += 1;
    }
    if serde_key(full_unstored, rust).is_some() {
        return Some(unstored);
    }
    match (serde_key(full_altered, rust), sometimes, reformed) {
        (Some(key), Some(message), _) if str_eq(key, "skip_serializing_if") => Some(message),
        (Some(key), _, Some(message)) if !str_eq(key, "skip_serializing_if") => Some(message),
        _ => None,
    }
}

/// A preview field's type is its full type's field's: `#[derive(Child)]` checks it for each
/// field of a preview (`Self` the preview field's type, `F` the full type's). Implemented only
/// for `F` itself.
#[diagnostic::on_unimplemented(
    message = "a preview field must have the type of the full child's field of the same name: `{Self}` here, `{F}` in the full child",
    label = "declare this field as `{F}`",
    note = "a preview embeds the full child's values as they are stored, so each of its fields has the type the full child gives it"
)]
pub trait PreviewField<F: ?Sized> {}

impl<T: ?Sized> PreviewField<T> for T {}

/// The [`SortValues`] of a sort key: the field of type `T` (inferred) at index `I` of `C`'s
/// [`Child::FIELDS`].
#[doc(hidden)]
pub const fn sort_values_at<C, T, const I: usize, const CHILD: bool>() -> SortValues
where
    C: FieldOf<T, I, CHILD> + ?Sized,
    T: ?Sized,
{
    <C as FieldOf<T, I, CHILD>>::SORT_VALUES
}

/// A type in a probe's parameters, without owning one (and `Send`, `Sync` whatever it is).
type Marker<T> = PhantomData<fn() -> PhantomData<T>>;

/// `SameType::<A, B>::SAME`: whether `A` and `B` are one type. Path resolution prefers an
/// inherent associated constant to a trait's, but skips an inherent impl that does not apply
/// (here: whose two parameters are not one type), as `Described` does.
#[doc(hidden)]
pub struct SameType<A: ?Sized, B: ?Sized>(Marker<A>, Marker<B>);

impl<T: ?Sized> SameType<T, T> {
    /// One type.
    pub const SAME: bool = true;
}

/// The fallback of [`SameType`].
#[doc(hidden)]
pub trait SameTypeFallback {
    /// Two types.
    const SAME: bool = false;
}

impl<A: ?Sized, B: ?Sized> SameTypeFallback for SameType<A, B> {}

/// Whether `specs[earlier]` and `specs[later]` sort their children in one order once both are
/// made total as [`SubsetSpec::order`] makes them (the `_id` tie-breaker appended in the
/// direction of the last key, and nothing after an `_id` counting, since no two children share
/// one). The derive fails the build when they do for views of the same children with the same
/// `keep` and filter, which would then always hold the same children.
#[doc(hidden)]
pub const fn same_order(specs: &'static [SubsetSpec], earlier: usize, later: usize) -> bool {
    let (a, b) = (specs[earlier].sort, specs[later].sort);
    let (len_a, len_b) = (total_len(a), total_len(b));
    if len_a != len_b {
        return false;
    }
    let mut i = 0;
    while i < len_a {
        let ((field_a, dir_a), (field_b, dir_b)) = (total_key(a, i), total_key(b, i));
        if !str_eq(field_a, field_b) || dir_a.as_i32() != dir_b.as_i32() {
            return false;
        }
        i += 1;
    }
    true
}

/// `specs`; in a generic parent, where no constant item can name the parent, the derive's
/// check of [`same_order`] in `SUBSETS` itself: fails the build with `message` when they sort
/// in one order (evaluated where a build uses `SUBSETS` for a concrete type).
#[doc(hidden)]
pub const fn distinct_orders(
    specs: &'static [SubsetSpec],
    earlier: usize,
    later: usize,
    message: &'static str,
) -> &'static [SubsetSpec] {
    if same_order(specs, earlier, later) {
        panic!("{}", message);
    }
    specs
}

/// The length of the total order of `sort`: up to its first `_id`, or one more for the `_id`
/// appended.
const fn total_len(sort: &[crate::model::SortKey]) -> usize {
    let mut i = 0;
    while i < sort.len() {
        if str_eq(sort[i].field, "_id") {
            return i + 1;
        }
        i += 1;
    }
    sort.len() + 1
}

/// The `i`th key of the total order of `sort` (`i < total_len(sort)`).
const fn total_key(sort: &[crate::model::SortKey], i: usize) -> (&'static str, Direction) {
    if i < sort.len() {
        return (sort[i].field, sort[i].direction);
    }
    let last = match sort.last() {
        Some(key) => key.direction,
        None => Direction::Asc,
    };
    ("_id", last)
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Types that can be a sort key: required scalars, so that every child has one value of one BSON
/// type and keyset comparisons (`$lt`, `$gt`, which MongoDB brackets by type) reach every child.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a subset sort key",
    label = "sort keys must be scalar fields",
    note = "sort by a required scalar child field (integer, float, string, bool, date, ObjectId); arrays and nested documents have no single sort value, and an `Option` would put nulls where keyset pagination cannot reach them"
)]
pub trait SortableField {
    /// The BSON values a field of this type holds once serialized (and reads back): a cursor
    /// position for this key must be one of them.
    const VALUES: SortValues;

    /// The derive's check that a sort key's field has such a type, called as
    /// `<_ as SortableField>::__check(&child.field)` in code that never runs, so that rustc
    /// reports a type that is none at the sort string, with this trait's message.
    #[doc(hidden)]
    fn __check(&self) {}
}

/// Integer types that can hold a subset's child count.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold a subset count",
    label = "the `count` field must be an integer",
    note = "declare the count field as `i64` (or `i32`, `u32`, `u64`) and mark it `#[serde(default)]`"
)]
pub trait CountField {
    /// The derive's check of the `count` field: see [`SortableField::__check`].
    #[doc(hidden)]
    fn __check(&self) {}
}

/// The traits behind [`CountField`] and [`FilterField`]: each is implemented for the types
/// listed, and only for them. Through a blanket impl that rustc does not recommend, so that an
/// error names the trait's own message and not a list of impls.
mod sealed {
    pub trait Count {}
    pub trait Filter {}
}

#[diagnostic::do_not_recommend]
impl<T: sealed::Count + ?Sized> CountField for T {}

macro_rules! impl_sortable {
    ($($t:ty => $values:expr),* $(,)?) => {
        $(impl SortableField for $t { const VALUES: SortValues = $values; })*
    };
}

/// The values of an integer type: an int32 or int64 in its range (`u64` beyond `i64::MAX` has
/// no BSON form).
macro_rules! integer {
    ($t:ty) => {{
        let max = <$t>::MAX as u64;
        let max = if max > i64::MAX as u64 {
            i64::MAX
        } else {
            max as i64
        };
        SortValues::integer(<$t>::MIN as i64, max)
    }};
}

impl_sortable!(
    i8 => integer!(i8), i16 => integer!(i16), i32 => integer!(i32), i64 => integer!(i64),
    u8 => integer!(u8), u16 => integer!(u16), u32 => integer!(u32), u64 => integer!(u64),
    f32 => SortValues::Float, f64 => SortValues::Float,
    bool => SortValues::Bool, char => SortValues::Char, String => SortValues::String,
    crate::bson::DateTime => SortValues::DateTime, crate::bson::oid::ObjectId => SortValues::ObjectId,
    crate::bson::Decimal128 => SortValues::Decimal128, crate::bson::Timestamp => SortValues::Timestamp,
    crate::bson::Uuid => SortValues::Uuid,
);

macro_rules! impl_marker {
    ($trait:path: $($t:ty),* $(,)?) => { $(impl $trait for $t {})* };
}

impl_marker!(sealed::Count: i32, i64, u32, u64);

/// Types a parent field can have to hold the running sum of a child field of type `C`: an
/// integer for integer children (the sum stays exact), `f64` for any numeric child but a
/// decimal, and `Decimal128` for `Decimal128` children only (the sum stays exact, as the
/// server's `$inc` and `$sum` keep it; mixed with integers or floats it would not).
#[diagnostic::on_unimplemented(
    message = "a running sum of the child field's `{C}` cannot be kept in the parent field's `{Self}`",
    label = "a `sum` adds up a required numeric child field (not an `Option`: every child must hold a number there) into a numeric parent field",
    note = "sum a required numeric child field (an integer up to `i64`/`u32`, or `f32`/`f64`) into an `i64` (or `i32`, `u32`) parent field for integers, an `f64` one for floats, and a `bson::Decimal128` child field into a `bson::Decimal128` parent field; mark an integer or float parent field `#[serde(default)]`"
)]
pub trait SumField<C: ?Sized> {
    /// The derive's check of one `sum`, called as `<_ as SumField<_>>::__check(&child.field,
    /// &parent.total)`: see [`SortableField::__check`]. The child field comes first, so that
    /// rustc knows its type when it reports a parent field that cannot hold the sum.
    #[doc(hidden)]
    fn __check(_child: &C, _parent: &Self) {}
}

macro_rules! impl_sum {
    ($($parent:ty: $($child:ty),*;)*) => { $($(impl SumField<$child> for $parent {})*)* };
}

impl_sum!(
    i32: i8, i16, i32, u8, u16;
    i64: i8, i16, i32, i64, u8, u16, u32;
    u32: u8, u16, u32;
    f64: i8, i16, i32, i64, u8, u16, u32, f32, f64;
);

impl SumField<crate::bson::Decimal128> for crate::bson::Decimal128 {}

/// A value to name fields of in the derive's never-called check function.
#[doc(hidden)]
pub fn nothing<'a, T: ?Sized>() -> &'a T {
    unreachable!("only named in a check function that is never called")
}

/// Types a filtered view's child field can have: `bool`, which every child holds (a child whose
/// field is missing or null is in no filtered view, so an `Option` would hide it silently).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a view's filter",
    label = "a `filter` names a `bool` child field",
    note = "filter by a required `bool` child field: `filter = \"verified\"` keeps the children where it is true, `filter = \"!hidden\"` those where it is false"
)]
pub trait FilterField {
    /// The derive's check of a view's `filter`: see [`SortableField::__check`].
    #[doc(hidden)]
    fn __check(&self) {}
}

#[diagnostic::do_not_recommend]
impl<T: sealed::Filter + ?Sized> FilterField for T {}

impl sealed::Filter for bool {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SortKey, TEST_SPEC};

    const FIELDS: &[FieldName] = &[
        FieldName {
            rust: "id",
            bson: "_id",
        },
        FieldName {
            rust: "is_verified",
            bson: "isVerified",
        },
        FieldName {
            rust: "votes",
            bson: "votes",
        },
    ];
    const UNSTORED: &[(&str, &str)] = &[("cached", "skip")];
    const ALTERED: &[(&str, &str)] = &[("votes", "skip_serializing_if")];

    fn site(field: &'static str, role: Role) -> Site {
        Site {
            field,
            owner: "Review",
            full_owner: "Review",
            role,
        }
    }

    /// The message of the problem with `field` in `role`, if any.
    fn problem(field: &'static str, role: Role) -> Option<String> {
        let found = field_of(FIELDS, UNSTORED, ALTERED, field);
        field_problem(true, FIELDS, found, site(field, role)).map(|m| m.text().to_owned())
    }

    #[test]
    fn fields_are_found_by_rust_name() {
        let found = field_of(FIELDS, UNSTORED, ALTERED, "is_verified");
        assert_eq!((field_index(found), bson_name(found)), (1, "isVerified"));
        assert!(field_found(true, found) && !field_found(false, found));
        assert_eq!(problem("is_verified", Role::Sort), None);
        // Not a child: nothing is reported here.
        let found = field_of(&[], &[], &[], "nothing");
        assert!(!field_found(true, found));
        assert!(field_problem(false, &[], found, site("nothing", Role::Sum)).is_none());
    }

    #[test]
    fn serde_names_are_told_and_unknown_names_left_to_rustc() {
        assert_eq!(
            problem("isVerified", Role::Filter { equals: true }).as_deref(),
            Some("`isVerified` is the serde name of `is_verified` on `Review`, and `filter` names Rust fields: write `is_verified`")
        );
        assert_eq!(problem("vote", Role::Sum), None);
    }

    #[test]
    fn fields_stored_sometimes_or_never_are_refused() {
        let message = problem("votes", Role::Filter { equals: false }).unwrap_or_default();
        assert!(
            message.starts_with("a filter field must always be stored: `votes` is `#[serde(skip_serializing_if)]` on `Review`")
                && message.contains("a query for `votes: false` never matches a missing field"),
            "{message}"
        );
        let message = problem("cached", Role::Sum).unwrap_or_default();
        assert!(
            message.starts_with("`cached` cannot be summed: it is `#[serde(skip)]` on `Review`, so it is never stored"),
            "{message}"
        );
    }

    #[test]
    fn messages_are_cut_when_full() {
        let long = "x".repeat(MESSAGE_CAP);
        let message = Message::new().push("start ").push(&long).push("more");
        assert_eq!(message.text(), "start …");
        assert_eq!(Message::new().push("a").push("b").text(), "ab");
    }

    fn with_sort(sort: &'static [SortKey]) -> SubsetSpec {
        SubsetSpec { sort, ..TEST_SPEC }
    }

    fn key(field: &'static str, direction: Direction) -> SortKey {
        SortKey {
            field,
            direction,
            values: SortValues::Scalar,
        }
    }

    /// Whether `same_order` takes the two orders for one.
    fn one_order(a: &'static [SortKey], b: &'static [SortKey]) -> bool {
        let specs: &'static [SubsetSpec] = Box::leak(Box::new([with_sort(a), with_sort(b)]));
        same_order(specs, 0, 1)
    }

    #[test]
    fn orders_are_compared_once_total() {
        use Direction::{Asc, Desc};
        let leak =
            |keys: Vec<SortKey>| -> &'static [SortKey] { Box::leak(keys.into_boxed_slice()) };
        let date = leak(vec![key("date", Desc)]);
        // The tie-breaker written out, in the direction of the last key: the same order.
        assert!(one_order(
            date,
            leak(vec![key("date", Desc), key("_id", Desc)])
        ));
        // In the other direction: another order.
        assert!(!one_order(
            date,
            leak(vec![key("date", Desc), key("_id", Asc)])
        ));
        // Nothing after an `_id` counts.
        assert!(one_order(
            leak(vec![key("_id", Asc)]),
            leak(vec![key("_id", Asc), key("date", Desc)])
        ));
        assert!(!one_order(date, leak(vec![key("date", Asc)])));
        assert!(!one_order(
            date,
            leak(vec![key("date", Desc), key("rating", Desc)])
        ));
    }

    #[test]
    fn probes() {
        use crate::checks::SameTypeFallback as _;
        const {
            assert!(SameType::<String, String>::SAME && !SameType::<String, i64>::SAME);
        }
    }
}
