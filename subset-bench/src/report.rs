//! The results: a markdown file and an SVG chart.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use bson::{doc, Document};
use plotters::prelude::*;
use subset::bson;
use subset::testkit::MongoServer;
use subset::WriteMode;

use crate::batching;
use crate::hot_parent;
use crate::load::CollSize;
use crate::memory::Usage;
use crate::model_change;
use crate::overhead;
use crate::previews;
use crate::push_cost;
use crate::stats::Spread;
use crate::sum_types;
use crate::trips;
use crate::votes;
use crate::working_set::Layout;
use crate::Res;

/// Everything after this line of `results.md` is written by hand and kept on regeneration.
const ANALYSIS: &str =
    "<!-- analysis: everything below is kept when the benchmark rewrites this file -->";

pub struct DataRow {
    pub products: usize,
    pub reviews: usize,
    pub min_reviews: usize,
    pub max_reviews: usize,
    pub load_time: Option<Duration>,
}

pub struct ReadRow {
    pub layout: Layout,
    pub popularity: String,
    pub tasks: usize,
    pub ops: Spread,
    pub p50: Spread,
    pub p99: Spread,
    pub cache_kb: Spread,
    pub disk_kb: Spread,
}

/// Throughput of the subset layout over another layout, per round.
pub struct RatioRow {
    pub popularity: String,
    pub tasks: usize,
    pub other: Layout,
    pub ratio: Spread,
}

/// What the working set ran in.
pub enum Memory {
    /// `mongod` confined to `limit` bytes for the measurements.
    Confined {
        limit: u64,
        cgroup: String,
        /// Whether the peak covers only the run under the limit (else also the load).
        peak_reset: bool,
        /// At the end of the working-set experiment.
        usage: Usage,
    },
    /// A limit was asked for and could not be set.
    Cannot { limit: u64, reason: String },
}

pub struct WriteRow {
    pub name: String,
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub ops: f64,
}

pub struct ShowRow {
    pub layout: Layout,
    pub products: usize,
    pub pages: usize,
    pub p50: f64,
    pub max: f64,
    pub per_page: f64,
}

/// One part of `results.md`: the results of one experiment, written by the experiment that
/// measured them. An experiment adds its section with [`Report::add`] and touches no other.
pub trait Section {
    /// Its place in the file: the number of its heading (`## 2. Library overhead`), so that
    /// the file keeps one order whatever order the experiments run in.
    fn number(&self) -> u32;

    /// Writes the section, heading included.
    fn markdown(&self, w: &mut String);

    /// Writes the files the section links to into `dir`, beside `results.md`.
    fn files(&self, _dir: &Path) -> Res<()> {
        Ok(())
    }
}

/// The run: the machine, the server and the command, then a section per experiment that ran.
pub struct Report {
    pub date: String,
    pub machine: String,
    /// `/proc/loadavg` at the start; the end is read when the file is written.
    pub load_start: String,
    pub server_version: String,
    pub topology: String,
    pub cache: String,
    pub args: Vec<String>,
    sections: Vec<Box<dyn Section>>,
}

/// The working set: the data set, where it ran, and the reads and writes measured on it.
pub struct WorkingSet {
    pub data: DataRow,
    pub sizes: Vec<CollSize>,
    pub memory: Option<Memory>,
    pub reads: Vec<ReadRow>,
    pub ratios: Vec<RatioRow>,
    pub writes: Vec<WriteRow>,
    pub show_all: Vec<ShowRow>,
}

/// The library overhead experiment: a run per write mode, on the same server.
pub struct Overhead(pub Vec<OverheadRun>);

/// One run of the overhead experiment.
pub struct OverheadRun {
    pub mode: WriteMode,
    /// Whether the store was told the mode (`StoreOptions::mode`) rather than detecting it.
    pub forced: bool,
    /// A row per operation.
    pub rows: Vec<overhead::Row>,
}

/// The round trips experiment: per server (a name), the commands of each operation.
pub struct Trips(pub Vec<(String, Vec<trips::Calls>)>);

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or_else(
            || "unknown".into(),
            |kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0),
        );
    format!(
        "{cores} cores ({cpu}), {memory} memory, {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// The 1, 5 and 15 minute load averages: other work on a shared machine shows here.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

impl Report {
    pub async fn new(
        client: &mongodb::Client,
        server: &MongoServer,
        args: Vec<String>,
    ) -> Res<Report> {
        let admin = client.database("admin");
        let info = admin.run_command(doc! { "buildInfo": 1 }).await?;
        let status = admin.run_command(doc! { "serverStatus": 1 }).await?;
        let cache = status
            .get_document("wiredTiger")
            .and_then(|w| w.get_document("cache"))
            .ok()
            .and_then(|c: &Document| c.get("maximum bytes configured"))
            .and_then(|b| match b {
                bson::Bson::Int64(n) => Some(*n as f64),
                bson::Bson::Int32(n) => Some(f64::from(*n)),
                bson::Bson::Double(n) => Some(*n),
                _ => None,
            })
            .map_or_else(|| "unknown".into(), |b| format!("{:.0} MiB", b / 1048576.0));
        let topology = match (server.topology(), server.is_external()) {
            (subset::testkit::Topology::Standalone, false) => {
                "standalone, started by the benchmark"
            }
            (_, false) => "single-node replica set, started by the benchmark",
            (subset::testkit::Topology::Standalone, true) => "standalone at MONGODB_URI",
            (_, true) => "replica set or sharded cluster at MONGODB_URI",
        };
        Ok(Report {
            date: bson::DateTime::now()
                .try_to_rfc3339_string()
                .unwrap_or_default(),
            machine: machine(),
            load_start: load_average(),
            server_version: info.get_str("version").unwrap_or("unknown").to_owned(),
            topology: topology.to_owned(),
            cache,
            args,
            sections: Vec::new(),
        })
    }

    fn command(&self) -> String {
        let mut c = "cargo run --release -p subset-bench --".to_owned();
        for a in &self.args {
            c.push(' ');
            c.push_str(a);
        }
        c
    }

    /// Adds the section of an experiment that ran.
    pub fn add(&mut self, section: impl Section + 'static) {
        self.sections.push(Box::new(section));
    }

    pub fn markdown(&self, analysis: &str) -> String {
        let mut m = String::new();
        let w = &mut m;
        let _ = writeln!(w, "# Benchmark results\n");
        let _ = writeln!(
            w,
            "Generated by `subset-bench`; see [README.md](README.md) for what each experiment does.\n"
        );
        let _ = writeln!(w, "- date: {}", self.date);
        let _ = writeln!(w, "- machine: {}", self.machine);
        let _ = writeln!(
            w,
            "- load average (1, 5, 15 min): {} at the start, {} at the end",
            self.load_start,
            load_average()
        );
        let _ = writeln!(
            w,
            "- server: mongod {}, {}, WiredTiger cache {}",
            self.server_version, self.topology, self.cache
        );
        let _ = writeln!(w, "- command: `{}`\n", self.command());

        let mut sections: Vec<&dyn Section> = self.sections.iter().map(|s| &**s).collect();
        sections.sort_by_key(|s| s.number());
        for section in sections {
            section.markdown(w);
        }

        let _ = writeln!(w, "{ANALYSIS}");
        m.push_str(analysis);
        m
    }

    /// Writes `results.md` (keeping its hand-written analysis) and the files its sections link
    /// to.
    pub fn write(&self, dir: &Path) -> Res<()> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("results.md");
        let analysis = std::fs::read_to_string(&path)
            .ok()
            .and_then(|old| {
                old.split_once(ANALYSIS)
                    .map(|(_, rest)| rest.trim_start_matches('\n').to_owned())
            })
            .unwrap_or_default();
        std::fs::write(&path, self.markdown(&analysis))?;
        for section in &self.sections {
            section.files(dir)?;
        }
        Ok(())
    }
}

