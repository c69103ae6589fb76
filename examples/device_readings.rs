//! Device readings written around the library: 20 devices insert readings straight into the
//! `readings` collection with the plain driver (`insert_many`, the parent key `device_id` set),
//! some 2,000 a second. A follower (`store.follow`) keeps each device's 10 latest readings, its
//! count and its temperature sum true as they land; a dashboard reads every device in one query.
//! Printed: the follower's lag, from the last insert until the dashboard shows it (polled), and
//! its totals; then every device is checked against the child collection.
//!
//! Needs a replica set (change streams). `cargo run --example device_readings --features
//! testkit` starts its own `mongod` unless `MONGODB_URI` names a server.

use std::cmp::Reverse;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use rand::Rng;
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{doc, DateTime, Document};
use subset::follow::{FollowOptions, FollowUpdate};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Reading {
    #[serde(rename = "_id")]
    id: ObjectId,
    at: DateTime,
    /// The temperature in tenths of a degree: an integer, so that the running sum is exact.
    tenths: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "devices")]
struct Device {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "readings",
        keep = 10,
        sort = "at desc",
        count = "reading_count",
        sum = "tenths_total = tenths"
    )]
    latest: Vec<Reading>,
    #[serde(default)]
    reading_count: i64,
    #[serde(default)]
    tenths_total: i64,
}

const DEVICES: usize = 20;
/// Each device sends a batch of this many readings…
const BATCH: usize = 10;
/// …this often…
const EVERY: Duration = Duration::from_millis(100);
/// …for this long.
const RUN_FOR: Duration = Duration::from_secs(2);

/// What a device sent, and when its last insert was acknowledged.
struct Sent {
    readings: Vec<Reading>,
    last_ack: Instant,
}

/// A device's firmware: plain driver inserts into the child collection, no library involved.
async fn device(
    readings: mongodb::Collection<Document>,
    id: ObjectId,
) -> Result<Sent, mongodb::error::Error> {
    let until = Instant::now() + RUN_FOR;
    let mut base = rand::rng().random_range(150..300);
    let mut sent = Vec::new();
    let mut last_ack = Instant::now();
    while Instant::now() < until {
        let batch: Vec<Reading> = (0..BATCH)
            .map(|_| {
                base += rand::rng().random_range(-3..=3);
                Reading {
                    id: ObjectId::new(),
                    at: DateTime::now(),
                    tenths: base,
                }
            })
            .collect();
        let docs = batch.iter().map(|r| {
            doc! { "_id": r.id, "device_id": id, "at": r.at, "tenths": r.tenths }
        });
        readings.insert_many(docs).await?;
        last_ack = Instant::now();
        sent.extend(batch);
        tokio::time::sleep(EVERY).await;
    }
    Ok(Sent {
        readings: sent,
        last_ack,
    })
}

