//! Experiment 3, round trips: the commands each operation sends, from the driver's command
//! monitoring, on its second call (the steady state, which `tests/it/round_trips.rs` asserts)
//! and on its first on a fresh store.

use std::sync::{Arc, Mutex};

use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use subset::{PageRequest, WriteMode};

use crate::data::{DataSet, Product, PAGE_REVIEWS};
use crate::working_set::{Ctx, Layout};
use crate::Res;

/// The operations counted, in table order.
pub const OPS: [&str; 9] = [
    "`get`",
    "`page`, first (within `keep`)",
    "`page`, later",
    "`push`",
    "`push_many` (10)",
    "page read, fully embedded",
    "page read, referenced, two queries",
    "page read, referenced, `$lookup`",
    "review write, referenced",
];

/// The commands of one operation's two calls.
#[derive(Debug, Clone)]
pub struct Calls {
    /// The first call on a fresh store: what the store reads once (its registry) included.
    pub first: Vec<String>,
    /// The second call, on the same store and parent: what a running service sends each time.
    pub steady: Vec<String>,
}

/// Connects to `uri` with a client that logs the name of every command it starts (except the
/// driver's own `hello`s), writes a small data set into `database`, and returns, per operation
/// of [`OPS`], the commands its first and second calls sent. The store's one-time `hello`
/// happens before counting.
pub async fn count(
    uri: &str,
    database: &str,
    mode: Option<WriteMode>,
) -> Res<(WriteMode, Vec<Calls>)> {
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut options = ClientOptions::parse(uri).await?;
    let sink = Arc::clone(&log);
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event {
            if !matches!(
                started.command_name.as_str(),
                "hello" | "isMaster" | "ismaster"
            ) {
                if let Ok(mut log) = sink.lock() {
                    log.push(started.command_name);
                }
            }
        }
    }));
    let db = mongodb::Client::with_options(options)?.database(database);
    db.drop().await?;
    let data = DataSet {
        products: 2,
        min_reviews: 50,
        max_reviews: 50,
        seed: 1,
    };
    crate::load::load(&db, &data, 1).await?;
    let mut ctx = Ctx::new(&db, data);
    if let Some(mode) = mode {
        ctx.store = subset::Store::with_options(&db, subset::StoreOptions::new().mode(mode));
    }
    let mode = ctx.store.mode().await?;
    let take = || -> Vec<String> {
        log.lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    };
    take();

    let id = data.product_id(0);
    let handle = ctx.store.children(Product::RECENT_REVIEWS);
    let mut counts = Vec::new();
    // Each operation twice, the second call on the same store and parent as the first.
    let mut twice = |first: Vec<String>, steady: Vec<String>| counts.push(Calls { first, steady });
    ctx.store.get(&id).await?;
    let first = take();
    ctx.store.get(&id).await?;
    twice(first, take());
    let request = PageRequest::first(PAGE_REVIEWS as u32);
    handle.page(&id, &request).await?;
    let first = take();
    let page = handle.page(&id, &request).await?;
    twice(first, take());
    let request = PageRequest::after(page.next.ok_or("no second page")?, 20);
    handle.page(&id, &request).await?;
    let first = take();
    handle.page(&id, &request).await?;
    twice(first, take());
    // Each review newer than the last: every push goes to the head of the subset.
    handle.push(&id, &data.new_review(0, 1)).await?;
    let first = take();
    handle.push(&id, &data.new_review(0, 2)).await?;
    twice(first, take());
    let batch: Vec<_> = (3..13).map(|n| data.new_review(0, n)).collect();
    handle.push_many(&id, &batch).await?;
    let first = take();
    let batch: Vec<_> = (13..23).map(|n| data.new_review(0, n)).collect();
    handle.push_many(&id, &batch).await?;
    twice(first, take());
    for layout in [Layout::Embedded, Layout::TwoQuery, Layout::Lookup] {
        ctx.read(layout, 1).await?;
        let first = take();
        ctx.read(layout, 1).await?;
        twice(first, take());
    }
    ctx.write(Layout::TwoQuery, 1, 99, false).await?;
    let first = take();
    ctx.write(Layout::TwoQuery, 1, 100, false).await?;
    twice(first, take());
    db.drop().await?;
    Ok((mode, counts))
}