impl WorkingSet {
    fn ratio_of(&self, other: Layout, popularity: &str, tasks: usize) -> Option<Spread> {
        self.ratios
            .iter()
            .find(|r| r.other == other && r.popularity == popularity && r.tasks == tasks)
            .map(|r| r.ratio)
    }

    fn memory_line(&self) -> String {
        match &self.memory {
            None => "Memory: not limited (no `--memory-limit`): the operating system's page cache \
                     can hold the collection files, so a WiredTiger cache miss is a memory copy."
                .to_owned(),
            Some(Memory::Cannot { limit, reason }) => format!(
                "Memory: **not limited**: `--memory-limit {}` was asked for, but {reason}.",
                bytes(*limit as f64)
            ),
            Some(Memory::Confined {
                limit,
                cgroup,
                peak_reset,
                usage,
            }) => {
                let or_unknown =
                    |b: Option<u64>| b.map_or("unknown".to_owned(), |b| bytes(b as f64));
                format!(
                    "Memory: mongod confined to **{}** ({cgroup}): the data was written without \
                     the limit, then the server was stopped, the cgroup's page cache dropped, and \
                     the server started again, cold, under the limit. Peak usage {}{}; at the end \
                     {} anonymous (the WiredTiger cache and the rest of the process), {} page \
                     cache; {} OOM kills.",
                    bytes(*limit as f64),
                    or_unknown(usage.peak),
                    if *peak_reset {
                        " under the limit"
                    } else {
                        " (including the load: the kernel cannot reset the peak)"
                    },
                    or_unknown(usage.anon),
                    or_unknown(usage.file),
                    usage
                        .oom_kills
                        .map_or("unknown".to_owned(), |n| n.to_string()),
                )
            }
        }
    }

    fn reads_of(&self, layout: Layout, popularity: &str, tasks: usize) -> Option<&ReadRow> {
        self.reads
            .iter()
            .find(|r| r.layout == layout && r.popularity == popularity && r.tasks == tasks)
    }

    /// (popularity, tasks) pairs in measurement order.
    fn configs(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for r in &self.reads {
            if !out.iter().any(|(p, t)| *p == r.popularity && *t == r.tasks) {
                out.push((r.popularity.clone(), r.tasks));
            }
        }
        out
    }

    /// Grouped bars: pages per second per layout, for each (popularity, tasks), with min–max.
    fn chart(&self, path: &Path) -> Res<()> {
        let configs = self.configs();
        let top = self.reads.iter().map(|r| r.ops.max).fold(0.0_f64, f64::max) * 1.15;
        let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Product-page reads per second (median, min–max whiskers)",
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(0.0..configs.len() as f64, 0.0..top.max(1.0))?;
        let labels = configs.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(configs.len() * 2 + 1)
            .x_label_formatter(&move |x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 1e-6 {
                    labels
                        .get(i)
                        .map(|(p, t)| format!("{p}, {t} task{}", if *t == 1 { "" } else { "s" }))
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .max_light_lines(0)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc("pages/s")
            .label_style(("sans-serif", 14))
            .draw()?;
        let colors = [
            RGBColor(0x8c, 0x2d, 0x2d),
            RGBColor(0xd6, 0x5f, 0x5f),
            RGBColor(0x2e, 0x86, 0x4b),
            RGBColor(0x4a, 0x78, 0xc2),
            RGBColor(0xc2, 0x9a, 0x2e),
        ];
        let width = 0.8 / Layout::ALL.len() as f64;
        for (l, layout) in Layout::ALL.into_iter().enumerate() {
            let color = colors[l % colors.len()];
            let bars: Vec<(f64, &ReadRow)> = configs
                .iter()
                .enumerate()
                .filter_map(|(c, (p, t))| {
                    self.reads_of(layout, p, *t)
                        .map(|r| (c as f64 + 0.1 + width * l as f64, r))
                })
                .collect();
            chart
                .draw_series(bars.iter().map(|(x, r)| {
                    Rectangle::new(
                        [(*x, 0.0), (*x + width * 0.9, r.ops.median)],
                        color.filled(),
                    )
                }))?
                .label(layout.name().replace('`', ""))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
                });
            chart.draw_series(bars.iter().map(|(x, r)| {
                let mid = *x + width * 0.45;
                PathElement::new(
                    vec![(mid, r.ops.min), (mid, r.ops.max)],
                    BLACK.stroke_width(1),
                )
            }))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        root.present()?;
        Ok(())
    }
}

/// `## 1. Working set`, and its chart.
impl Section for WorkingSet {
    fn number(&self) -> u32 {
        1
    }

