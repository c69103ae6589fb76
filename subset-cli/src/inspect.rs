//! `subset inspect`: document sizes and array lengths per collection, and which arrays look
//! unbounded. Read-only.

use futures::TryStreamExt;
use mongodb::Database;
use serde::Serialize;
use serde_json::json;
use subset_runtime::bson::{doc, Bson, RawBsonRef, RawDocument, RawDocumentBuf};
use subset_runtime::bson_compat;

use crate::args::InspectArgs;
use crate::error::CliError;
use crate::output::{bytes, id_json, orphans_json, orphans_text, Outcome};
use crate::progress;
use crate::shape::{Bracket, Brackets, SortValue};

/// How many of the largest documents are named.
const LARGEST: usize = 5;

/// A document this large (half of MongoDB's 16 MB limit) flags the arrays it holds.
const NEAR_LIMIT: u64 = 8 * 1024 * 1024;

/// How deep into embedded documents arrays are looked for (`a.b.c` is depth 3).
const MAX_DEPTH: usize = 4;

/// How many documents are named for each field of mixed types.
const EXAMPLES: usize = 3;

/// Runs `subset inspect`.
pub async fn run(db: &Database, args: &InspectArgs) -> Result<Outcome, CliError> {
    let names = match &args.collection {
        Some(name) => {
            crate::scan::require_collection(db, name).await?;
            vec![name.clone()]
        }
        None => {
            let mut names = db
                .list_collection_names()
                .filter(doc! { "type": "collection" })
                .await
                .map_err(|e| CliError::mongo(db.name(), e))?;
            names.retain(|n| !n.starts_with("system."));
            names.sort();
            names
        }
    };
    let mut reports = Vec::with_capacity(names.len());
    for name in names {
        reports.push(inspect(db, &name, args).await?);
    }
    let mut text = String::new();
    for r in &reports {
        r.write(&mut text, args);
    }
    if reports.is_empty() {
        text.push_str(&format!("database `{}` has no collections\n", db.name()));
    }
    let mut json = json!({ "command": "inspect", "database": db.name(), "collections": reports });
    if let (Some(parent), Some(key), Some(child)) = (&args.parent, &args.key, &args.collection) {
        crate::scan::require_collection(db, parent).await?;
        let store = crate::connect::store(db, &args.conn, parent, Vec::new())?;
        let orphans = store.orphans(child, key).await?;
        text.push_str(&format!(
            "`{child}` as children of `{parent}` by `{key}`:\n"
        ));
        match orphans.total() {
            0 => text.push_str("  every child names a parent\n"),
            _ => text.push_str(&orphans_text(&orphans, child)),
        }
        json["orphans"] = orphans_json(&orphans);
    }
    Ok(Outcome {
        json,
        text,
        problems: false,
    })
}

/// What was found in one collection.
#[derive(Debug, Serialize)]
struct Report {
    collection: String,
    count: u64,
    /// The number of documents read, when sampled.
    sampled: Option<u64>,
    /// All documents' BSON bytes (estimated from the sample when sampled).
    bytes: u64,
    avg_document_bytes: u64,
    largest: Vec<Largest>,
    arrays: Vec<ArrayReport>,
}

