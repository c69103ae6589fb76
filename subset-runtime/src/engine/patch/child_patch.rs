//! [`ChildPatch`]: a change to some fields of one child, by BSON name; what it may change, how
//! two compose, and which views it concerns.

use crate::bson::{Bson, Document};

use crate::engine::numbers::{integer, Range};
use crate::engine::sums::Num;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// A change to some fields of one stored child, by BSON name: what
/// [`raw::Children::patch`](crate::raw::Children::patch)
/// applies to the child and to its embedded copies. The typed API builds one from field
/// constants (`Review::HELPFUL`) through [`crate::patch::Patch`].
///
/// ```
/// # use subset_runtime as subset;
/// use subset::raw::ChildPatch;
/// let vote = ChildPatch::new().inc("helpful", 1).set("edited", true);
/// assert_eq!(vote.fields().collect::<Vec<_>>(), ["helpful", "edited"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChildPatch {
    ops: Vec<(String, Op)>,
}

/// One field's change.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Set(Bson),
    Unset,
    /// By a number, kept within the range of the field's Rust type when it has one.
    Inc(Bson, Option<Range>),
}

impl Range {
    /// Why adding `by` to `current` (`None`: the child has no such field) leaves the range, if
    /// it does.
    fn refuses(&self, current: Option<&Bson>, by: &Bson) -> Option<String> {
        let by = integer(by)?;
        let Range { min, max, name } = self;
        let (from, to) = match current {
            None => ("it is absent, so it would be set to".to_owned(), by),
            Some(current) => {
                let current = integer(current)?;
                (format!("{current} + {by} ="), current + by)
            }
        };
        (!self.holds(to)).then(|| {
            format!(
                "holds an `{name}`, from {min} to {max}: {from} {to} would leave that range, \
                 and the server would store a value the field cannot read back"
            )
        })
    }
}

impl ChildPatch {
    /// A patch that changes nothing yet.
    pub fn new() -> Self {
        ChildPatch::default()
    }

    /// Sets `field` (a BSON name, or a dotted path into an embedded document) to `value`.
    pub fn set(mut self, field: impl Into<String>, value: impl Into<Bson>) -> Self {
        self.ops.push((field.into(), Op::Set(value.into())));
        self
    }

    /// Removes `field` from the child.
    pub fn unset(mut self, field: impl Into<String>) -> Self {
        self.ops.push((field.into(), Op::Unset));
        self
    }

    /// Adds `by` (an int32, int64, double or decimal; negative to decrement) to `field`, which a child
    /// without it gets as `by`.
    pub fn inc(mut self, field: impl Into<String>, by: impl Into<Bson>) -> Self {
        self.ops.push((field.into(), Op::Inc(by.into(), None)));
        self
    }

    /// [`ChildPatch::inc`] of a field whose Rust type holds `range` (`None` for a float): the
    /// child is changed only where the result stays in it (see [`ChildPatch::guard`]).
    pub(crate) fn inc_within(
        mut self,
        field: impl Into<String>,
        by: Bson,
        range: Option<Range>,
    ) -> Self {
        self.ops.push((field.into(), Op::Inc(by, range)));
        self
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The fields the patch changes, in the order given.
    pub fn fields(&self) -> impl Iterator<Item = &str> + '_ {
        self.ops.iter().map(|(field, _)| field.as_str())
    }

    /// The update document that applies the patch to the child.
    pub(crate) fn update(&self) -> Document {
        let mut update = Update::default();
        self.add_to(&mut update, "", |_| true);
        update.into_document()
    }