    fn markdown(&self, w: &mut String) {
        let d = &self.data;
        let _ = writeln!(w, "## 1. Working set\n");
        let _ = writeln!(
            w,
            "{} products with {}–{} reviews each ({} reviews){}.\n",
            d.products,
            d.min_reviews,
            d.max_reviews,
            d.reviews,
            d.load_time.map_or_else(
                || ", reused from an earlier run".to_owned(),
                |t| format!(", written in {:.0} s", t.as_secs_f64())
            )
        );
        let _ = writeln!(w, "{}\n", self.memory_line());
        let _ = writeln!(w, "### Collection sizes\n");
        let _ = writeln!(
            w,
            "| collection | layout | documents | avg document | data size | on disk | indexes |"
        );
        let _ = writeln!(w, "|---|---|--:|--:|--:|--:|--:|");
        for s in &self.sizes {
            let layout = match s.name {
                crate::data::EMBEDDED => "fully embedded",
                crate::data::SUBSET => "subset (parents)",
                crate::data::REFERENCED => "referenced (parents)",
                _ => "subset and referenced (children)",
            };
            let _ = writeln!(
                w,
                "| `{}` | {} | {} | {} | {} | {} | {} |",
                s.name,
                layout,
                s.count,
                bytes(s.avg_obj_size),
                bytes(s.size),
                bytes(s.storage_size),
                bytes(s.index_size)
            );
        }
        let _ = writeln!(w);

        let configs = self.configs();
        if !configs.is_empty() {
            let _ = writeln!(w, "### Product-page reads\n");
            let _ = writeln!(
                w,
                "Throughput in pages per second, median (min–max) of the rounds; latencies are the \
                 median over rounds of each round's percentile.\n"
            );
            let _ = writeln!(w, "![product-page throughput](working-set.svg)\n");
            let disk = self.reads.iter().any(|r| r.disk_kb.median.is_finite());
            let _ = writeln!(
                w,
                "| popularity | tasks | layout | pages/s | p50 ms | p99 ms | KB read into cache per page |{}",
                if disk { " KB read from disk per page |" } else { "" }
            );
            let _ = writeln!(
                w,
                "|---|--:|---|--:|--:|--:|--:|{}",
                if disk { "--:|" } else { "" }
            );
            for (p, t) in &configs {
                for layout in Layout::ALL {
                    if let Some(r) = self.reads_of(layout, p, *t) {
                        let _ = write!(
                            w,
                            "| {p} | {t} | {} | {:.0} ({:.0}–{:.0}) | {:.2} | {:.2} | {:.1} |",
                            layout.name(),
                            r.ops.median,
                            r.ops.min,
                            r.ops.max,
                            r.p50.median,
                            r.p99.median,
                            r.cache_kb.median
                        );
                        if disk {
                            let _ = write!(w, " {:.1} |", r.disk_kb.median);
                        }
                        let _ = writeln!(w);
                    }
                }
            }
            let _ = writeln!(w);
            let _ = writeln!(
                w,
                "Throughput of the subset layout over each other layout: the median (min–max) of \
                 the ratios within each round (the five layouts of a configuration run back to back).\n"
            );
            let _ = writeln!(
                w,
                "| popularity | tasks | / fully embedded, whole | / fully embedded, `$slice` | / two queries | / `$lookup` |"
            );
            let _ = writeln!(w, "|---|--:|--:|--:|--:|--:|");
            for (p, t) in &configs {
                let ratio = |other| match self.ratio_of(other, p, *t) {
                    Some(r) => format!("{:.2} ({:.2}–{:.2})", r.median, r.min, r.max),
                    None => "–".into(),
                };
                let _ = writeln!(
                    w,
                    "| {p} | {t} | {} | {} | {} | {} |",
                    ratio(Layout::EmbeddedWhole),
                    ratio(Layout::Embedded),
                    ratio(Layout::TwoQuery),
                    ratio(Layout::Lookup)
                );
            }
            let _ = writeln!(w, "| target | 4 | ≥ 4 | – | ≥ 2.5 | ≥ 2 |\n");
            let wide: Vec<String> = self
                .ratios
                .iter()
                .filter(|r| !within(&r.ratio, 0.25))
                .map(|r| format!("{}, {} tasks, / {}", r.popularity, r.tasks, r.other.name()))
                .collect();
            if !self.ratios.is_empty() {
                if wide.is_empty() {
                    let _ = writeln!(w, "Every ratio's range is within ±25 % of its median.\n");
                } else {
                    let _ = writeln!(
                        w,
                        "Ranges wider than ±25 % of their median: {}.\n",
                        wide.join("; ")
                    );
                }
            }
        }

        if !self.writes.is_empty() {
            let _ = writeln!(w, "### Writing one new review\n");
            let _ = writeln!(w, "One task, uniformly random products.\n");
            let _ = writeln!(w, "| layout | writes | p50 ms | p99 ms | writes/s |");
            let _ = writeln!(w, "|---|--:|--:|--:|--:|");
            for r in &self.writes {
                let _ = writeln!(
                    w,
                    "| {} | {} | {:.2} | {:.2} | {:.0} |",
                    r.name, r.n, r.p50, r.p99, r.ops
                );
            }
            let _ = writeln!(w);
        }

        if !self.show_all.is_empty() {
            let _ = writeln!(w, "### Show all reviews (pages of 20)\n");
            let _ = writeln!(
                w,
                "Every review of a random product; fully embedded pages are `$slice` offsets into \
                 the array, the others keyset pages on the review collection (the subset's through \
                 `Children::page`, the referenced layout's by hand).\n"
            );
            let _ = writeln!(
                w,
                "| layout | products | pages | ms per product, p50 | max | ms per page |"
            );
            let _ = writeln!(w, "|---|--:|--:|--:|--:|--:|");
            for r in &self.show_all {
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {:.1} | {:.1} | {:.2} |",
                    r.layout.name(),
                    r.products,
                    r.pages,
                    r.p50,
                    r.max,
                    r.per_page
                );
            }
            let _ = writeln!(w);
        }
    }

    fn files(&self, dir: &Path) -> Res<()> {
        if !self.reads.is_empty() {
            self.chart(&dir.join("working-set.svg"))?;
        }
        Ok(())
    }
}

/// `## 2. Library overhead`.
impl Section for Overhead {
    fn number(&self) -> u32 {
        2
    }

    fn markdown(&self, w: &mut String) {
        let _ = writeln!(w, "## 2. Library overhead\n");
        let _ = writeln!(
            w,
            "Median latency of each operation through the library and written by hand with the \
             driver, interleaved A/B, once per write mode on the same server; the writes by hand \
             are in the same mode as the library's (in transactions: the update and the insert \
             in one, through the driver's `and_run`; ordered: the insert, then the update). \
             ratio is library over hand, the range the ratio within each fifth of the run.\n"
        );
        for run in &self.0 {
            let _ = writeln!(
                w,
                "### {}{}\n",
                match run.mode {
                    WriteMode::Transactional => "Writes in transactions",
                    WriteMode::Ordered => "Ordered writes",
                },
                if run.forced {
                    " (forced: `StoreOptions::mode`)"
                } else {
                    " (detected)"
                }
            );
            let _ = writeln!(
                w,
                "| operation | iterations | library p50 ms | hand p50 ms | ratio | range |"
            );
            let _ = writeln!(w, "|---|--:|--:|--:|--:|--:|");
            for r in &run.rows {
                let _ = writeln!(
                    w,
                    "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3}–{:.3} |",
                    r.op.name(),
                    r.iterations,
                    r.library_p50,
                    r.hand_p50,
                    r.ratio,
                    r.block_min,
                    r.block_max
                );
            }
            let _ = writeln!(w);
            let _ = writeln!(
                w,
                "On the wire, medians of {} more calls per side on a second client with the \
                 driver's command monitoring on (the timed calls above run without it, whose \
                 events cost the client time): commands per call, BSON bytes sent and \
                 received, latency, the time spent waiting on replies (the driver's command \
                 durations, summed) and the rest (the client's own work); then the waiting \
                 by command, median ms each, of the calls that sent the most common sequence.\n",
                overhead::WIRE_CALLS
            );
            let _ = writeln!(
                w,
                "| operation | side | commands | sent B | received B | p50 ms | waiting ms | \
                 client ms | waiting by command, ms |"
            );
            let _ = writeln!(w, "|---|---|--:|--:|--:|--:|--:|--:|---|");
            for r in &run.rows {
                for (side, t) in [("library", &r.library_wire), ("hand", &r.hand_wire)] {
                    let split: Vec<String> = t
                        .split
                        .iter()
                        .map(|(name, ms)| format!("`{name}` {ms:.3}"))
                        .collect();
                    let _ = writeln!(
                        w,
                        "| {} | {side} | {:.0} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {} |",
                        r.op.name(),
                        t.commands,
                        t.sent,
                        t.received,
                        t.p50,
                        t.waited,
                        t.client,
                        split.join(" · ")
                    );
                }
            }
            let _ = writeln!(w);
        }
        let _ = writeln!(w, "Target: ratio ≤ 1.03.\n");
    }
}

