//! `subset migrate`: from a fully-embedded array to the subset layout, resumably.
//!
//! A read-only survey checks every parent's array (`shape.rs`) for each view and sizes the
//! change; a dry run stops there, and an invalid parent stops the migration before any write
//! unless `--skip-invalid`. Then, view by view, in `_id` order and a few at a time, each parent
//! is checked again as it is now and handed to the engine's `raw::Children::adopt`, which gives
//! elements without an `_id` one, copies every element into the child collection (a copy an
//! interrupted run made is left as is) and only then rewrites the array as the top `keep` of
//! the child collection, with the count. A run killed at any point leaves each parent
//! untouched, or with the full array and some children copied, or done, and a rerun finishes
//! it.
//!
//! The engine refuses a parent only where adopting it would lose a child; the check here also
//! refuses sort values that pages in the subset's order would never reach, naming each.
//!
//! A parent without the field has nothing to move: its subset is built from the child
//! collection. That is how a second view (another order, `keep`, filter or preview) is added to
//! children migrated before, touching nothing but the new field, its count and its sums; on the
//! registered model, the views no parent holds are built after the views that fill their child
//! collection.

use futures::TryStreamExt;
use mongodb::Database;
use serde_json::{json, Value};
use subset_runtime::bson::{doc, Bson, Document, RawDocumentBuf};
use subset_runtime::raw::{self, Adopted, Refusal};
use subset_runtime::repair::{Orphans, SweepOptions};
use subset_runtime::spec::SubsetSpec;

use crate::args::{MigrateArgs, SubsetArgs};
use crate::error::{CliError, Invalid};
use crate::model::Model;
use crate::output::{
    bytes, headline, invalid_json, keys_text, orphans_json, orphans_text, push_invalid, spec_json,
    Outcome,
};
use crate::scan::{self, Sizes};
use crate::{progress, shape};

/// Parents migrated at once: enough to overlap round trips, few enough to leave the server room.
const CONCURRENCY: usize = 4;

/// What the read-only survey found.
#[derive(Debug, Default)]
struct Survey {
    parents: u64,
    /// Parents without the field, whose subset is built from the child collection.
    absent: u64,
    elements: u64,
    without_id: u64,
    array_bytes: u64,
    kept_bytes: u64,
    invalid: Vec<Invalid>,
}

/// A view to migrate, what its survey found, and the children of no parent in its child
/// collection.
struct View {
    spec: &'static SubsetSpec,
    survey: Survey,
    orphans: Orphans,
}

impl View {
    /// Some parent embeds children to copy through this view.
    fn copies(&self) -> bool {
        self.survey.elements > 0
    }

    /// No parent holds the field: the whole view is built from the child collection.
    fn built(&self) -> bool {
        self.survey.parents > 0 && self.survey.absent == self.survey.parents
    }
}

/// What the migration did.
#[derive(Debug, Default)]
struct Moved {
    parents: u64,
    /// Parents without the field, whose subset was built from the child collection.
    built: u64,
    inserted: u64,
    already: u64,
    assigned: u64,
    gone: u64,
    skipped: Vec<Invalid>,
}

/// The result for one parent.
enum One {
    Done {
        inserted: u64,
        already: u64,
        assigned: u64,
        /// The parent had no field: its subset was built from the child collection.
        built: bool,
    },
    Gone,
    Invalid(Invalid),
}