#[derive(Debug, Serialize)]
struct Largest {
    #[serde(rename = "_id")]
    id: serde_json::Value,
    #[serde(skip)]
    display: String,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct ArrayReport {
    path: String,
    /// Documents holding this array.
    documents: u64,
    p50: u64,
    p99: u64,
    max: u64,
    /// Whether every element is a document (what `subset migrate` can move).
    elements_are_documents: bool,
    avg_element_bytes: u64,
    flagged: bool,
    reasons: Vec<String>,
    /// The collection if only `--keep` elements of this array stayed embedded.
    estimate: Option<Estimate>,
    /// Fields of the elements whose type, in some documents, differs from the type most
    /// elements of that document's array have: as a sort key, they would be out of the order.
    mixed_types: Vec<MixedReport>,
    /// Fields that some elements of an array hold as a sortable value and others do not (it is
    /// missing, null, or an array or document): as a sort key, those elements would have no
    /// place in the order, and the dry run of `migrate` would refuse the document.
    placeless: Vec<PlacelessReport>,
}

/// One element field that some elements lack a sortable value of.
#[derive(Debug, Serialize)]
struct PlacelessReport {
    field: String,
    /// Elements without a sortable value in it, in the documents read.
    elements: u64,
    /// Documents holding such elements.
    documents: u64,
    /// The first few of those documents.
    examples: Vec<PlacelessDocument>,
}

/// A document whose array has elements without a sortable value in one field.
#[derive(Debug, Clone, Serialize)]
struct PlacelessDocument {
    #[serde(rename = "_id")]
    id: serde_json::Value,
    #[serde(skip)]
    display: String,
    /// How many elements.
    elements: u64,
    /// What the dry run of `migrate` says of the array with this field as a sort key.
    problem: String,
}

/// One element field of mixed types.
#[derive(Debug, Serialize)]
struct MixedReport {
    field: String,
    /// Elements of another type than most of their array, in the documents read.
    elements: u64,
    /// Documents holding such elements.
    documents: u64,
    /// The first few of those documents.
    examples: Vec<MixedDocument>,
}

/// A document whose array mixes types in one field.
#[derive(Debug, Clone, Serialize)]
struct MixedDocument {
    #[serde(rename = "_id")]
    id: serde_json::Value,
    #[serde(skip)]
    display: String,
    /// The type most elements have ("a date"; numbers are one type).
    usual: &'static str,
    /// How many elements have it.
    usual_elements: u64,
    /// The other types found, one entry per element (the first few).
    others: Vec<&'static str>,
    /// How many elements have another type.
    other_elements: u64,
}

#[derive(Debug, Serialize)]
struct Estimate {
    keep: u32,
    bytes: u64,
    avg_document_bytes: u64,
}

/// Running totals for one array path.
#[derive(Debug, Default)]
struct ArrayStats {
    lengths: Vec<u64>,
    elements: u64,
    non_documents: u64,
    bytes: u64,
    kept_bytes: u64,
    largest_holder: u64,
    /// Per element field, the documents whose array mixes types in it.
    mixed: Vec<(String, Vec<MixedDocument>)>,
    /// Per element field, the documents whose array has elements without a sortable value in
    /// it.
    placeless: Vec<PlacelessReport>,
}

/// Running totals for one collection.
#[derive(Debug, Default)]
struct Stats {
    read: u64,
    bytes: u64,
    largest: Vec<(u64, Bson)>,
    arrays: Vec<(String, ArrayStats)>,
}

impl Stats {
    fn add(&mut self, raw: &RawDocument, keep: u32) {
        let size = raw.as_bytes().len() as u64;
        self.read += 1;
        self.bytes += size;
        let id = raw
            .get("_id")
            .ok()
            .flatten()
            .and_then(|v| Bson::try_from(v).ok())
            .unwrap_or(Bson::Null);
        if self.largest.len() < LARGEST || self.largest.last().is_some_and(|(s, _)| size > *s) {
            let at = self.largest.partition_point(|(s, _)| *s >= size);
            self.largest.insert(at, (size, id.clone()));
            self.largest.truncate(LARGEST);
        }
        let holder = Holder { id: &id, size };
        self.walk(raw, "", 1, &holder, keep);
    }

    fn walk(&mut self, doc: &RawDocument, prefix: &str, depth: usize, holder: &Holder, keep: u32) {
        for element in doc.into_iter().flatten() {
            let (key, value) = element;
            let key = bson_compat::raw_key(key);
            let path = if prefix.is_empty() {
                key.to_owned()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                RawBsonRef::Array(array) => {
                    let stats = match self.arrays.iter().position(|(p, _)| *p == path) {
                        Some(i) => &mut self.arrays[i].1,
                        None => {
                            self.arrays.push((path.clone(), ArrayStats::default()));
                            let last = self.arrays.len() - 1;
                            &mut self.arrays[last].1
                        }
                    };
                    let mut len = 0;
                    let mut fields: Vec<(&str, Brackets, u64)> = Vec::new();
                    let mut elements: Vec<&RawDocument> = Vec::new();
                    for item in array.into_iter().flatten() {
                        len += 1;
                        let RawBsonRef::Document(element) = item else {
                            stats.non_documents += 1;
                            continue;
                        };
                        elements.push(element);
                        for (name, value) in element.into_iter().flatten() {
                            let name = bson_compat::raw_key(name);
                            let Some(bracket) = Bracket::of(value) else {
                                continue;
                            };
                            let at = match fields.iter().position(|(n, ..)| *n == name) {
                                Some(at) => at,
                                None => {
                                    fields.push((name, Brackets::default(), 0));
                                    fields.len() - 1
                                }
                            };
                            let (_, brackets, values) = &mut fields[at];
                            brackets.add(bracket, *values);
                            *values += 1;
                        }
                    }
                    let names: Vec<&str> = fields.iter().map(|(name, ..)| *name).collect();
                    stats.add_mixed(holder.id, fields);
                    stats.add_placeless(holder.id, &path, &names, &elements);
                    let array_bytes = array.as_bytes().len() as u64;
                    stats.lengths.push(len);
                    stats.elements += len;
                    stats.bytes += array_bytes;
                    stats.kept_bytes += crate::shape::kept_bytes(array_bytes, len, keep);
                    stats.largest_holder = stats.largest_holder.max(holder.size);
                }
                RawBsonRef::Document(inner) if depth < MAX_DEPTH => {
                    self.walk(inner, &path, depth + 1, holder, keep);
                }
                _ => {}
            }
        }
    }
}

/// The top-level document an array is in.
struct Holder<'a> {
    id: &'a Bson,
    size: u64,
}