/// `## 3. Round trips`.
impl Section for Trips {
    fn number(&self) -> u32 {
        3
    }

    fn markdown(&self, w: &mut String) {
        let _ = writeln!(w, "## 3. Round trips\n");
        let _ = writeln!(
            w,
            "Commands sent per operation, from the driver's command monitoring (the driver's own \
             `hello`s excluded). Each operation runs twice on the same store and parent: the \
             second call is the steady state a running service sees, and the counts \
             `tests/it/round_trips.rs` asserts; the first call, on a fresh store, adds what the \
             store reads once.\n"
        );
        let _ = write!(w, "| operation |");
        for (name, _) in &self.0 {
            let _ = write!(w, " {name} | {name}, first call |");
        }
        let _ = write!(w, "\n|---|");
        for _ in &self.0 {
            let _ = write!(w, "---|---|");
        }
        let _ = writeln!(w);
        let commands = |c: &[String]| format!("{}: {}", c.len(), c.join(", "));
        for (i, op) in trips::OPS.iter().enumerate() {
            let _ = write!(w, "| {op} |");
            for (_, calls) in &self.0 {
                match calls.get(i) {
                    Some(c) => {
                        let _ = write!(w, " {} | {} |", commands(&c.steady), commands(&c.first));
                    }
                    None => {
                        let _ = write!(w, " – | – |");
                    }
                }
            }
            let _ = writeln!(w);
        }
        let _ = writeln!(w);
    }
}

/// `## 4. Batching`.
impl Section for batching::Result {
    fn number(&self) -> u32 {
        4
    }

    fn markdown(&self, w: &mut String) {
        let b = self;
        let _ = writeln!(w, "## 4. Batching\n");
        let _ = writeln!(
            w,
            "{} reviews over {} products, one task, median (min–max) of the rounds.\n",
            batching::PRODUCTS * batching::REVIEWS_EACH,
            batching::PRODUCTS
        );
        let _ = writeln!(w, "| way | reviews/s |");
        let _ = writeln!(w, "|---|--:|");
        let _ = writeln!(
            w,
            "| one `push` per review | {:.0} ({:.0}–{:.0}) |",
            b.one_by_one.median, b.one_by_one.min, b.one_by_one.max
        );
        let _ = writeln!(
            w,
            "| `push_many`, batches of {} | {:.0} ({:.0}–{:.0}) |",
            b.batch, b.batched.median, b.batched.min, b.batched.max
        );
        let _ = writeln!(
            w,
            "\nRatio: **{:.1}x** ({:.1}–{:.1}); target ≥ 5x.\n",
            b.ratio.median, b.ratio.min, b.ratio.max
        );
    }
}

/// `## 5. Hot parent`.
impl Section for hot_parent::Result {
    fn number(&self) -> u32 {
        5
    }

