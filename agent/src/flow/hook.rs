//! What a worker holds for one flow scenario: its steps, and how many of
//! its flows under way stand at each step, so the steps they never reach
//! are booked when the run ends while they are under way.

use std::cell::RefCell;
use std::sync::Arc;

use loadfleet_proto::vocab::NotReached;

use super::FlowSpec;
use crate::recorder::Recorder;

/// What a worker holds for one flow scenario: its steps, and how many of
/// its flows under way stand at each step (the last one they reached).
pub(crate) struct FlowHook {
    pub(crate) spec: Arc<FlowSpec>,
    live: RefCell<Vec<u64>>,
}

impl FlowHook {
    pub(crate) fn new(spec: Arc<FlowSpec>) -> Self {
        let live = RefCell::new(vec![0; spec.steps.len()]);
        Self { spec, live }
    }

    /// A flow under way reached step `step` (from the one before it).
    pub(crate) fn reach(&self, step: usize) {
        let mut live = self.live.borrow_mut();
        if step > 0 {
            live[step - 1] = live[step - 1].saturating_sub(1);
        }
        live[step] += 1;
    }

    /// A flow that stood at step `step` ended.
    pub(crate) fn leave(&self, step: usize) {
        let mut live = self.live.borrow_mut();
        live[step] = live[step].saturating_sub(1);
    }

    /// The run ended with flows under way (they stay in flight at the
    /// end): the steps each had not reached are booked `run_ended`.
    pub(crate) fn book_run_end(&self, recorder: &mut Recorder, interval: u64) {
        let live = self.live.borrow();
        let steps = live.len();
        for (at, &n) in live.iter().enumerate() {
            recorder.steps_not_reached(interval, at + 1..steps, NotReached::RunEnded, n);
        }
    }
}