    /// One patch that does what `self` and then `next` do, when each field they change is
    /// changed by one of them, or by both with `$set`, `$unset` and `$inc` that compose (an
    /// `$inc` after an `$inc` adds up; a `$set` or `$unset` after anything wins; an `$inc`
    /// after a `$set` of a number sets the sum; after an `$unset` it sets the increment);
    /// `None` when two fields overlap (one inside the other) or an `$inc` follows a `$set` of
    /// something that is not a number, whose error the server must report, and when an
    /// `$inc` kept in range could compose into one its caller would not see refused (see
    /// [`within`]).
    pub(crate) fn then(&self, next: &ChildPatch) -> Option<ChildPatch> {
        let mut ops = self.ops.clone();
        for (field, op) in &next.ops {
            let same = ops.iter().position(|(f, _)| f == field);
            if ops
                .iter()
                .enumerate()
                .any(|(i, (f, _))| Some(i) != same && overlap(f, field))
            {
                return None;
            }
            let Some(at) = same else {
                ops.push((field.clone(), op.clone()));
                continue;
            };
            let both = match (&ops[at].1, op) {
                (_, Op::Set(_) | Op::Unset) => op.clone(),
                (Op::Inc(a, ra), Op::Inc(b, rb)) if ra == rb => {
                    Op::Inc(within(a, b, *rb, true)?, *rb)
                }
                (Op::Inc(..), Op::Inc(..)) => return None,
                (Op::Set(a), Op::Inc(b, range)) => Op::Set(within(a, b, *range, false)?),
                (Op::Unset, Op::Inc(b, range)) => match (range, integer(b)) {
                    (Some(range), Some(by)) if !range.holds(by) => return None,
                    _ => Op::Set(b.clone()),
                },
            };
            ops[at].1 = both;
        }
        Some(ChildPatch { ops })
    }

