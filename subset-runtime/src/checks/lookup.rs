//! Finding the child field a parent names, in constant evaluation: its BSON name and index in
//! the child's lists, and what is wrong with it, as a message the generated code panics with.

use crate::model::FieldName;

/// A child field found by Rust name: see [`field_of`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ChildField {
    /// The field's BSON name, or the Rust name asked for when no stored field has it.
    bson: &'static str,
    /// Its index in the child's [`Child::FIELDS`](crate::Child::FIELDS), if it is there.
    index: Option<usize>,
    /// The serde key that keeps the field from being stored, always or as its type, if any.
    blocker: Option<&'static str>,
}

/// Looks up the Rust field `rust` of a child in its lists (its
/// [`Child::FIELDS`](crate::Child::FIELDS), [`Child::__UNSTORED`](crate::Child::__UNSTORED) and
/// [`Child::__ALTERED`](crate::Child::__ALTERED), as read through [`Described`](super::Described),
/// so that a child type without `#[derive(Child)]` is reported once elsewhere). An unknown name
/// comes back unchanged, without an index.
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
    /// The type looked up ([`Child::__NAME`](crate::Child::__NAME)).
    pub owner: &'static str,
    /// Its full type, whose serde attributes decide how the field is stored (the same type
    /// unless the field is a preview's).
    pub full_owner: &'static str,
    /// What the parent does with the field.
    pub role: Role,
    /// The full type's stored fields ([`Child::FIELDS`](crate::Child::FIELDS) of
    /// [`Child::Full`](crate::Child::Full)), to tell a sort key a preview lacks from a name that
    /// is no field at all.
    pub full_fields: &'static [FieldName],
    /// Whether a name that is no field of `owner` is reported here: where the derive checks the
    /// field's type by its index in `FIELDS` (a child type that names none of the parent's
    /// parameters), no code names the field, so nothing else does. Where it accesses the field
    /// by name, an unknown name is rustc's "no field" error.
    pub unknown_here: bool,
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
    /// is: the grammar takes Rust names.
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

    /// The message for a name that is none of `fields`: a sort key that a preview lacks but its
    /// full type has, or else the field most likely meant, or the fields there are.
    const fn unknown(&self, fields: &'static [FieldName]) -> Message {
        let preview = !str_eq(self.owner, self.full_owner);
        if matches!(self.role, Role::Sort)
            && preview
            && rust_index(self.full_fields, self.field).is_some()
        {
            return Message::new()
                .push("sort key `")
                .push(self.field)
                .push("` is a field of `")
                .push(self.full_owner)
                .push("` but not of its preview `")
                .push(self.owner)
                .push("`, and the server sorts the embedded previews by it: add `")
                .push(self.field)
                .push("` to `")
                .push(self.owner)
                .push("`");
        }
        let m = Message::new()
            .push("`")
            .push(self.key())
            .push("` names `")
            .push(self.field)
            .push("`, which is not a field of `")
            .push(self.owner)
            .push("`");
        suggest(m, self.field, fields)
    }
}

/// `message`, then the field of `fields` that `typo` most likely meant (by
/// [`subset_spec::is_better`], the rule of every suggestion of the derives), or else the list of
/// `fields`: what every message about a name that is no child field ends with.
pub(super) const fn suggest(message: Message, typo: &str, fields: &'static [FieldName]) -> Message {
    let mut best: Option<&str> = None;
    let mut i = 0;
    while i < fields.len() {
        if subset_spec::is_better(typo, fields[i].rust, best) {
            best = Some(fields[i].rust);
        }
        i += 1;
    }
    if let Some(best) = best {
        return message.push(": did you mean `").push(best).push("`?");
    }
    let mut m = message.push(": fields are ");
    let mut i = 0;
    while i < fields.len() {
        if i > 0 {
            m = m.push(", ");
        }
        m = m.push("`").push(fields[i].rust).push("`");
        i += 1;
    }
    m
}