impl ArrayStats {
    /// Records the fields `names` of one array's elements (at `path`) that some elements hold a
    /// sortable value in and others do not, by the dry run's rule for a sort key
    /// ([`crate::shape::placeless`]).
    fn add_placeless(&mut self, id: &Bson, path: &str, names: &[&str], elements: &[&RawDocument]) {
        for name in names {
            let values: Vec<SortValue> = elements
                .iter()
                .map(|e| SortValue::of(name, e.get(name).ok().flatten()))
                .collect();
            let sortable = |v: &SortValue| matches!(v, SortValue::Sortable(_));
            if !values.iter().any(sortable) {
                continue;
            }
            let Err(problem) = crate::shape::placeless(path, name, &values) else {
                continue;
            };
            let at = match self.placeless.iter().position(|p| p.field == *name) {
                Some(at) => at,
                None => {
                    self.placeless.push(PlacelessReport {
                        field: (*name).to_owned(),
                        elements: 0,
                        documents: 0,
                        examples: Vec::new(),
                    });
                    self.placeless.len() - 1
                }
            };
            let report = &mut self.placeless[at];
            let elements = values.iter().filter(|v| !sortable(v)).count() as u64;
            report.elements += elements;
            report.documents += 1;
            if report.examples.len() < EXAMPLES {
                report.examples.push(PlacelessDocument {
                    id: id_json(id),
                    display: id.to_string(),
                    elements,
                    problem,
                });
            }
        }
    }

    /// Records the fields of one array's elements whose values are not all of one type.
    fn add_mixed(&mut self, id: &Bson, fields: Vec<(&str, Brackets, u64)>) {
        for (name, brackets, values) in fields {
            let Some((usual, usual_elements)) = brackets.majority() else {
                continue;
            };
            let documents = match self.mixed.iter().position(|(n, _)| n == name) {
                Some(at) => &mut self.mixed[at].1,
                None => {
                    self.mixed.push((name.to_owned(), Vec::new()));
                    let last = self.mixed.len() - 1;
                    &mut self.mixed[last].1
                }
            };
            documents.push(MixedDocument {
                id: id_json(id),
                display: id.to_string(),
                usual: usual.name(),
                usual_elements,
                others: brackets
                    .others(usual)
                    .map(Bracket::name)
                    .take(EXAMPLES)
                    .collect(),
                other_elements: values - usual_elements,
            });
        }
    }
}