    fn markdown(&self, w: &mut String) {
        let h = self;
        let _ = writeln!(w, "## 5. Hot parent\n");
        let _ = writeln!(
            w,
            "Tasks pushing new reviews (dated now) for {} s per configuration after {} s of \
             warm-up, {} rounds (the write modes alternate which goes first; the configurations \
             keep their order); the experiment took {:.0} s. Each configuration runs twice, back \
             to back (which first alternating between rounds), with the same tasks, seeds and \
             parent choices on parents of its own: through the library (folding {}), and written \
             by hand with the driver, the same recipe as the overhead experiment's (in \
             transactions the update and the insert in one transaction, retried on \
             `TransientTransactionError` by the driver's `and_run` with its backoff; ordered, the \
             insert, then the update; nothing coordinating the writers). The multi-process configurations \
             run copies of the benchmark in worker mode against the same server, started at \
             once. In the Zipf mix each push goes to one of {} parents drawn with exponent {} \
             (the same order of parents in every process){}. pushes/s is the median (min–max) of \
             the rounds, p50 and p99 the median of each round's percentile, max the slowest push \
             of any round. Commits and aborts per push: the server's `transactions.totalCommitted` \
             and `totalAborted` (`serverStatus`) over the run, warm-up included, over the pushes \
             acknowledged in it, median (min–max) of the rounds. Retries per push are not \
             reported: the library counts them nowhere (each is a `tracing` debug event); each \
             retry of a whole transaction follows an abort (only a commit whose result is \
             unknown is retried without one).\n",
            h.seconds,
            h.warmup,
            h.rounds,
            h.total_secs,
            if h.folding { "on" } else { "off" },
            hot_parent::thousands(hot_parent::ZIPF_PARENTS as u64),
            hot_parent::ZIPF_EXPONENT,
            match &h.zipf_hottest {
                Some(s) => format!(
                    "; the hottest parent got {:.1} % ({:.1}–{:.1}) of a run's pushes",
                    s.median * 100.0,
                    s.min * 100.0,
                    s.max * 100.0
                ),
                None => String::new(),
            }
        );
        let _ = writeln!(
            w,
            "| write mode | pushes from | writer | measured | pushes/s | p50 ms | p99 ms | max ms | commits per push | aborts per push |"
        );
        let _ = writeln!(w, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|");
        for r in &h.rows {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {:.0} ({:.0}–{:.0}) | {:.2} | {:.2} | {:.1} | {:.3} ({:.3}–{:.3}) | {:.3} ({:.3}–{:.3}) |",
                mode_label(r.mode),
                r.shape.name(),
                r.writer.name(),
                r.pushes,
                r.rate.median,
                r.rate.min,
                r.rate.max,
                r.p50.median,
                r.p99.median,
                r.max,
                r.commits.median,
                r.commits.min,
                r.commits.max,
                r.aborts.median,
                r.aborts.min,
                r.aborts.max
            );
        }
        if let Some(why) = &h.processes_skipped {
            let _ = writeln!(w, "\nThe multi-process configurations did not run: {why}.");
        }
        if !h.against.is_empty() {
            let _ = writeln!(
                w,
                "\nThe library against the same pushes written by hand, per configuration and \
                 mode: pushes/s median (min–max) of the rounds; library / hand the median \
                 (min–max) of the per-round ratios (above 1 the library pushes more per second; \
                 for p99, below 1 its slow pushes are faster); worst push the slowest of any \
                 round; commits per push the library's, in transactions (the writes by hand \
                 commit once per push).\n"
            );
            let _ = writeln!(
                w,
                "| write mode | pushes from | pushes/s, library | pushes/s, hand | pushes/s, library / hand | p99 ms, library | p99 ms, hand | p99, library / hand | worst push ms, library | worst push ms, hand | commits per push, library |"
            );
            let _ = writeln!(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
            for a in &h.against {
                let (Some(l), Some(o)) = (
                    h.row(a.mode, a.shape, hot_parent::Writer::Library),
                    h.row(a.mode, a.shape, hot_parent::Writer::Hand),
                ) else {
                    continue;
                };
                let _ = writeln!(
                    w,
                    "| {} | {} | {:.0} ({:.0}–{:.0}) | {:.0} ({:.0}–{:.0}) | {:.2} ({:.2}–{:.2}) | {:.2} | {:.2} | {:.2} ({:.2}–{:.2}) | {:.1} | {:.1} | {} |",
                    mode_label(a.mode),
                    a.shape.name(),
                    l.rate.median,
                    l.rate.min,
                    l.rate.max,
                    o.rate.median,
                    o.rate.min,
                    o.rate.max,
                    a.rate.median,
                    a.rate.min,
                    a.rate.max,
                    l.p99.median,
                    o.p99.median,
                    a.p99.median,
                    a.p99.min,
                    a.p99.max,
                    l.max,
                    o.max,
                    match a.mode {
                        WriteMode::Transactional => format!(
                            "{:.3} ({:.3}–{:.3})",
                            l.commits.median, l.commits.min, l.commits.max
                        ),
                        WriteMode::Ordered => "–".to_owned(),
                    }
                );
            }
        }
        if let Some(v) = h.versus(hot_parent::Shape::OneParent) {
            let _ = writeln!(
                w,
                "\nThe library, one parent, one process, transactions over ordered writes, per round: pushes/s \
                 **{:.2}** ({:.2}–{:.2}), target ≥ 0.8; p99 **{:.2}** ({:.2}–{:.2}), target ≤ 3.",
                v.rate.median, v.rate.min, v.rate.max, v.p99.median, v.p99.min, v.p99.max
            );
        }
        let across: Vec<&hot_parent::Versus> = h
            .versus
            .iter()
            .filter(|v| v.shape.processes().is_some())
            .collect();
        if !across.is_empty() {
            let _ = writeln!(
                w,
                "\nThe library across processes, transactions against ordered writes in the same run: the \
                 median (min–max) of the per-round ratios, and the slowest push of any round. \
                 Target: pushes/s ≥ 1× ordered, p99 ≤ 1.5× ordered, worst push ≤ 200 ms.\n"
            );
            let _ = writeln!(
                w,
                "| pushes from | pushes/s, transactions / ordered | p99, transactions / ordered | worst push ms, transactions | worst push ms, ordered | met? |"
            );
            let _ = writeln!(w, "|---|--:|--:|--:|--:|---|");
            for v in across {
                // A figure that is not a number misses its target.
                let missed: Vec<&str> = [
                    (v.rate.median >= 1.0, "pushes/s"),
                    (v.p99.median <= 1.5, "p99"),
                    (v.max.0 <= 200.0, "worst push"),
                ]
                .into_iter()
                .filter_map(|(met, what)| (!met).then_some(what))
                .collect();
                let _ = writeln!(
                    w,
                    "| {} | {:.2} ({:.2}–{:.2}) | {:.2} ({:.2}–{:.2}) | {:.1} | {:.1} | {} |",
                    v.shape.name(),
                    v.rate.median,
                    v.rate.min,
                    v.rate.max,
                    v.p99.median,
                    v.p99.min,
                    v.p99.max,
                    v.max.0,
                    v.max.1,
                    if missed.is_empty() {
                        "yes".to_owned()
                    } else {
                        format!("**no**: {}", missed.join(", "))
                    }
                );
            }
        }
        let _ = writeln!(
            w,
            "\nChecked after every run ({} runs), with the driver alone: {} acknowledged pushes \
             (warm-up included), each stored once in the review collection under its parent, and \
             no other review stored; every parent's count equal to the pushes acknowledged to it, \
             its embedded `_id`s distinct and min(10, pushes) many, the library's parents and the \
             hand-written ones alike. Then `Children::check` on every parent a run touched ({} checks): each subset the top 10 of the review collection, in \
             order, with the right count. All clean (a failed check stops the experiment).\n",
            h.checked_runs,
            hot_parent::thousands(h.checked_pushes),
            h.checked_parents
        );
    }
}

fn mode_label(mode: WriteMode) -> &'static str {
    match mode {
        WriteMode::Transactional => "transactions",
        WriteMode::Ordered => "ordered",
    }
}

/// `## 6. Push cost by `keep`.
impl Section for push_cost::Result {
    fn number(&self) -> u32 {
        6
    }