    /// The fields the patch increments.
    pub(crate) fn increments(&self) -> impl Iterator<Item = &str> + '_ {
        self.ops
            .iter()
            .filter(|(_, op)| matches!(op, Op::Inc(..)))
            .map(|(field, _)| field.as_str())
    }

    /// Whether the patch changes `field` or a field inside it, or sets or removes a document
    /// that holds it.
    pub(crate) fn touches(&self, field: &str) -> bool {
        self.fields().any(|path| overlap(path, field))
    }

    /// Refuses what cannot be applied to a child of `views` (see [`Error::InvalidPatch`]).
    pub(crate) fn check(&self, views: &[SubsetSpec]) -> Result<()> {
        let Some(spec) = views.first() else {
            return Ok(());
        };
        let invalid = |field: &str, reason: String| Error::InvalidPatch {
            collection: spec.child_collection.to_owned(),
            field: field.to_owned(),
            reason,
        };
        for (i, (field, op)) in self.ops.iter().enumerate() {
            if field.is_empty() || field.split('.').any(|s| s.is_empty() || s.starts_with('$')) {
                return Err(invalid(
                    field,
                    "is not a field path: name a field, or fields inside it with dots, none empty or `$`-prefixed".into(),
                ));
            }
            if overlap(field, "_id") {
                return Err(invalid(
                    field,
                    "is the child's `_id`, its identity: remove the child and push it with the new `_id`".into(),
                ));
            }
            if overlap(field, spec.key) {
                return Err(invalid(
                    field,
                    format!(
                        "is the parent key `{}`: move the child to another parent instead",
                        spec.key
                    ),
                ));
            }
            if let Some((other, _)) = self.ops[..i].iter().find(|(o, _)| overlap(o, field)) {
                return Err(invalid(
                    field,
                    format!("is changed twice (with `{other}`): change each field once in a patch"),
                ));
            }
            if let Some(role) = views.iter().find_map(|v| use_of(v, field)) {
                match (op, role) {
                    (Op::Unset, _) => {
                        return Err(invalid(
                            field,
                            format!("is {role}: every child must hold it, so it cannot be unset"),
                        ))
                    }
                    (Op::Set(Bson::Null), _) => {
                        return Err(invalid(field, format!("is {role}: it cannot be null")))
                    }
                    (Op::Set(v), Use::Summed(_)) if Num::of(v).is_none() => {
                        return Err(invalid(
                            field,
                            format!(
                                "is {role}: it must be set to a number, not {}",
                                type_name(v)
                            ),
                        ))
                    }
                    (Op::Set(v), Use::Filter(_)) if !matches!(v, Bson::Boolean(_)) => {
                        return Err(invalid(
                            field,
                            format!("is {role}: it must be set to a bool, not {}", type_name(v)),
                        ))
                    }
                    _ => {}
                }
            }
            if let Op::Inc(by, _) = op {
                if Num::of(by).is_none() {
                    return Err(invalid(
                        field,
                        format!(
                            "is incremented by {}: `inc` takes an int32, int64, double or finite decimal",
                            type_name(by)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Adds to `update` what applies the patch to a document, each field's path after `prefix`
    /// (empty for the child itself, `latest.$[c0].` for an embedded copy); only the fields
    /// `holds` (a preview's copies hold only some).
    pub(super) fn add_to(&self, update: &mut Update, prefix: &str, holds: impl Fn(&str) -> bool) {
        for (field, op) in self.ops.iter().filter(|(field, _)| holds(field)) {
            let path = format!("{prefix}{field}");
            match op {
                Op::Set(v) => update.set.insert(path, v.clone()),
                Op::Unset => update.unset.insert(path, ""),
                Op::Inc(by, _) => update.inc.insert(path, by.clone()),
            };
        }
    }

    /// What the child must match for the patch's increments to stay within the ranges of
    /// their fields' Rust types (empty when none has one), added to the filter of its update:
    /// a child that exists but misses it is one an increment would take out of range, which
    /// [`ChildPatch::refusal`] explains.
    pub(crate) fn guard(&self) -> Document {
        let mut guard = Document::new();
        for (field, op) in &self.ops {
            if let Op::Inc(by, Some(range)) = op {
                if let Some(condition) = range.guard(by) {
                    guard.insert(field.clone(), condition);
                }
            }
        }
        guard
    }

    /// The field an increment would take out of range in one of `children` (as stored,
    /// missing [`ChildPatch::guard`]), and why: for [`Error::InvalidPatch`]. Should they have
    /// changed meanwhile so that none would, the first guarded field.
    pub(crate) fn refusal(&self, children: &[Document]) -> (String, String) {
        let mut first = None;
        for (field, op) in &self.ops {
            let Op::Inc(by, Some(range)) = op else {
                continue;
            };
            if range.guard(by).is_none() {
                continue;
            }
            let refused = children
                .iter()
                .find_map(|child| range.refuses(lookup(child, field), by));
            if let Some(reason) = refused {
                return (field.clone(), reason);
            }
            first.get_or_insert((field, integer(by).unwrap_or(0), range));
        }
        match first {
            Some((field, by, Range { min, max, name })) => (
                field.clone(),
                format!(
                    "holds an `{name}`, from {min} to {max}: adding {by} would leave that range, \
                     and the server would store a value the field cannot read back"
                ),
            ),
            None => (String::new(), "is incremented out of its range".to_owned()),
        }
    }

    /// The child as the patch leaves `before`: what views are decided and sums moved by, and,
    /// where [`ChildPatch::reproduces`] says so, the copy a view re-ranked in place embeds.
    /// An `$inc` takes the type the server's gives ([`incremented`]); fields the patch adds
    /// come in the order the server adds them (by name, since MongoDB 5.0).
    pub(crate) fn apply(&self, before: &Document) -> Document {
        let mut after = before.clone();
        let mut ops: Vec<&(String, Op)> = self.ops.iter().collect();
        ops.sort_by(|(a, _), (b, _)| a.split('.').cmp(b.split('.')));
        for (field, op) in ops {
            let mut path = field.split('.').peekable();
            let mut at = &mut after;
            while let Some(segment) = path.next() {
                if path.peek().is_none() {
                    match op {
                        Op::Set(v) => {
                            at.insert(segment, v.clone());
                        }
                        Op::Unset => {
                            at.remove(segment);
                        }
                        Op::Inc(by, _) => {
                            let sum = incremented(at.get(segment), by);
                            at.insert(segment, sum);
                        }
                    }
                    break;
                }
                // `$unset` never makes a path; `$set` and `$inc` make what is missing.
                if matches!(op, Op::Unset) && !at.contains_key(segment) {
                    break;
                }
                let inner = at
                    .entry(segment.to_owned())
                    .or_insert_with(|| Bson::Document(Document::new()));
                if !matches!(inner, Bson::Document(_)) {
                    *inner = Bson::Document(Document::new());
                }
                let Bson::Document(inner) = inner else {
                    break;
                };
                at = inner;
            }
        }
        after
    }

    /// Whether [`ChildPatch::apply`] of `before` is the child exactly as the server stores it,
    /// so that a copy made from it equals the child. Not where a path steps through an array
    /// or another non-document, or a name starts with a digit (`tags.0`: an array element on
    /// the server, a field here; and the server orders such names by length first). Not where
    /// an increment meets a decimal (the server keeps a sum equal to the old value as it was,
    /// `1.5` where decimal arithmetic gives `1.50`, and converts a double first, with its own
    /// rounding) or a double zero (`-0.0 + 0` stays `-0.0` on the server).
    pub(crate) fn reproduces(&self, before: &Document) -> bool {
        self.ops.iter().all(|(field, op)| {
            let segments: Vec<&str> = field.split('.').collect();
            if segments
                .iter()
                .any(|s| s.bytes().next().is_some_and(|b| b.is_ascii_digit()))
            {
                return false;
            }
            let mut at = Some(before);
            for segment in &segments[..segments.len() - 1] {
                at = match at.and_then(|d| d.get(*segment)) {
                    None => None,
                    Some(Bson::Document(inner)) => Some(inner),
                    Some(_) => return false,
                };
            }
            let old = at.and_then(|d| d.get(segments[segments.len() - 1]));
            let odd = |v: &Bson| match v {
                Bson::Decimal128(_) => true,
                Bson::Double(d) => *d == 0.0,
                _ => false,
            };
            match (op, old) {
                (Op::Inc(by, _), Some(old)) => !odd(old) && !odd(by),
                (Op::Inc(by, _), None) => !odd(by),
                _ => true,
            }
        })
    }
}

/// `old` (`None`: missing) incremented by `by`, in the type the server's `$inc` gives it, so
/// that a copy made from the result is the child as stored: the wider of the two types
/// (int32, int64, double, decimal), an int32 sum past `i32` an int64.
fn incremented(old: Option<&Bson>, by: &Bson) -> Bson {
    // A missing field takes the increment as given.
    let Some(old) = old else {
        return by.clone();
    };
    let width = |value: &Bson| match value {
        Bson::Int32(_) => 0,
        Bson::Int64(_) => 1,
        Bson::Double(_) => 2,
        _ => 3,
    };
    let sum = Num::of(old)
        .unwrap_or(Num::Int(0))
        .add(Num::of(by).unwrap_or(Num::Int(0)));
    match (width(old).max(width(by)), sum) {
        (0, Num::Int(n)) => i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32),
        (_, sum) => sum.into_bson(),
    }
}

/// An update being built: the fields of each operator.
#[derive(Debug, Default)]
pub(super) struct Update {
    pub(super) set: Document,
    pub(super) unset: Document,
    pub(super) inc: Document,
}

impl Update {
    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty() && self.unset.is_empty() && self.inc.is_empty()
    }

    /// The update document, without the operators that change nothing.
    pub(super) fn into_document(self) -> Document {
        [
            ("$set", self.set),
            ("$unset", self.unset),
            ("$inc", self.inc),
        ]
        .into_iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(operator, fields)| (operator.to_owned(), Bson::Document(fields)))
        .collect()
    }
}

/// `a + b` for composing patches, when adding `b` in `range` (see [`Range`]) to `a` gives
/// what the two in turn would: the sum stays in range, and, for two increments (`both`), they
/// go the same way, so that neither alone would be refused where the sum is not (`+1` at the
/// maximum, then `-1`). The sum keeps `a`'s BSON type. `None`: the patches stay apart.
fn within(a: &Bson, b: &Bson, range: Option<Range>, both: bool) -> Option<Bson> {
    let Some(range) = range else {
        return plus(a, b);
    };
    let (x, y) = (integer(a)?, integer(b)?);
    if both && x.signum() * y.signum() < 0 {
        return None;
    }
    let sum = x + y;
    if !range.holds(sum) || (!both && !range.holds(x)) {
        return None;
    }
    match a {
        Bson::Int32(_) => i32::try_from(sum).ok().map(Bson::Int32),
        _ => i64::try_from(sum).ok().map(Bson::Int64),
    }
}

/// The value at dotted `path` in `doc`.
fn lookup<'d>(doc: &'d Document, path: &str) -> Option<&'d Bson> {
    let mut segments = path.split('.');
    let mut at = doc.get(segments.next()?)?;
    for segment in segments {
        at = at.as_document()?.get(segment)?;
    }
    Some(at)
}

/// `a + b` as the server's `$inc` adds them: two int32s stay an int32 while the sum fits (so
/// that composed votes leave a field the type separate ones would), anything else as the
/// running sums add; `None` for what is not a number.
fn plus(a: &Bson, b: &Bson) -> Option<Bson> {
    if let (Bson::Int32(a), Bson::Int32(b)) = (a, b) {
        if let Some(sum) = a.checked_add(*b) {
            return Some(Bson::Int32(sum));
        }
    }
    Some(Num::of(a)?.add(Num::of(b)?).into_bson())
}

/// What a field is to a view, for messages.
#[derive(Clone, Copy)]
enum Use {
    Sort(&'static str),
    Filter(&'static str),
    Summed(&'static str),
}

impl std::fmt::Display for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Use::Sort(view) => write!(f, "a sort key of `{view}`"),
            Use::Filter(view) => write!(f, "the filter of `{view}`"),
            Use::Summed(view) => write!(f, "summed by `{view}`"),
        }
    }
}

fn use_of(view: &SubsetSpec, field: &str) -> Option<Use> {
    if view.sort.iter().any(|k| overlap(k.field, field)) {
        return Some(Use::Sort(view.field));
    }
    if view.filter.is_some_and(|f| overlap(f.field, field)) {
        return Some(Use::Filter(view.field));
    }
    if view.sums.iter().any(|s| overlap(s.child, field)) {
        return Some(Use::Summed(view.field));
    }
    None
}

fn type_name(value: &Bson) -> &'static str {
    crate::values::type_name(value.element_type())
}