/// The index in `fields` of the field of Rust name `rust`.
const fn rust_index(fields: &'static [FieldName], rust: &str) -> Option<usize> {
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i].rust, rust) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The BSON name of a child field found by [`field_of`].
#[doc(hidden)]
pub const fn bson_name(field: ChildField) -> &'static str {
    field.bson
}

/// What is wrong with the child field a parent names at `site`, for the derive to fail the build
/// with, at the string that names it: serde does not always store it as its type (it is `skip`,
/// `skip_serializing`, `flatten`, `skip_serializing_if`, `with` or `serialize_with` on the child),
/// the name is the BSON name of a field (the grammar takes Rust names), or it is no field at all
/// (with the field most likely meant; only where [`Site::unknown_here`], elsewhere rustc reports
/// it). `None` when `is_child` is false: the type does not implement [`Child`](crate::Child),
/// which is reported once elsewhere.
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
    match (field.index, site.serde_name(fields)) {
        (Some(_), _) => None,
        (None, Some(serde_name)) => Some(serde_name),
        (None, None) if site.unknown_here => Some(site.unknown(fields)),
        (None, None) => None,
    }
}

/// The index in the child's [`Child::FIELDS`](crate::Child::FIELDS) of a field found by
/// [`field_of`], for [`FieldOf`](super::FieldOf); 0 for a name that is no stored field, which
/// [`field_found`] then turns into [`FieldOf`](super::FieldOf)'s `CHILD = false` (the derive
/// reports the name elsewhere).
#[doc(hidden)]
pub const fn field_index(field: ChildField) -> usize {
    match field.index {
        Some(index) => index,
        None => 0,
    }
}

/// Whether `field` is a stored field of a type that is a [`Child`](crate::Child) (`is_child`): the
/// `CHILD` argument of [`FieldOf`](super::FieldOf).
#[doc(hidden)]
pub const fn field_found(is_child: bool, field: ChildField) -> bool {
    is_child && field.index.is_some()
}

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

/// Whether one of `fields` is stored under `key`: the derive sets
/// [`SubsetSpec::embed_key`](crate::spec::SubsetSpec::embed_key) when the child type stores the
/// parent key as a field of its own.
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

/// The index in `fields` of the field stored under the parent key `key`, for
/// [`FieldOf`](super::FieldOf) (0 where none is, which [`key_found`] turns into `CHILD = false`):
/// the derive checks that field's type against the parent's `_id` type.
#[doc(hidden)]
pub const fn key_index(fields: &'static [FieldName], key: &str) -> usize {
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i].bson, key) {
            return i;
        }
        i += 1;
    }
    0
}

/// Whether `fields`, of a type that is a [`Child`](crate::Child) (`is_child`), has a field
/// stored under the parent key `key`: the `CHILD` argument of [`FieldOf`](super::FieldOf) for
/// [`key_index`].
#[doc(hidden)]
pub const fn key_found(is_child: bool, fields: &'static [FieldName], key: &str) -> bool {
    is_child && stores(fields, key)
}

/// Whether the child field `field` a parent names in `sort`, `sum` or `filter` is stored under
/// the parent key `key`, which holds the same value in every child of a parent: the derive
/// fails the build.
#[doc(hidden)]
pub const fn is_key(field: ChildField, key: &str) -> bool {
    field.index.is_some() && str_eq(field.bson, key)
}

/// What is wrong with a preview field, `rust` stored as `bson`, checked against the full type's
/// field of the same Rust name (`full`, `full_unstored`, `full_altered`: its
/// [`Described`](super::Described) lists), for the derive to fail the build with at the preview
/// field: `renamed` when the full type stores it under another name, `unstored` when it never
/// stores it under its name (`skip`, `skip_serializing`, `flatten`), `sometimes` when it leaves it
/// out of some children (`skip_serializing_if`) and the preview field cannot read a missing value
/// (`None` when it can: it is an `Option` or `#[serde(default)]`), or `reformed` when it stores it
/// through a function (`with`, `serialize_with`) and the preview field reads it as its plain type
/// (`None` when it has a `with` or `deserialize_with` of its own). A name the full type lacks is
/// [`preview_unknown`]'s, or rustc's.
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