    fn markdown(&self, w: &mut String) {
        let k = self;
        let _ = writeln!(w, "## 6. Push cost by `keep`\n");
        let _ = writeln!(
            w,
            "One task, transactions; {} pushes of each kind per size and round into full subsets \
             (the kinds alternate), {} rounds (the sizes rotate which goes first). In order: a \
             review newer than every embedded one (from keep 32 up `$position: 0`, no `$sort`). \
             Out of order: one dated inside the embedded span (from keep 32 up the guarded head \
             update misses and the `$sort` update follows; below, both kinds are the `$sort` \
             update alone). Median (min–max) of the rounds' medians.\n",
            k.pushes, k.rounds
        );
        let _ = writeln!(
            w,
            "| keep | embedded array | in order p50 ms | p99 ms | out of order p50 ms | p99 ms |"
        );
        let _ = writeln!(w, "|--:|--:|--:|--:|--:|--:|");
        for r in &k.rows {
            let _ = writeln!(
                w,
                "| {} | {} | {:.2} ({:.2}–{:.2}) | {:.2} | {:.2} ({:.2}–{:.2}) | {:.2} |",
                r.keep,
                bytes(r.array_bytes),
                r.head.median,
                r.head.min,
                r.head.max,
                r.head_p99.median,
                r.sorted.median,
                r.sorted.min,
                r.sorted.max,
                r.sorted_p99.median
            );
        }
        let _ = writeln!(
            w,
            "\nIn order, keep 1000 over keep 5, per round: **{:.2}** ({:.2}–{:.2}); target ≤ 1.5.\n",
            k.head_ratio.median, k.head_ratio.min, k.head_ratio.max
        );
        let a = &k.append;
        let keep = push_cost::APPEND_KEEP;
        let _ = writeln!(
            w,
            "Beside them, at keep {keep}, a layout written by hand with the driver: in-order \
             reviews appended at the tail with a plain `$push` (no `$sort`, `$position` or \
             `$slice`), and the array trimmed to the {keep} newest (a `$push` with `$slice`) by \
             the push that would make it {}: it holds {keep}–{} children ({}–{} embedded after \
             the rounds), oldest first, and a read would take the last {keep}. Each push is a \
             transaction (snapshot read concern, majority write concern), as the library's: the \
             child inserted, then the parent updated on condition that its array is not full, \
             else the trimming update; the child collection has the library's indexes. The \
             parents start at random lengths in {keep}..{}, so pushes meet trims at the steady \
             state's rate ({} trims among the {} measured pushes). The trim is also measured \
             alone, on 20 other parents: per round, each filled to {} (untimed), then one push. \
             Ratios to the library's in-order p50 at keep 5, per round, median (min–max).\n",
            2 * keep,
            2 * keep - 1,
            bytes(a.array_bytes.0),
            bytes(a.array_bytes.1),
            2 * keep,
            a.trims_in_pushes,
            k.pushes * k.rounds,
            2 * keep - 1
        );
        let _ = writeln!(
            w,
            "| layout at keep {keep} | push p50 ms | p99 ms | / keep 5, p50 |"
        );
        let _ = writeln!(w, "|---|--:|--:|--:|");
        if let Some(r) = k.rows.iter().find(|r| r.keep == keep) {
            let _ = writeln!(
                w,
                "| library, in order (`$position: 0`, `$slice`) | {:.2} ({:.2}–{:.2}) | {:.2} | {:.2} ({:.2}–{:.2}) |",
                r.head.median,
                r.head.min,
                r.head.max,
                r.head_p99.median,
                k.head_ratio.median,
                k.head_ratio.min,
                k.head_ratio.max
            );
        }
        let _ = writeln!(
            w,
            "| by hand, plain `$push`, trimmed every {keep} pushes | {:.2} ({:.2}–{:.2}) | {:.2} | {:.2} ({:.2}–{:.2}) |",
            a.push.median,
            a.push.min,
            a.push.max,
            a.push_p99.median,
            a.ratio.median,
            a.ratio.min,
            a.ratio.max
        );
        let _ = writeln!(
            w,
            "| by hand, the trimming push alone | {:.2} ({:.2}–{:.2}) | – | – |",
            a.trim.median, a.trim.min, a.trim.max
        );
        let _ = writeln!(
            w,
            "| by hand, {} plain pushes and 1 trim, per push | – | – | {:.2} ({:.2}–{:.2}) |\n",
            keep - 1,
            a.amortized_ratio.median,
            a.amortized_ratio.min,
            a.amortized_ratio.max
        );
    }
}

/// `## 7. Preview subsets`.
impl Section for previews::Result {
    fn number(&self) -> u32 {
        7
    }

    fn markdown(&self, w: &mut String) {
        let p = self;
        let _ = writeln!(w, "## 7. Preview subsets\n");
        let _ = writeln!(
            w,
            "{} products with {} reviews each (comments of {}+ characters), written twice through \
             the library in {:.0} s: parents embedding their 10 latest reviews whole, and parents \
             embedding previews of them (`_id`, `author`, `rating`, `date`), each layout with its \
             own parent and child collections. A whole review embeds in **{:.0} B** on average, \
             a preview in **{:.0} B**; a stored child (review and parent key) is {:.0} B in both \
             layouts. Sizes are the mean (or median) `$bsonSize` after the load. The experiment \
             took {:.0} s.\n",
            previews::PRODUCTS,
            previews::REVIEWS_EACH,
            previews::COMMENT_CHARS,
            p.load_secs,
            p.whole.element_mean,
            p.preview.element_mean,
            p.whole.child_mean,
            p.total_secs
        );
        let _ = writeln!(
            w,
            "Reads: `Store::get` of uniformly random products by {} tasks, {} s of warm-up then {} s \
             measured, {} rounds with the layouts back to back (alternating which goes first); \
             pages/s is the median (min–max) of the rounds, p50 and p99 the median of each \
             round's percentile. Pushes: one task, {} new reviews per layout and round, each \
             newer than every embedded one, into full subsets (keep 10: the `$sort` update), the \
             same review to both layouts in turn.\n",
            previews::TASKS,
            p.warmup,
            p.seconds,
            p.rounds,
            p.pushes
        );
        let _ = writeln!(
            w,
            "| embedded | parent, mean | parent, median | pages/s | read p50 ms | read p99 ms | push p50 ms | push p99 ms |"
        );
        let _ = writeln!(w, "|---|--:|--:|--:|--:|--:|--:|--:|");
        for r in [&p.whole, &p.preview] {
            let _ = writeln!(
                w,
                "| {} | {:.0} B | {:.0} B | {:.0} ({:.0}–{:.0}) | {:.2} | {:.2} | {:.2} ({:.2}–{:.2}) | {:.2} |",
                r.name,
                r.parent_mean,
                r.parent_median,
                r.reads.median,
                r.reads.min,
                r.reads.max,
                r.read_p50.median,
                r.read_p99.median,
                r.push_p50.median,
                r.push_p50.min,
                r.push_p50.max,
                r.push_p99.median
            );
        }
        let _ = writeln!(
            w,
            "\nMean parent, whole over preview: **{:.2}x**. Per round, preview over whole: pages/s \
             **{:.2}** ({:.2}–{:.2}); push p50 **{:.2}** ({:.2}–{:.2}).\n",
            p.bytes_ratio,
            p.read_ratio.median,
            p.read_ratio.min,
            p.read_ratio.max,
            p.push_ratio.median,
            p.push_ratio.min,
            p.push_ratio.max
        );
    }
}

/// `## 8. Helpful votes`.
impl Section for votes::Result {
    fn number(&self) -> u32 {
        8
    }

