//! Catching up: when the changes cannot be read one by one (a first start, a place off the
//! oplog, events without their images, a dropped collection), a full reconcile pass under a
//! stream opened from now.

use futures::future::Either;

use super::pre_images::ensure_pre_images;
use super::stats::{CatchUp, FollowUpdate};
use super::stream::{CollectionFollower, Stream};
use crate::error::Result;

impl CollectionFollower<'_> {
    /// Catches up on every change the stream cannot deliver: opens a stream from now, then
    /// reconciles every parent of the collection's fields, then saves the new stream's place.
    /// Changes after the stream opened come through it; the ones before, the pass reads. `None`
    /// when a stop came during the pass: the old place stays saved, so the next start catches
    /// up again.
    pub(super) async fn catch_up(&self, reason: CatchUp) -> Result<Option<Stream>> {
        let shared = self.shared;
        tracing::warn!(?reason, "catching up: reconciling every parent");
        shared.notify(FollowUpdate::CatchingUp {
            collection: self.name,
            reason,
        });
        // A dropped collection comes back without its pre-images.
        ensure_pre_images(shared.store, self.name, shared.options.enable_pre_images).await?;
        let stream = self.open(None).await.map_err(|e| self.mongo(e))?;
        let pass = shared
            .store
            .reconcile_fields(&self.fields, &shared.options.sweep, |_| {});
        let stop = shared.stop.wait();
        futures::pin_mut!(pass, stop);
        let mut report = match futures::future::select(pass, stop).await {
            Either::Left((report, _)) => report?,
            Either::Right(_) => {
                tracing::info!("stopped during the catch-up; it starts over on the next start");
                shared.notify(FollowUpdate::Stopped {
                    collection: self.name,
                });
                return Ok(None);
            }
        };
        // A parent the pass could not reach for a reason that may pass is not caught up: the
        // place must not move past it.
        if let Some(i) = report
            .failures
            .iter()
            .position(|f| f.error.mongo_error().is_some())
        {
            return Err(report.failures.swap_remove(i).error);
        }
        shared.counters.add_catch_up(&report);
        self.save(stream.resume_token()).await?;
        tracing::info!(
            parents = report.progress.checked,
            fixed = report.progress.fixed,
            "caught up"
        );
        shared.notify(FollowUpdate::CaughtUp {
            collection: self.name,
            report: &report,
        });
        Ok(Some(stream))
    }
}