/// The message for a preview field `rust` that its full type `full_name` (a
/// [`Child`](crate::Child) where `is_child`) does not have at all: none of its stored fields
/// (`full`) nor of those it never stores (`full_unstored`, which [`preview_problem`] reports).
/// Where the derive compares a preview field's type with the full type's by its index in `full`
/// (a preview without type parameters), nothing else reports the name; elsewhere it accesses the
/// field by name, and rustc reports it.
#[doc(hidden)]
pub const fn preview_unknown(
    is_child: bool,
    full: &'static [FieldName],
    full_unstored: &'static [(&'static str, &'static str)],
    rust: &'static str,
    full_name: &'static str,
) -> Option<Message> {
    if !is_child || rust_index(full, rust).is_some() || serde_key(full_unstored, rust).is_some() {
        return None;
    }
    let m = Message::new()
        .push("preview field `")
        .push(rust)
        .push("` is not a field of `")
        .push(full_name)
        .push("`");
    Some(suggest(m, rust, full))
}

pub(super) const fn str_eq(a: &str, b: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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
            full_fields: FIELDS,
            unknown_here: true,
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
    fn serde_names_are_told() {
        assert_eq!(
            problem("isVerified", Role::Filter { equals: true }).as_deref(),
            Some("`isVerified` is the serde name of `is_verified` on `Review`, and `filter` names Rust fields: write `is_verified`")
        );
        assert_eq!(
            problem("_id", Role::Sort).as_deref(),
            Some("`_id` is the serde name of `id` on `Review`, and `sort` names Rust fields: write `id`")
        );
    }

    #[test]
    fn unknown_names_get_the_closest_field_or_the_list() {
        assert_eq!(
            problem("vote", Role::Sum).as_deref(),
            Some("`sum` names `vote`, which is not a field of `Review`: did you mean `votes`?")
        );
        assert_eq!(
            problem("stars", Role::Sort).as_deref(),
            Some("`sort` names `stars`, which is not a field of `Review`: fields are `id`, `is_verified`, `votes`")
        );
        // Where the derive names the field itself, rustc reports it.
        let found = field_of(FIELDS, UNSTORED, ALTERED, "vote");
        let rustc = Site {
            unknown_here: false,
            ..site("vote", Role::Sum)
        };
        assert!(field_problem(true, FIELDS, found, rustc).is_none());
    }

    #[test]
    fn a_preview_without_a_sort_key_of_its_full_type_is_told_so() {
        let preview = Site {
            owner: "ReviewPreview",
            ..site("votes", Role::Sort)
        };
        let found = field_of(&FIELDS[..2], &[], &[], "votes");
        assert_eq!(
            field_problem(true, &FIELDS[..2], found, preview).map(|m| m.text().to_owned()).as_deref(),
            Some("sort key `votes` is a field of `Review` but not of its preview `ReviewPreview`, and the server sorts the embedded previews by it: add `votes` to `ReviewPreview`")
        );
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
    fn a_preview_field_the_full_type_lacks_gets_the_closest() {
        let unknown = |rust| {
            preview_unknown(true, FIELDS, UNSTORED, rust, "Review").map(|m| m.text().to_owned())
        };
        assert_eq!(
            unknown("vote").as_deref(),
            Some("preview field `vote` is not a field of `Review`: did you mean `votes`?")
        );
        assert_eq!(unknown("votes"), None);
        assert_eq!(unknown("cached"), None);
        assert!(preview_unknown(false, &[], &[], "vote", "").is_none());
    }

    #[test]
    fn messages_are_cut_when_full() {
        let long = "x".repeat(MESSAGE_CAP);
        let message = Message::new().push("start ").push(&long).push("more");
        assert_eq!(message.text(), "start …");
        assert_eq!(Message::new().push("a").push("b").text(), "ab");
    }
}