/// Whether two field paths name the same field, or one is inside the other.
fn overlap(a: &str, b: &str) -> bool {
    let inside = |long: &str, short: &str| {
        long.strip_prefix(short)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    inside(a, b) || inside(b, a)
}

/// Whether a patch changes what `view` orders or filters by, so that the child may move in it.
pub(super) fn moves_in(patch: &ChildPatch, view: &SubsetSpec) -> bool {
    view.sort.iter().any(|k| patch.touches(k.field))
        || view.filter.is_some_and(|f| patch.touches(f.field))
}

/// Whether `view`'s embedded copies hold the field at `path`.
pub(super) fn holds(view: &SubsetSpec, path: &str) -> bool {
    match view.embed {
        None => true,
        Some(fields) => fields.iter().any(|f| overlap(f.bson, path)),
    }
}

/// Whether a patch changes a field `view`'s embedded copies hold.
pub(super) fn shows_in(patch: &ChildPatch, view: &SubsetSpec) -> bool {
    patch.fields().any(|path| holds(view, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson::doc;
    use crate::model::{FilterSpec, SumSpec, TEST_SPEC};

    const SPEC: SubsetSpec = SubsetSpec {
        count: Some("n"),
        sums: &[SumSpec {
            parent: "stars",
            child: "stars",
            ty: crate::model::NumberType::Unknown,
        }],
        filter: Some(FilterSpec {
            field: "verified",
            equals: true,
        }),
        ..TEST_SPEC
    };

    fn problem(patch: ChildPatch) -> String {
        match patch.check(&[SPEC]) {
            Err(Error::InvalidPatch { field, reason, .. }) => format!("{field}: {reason}"),
            other => panic!("expected InvalidPatch, got {other:?}"),
        }
    }

    #[test]
    fn a_patch_cannot_touch_identity_key_or_one_field_twice() {
        assert!(problem(ChildPatch::new().set("_id", 2)).starts_with("_id: is the child's `_id`"));
        assert!(problem(ChildPatch::new().set("product_id", 2)).contains("move the child"));
        let twice = ChildPatch::new().inc("helpful", 1).set("helpful.x", 2);
        assert!(problem(twice).contains("changed twice (with `helpful`)"));
        assert!(problem(ChildPatch::new().set("a..b", 1)).contains("not a field path"));
        assert!(problem(ChildPatch::new().set("$where", 1)).contains("not a field path"));
    }

    #[test]
    fn what_views_need_cannot_go_away_or_change_kind() {
        assert!(problem(ChildPatch::new().unset("rating")).contains("a sort key of `recent`"));
        assert!(problem(ChildPatch::new().set("date", Bson::Null)).contains("cannot be null"));
        assert!(problem(ChildPatch::new().set("stars", "five")).contains("a number, not a string"));
        assert!(problem(ChildPatch::new().set("verified", 1)).contains("a bool, not an int32"));
        assert!(problem(ChildPatch::new().inc("helpful", "1")).contains("`inc` takes"));
        let fine = ChildPatch::new()
            .inc("stars", 1)
            .set("verified", false)
            .unset("note");
        assert!(fine.check(&[SPEC]).is_ok());
    }

    #[test]
    fn apply_is_what_the_server_does() {
        let before = doc! { "_id": 1, "helpful": 41, "text": "x", "note": "n" };
        let patch = ChildPatch::new()
            .inc("helpful", 1)
            .inc("new", 2.5)
            .set("text", "y")
            .unset("note")
            .set("meta.seen", true);
        // New fields by name, after the others, as the server adds them.
        let after = patch.apply(&before);
        assert_eq!(
            after,
            doc! {
                "_id": 1, "helpful": 42, "text": "y", "meta": { "seen": true }, "new": 2.5,
            }
        );
        let keys: Vec<&str> = after.keys().map(String::as_str).collect();
        assert_eq!(keys, ["_id", "helpful", "text", "meta", "new"]);
        assert!(patch.reproduces(&before));
        // The wider type of the two, as `$inc` gives it; an int32 past its range an int64.
        let numbers = doc! { "a": i32::MAX, "b": 1_i64, "c": 1, "d": 1.5 };
        let widen = ChildPatch::new()
            .inc("a", 1)
            .inc("b", 1)
            .inc("c", 0.5)
            .inc("d", 1);
        let widened = doc! { "a": i64::from(i32::MAX) + 1, "b": 2_i64, "c": 1.5, "d": 2.5 };
        assert_eq!(widen.apply(&numbers), widened);
        let mut update = Update::default();
        patch.add_to(&mut update, "latest.$[c0].", |_| true);
        assert_eq!(
            update.into_document(),
            doc! {
                "$inc": { "latest.$[c0].helpful": 1, "latest.$[c0].new": 2.5 },
                "$set": { "latest.$[c0].text": "y", "latest.$[c0].meta.seen": true },
                "$unset": { "latest.$[c0].note": "" },
            }
        );
    }

    #[test]
    fn a_copy_is_made_here_only_where_it_is_the_servers() {
        let child = doc! {
            "_id": 1, "helpful": 3, "tags": ["a", "b"], "weight": 1.5, "zero": -0.0,
            "price": Bson::Decimal128("2.5".parse().unwrap()), "meta": { "seen": 1 },
        };
        let exact = [
            ChildPatch::new().inc("helpful", 1).set("meta.seen", 2),
            ChildPatch::new().set("meta.new.deep", 1),
            ChildPatch::new().inc("weight", 1).inc("helpful", 2_i64),
            ChildPatch::new().set("fresh", 1).unset("tags"),
        ];
        for patch in exact {
            assert!(patch.reproduces(&child), "{patch:?}");
        }
        // `$unset` makes no path; a missing field takes the increment as given.
        let unset = ChildPatch::new().unset("nested.flag").inc("new", 2.5);
        assert!(unset.reproduces(&child));
        let after = unset.apply(&child);
        assert!(!after.contains_key("nested"), "{after}");
        assert_eq!(after.get("new"), Some(&Bson::Double(2.5)));
        let inexact = [
            // An array element here would be a field of a document.
            ChildPatch::new().set("tags.0", "z"),
            ChildPatch::new().set("tags.x", "z"),
            ChildPatch::new().set("meta.0", 1),
            // Ordered by length first on the server.
            ChildPatch::new().set("9lives", 1),
            // The server converts the double to a decimal first, with its own rounding.
            ChildPatch::new().inc("price", 0.25),
            ChildPatch::new().inc("weight", Bson::Decimal128("0.25".parse().unwrap())),
            // It keeps a decimal sum equal to the old value as it was.
            ChildPatch::new().inc("price", 0),
            ChildPatch::new().inc("absent", Bson::Decimal128("1".parse().unwrap())),
            // And a double zero.
            ChildPatch::new().inc("zero", 1),
        ];
        for patch in inexact {
            assert!(!patch.reproduces(&child), "{patch:?}");
        }
    }

    #[test]
    fn queued_patches_of_one_child_compose() {
        let vote = ChildPatch::new().inc("helpful", 1);
        let three = vote.then(&vote).and_then(|p| p.then(&vote)).unwrap();
        assert_eq!(three, ChildPatch::new().inc("helpful", 3));
        let long = ChildPatch::new().inc("helpful", 1_i64);
        assert_eq!(
            vote.then(&long).unwrap(),
            ChildPatch::new().inc("helpful", 2_i64)
        );
        let hide = ChildPatch::new().set("hidden", true);
        assert_eq!(
            vote.then(&hide).unwrap(),
            ChildPatch::new().inc("helpful", 1).set("hidden", true)
        );
        let set = ChildPatch::new().set("helpful", 10);
        assert_eq!(
            set.then(&vote).unwrap(),
            ChildPatch::new().set("helpful", 11)
        );
        let gone = ChildPatch::new().unset("helpful");
        assert_eq!(
            gone.then(&vote).unwrap(),
            ChildPatch::new().set("helpful", 1)
        );
        assert_eq!(vote.then(&gone).unwrap(), gone);
        // Overlapping paths, and an `$inc` of what is not a number, stay apart.
        assert_eq!(
            ChildPatch::new()
                .set("meta", 1)
                .then(&ChildPatch::new().set("meta.a", 2)),
            None
        );
        assert_eq!(ChildPatch::new().set("helpful", "x").then(&vote), None);
    }

    const I32: Range = Range {
        min: i32::MIN as i64,
        max: i32::MAX as i64,
        name: "i32",
    };
    const U8: Range = Range {
        min: 0,
        max: 255,
        name: "u8",
    };

    #[test]
    fn increments_are_kept_in_their_range_by_the_filter() {
        let up = ChildPatch::new().inc_within("rating", Bson::Int32(2), Some(I32));
        let limit = i64::from(i32::MAX) - 2;
        assert_eq!(up.guard(), doc! { "rating": { "$not": { "$gt": limit } } });
        let (field, reason) = up.refusal(&[doc! { "rating": i32::MAX - 1 }]);
        assert_eq!(field, "rating");
        assert!(reason.contains("`i32`"), "{reason}");
        assert!(reason.contains("2147483646 + 2 = 2147483648"), "{reason}");
        // Below 0 for an unsigned field, a child without it included.
        let down = ChildPatch::new().inc_within("reports", Bson::Int32(-3), Some(U8));
        assert_eq!(down.guard(), doc! { "reports": { "$gte": 3_i64 } });
        let (_, reason) = down.refusal(&[doc! {}]);
        assert!(reason.contains("absent"), "{reason}");
        // No range (a float, or the BSON-level `inc`) and no move: no condition.
        assert_eq!(ChildPatch::new().inc("helpful", 1).guard(), doc! {});
        let still = ChildPatch::new().inc_within("reports", Bson::Int32(0), Some(U8));
        assert_eq!(still.guard(), doc! {});
    }

    #[test]
    fn increments_in_range_compose_only_as_they_would_apply_in_turn() {
        let inc = |by: i32| ChildPatch::new().inc_within("n", Bson::Int32(by), Some(U8));
        assert_eq!(inc(1).then(&inc(1)), Some(inc(2)));
        // `+1` at the maximum then `-1`: the first alone is refused, the sum would not be.
        assert_eq!(inc(1).then(&inc(-1)), None);
        assert_eq!(inc(200).then(&inc(100)), None);
        let set = ChildPatch::new().set("n", 254);
        assert_eq!(set.then(&inc(1)), Some(ChildPatch::new().set("n", 255)));
        assert_eq!(set.then(&inc(2)), None);
        let gone = ChildPatch::new().unset("n");
        assert_eq!(gone.then(&inc(3)), Some(ChildPatch::new().set("n", 3)));
        assert_eq!(gone.then(&inc(-3)), None);
        // The BSON-level `inc` and a typed one of the same field stay apart.
        assert_eq!(ChildPatch::new().inc("n", 1).then(&inc(1)), None);
    }

    #[test]
    fn views_move_or_show_by_what_the_patch_touches() {
        let votes = ChildPatch::new().inc("helpful", 1);
        assert!(!moves_in(&votes, &SPEC));
        assert!(moves_in(&ChildPatch::new().set("rating", 3), &SPEC));
        assert!(moves_in(&ChildPatch::new().set("verified", false), &SPEC));
        assert!(shows_in(&votes, &SPEC));
        let preview = SubsetSpec {
            embed: Some(&[crate::model::FieldName {
                rust: "text",
                bson: "body",
            }]),
            ..SPEC
        };
        assert!(!shows_in(&votes, &preview));
        assert!(shows_in(&ChildPatch::new().set("body", "x"), &preview));
        let mut update = Update::default();
        let edit = ChildPatch::new().set("body", "x").inc("helpful", 1);
        edit.add_to(&mut update, "p.$[c1].", |path| holds(&preview, path));
        assert_eq!(
            update.into_document(),
            doc! { "$set": { "p.$[c1].body": "x" } }
        );
    }
}
