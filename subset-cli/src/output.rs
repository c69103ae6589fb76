//! What a command prints: text for people, one JSON document with `--json`.

use std::process::ExitCode;

use serde_json::{json, Value};
use subset_runtime::bson::{Bson, Document};

use subset_runtime::repair::Orphans;
use subset_runtime::spec::{Direction, FilterSpec, SubsetSpec};

use crate::error::{CliError, Invalid};

/// A finished command's report.
pub struct Outcome {
    /// The `--json` form.
    pub json: Value,
    /// The text form.
    pub text: String,
    /// Whether the command found problems (exit code 1).
    pub problems: bool,
}

impl Outcome {
    /// Prints the report on stdout and returns the exit code.
    pub fn print(self, json: bool) -> ExitCode {
        if json {
            println!("{}", self.json);
        } else {
            print!("{}", self.text);
        }
        ExitCode::from(u8::from(self.problems))
    }
}

/// Prints an error (on stderr; with `--json` also as JSON on stdout) and returns its exit code.
pub fn fail(error: &CliError, json: bool) -> ExitCode {
    let code = error.exit_code();
    if json {
        println!(
            "{}",
            json!({
                "error": error.to_string(),
                "exit_code": code,
                "invalid": invalid_json(error.invalid()),
            })
        );
    }
    eprintln!("error: {error}");
    ExitCode::from(code)
}

/// An `_id` as relaxed extended JSON (`{"$oid": "…"}` for an ObjectId).
pub fn id_json(id: &Bson) -> Value {
    value_json(id)
}

/// A value as relaxed extended JSON: plain JSON numbers for numbers, `{"$numberDecimal": …}`
/// for a decimal.
pub fn value_json(value: &Bson) -> Value {
    subset_runtime::bson_compat::to_relaxed_extjson(value.clone())
}

/// Invalid parents as JSON objects `{ "_id", "problem" }`.
pub fn invalid_json(invalid: &[Invalid]) -> Value {
    invalid
        .iter()
        .map(|i| json!({ "_id": id_json(&i.id), "problem": i.problem }))
        .collect()
}

/// Parents a pass went on past as JSON objects `{ "_id", "error" }`.
pub fn failures_json(failures: &[Invalid]) -> Value {
    failures
        .iter()
        .map(|f| json!({ "_id": id_json(&f.id), "error": f.problem }))
        .collect()
}

/// Bytes for people, in powers of 1000 (what `ls -h --si` and MongoDB's tools print).
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// One line naming the subset: `shops.reviews → reviews (key …, keep …, sort …)`.
pub fn headline(spec: &SubsetSpec, parent: &str) -> String {
    let sort: Vec<String> = spec
        .sort
        .iter()
        .map(|k| {
            let dir = match k.direction {
                Direction::Asc => "asc",
                Direction::Desc => "desc",
            };
            format!("{} {dir}", k.field)
        })
        .collect();
    let mut extra = String::new();
    if let Some(count) = spec.count {
        extra.push_str(&format!(", count `{count}`"));
    }
    if !spec.sums.is_empty() {
        extra.push_str(&format!(", sums \"{}\"", sums_text(spec)));
    }
    if let Some(filter) = spec.filter {
        extra.push_str(&format!(", filter \"{}\"", filter_text(filter)));
    }
    if let Some(fields) = spec.embed {
        let names: Vec<&str> = fields.iter().map(|f| f.bson).collect();
        extra.push_str(&format!(", previews of {}", names.join(", ")));
    }
    if spec.embed_key {
        extra.push_str(", key embedded");
    }
    format!(
        "{parent}.{} → {} (key `{}`, keep {}, sort \"{}\"{extra})\n",
        spec.field,
        spec.child_collection,
        spec.key,
        spec.keep,
        sort.join(", ")
    )
}

/// The sums as `--sum` takes them: `rating_total = rating, helpful_total = helpful`.
fn sums_text(spec: &SubsetSpec) -> String {
    let sums: Vec<String> = spec
        .sums
        .iter()
        .map(|s| format!("{} = {}", s.parent, s.child))
        .collect();
    sums.join(", ")
}

/// A filter as `--filter` takes it: `verified` or `!hidden`.
fn filter_text(filter: FilterSpec) -> String {
    let not = if filter.equals { "" } else { "!" };
    format!("{not}{}", filter.field)
}

/// The subset's description for `--json`.
pub fn spec_json(spec: &SubsetSpec, parent: &str) -> serde_json::Value {
    json!({
        "parent": parent,
        "field": spec.field,
        "child": spec.child_collection,
        "key": spec.key,
        "keep": spec.keep,
        "sort": spec.sort.iter().map(|k| json!({ "field": k.field, "direction": k.direction.as_i32() })).collect::<Vec<_>>(),
        "count": spec.count,
        "sums": spec.sums.iter().map(|s| json!({ "field": s.parent, "child": s.child })).collect::<Vec<_>>(),
        "filter": spec.filter.map(filter_text),
        "embed": spec.embed.map(|fields| fields.iter().map(|f| f.bson).collect::<Vec<_>>()),
        "embed_key": spec.embed_key,
    })
}

/// Index keys as people write them: `{shop_id: 1, date: -1, _id: -1}`.
pub fn keys_text(keys: &Document) -> String {
    let keys: Vec<String> = keys.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", keys.join(", "))
}

/// The children of `child` that belong to no parent, for the text form: one line, empty when
/// there are none.
pub fn orphans_text(orphans: &Orphans, child: &str) -> String {
    if orphans.total() == 0 {
        return String::new();
    }
    let ids: Vec<String> = orphans.sample.iter().map(ToString::to_string).collect();
    format!(
        "  children of no parent in `{child}`: {} ({} naming no parent, {} without a key, {} with an array key), e.g. {}\n",
        orphans.total(),
        orphans.no_parent,
        orphans.keyless,
        orphans.invalid_key,
        ids.join(", ")
    )
}

/// The children of no parent, for `--json`.
pub fn orphans_json(orphans: &Orphans) -> Value {
    json!({
        "total": orphans.total(),
        "no_parent": orphans.no_parent,
        "keyless": orphans.keyless,
        "invalid_key": orphans.invalid_key,
        "sample": orphans.sample.iter().map(id_json).collect::<Vec<_>>(),
    })
}

/// Lists invalid parents under a heading, for the text form.
pub fn push_invalid(text: &mut String, invalid: &[Invalid], what: &str) {
    push_listed(text, invalid, invalid.len() as u64, usize::MAX, what);
}

/// Lists the first `most` of `listed` parents under a heading that counts `total` of them.
pub fn push_listed(text: &mut String, listed: &[Invalid], total: u64, most: usize, what: &str) {
    if total == 0 {
        return;
    }
    text.push_str(&format!("  {total} parent(s) {what}:\n"));
    for i in listed.iter().take(most) {
        text.push_str(&format!("    {}: {}\n", i.id, i.problem));
    }
    let shown = listed.len().min(most) as u64;
    if total > shown {
        let json = if listed.len() as u64 == total {
            "--json lists them all".to_owned()
        } else {
            format!("--json lists the first {}", listed.len())
        };
        text.push_str(&format!("    … and {} more ({json})\n", total - shown));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_well() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(999.0), "999 B");
        assert_eq!(bytes(72_412.0), "72.4 KB");
        assert_eq!(bytes(3_200_000.0), "3.2 MB");
    }
}