async fn inspect(db: &Database, name: &str, args: &InspectArgs) -> Result<Report, CliError> {
    let collection = db.collection::<RawDocumentBuf>(name);
    let count = collection
        .estimated_document_count()
        .await
        .map_err(|e| CliError::mongo(name, e))?;
    let sampled = (count > args.sample).then_some(args.sample);
    let bar = progress::bar(sampled.unwrap_or(count), name.to_owned(), args.conn.json);
    let mut cursor = match sampled {
        Some(size) => {
            let size = i64::try_from(size).unwrap_or(i64::MAX);
            collection
                .aggregate([doc! { "$sample": { "size": size } }])
                .with_type::<RawDocumentBuf>()
                .await
        }
        None => collection.find(doc! {}).await,
    }
    .map_err(|e| CliError::mongo(name, e))?;
    let mut stats = Stats::default();
    while let Some(raw) = cursor
        .try_next()
        .await
        .map_err(|e| CliError::mongo(name, e))?
    {
        stats.add(&raw, args.keep);
        bar.inc(1);
    }
    bar.finish_and_clear();

    // Scale what the sample saw to the whole collection.
    let scale = if stats.read == 0 {
        0.0
    } else {
        count.max(stats.read) as f64 / stats.read as f64
    };
    let total = (stats.bytes as f64 * scale) as u64;
    let documents = count.max(stats.read);
    let avg = total.checked_div(documents).unwrap_or(0);
    let mut arrays: Vec<ArrayReport> = stats
        .arrays
        .into_iter()
        .map(|(path, mut a)| {
            a.lengths.sort_unstable();
            let max = a.lengths.last().copied().unwrap_or(0);
            let mut reasons = Vec::new();
            if max >= args.long as u64 {
                reasons.push(format!(
                    "{max} elements in one document (flagged from {})",
                    args.long
                ));
            }
            if a.largest_holder >= NEAR_LIMIT {
                reasons.push(format!(
                    "held by a document of {}, near the 16 MB limit",
                    bytes(a.largest_holder as f64)
                ));
            }
            let flagged = !reasons.is_empty();
            let estimate = flagged.then(|| {
                let after = stats.bytes - a.bytes + a.kept_bytes;
                let after = (after as f64 * scale) as u64;
                Estimate {
                    keep: args.keep,
                    bytes: after,
                    avg_document_bytes: after.checked_div(documents).unwrap_or(0),
                }
            });
            let mixed_types = a
                .mixed
                .into_iter()
                .map(|(field, documents)| MixedReport {
                    field,
                    elements: documents.iter().map(|d| d.other_elements).sum(),
                    documents: documents.len() as u64,
                    examples: documents.into_iter().take(EXAMPLES).collect(),
                })
                .collect();
            ArrayReport {
                documents: (a.lengths.len() as f64 * scale) as u64,
                p50: percentile(&a.lengths, 50),
                p99: percentile(&a.lengths, 99),
                max,
                elements_are_documents: a.non_documents == 0,
                avg_element_bytes: a.bytes.checked_div(a.elements).unwrap_or(0),
                flagged,
                reasons,
                estimate,
                mixed_types,
                placeless: a.placeless,
                path,
            }
        })
        .collect();
    arrays.sort_by(|a, b| b.max.cmp(&a.max).then_with(|| a.path.cmp(&b.path)));
    Ok(Report {
        collection: name.to_owned(),
        count,
        sampled: sampled.map(|_| stats.read),
        bytes: total,
        avg_document_bytes: avg,
        largest: stats
            .largest
            .into_iter()
            .map(|(size, id)| Largest {
                display: id.to_string(),
                id: id_json(&id),
                bytes: size,
            })
            .collect(),
        arrays,
    })
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as u64).div_ceil(100).max(1);
    sorted[(rank - 1) as usize]
}

