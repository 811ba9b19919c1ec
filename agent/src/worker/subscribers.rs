//! The driver of an open subscription scenario: each arrival is a
//! subscriber that holds its event stream in a task of its own, until the
//! scenario's end.

use std::rc::Rc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::{Arrival, Driver, Sleep, Submitted, Waited};
use super::shared::Shared;
use crate::sse::hook::Hook;

/// Starts a held stream per arrival.
pub(super) struct Subscribers<'a> {
    shared: &'a Shared,
    hook: &'a Rc<Hook>,
    stop: &'a CancellationToken,
}

impl<'a> Subscribers<'a> {
    pub(super) fn new(shared: &'a Shared, hook: &'a Rc<Hook>, stop: &'a CancellationToken) -> Self {
        Self { shared, hook, stop }
    }
}

impl Driver for Subscribers<'_> {
    async fn submit(&mut self, arrival: Arrival) -> Submitted {
        let shared = self.shared;
        let Some(request) = shared.take(&arrival) else {
            return Submitted::Unrendered;
        };
        let (intended, kind) = (arrival.intended, shared.mix.kind(arrival.seq));
        let (task_shared, hook) = (shared.clone(), self.hook.clone());
        let until = hook.until(intended, shared.scenario_start + shared.duration);
        let stop = self.stop.clone();
        tokio::task::spawn_local(async move {
            task_shared
                .subscribe(&hook, (request, kind), intended, until, &stop)
                .await;
        });
        Submitted::Sent
    }

    async fn wait(&mut self, sleep: Sleep<'_>, _due: Option<Instant>) -> Waited {
        sleep.waited(self.stop).await
    }
}