/// Runs `subset migrate` on every view of `model`.
pub async fn run(db: &Database, model: Model, args: &MigrateArgs) -> Result<Outcome, CliError> {
    let a = &args.subset;
    let json = a.conn.json;
    let parent = model.parent();
    scan::require_collection(db, parent).await?;
    let before = scan::sizes(db, parent).await?;
    let store = model.store(db, &a.conn)?;
    let mut views = Vec::new();
    for spec in model.spec.subsets {
        views.push(View {
            spec,
            survey: survey(db, spec, a.batch, parent, before.count, json).await?,
            orphans: store.children(spec).orphans().await?,
        });
    }
    // The views that copy children go first: a view built from its child collection before
    // they filled it would stay short of their children. A stable sort: otherwise in the
    // model's order.
    views.sort_by_key(|v| !v.copies());
    for (at, view) in views.iter().enumerate() {
        let filled = views[..at].iter().any(|v| {
            v.copies()
                && (v.spec.child_collection, v.spec.key)
                    == (view.spec.child_collection, view.spec.key)
        });
        if view.built() && !filled {
            // A misspelt `--child` would give every parent an empty subset.
            scan::require_collection(db, view.spec.child_collection).await.map_err(|_| {
                CliError::Usage(format!(
                    "no parent of `{parent}` has `{}`, so every subset would be built from the child collection, and `{}` does not exist in database `{}`",
                    view.spec.field,
                    view.spec.child_collection,
                    db.name()
                ))
            })?;
        }
    }
    if args.dry_run {
        let mut built = 0;
        for view in &views {
            if view.survey.absent > 0 {
                built += built_bytes(db, view.spec, parent, view.survey.absent).await?;
            }
        }
        return Ok(dry_run_report(model, &before, &views, built));
    }
    if !a.skip_invalid {
        if let Some(view) = views.iter_mut().find(|v| !v.survey.invalid.is_empty()) {
            return Err(CliError::Invalid {
                collection: parent.to_owned(),
                field: view.spec.field.to_owned(),
                action: "migrated",
                invalid: std::mem::take(&mut view.survey.invalid),
                hint: "nothing was changed; fix these parents or pass --skip-invalid to migrate the others",
            });
        }
    }
    let mut moved = Vec::new();
    for view in &views {
        moved.push(migrate_view(&store, view, a).await?);
    }
    let after = scan::sizes(db, parent).await?;
    Ok(report(model, &store, (&before, &after), &views, &moved))
}

