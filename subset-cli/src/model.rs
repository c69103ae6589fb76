//! The model a command acts on: the application's, as the registry keeps it (every view of the
//! parent collection, with the types its sort keys hold), when no view flag is given; else the
//! one view the flags describe, each untyped sort key given the type most children hold.
//!
//! Either way a child whose sort value is of another type is malformed: reported by `check`,
//! never embedded by `reconcile`, as the application's own `check_all` and reconcile do.

use futures::TryStreamExt;
use mongodb::Database;
use subset_runtime::bookkeeping::{Names, PrefixError, Registered};
use subset_runtime::bson::{doc, spec::ElementType, Document, RawDocumentBuf};
use subset_runtime::raw;
use subset_runtime::spec::{ParentSpec, SortValues};

use crate::args::{Conn, SubsetArgs, View};
use crate::error::CliError;
use crate::shape::{Bracket, Brackets};

/// How many children are sampled for the type of an untyped sort key.
const SAMPLE: i64 = 1_000;

/// A model and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// The parent collection and its views.
    pub spec: ParentSpec,
    /// Whether it is the application's registered model (else the flags' one view).
    pub registered: bool,
}

impl Model {
    /// The store of this model: the whole application's model, or a store of the flags' view
    /// that leaves the application's definition alone.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for a `--bookkeeping-prefix` no collection name can start with.
    pub fn store(&self, db: &Database, conn: &Conn) -> Result<raw::Store, CliError> {
        let options = subset_runtime::StoreOptions::new()
            .bookkeeping_prefix(&conn.bookkeeping_prefix)
            .map_err(bad_prefix)?;
        Ok(match self.registered {
            true => raw::Store::with_options(db, self.spec, options),
            false => raw::Store::for_fields(db, self.spec, options),
        })
    }

    /// The parent collection.
    pub fn parent(&self) -> &'static str {
        self.spec.collection
    }
}

/// The model `args` name: the registered one without view flags, else the flags' view.
///
/// # Errors
///
/// [`CliError::Usage`] for partial view flags, or no flags for a collection the application
/// never wrote (nothing registered); [`CliError::Engine`] when the registry cannot be read or
/// holds the current definition by its digest only.
pub async fn of(db: &Database, args: &SubsetArgs) -> Result<Model, CliError> {
    let Some(view) = args.view()? else {
        return registered_model(db, &args.conn, &args.parent).await;
    };
    let spec = typed(db, view).await?;
    Ok(Model {
        spec: ParentSpec::leak(args.parent.clone(), vec![*spec]),
        registered: false,
    })
}

/// The registry's word on `parent`: the one place the command line reads it.
pub async fn registered(
    db: &Database,
    conn: &Conn,
    parent: &str,
) -> Result<Option<Registered>, CliError> {
    let names = names(conn)?;
    Ok(Registered::read(db, &names, parent).await?)
}

/// The registered current model of `parent`.
///
/// # Errors
///
/// As [`of`].
pub async fn registered_model(db: &Database, conn: &Conn, parent: &str) -> Result<Model, CliError> {
    let Some(registered) = registered(db, conn, parent).await? else {
        return Err(CliError::Usage(format!(
            "`{parent}` has no registered model in database `{}`: give the view flags (--field, --child, --key, --sort), or let the application write to it once (its first write registers its model)",
            db.name()
        )));
    };
    Ok(Model {
        spec: registered.current_model()?,
        registered: true,
    })
}

/// The bookkeeping names of `--bookkeeping-prefix`: the one place the tool reads the flag.
///
/// # Errors
///
/// [`CliError::Usage`] for a prefix no collection name can start with.
pub fn names(conn: &Conn) -> Result<Names, CliError> {
    Names::with_prefix(&conn.bookkeeping_prefix).map_err(bad_prefix)
}

/// The usage error of a `--bookkeeping-prefix` no collection name can start with.
fn bad_prefix(e: PrefixError) -> CliError {
    CliError::Usage(format!("--bookkeeping-prefix: {e}"))
}

/// The flags' view, each sort key `--sort` gave no type typed by the values most children
/// hold (a `$sample`), as `migrate` reads the sort values of an embedded array.
async fn typed(
    db: &Database,
    View { builder, untyped }: View,
) -> Result<&'static subset_runtime::spec::SubsetSpec, CliError> {
    let mut builder = builder;
    if !untyped.is_empty() {
        // The descriptor without the sampled types names the child collection.
        let plain = builder.clone().build().map_err(CliError::Spec)?;
        let children = db.collection::<RawDocumentBuf>(plain.child_collection);
        let mut projection = Document::new();
        for field in &untyped {
            projection.insert(field, 1);
        }
        let sample: Vec<RawDocumentBuf> = children
            .aggregate([
                doc! { "$sample": { "size": SAMPLE } },
                doc! { "$project": projection },
            ])
            .with_type::<RawDocumentBuf>()
            .await
            .map_err(|e| CliError::mongo(plain.child_collection, e))?
            .try_collect()
            .await
            .map_err(|e| CliError::mongo(plain.child_collection, e))?;
        for field in &untyped {
            if let Some(values) = most_held(&sample, field) {
                builder = builder.values(field, values);
            }
        }
    }
    builder.build().map_err(CliError::Spec)
}

/// The values most of `sample` hold under `field`, as the library's types say them; `None`
/// when none is held or most are of a kind no one type names (numbers mixing decimals).
fn most_held(sample: &[RawDocumentBuf], field: &str) -> Option<SortValues> {
    let mut brackets = Brackets::default();
    let (mut doubles, mut decimals) = (false, false);
    for (at, child) in sample.iter().enumerate() {
        let Ok(Some(value)) = child.get(field) else {
            continue;
        };
        let Some(bracket) = Bracket::of(value) else {
            continue;
        };
        doubles |= value.element_type() == ElementType::Double;
        decimals |= value.element_type() == ElementType::Decimal128;
        brackets.add(bracket, at as u64);
    }
    let (most, _) = brackets.most()?;
    Some(match most {
        Bracket::Number if decimals => return None,
        Bracket::Number if doubles => SortValues::Float,
        Bracket::Number => SortValues::integer(i64::MIN, i64::MAX),
        Bracket::Type(ElementType::String) => SortValues::String,
        Bracket::Type(ElementType::DateTime) => SortValues::DateTime,
        Bracket::Type(ElementType::ObjectId) => SortValues::ObjectId,
        Bracket::Type(ElementType::Boolean) => SortValues::Bool,
        Bracket::Type(ElementType::Timestamp) => SortValues::Timestamp,
        Bracket::Type(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use subset_runtime::bson::DateTime;

    #[test]
    fn untyped_keys_take_the_type_most_children_hold() {
        let raw = |d: Document| RawDocumentBuf::try_from(&d).unwrap();
        let sample = vec![
            raw(doc! { "date": DateTime::from_millis(1), "n": 1 }),
            raw(doc! { "date": "2024-01-01", "n": 2_i64 }),
            raw(doc! { "date": DateTime::from_millis(3), "n": 2.5 }),
            raw(doc! {}),
        ];
        assert_eq!(most_held(&sample, "date"), Some(SortValues::DateTime));
        assert_eq!(most_held(&sample, "n"), Some(SortValues::Float));
        assert_eq!(most_held(&sample, "absent"), None);
    }
}