    fn markdown(&self, w: &mut String) {
        let v = self;
        let _ = writeln!(w, "## 8. Helpful votes\n");
        let _ = writeln!(
            w,
            "{} tasks each add 1 to the `helpful` count of reviews, back to back, for {} s per \
             configuration after {} s of warm-up, {} rounds (the configurations of one target run \
             back to back; which goes first rotates); every run starts from freshly written \
             products. Products embed their {} latest reviews whole (`sort = \"date desc\"`: a \
             vote cannot change the rank) or their {} most helpful (`sort = \"helpful desc, date \
             desc\"`: a vote may re-rank, and the library re-ranks the view in place). Targets: the \
             newest review of one product, embedded; one of the {} reviews of one product, at \
             random ({} of them embedded); the newest review of one of {} products ({} reviews \
             each), at random.\n",
            votes::TASKS,
            v.seconds,
            v.warmup,
            v.rounds,
            votes::KEEP,
            votes::KEEP,
            votes::CHILDREN,
            votes::KEEP,
            votes::CHILDREN,
            votes::REVIEWS_EACH
        );
        let _ = writeln!(
            w,
            "votes/s is the median (min–max) of the rounds, p50 and p99 the median of each round's \
             percentile, / `$inc` the median (min–max) of the per-round ratio to the hand-written \
             `$inc` on the same targets. Votes: those that returned without error, warm-up \
             included, all rounds; lost: those minus what the stored `helpful` counts grew by. \
             Stale copies: per round, embedded reviews that differ from the review collection at \
             the end, or are missing from their view (`Children::check`), \"+ order\" when a view \
             was also out of order.\n"
        );
        let _ = writeln!(
            w,
            "| votes to | written by | view | votes/s | p50 ms | p99 ms | / `$inc` | votes | lost | stale copies |"
        );
        let _ = writeln!(w, "|---|---|---|--:|--:|--:|--:|--:|--:|---|");
        for r in &v.rows {
            let ratio = r.over_inc.map_or_else(
                || "1".to_owned(),
                |s| format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max),
            );
            let stale: Vec<String> = r
                .stale
                .iter()
                .map(|(n, misordered)| {
                    if *misordered {
                        format!("{n} + order")
                    } else {
                        n.to_string()
                    }
                })
                .collect();
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.0} ({:.0}–{:.0}) | {:.2} | {:.2} | {} | {} | {} | {} |",
                r.targets.name(),
                r.variant.way_name(),
                r.variant.view_name(),
                r.rate.median,
                r.rate.min,
                r.rate.max,
                r.p50.median,
                r.p99.median,
                ratio,
                r.votes,
                r.lost,
                stale.join(", ")
            );
        }
        if let Some(why) = &v.no_transactions {
            let _ = writeln!(w, "\nThe rows in transactions did not run: {why}.");
        }
        let _ = writeln!(
            w,
            "\nTargets: the library loses no vote, leaves no copy stale and reaches, of the \
             hand-written `$inc`'s votes/s, ≥ 0.8 in transactions and ≥ 0.5 ordered on the \
             latest-5 view; ≥ 0.5 and ≥ 0.3 on the most-helpful-5 view.\n"
        );
        let _ = writeln!(
            w,
            "| votes to | view | write mode | lost | stale | / `$inc` | target | met? |"
        );
        let _ = writeln!(w, "|---|---|---|--:|--:|--:|--:|---|");
        for r in v
            .rows
            .iter()
            .filter(|r| matches!(r.variant.way, votes::Way::Library(_)))
        {
            let Some(ratio) = r.over_inc else { continue };
            let transactions = r.variant.way == votes::Way::Library(WriteMode::Transactional);
            let mode = match transactions {
                true => "transactions",
                false => "ordered writes",
            };
            let target = match (r.variant.view == votes::View::Latest, transactions) {
                (true, true) => 0.8,
                (true, false) | (false, true) => 0.5,
                (false, false) => 0.3,
            };
            let stale: usize = r.stale.iter().map(|(n, _)| n).sum();
            let met = r.lost == 0 && stale == 0 && ratio.median >= target;
            let _ = writeln!(
                w,
                "| {} | {} | {mode} | {} | {stale} | {:.3} ({:.3}–{:.3}) | {target} | {} |",
                r.targets.name(),
                r.variant.view_name(),
                r.lost,
                ratio.median,
                ratio.min,
                ratio.max,
                if met { "yes" } else { "**no**" }
            );
        }
        let _ = writeln!(
            w,
            "\nWhat the server counted during each run (warm-up included; `serverStatus`), per \
             vote: operations received (`opcounters`: finds, updates and commands, \
             `findAndModify` and `commitTransaction` among them) and transactions committed, \
             median (min–max) of the rounds; and the transactions it aborted, all rounds.\n"
        );
        let _ = writeln!(
            w,
            "| votes to | written by | view | server operations per vote | commits per vote | aborted |"
        );
        let _ = writeln!(w, "|---|---|---|--:|--:|--:|");
        for r in &v.rows {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.2} ({:.2}–{:.2}) | {:.2} ({:.2}–{:.2}) | {} |",
                r.targets.name(),
                r.variant.way_name(),
                r.variant.view_name(),
                r.ops_per_vote.median,
                r.ops_per_vote.min,
                r.ops_per_vote.max,
                r.commits_per_vote.median,
                r.commits_per_vote.min,
                r.commits_per_vote.max,
                r.aborts
            );
        }
        let _ = writeln!(w);
    }
}

/// `## 9. Model change`.
impl Section for model_change::Result {
    fn number(&self) -> u32 {
        9
    }