/// Whether the dashboard shows exactly what was sent: each device's count, sum and 10 latest.
fn shows(dashboard: &[Device], sent: &[(ObjectId, Vec<Reading>)]) -> bool {
    sent.iter().all(|(id, readings)| {
        dashboard.iter().any(|d| {
            d.id == *id
                && d.reading_count == readings.len() as i64
                && d.tenths_total == readings.iter().map(|r| i64::from(r.tenths)).sum::<i64>()
                && d.latest == readings[..10]
        })
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Returned from `main`, an error would print as its `Debug`, without the advice its `Display`
    // gives: print that, then each cause it does not already quote.
    let Err(error) = run().await else {
        return std::process::ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    let shown = error.to_string();
    std::iter::successors(error.source(), |e| e.source())
        .filter(|cause| !shown.contains(&cause.to_string()))
        .for_each(|cause| eprintln!("caused by: {cause}"));
    std::process::ExitCode::FAILURE
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let db = server
        .client()
        .await?
        .database("subset_example_device_readings");
    db.drop().await?;
    let store = Store::<Device>::new(&db);
    store.ensure_indexes().await?;
    println!("server {}", server.uri());

    let mut ids = Vec::new();
    for i in 0..DEVICES {
        let device = Device {
            id: ObjectId::new(),
            name: format!("sensor-{i:02}"),
            latest: Vec::new(),
            reading_count: 0,
            tenths_total: 0,
        };
        store.insert(&device).await?;
        ids.push(device.id);
    }

    // The follower, in a task of its own; the devices start once its change stream is open.
    let stream_open = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stream_open);
    let follower = store
        .follow(FollowOptions::new("device-dashboard").window(Duration::from_millis(20)))
        .on_update(move |update| {
            if let FollowUpdate::Started { .. } = update {
                flag.store(true, Ordering::SeqCst);
            }
        })
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stream_open.load(Ordering::SeqCst) {
        if follower.is_finished() || Instant::now() > deadline {
            follower.stop().await?;
            return Err("the follower's change stream did not open".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // The devices, on a client of their own, as another program.
    let readings = server
        .client()
        .await?
        .database("subset_example_device_readings")
        .collection::<Document>("readings");
    let started = Instant::now();
    let tasks: Vec<_> = ids
        .iter()
        .map(|&id| tokio::spawn(device(readings.clone(), id)))
        .collect();
    let mut sent = Vec::new();
    let mut last_insert = started;
    for (task, &id) in tasks.into_iter().zip(&ids) {
        let mut s = task.await??;
        last_insert = last_insert.max(s.last_ack);
        s.readings.sort_by_key(|r| Reverse((r.at, r.id)));
        sent.push((id, s.readings));
    }
    let total: usize = sent.iter().map(|(_, r)| r.len()).sum();
    println!(
        "{DEVICES} devices inserted {total} readings in {:.2} s ({:.0}/s) with the plain driver",
        (last_insert - started).as_secs_f64(),
        total as f64 / (last_insert - started).as_secs_f64()
    );

    // The dashboard: every device in one query, polled until it shows the last insert.
    let devices = db.collection::<Device>("devices");
    let deadline = last_insert + Duration::from_secs(30);
    let dashboard = loop {
        let dashboard: Vec<Device> = devices
            .find(doc! {})
            .sort(doc! { "name": 1 })
            .await?
            .try_collect()
            .await?;
        if shows(&dashboard, &sent) {
            break dashboard;
        }
        if Instant::now() > deadline {
            return Err("the dashboard did not catch up within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let lag = last_insert.elapsed();
    println!(
        "follower lag: {:.0} ms from the last insert until the dashboard showed it",
        lag.as_secs_f64() * 1_000.0
    );
    for d in dashboard.iter().take(3) {
        let latest = d.latest.first().ok_or("no readings")?;
        println!(
            "  {}  {} readings, now {:.1}°, average {:.1}°",
            d.name,
            d.reading_count,
            f64::from(latest.tenths) / 10.0,
            d.tenths_total as f64 / d.reading_count as f64 / 10.0
        );
    }
    println!("  … {} more", dashboard.len() - 3);

    // The events of the last readings may be unread still: a batch reconciles a device from
    // the child collection, so it shows readings whose events come in a later batch.
    let stats = follower.stop().await?;
    println!(
        "follower: {} events in {} batches, {} device updates written, batch lag max {} ms",
        stats.events,
        stats.batches,
        stats.written,
        stats.max_lag.as_millis()
    );

    // Checked against the child collection itself: counts, sums and latest 10 all exact.
    let handle = store.children(Device::LATEST);
    for (id, readings) in &sent {
        let drift = handle.check(id).await?;
        assert!(
            drift.is_clean(),
            "the device agrees with its readings: {drift:?}"
        );
        assert_eq!(handle.count(id).await?, readings.len() as u64);
    }
    println!("every device exact: {total} readings counted, summed and the latest 10 embedded");
    db.drop().await?;
    Ok(())
}