impl Report {
    fn write(&self, out: &mut String, args: &InspectArgs) {
        out.push_str(&format!(
            "{}: {} documents, {}, average {}\n",
            self.collection,
            self.count,
            bytes(self.bytes as f64),
            bytes(self.avg_document_bytes as f64)
        ));
        if let Some(read) = self.sampled {
            out.push_str(&format!(
                "  sampled {read} of {} documents ($sample): sizes and lengths are estimates\n",
                self.count
            ));
        }
        if let Some((first, rest)) = self.largest.split_first() {
            out.push_str(&format!(
                "  largest: {:>9}  {}\n",
                bytes(first.bytes as f64),
                first.display
            ));
            for l in rest {
                out.push_str(&format!(
                    "           {:>9}  {}\n",
                    bytes(l.bytes as f64),
                    l.display
                ));
            }
        }
        if self.arrays.is_empty() {
            return;
        }
        let width = self
            .arrays
            .iter()
            .map(|a| a.path.len())
            .max()
            .unwrap_or(0)
            .max(5);
        out.push_str(&format!(
            "  {:width$}  {:>7} {:>7} {:>7}\n",
            "array", "p50", "p99", "max"
        ));
        for a in &self.arrays {
            let flag = if a.flagged { "  <- unbounded?" } else { "" };
            out.push_str(&format!(
                "  {:width$}  {:>7} {:>7} {:>7}{flag}\n",
                a.path, a.p50, a.p99, a.max
            ));
            for reason in &a.reasons {
                out.push_str(&format!("      {reason}\n"));
            }
            for m in &a.mixed_types {
                out.push_str(&format!(
                    "      `{}`: {} element(s) in {} document(s) of another type than the rest of their array (as a --sort field: out of the order)\n",
                    m.field, m.elements, m.documents
                ));
                for d in &m.examples {
                    out.push_str(&format!(
                        "        {}: {} of {} are {}; the others: {}\n",
                        d.display,
                        d.usual_elements,
                        d.usual_elements + d.other_elements,
                        d.usual,
                        d.others.join(", ")
                    ));
                }
            }
            for p in &a.placeless {
                out.push_str(&format!(
                    "      `{}`: {} element(s) in {} document(s) without a sortable value (as a --sort field: no place in the order)\n",
                    p.field, p.elements, p.documents
                ));
                for d in &p.examples {
                    out.push_str(&format!("        {}: {}\n", d.display, d.problem));
                }
            }
            if let Some(e) = &a.estimate {
                let ratio = self.bytes as f64 / e.bytes.max(1) as f64;
                out.push_str(&format!(
                    "      with only the top {} embedded: {} in all, {} per document on average ({ratio:.0}x smaller)\n",
                    e.keep,
                    bytes(e.bytes as f64),
                    bytes(e.avg_document_bytes as f64),
                ));
                if a.elements_are_documents && !a.path.contains('.') {
                    out.push_str(&format!(
                        "      move it: subset migrate --db {} --parent {} --field {} --child {} --key <parent key> --keep {} --sort \"<field> desc\"\n",
                        args.conn.db, self.collection, a.path, a.path, e.keep
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), 50);
        assert_eq!(percentile(&v, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn stats_find_nested_arrays_and_the_largest() {
        let mut stats = Stats::default();
        for n in 0..7_i32 {
            let items: Vec<Bson> = (0..n).map(|i| Bson::Document(doc! { "i": i })).collect();
            let d = doc! { "_id": n, "items": items, "meta": { "tags": ["a"] } };
            stats.add(&RawDocumentBuf::try_from(&d).unwrap(), 2);
        }
        assert_eq!(stats.largest.len(), LARGEST);
        assert_eq!(stats.largest[0].1, Bson::Int32(6));
        let paths: Vec<&str> = stats.arrays.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["items", "meta.tags"]);
        assert_eq!(stats.arrays[0].1.elements, 21);
    }

    #[test]
    fn stats_name_documents_whose_array_lacks_a_sortable_value_in_a_field() {
        let mut stats = Stats::default();
        let docs = [
            doc! { "_id": 1, "items": [{ "d": 1, "t": "a" }, { "d": 2 }, { "x": 0 }] },
            doc! { "_id": 2, "items": [{ "d": 3, "t": "b" }, { "d": null, "t": "c" }] },
            // Nothing sortable in `tags`, and no element of this array has `d`: nothing to say.
            doc! { "_id": 3, "items": [{ "tags": [1] }, { "tags": [2] }] },
        ];
        for d in docs {
            stats.add(&RawDocumentBuf::try_from(&d).unwrap(), 2);
        }
        let placeless = &stats.arrays[0].1.placeless;
        let fields: Vec<(&str, u64, u64)> = placeless
            .iter()
            .map(|p| (p.field.as_str(), p.elements, p.documents))
            .collect();
        assert_eq!(
            fields,
            [("d", 2, 2), ("t", 2, 1), ("x", 2, 1)],
            "{placeless:?}"
        );
        // The dry run's words for the same array.
        let problems: Vec<&str> = placeless[0]
            .examples
            .iter()
            .map(|d| d.problem.as_str())
            .collect();
        assert_eq!(
            problems,
            [
                "sort field `d` is missing on 1 of 3 elements: `items.2`",
                "sort field `d` is null on 1 of 2 elements, which gives them no place in the order: `items.1`"
            ]
        );
    }

    #[test]
    fn stats_name_documents_whose_array_mixes_types_in_a_field() {
        let mut stats = Stats::default();
        let docs = [
            doc! { "_id": 1, "items": [{ "d": 1, "t": "a" }, { "d": "x" }, { "d": 2.5 }, { "d": null }] },
            doc! { "_id": 2, "items": [{ "d": "a" }, { "d": "b" }] },
        ];
        for d in docs {
            stats.add(&RawDocumentBuf::try_from(&d).unwrap(), 2);
        }
        let mixed = &stats.arrays[0].1.mixed;
        assert_eq!(mixed.len(), 1, "{mixed:?}");
        let (field, documents) = &mixed[0];
        assert_eq!(field, "d");
        assert_eq!(documents.len(), 1);
        let d = &documents[0];
        assert_eq!(
            (d.display.as_str(), d.usual, d.usual_elements),
            ("1", "a number", 2)
        );
        assert_eq!(
            (d.others.as_slice(), d.other_elements),
            (&["a string"][..], 1)
        );
    }
}