    fn markdown(&self, w: &mut String) {
        let c = self;
        let _ = writeln!(w, "## 9. Model change\n");
        let _ = writeln!(
            w,
            "{} products with {}–{} reviews each ({} reviews), written through the library under \
             the old model (the {} latest reviews embedded whole, `date desc`, with the count) \
             in {:.0} s: {:.0} B a product on average, {:.0} B once rebuilt with keep {}. The \
             model then changes on the same collections: keep {} (same order and count), or a \
             second view added (previews of the {} oldest reviews, `date asc`, no count). {} \
             rounds; the experiment took {:.0} s.\n",
            c.parents,
            model_change::MIN_REVIEWS,
            model_change::MAX_REVIEWS,
            c.reviews,
            model_change::OLD_KEEP,
            c.load_secs,
            c.parent_bytes.0,
            c.parent_bytes.1,
            model_change::NEW_KEEP,
            model_change::NEW_KEEP,
            model_change::OLDEST_KEEP,
            c.rounds,
            c.total_secs
        );
        let f = c.first_check;
        let _ = writeln!(
            w,
            "Before any rebuild, `check_all` of the keep-{} model found **{} of {}** products \
             outdated and {} drifted, in {:.1} s.\n",
            model_change::NEW_KEEP,
            f.outdated,
            f.checked,
            f.drifted,
            f.secs
        );
        let _ = writeln!(
            w,
            "**Reads.** One task reads random products through the new model's store, `Store::get` \
             and the first `Children::page` of {}: {} reads of each kind while every product is \
             built under the old model (outdated), and as many right after the new model's \
             `Store::rebuild` (rebuilt), in each round, the kinds interleaved, after {} \
             unrecorded reads of each, in which the store's look-ahead starts (outdated: each \
             read is one `aggregate` of the product with its reviews through `$lookup`) and \
             stops (rebuilt: each read is one `find`). p50 and p99 are the median (min–max) \
             over the rounds of each round's percentile; outdated / rebuilt the median \
             (min–max) of the per-round ratio. Server operations: what `serverStatus` counted (`opcounters`) over {} more \
             reads of one kind alone, per read, median of the rounds. Every read, {} in all \
             (unrecorded ones included), was compared with the reviews the product was written \
             with: none was wrong (a wrong read stops the experiment).\n",
            model_change::PAGE,
            c.reads_each,
            c.reads_each.div_ceil(10),
            model_change::OPS_READS,
            c.checked_reads
        );
        let _ = writeln!(
            w,
            "| read | an outdated read | server operations, outdated → rebuilt | outdated p50 ms | rebuilt p50 ms | outdated / rebuilt, p50 | outdated p99 ms | rebuilt p99 ms | outdated / rebuilt, p99 |"
        );
        let _ = writeln!(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|");
        for r in &c.reads {
            let _ = writeln!(
                w,
                "| {} | {} | {:.2} → {:.2} | {:.3} ({:.3}–{:.3}) | {:.3} ({:.3}–{:.3}) | **{:.2}** ({:.2}–{:.2}) | {:.2} ({:.2}–{:.2}) | {:.2} ({:.2}–{:.2}) | {:.2} ({:.2}–{:.2}) |",
                r.read.name(),
                r.read.outdated_cost(),
                r.outdated_ops.median,
                r.rebuilt_ops.median,
                r.outdated_p50.median,
                r.outdated_p50.min,
                r.outdated_p50.max,
                r.rebuilt_p50.median,
                r.rebuilt_p50.min,
                r.rebuilt_p50.max,
                r.ratio_p50.median,
                r.ratio_p50.min,
                r.ratio_p50.max,
                r.outdated_p99.median,
                r.outdated_p99.min,
                r.outdated_p99.max,
                r.rebuilt_p99.median,
                r.rebuilt_p99.min,
                r.rebuilt_p99.max,
                r.ratio_p99.median,
                r.ratio_p99.min,
                r.ratio_p99.max
            );
        }
        let _ = writeln!(
            w,
            "\n**Rebuilds.** `Store::rebuild` over all {} products with the default options \
             (pages of 500 `_id`s, 4 batches of 32 products at once), each once per round; \
             parents/s is the products it rebuilt over its duration, median (min–max) of the \
             rounds. In transactions 32 products are rebuilt in one transaction; in ordered \
             writes 32 products are marked as built under none, rebuilt, and marked as built, \
             one command a step. Which write mode goes \
             first alternates between rounds. Before each rebuild the products are put back as \
             the old model wrote them, from a copy made after the load (`$out`, {:.1} s), and \
             reviews pushed by an earlier step deleted. After every rebuild, `check_all` of the \
             model rebuilt found no product drifted nor outdated, and the rebuild failed none \
             (either stops the experiment); its rate, read by a store in ordered writes (no \
             transaction per product), is the last column.\n",
            c.parents, c.restore_secs
        );
        let _ = writeln!(
            w,
            "| change | write mode | parents/s | seconds | rebuilt, all rounds | `check_all` parents/s |"
        );
        let _ = writeln!(w, "|---|---|--:|--:|--:|--:|");
        for r in &c.rebuilds {
            let _ = writeln!(
                w,
                "| {} | {} | **{:.0}** ({:.0}–{:.0}) | {:.1} | {} | {:.0} ({:.0}–{:.0}) |",
                r.step.name(),
                model_change::mode_name(r.step.mode(c.mode)),
                r.rate.median,
                r.rate.min,
                r.rate.max,
                r.secs.median,
                r.rebuilt,
                r.check_rate.median,
                r.check_rate.min,
                r.check_rate.max
            );
        }
        if let Some((r, (pushes, rate))) = c
            .rebuilds
            .iter()
            .find_map(|r| r.pushes.as_ref().map(|p| (r, p)))
        {
            let _ = writeln!(
                w,
                "\nWhile the new model rebuilt ({}), one task pushed {} new reviews through it to \
                 random odd-numbered products (the reads read even-numbered ones), {:.0} pushes/s \
                 ({:.0}–{:.0}); a push to a product still built under the old model rebuilds it, \
                 so the rebuild itself rebuilt {} of {} products over the rounds.",
                model_change::mode_name(r.step.mode(c.mode)),
                pushes,
                rate.median,
                rate.min,
                rate.max,
                r.rebuilt,
                c.parents * c.rounds
            );
        }
        let _ = writeln!(w);
    }
}

/// `## 10. Sum types`.
impl Section for sum_types::Result {
    fn number(&self) -> u32 {
        10
    }

    fn markdown(&self, w: &mut String) {
        let t = self;
        let _ = writeln!(w, "## 10. Sum types\n");
        let _ = writeln!(
            w,
            "{} pushes per layout and round over {} accounts (keep 10, a count and a running \
             balance), alternating, which goes first alternating too; each round's median \
             latency, then the median (min–max) over the rounds.\n",
            t.pushes,
            sum_types::ACCOUNTS
        );
        let _ = writeln!(w, "| balance | push p50 (ms) |");
        let _ = writeln!(w, "|---|--:|");
        let _ = writeln!(
            w,
            "| `i64` (cents) | {:.2} ({:.2}–{:.2}) |",
            t.cents.median, t.cents.min, t.cents.max
        );
        let _ = writeln!(
            w,
            "| `Decimal128` | {:.2} ({:.2}–{:.2}) |",
            t.decimal.median, t.decimal.min, t.decimal.max
        );
        let _ = writeln!(
            w,
            "\nRatio, `Decimal128` over `i64`: **{:.3}x** ({:.3}–{:.3}); target ≤ 1.1x. \
             Every account's two balances agreed to the cent afterwards.\n",
            t.ratio.median, t.ratio.min, t.ratio.max
        );
    }
}

/// Whether `s`'s range lies within `±fraction` of its median.
pub fn within(s: &Spread, fraction: f64) -> bool {
    s.min >= s.median * (1.0 - fraction) && s.max <= s.median * (1.0 + fraction)
}

fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", b / 1024.0 / 1024.0 / 1024.0)
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}
