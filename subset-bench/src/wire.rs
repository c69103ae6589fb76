//! What an operation puts on the wire: the commands it sends, their bytes each way and the time
//! the driver spent waiting on them, from the driver's command monitoring. The overhead
//! experiment uses it to split a call's latency between the server (and the network) and the
//! client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use mongodb::Client;
use subset::bson;

use crate::Res;

/// What the commands of one call (or of several) added up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub commands: u32,
    /// Bytes of the command documents sent, as BSON.
    pub sent: u64,
    /// Bytes of the replies.
    pub received: u64,
    /// Milliseconds from each command's start to its reply, as the driver reports them, summed.
    pub waited: f64,
    /// Each command answered, in the order sent: its name and its milliseconds to the reply,
    /// so that a call's waiting splits by command (a write's guard, a lease's take).
    pub each: Vec<(String, f64)>,
}

/// A client whose commands are tallied while tallying is on. Off or on, the driver builds
/// every command's event (a copy of the command) before the handler sees it: 11 % of the
/// benchmark process's CPU samples in a profile of the overhead experiment. Time nothing on
/// this client.
#[derive(Clone)]
pub struct Wire {
    client: Client,
    on: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
}

impl Wire {
    /// A new client of `uri` with a tallying command monitor. The driver's own `hello`s, sent on
    /// its monitoring connections, are left out.
    ///
    /// # Errors
    ///
    /// The driver's, parsing `uri`.
    pub async fn connect(uri: &str) -> Res<Wire> {
        let on = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut options = ClientOptions::parse(uri).await?;
        let (switch, sink) = (Arc::clone(&on), Arc::clone(&tally));
        options.command_event_handler = Some(EventHandler::callback(move |event| {
            if !switch.load(Ordering::Relaxed) {
                return;
            }
            let mut t = sink.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                CommandEvent::Started(e) if !is_hello(&e.command_name) => {
                    t.commands += 1;
                    t.sent += bytes(&e.command);
                }
                CommandEvent::Succeeded(e) if !is_hello(&e.command_name) => {
                    let ms = e.duration.as_secs_f64() * 1e3;
                    t.received += bytes(&e.reply);
                    t.waited += ms;
                    t.each.push((e.command_name, ms));
                }
                CommandEvent::Failed(e) if !is_hello(&e.command_name) => {
                    let ms = e.duration.as_secs_f64() * 1e3;
                    t.waited += ms;
                    t.each.push((e.command_name, ms));
                }
                _ => {}
            }
        }));
        Ok(Wire {
            client: Client::with_options(options)?,
            on,
            tally,
        })
    }

    /// The monitored client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts (or stops) tallying.
    pub fn tally(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// What was tallied since the last take.
    pub fn take(&self) -> Tally {
        std::mem::take(&mut *self.tally.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn is_hello(name: &str) -> bool {
    matches!(name, "hello" | "isMaster" | "ismaster")
}

fn bytes(doc: &bson::Document) -> u64 {
    bson::RawDocumentBuf::try_from(doc).map_or(0, |raw| raw.as_bytes().len() as u64)
}