/// Migrates every parent through one view.
async fn migrate_view(store: &raw::Store, view: &View, a: &SubsetArgs) -> Result<Moved, CliError> {
    let spec = view.spec;
    store.children(spec).ensure_index().await?;
    let bar = progress::bar(view.survey.parents, "migrating", a.conn.json);
    let mut moved = Moved::default();
    let options = SweepOptions::default()
        .batch_size(a.batch)
        .concurrency(CONCURRENCY);
    let parents = store.sweep(&options, |id| async move {
        Ok(migrate_one(store, spec, &id).await)
    });
    futures::pin_mut!(parents);
    while let Some((_, result)) = parents.try_next().await? {
        match result?? {
            One::Done {
                inserted,
                already,
                assigned,
                built,
            } => {
                moved.parents += 1;
                moved.built += u64::from(built);
                moved.inserted += inserted;
                moved.already += already;
                moved.assigned += assigned;
            }
            One::Gone => moved.gone += 1,
            One::Invalid(invalid) if a.skip_invalid => moved.skipped.push(invalid),
            One::Invalid(invalid) => {
                bar.abandon();
                return Err(CliError::Invalid {
                    collection: store.collection_name().to_owned(),
                    field: spec.field.to_owned(),
                    action: "migrated",
                    invalid: vec![invalid],
                    hint: "the parents before it are migrated; fix it (or pass --skip-invalid) and run the same command again to finish",
                });
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(moved)
}

/// About how many bytes building the subset adds to the `absent` parents that lack the field:
/// for each, the field (an array header), its count and sums, and its `keep` first children
/// (or all, when fewer) at the average size of its children's embedded form, each with its
/// element header. One aggregation over the child collection, grouped by parent key, looking
/// up whether each parent has the field.
async fn built_bytes(
    db: &Database,
    spec: &SubsetSpec,
    parent: &str,
    absent: u64,
) -> Result<u64, CliError> {
    // An element's header: a type byte, the name, a NUL; an array or document adds a length
    // and a terminator, a number its 8 bytes (an int64 count or sum, or a double).
    let header = |name: &str| name.len() as u64 + 2;
    let fields = header(spec.field)
        + 5
        + spec.count.map_or(0, |c| header(c) + 8)
        + spec.sums.iter().map(|s| header(s.parent) + 8).sum::<u64>();
    let mut pipeline = Vec::new();
    if let Some(filter) = spec.filter {
        pipeline.push(doc! { "$match": { filter.field: filter.equals } });
    }
    // The size of a child's embedded form: the whole child without its key (a `$project`
    // excluding the key would leave nothing to group by) or with it (`embed_key`), or a
    // preview's `_id` and fields.
    let size = match spec.embed {
        None if spec.embed_key => doc! { "$bsonSize": "$$ROOT" },
        None => doc! { "$subtract": [
            { "$bsonSize": "$$ROOT" },
            { "$subtract": [{ "$bsonSize": { spec.key: format!("${}", spec.key) } }, 5] },
        ] },
        Some(fields) => {
            let key = spec.embed_key.then_some(spec.key);
            let kept: Document = std::iter::once("_id")
                .chain(fields.iter().map(|f| f.bson))
                .chain(key)
                .map(|field| (field.to_owned(), Bson::String(format!("${field}"))))
                .collect();
            doc! { "$bsonSize": kept }
        }
    };
    pipeline.extend([
        doc! { "$group": {
            "_id": format!("${}", spec.key),
            "n": { "$sum": 1 },
            "bytes": { "$sum": size },
        } },
        doc! { "$lookup": {
            "from": parent,
            "localField": "_id",
            "foreignField": "_id",
            "pipeline": [{ "$project": { "has": { "$ne": [{ "$type": format!("${}", spec.field) }, "missing"] } } }],
            "as": "parent",
        } },
        doc! { "$match": { "parent.has": false } },
        doc! { "$group": {
            "_id": null,
            // An array element is its document plus a type byte, its index and a NUL: about 5.
            "bytes": { "$sum": { "$multiply": [
                { "$min": ["$n", i64::from(spec.keep)] },
                { "$add": [{ "$divide": ["$bytes", "$n"] }, 5] },
            ] } },
        } },
    ]);
    let found: Vec<Document> = db
        .collection::<Document>(spec.child_collection)
        .aggregate(pipeline)
        .await
        .map_err(|e| CliError::mongo(spec.child_collection, e))?
        .try_collect()
        .await
        .map_err(|e| CliError::mongo(spec.child_collection, e))?;
    let elements = match found.first().and_then(|d| d.get("bytes")) {
        Some(Bson::Double(b)) => *b as u64,
        Some(Bson::Int32(b)) => u64::try_from(*b).unwrap_or(0),
        Some(Bson::Int64(b)) => u64::try_from(*b).unwrap_or(0),
        _ => 0,
    };
    Ok(elements + absent * fields)
}

/// Reads every parent's array (read-only) and checks its shape.
async fn survey(
    db: &Database,
    spec: &SubsetSpec,
    batch: u32,
    collection: &str,
    estimated: u64,
    json: bool,
) -> Result<Survey, CliError> {
    let bar = progress::bar(estimated, "surveying", json);
    let mut cursor = db
        .collection::<RawDocumentBuf>(collection)
        .find(doc! {})
        .projection(doc! { spec.field: 1 })
        .sort(doc! { "_id": 1 })
        .batch_size(batch)
        .await
        .map_err(|e| CliError::mongo(collection, e))?;
    let mut survey = Survey::default();
    while let Some(raw) = cursor
        .try_next()
        .await
        .map_err(|e| CliError::mongo(collection, e))?
    {
        survey.parents += 1;
        bar.inc(1);
        if matches!(raw.get(spec.field), Ok(None)) {
            survey.absent += 1;
        }
        match shape::check(&raw, spec) {
            Ok(s) => {
                survey.elements += s.len;
                survey.without_id += s.without_id;
                survey.array_bytes += s.array_bytes;
                survey.kept_bytes += s.kept_bytes(spec.keep);
            }
            Err(problem) => survey.invalid.push(Invalid {
                id: raw_id(&raw),
                problem,
            }),
        }
    }
    bar.finish_and_clear();
    Ok(survey)
}

fn raw_id(raw: &RawDocumentBuf) -> Bson {
    raw.get("_id")
        .ok()
        .flatten()
        .and_then(|v| Bson::try_from(v).ok())
        .unwrap_or(Bson::Null)
}

/// Migrates one parent: checked as it is now (the survey may be stale), then adopted.
async fn migrate_one(store: &raw::Store, spec: &SubsetSpec, id: &Bson) -> Result<One, CliError> {
    let name = store.collection_name();
    let found = store
        .database()
        .collection::<RawDocumentBuf>(name)
        .find_one(doc! { "_id": id.clone() })
        .projection(doc! { spec.field: 1 })
        .await
        .map_err(|e| CliError::mongo(name, e))?;
    let Some(raw) = found else {
        return Ok(One::Gone);
    };
    let invalid = |problem| {
        One::Invalid(Invalid {
            id: id.clone(),
            problem,
        })
    };
    if let Err(problem) = shape::check(&raw, spec) {
        return Ok(invalid(problem));
    }
    Ok(match store.children(spec).adopt(id).await? {
        Adopted::Done {
            inserted,
            already,
            assigned,
            built,
        } => One::Done {
            inserted,
            already,
            assigned,
            built,
        },
        Adopted::Gone => One::Gone,
        Adopted::Refused(refusal) => invalid(refused(spec, &refusal)),
    })
}

/// Why the engine left a parent as it is, in the tool's words.
fn refused(spec: &SubsetSpec, refusal: &Refusal) -> String {
    match refusal {
        Refusal::OwnedElsewhere { child, owner } => format!(
            "child {child} is already in `{}` under parent {owner}: give the element another `_id`",
            spec.child_collection
        ),
        Refusal::LostPreview { child } => format!(
            "element {child} holds only the --embed fields and its child is not in `{}`: it is a preview whose whole child is gone, so it can be neither copied nor dropped; restore the child or remove the element (or, if the children really have no other fields, migrate without --embed)",
            spec.child_collection
        ),
        Refusal::KeyMismatch {
            child, field, found, ..
        } => format!(
            "child {child} holds `{field}` = {found}, another parent's key: it belongs elsewhere; fix the element's key or move it to that parent's `{}`",
            spec.field
        ),
        Refusal::Changing => format!(
            "`{}` kept changing while being migrated; run again to finish it",
            spec.field
        ),
        other => other.to_string(),
    }
}

/// The first line of each view's part of a report: the first names what was done.
fn view_line(done: &str, at: usize, spec: &SubsetSpec, parent: &str) -> String {
    match at {
        0 => format!("{done}{}", headline(spec, parent)),
        _ => format!("then {}", headline(spec, parent)),
    }
}

/// The document sizes before and after, for `--json`: the collection's and each document's.
fn estimated(before: &Sizes, after_bytes: u64) -> Value {
    json!({
        "bytes": after_bytes,
        "avg_document_bytes": after_bytes.checked_div(before.count).unwrap_or(0),
    })
}

fn dry_run_report(model: Model, before: &Sizes, views: &[View], built: u64) -> Outcome {
    let parent = model.parent();
    let after_bytes = views
        .iter()
        .fold(before.bytes, |bytes, v| {
            bytes
                .saturating_sub(v.survey.array_bytes)
                .saturating_add(v.survey.kept_bytes)
        })
        .saturating_add(built);
    let after_avg = after_bytes.checked_div(before.count).unwrap_or(0);
    let mut text = String::new();
    let mut json_views = Vec::new();
    for (at, view) in views.iter().enumerate() {
        let (spec, survey) = (view.spec, &view.survey);
        text.push_str(&view_line("dry run, nothing changed: ", at, spec, parent));
        text.push_str(&format!(
            "  parents:            {} ({} invalid)\n  children to copy:   {}\n  ids to assign:      {}\n",
            survey.parents,
            survey.invalid.len(),
            survey.elements,
            survey.without_id
        ));
        if survey.absent > 0 {
            text.push_str(&format!(
                "  parents without `{}`, to build from `{}`: {}\n",
                spec.field, spec.child_collection, survey.absent
            ));
        }
        text.push_str(&orphans_text(&view.orphans, spec.child_collection));
        push_invalid(
            &mut text,
            &survey.invalid,
            "invalid (fix them, or pass --skip-invalid)",
        );
        json_views.push(json!({
            "subset": spec_json(spec, parent),
            "parents": survey.parents,
            "valid_parents": survey.parents - survey.invalid.len() as u64,
            "children_to_copy": survey.elements,
            "ids_to_assign": survey.without_id,
            "parents_to_build": survey.absent,
            "orphans": orphans_json(&view.orphans),
            "invalid": invalid_json(&survey.invalid),
        }));
    }
    text.push_str(&format!(
        "  collection bytes:   {} now, about {} after\n  average document:   {} now, about {} after\n",
        bytes(before.bytes as f64),
        bytes(after_bytes as f64),
        bytes(before.avg_document_bytes as f64),
        bytes(after_avg as f64)
    ));
    Outcome {
        json: json!({
            "command": "migrate",
            "dry_run": true,
            "registered": model.registered,
            "before": before,
            "estimated_after": estimated(before, after_bytes),
            "views": json_views,
        }),
        text,
        problems: views.iter().any(|v| !v.survey.invalid.is_empty()),
    }
}

fn report(
    model: Model,
    store: &raw::Store,
    (before, after): (&Sizes, &Sizes),
    views: &[View],
    moved: &[Moved],
) -> Outcome {
    let parent = model.parent();
    let mut text = String::new();
    for (at, view) in views.iter().enumerate() {
        text.push_str(&view_line("migrated ", at, view.spec, parent));
    }
    text.push_str(&format!(
        "                          before        after\n  documents         {:>12} {:>12}\n  collection bytes  {:>12} {:>12}\n  average document  {:>12} {:>12}\n",
        before.count,
        after.count,
        bytes(before.bytes as f64),
        bytes(after.bytes as f64),
        bytes(before.avg_document_bytes as f64),
        bytes(after.avg_document_bytes as f64),
    ));
    let mut json_views = Vec::new();
    for (view, moved) in views.iter().zip(moved) {
        let spec = view.spec;
        if views.len() > 1 {
            text.push_str(&format!("  view `{}`:\n", spec.field));
        }
        text.push_str(&format!(
            "  parents migrated: {}; children copied: {} ({} already there from an earlier run); ids assigned: {}\n",
            moved.parents, moved.inserted, moved.already, moved.assigned
        ));
        if moved.built > 0 {
            text.push_str(&format!(
                "  parents without `{}`, built from the child collection `{}`: {}\n",
                spec.field, spec.child_collection, moved.built
            ));
        }
        if moved.gone > 0 {
            text.push_str(&format!(
                "  parents deleted while migrating: {}\n",
                moved.gone
            ));
        }
        text.push_str(&format!(
            "  index on `{}`: {}\n",
            spec.child_collection,
            keys_text(&store.children(spec).index_keys())
        ));
        text.push_str(&orphans_text(&view.orphans, spec.child_collection));
        push_invalid(
            &mut text,
            &moved.skipped,
            "skipped as invalid (--skip-invalid)",
        );
        json_views.push(json!({
            "subset": spec_json(spec, parent),
            "parents_migrated": moved.parents,
            "children_copied": moved.inserted,
            "children_already_copied": moved.already,
            "ids_assigned": moved.assigned,
            "parents_built": moved.built,
            "parents_gone": moved.gone,
            "orphans": orphans_json(&view.orphans),
            "skipped": invalid_json(&moved.skipped),
        }));
    }
    Outcome {
        json: json!({
            "command": "migrate",
            "dry_run": false,
            "registered": model.registered,
            "before": before,
            "after": after,
            "views": json_views,
        }),
        text,
        problems: false,
    }
}
