//! `--duration D` on a plan of several scenarios: the plan's whole timeline
//! is scaled so that the run lasts D. Every scenario's schedule, its
//! `start` offset and its subscribers' `hold` are scaled by the one factor,
//! so scenarios keep their order, overlaps and proportions (`after` follows
//! by itself), as stages keep theirs within one scenario.

use std::time::Duration;

use loadfleet_proto::bounds::MAX_SCENARIO;

use super::check::PlanError;
use super::raw::RawPlan;
use super::validated::{Model, Plan};

/// The flag that asks for it, which every scaled field's mistakes name.
const FLAG: &str = "--duration";

/// What each scenario becomes on the scaled timeline.
pub(super) struct Timeline {
    scenarios: Vec<Scaled>,
}

struct Scaled {
    schedule: Duration,
    start: Duration,
    hold: Option<Duration>,
}

impl Timeline {
    /// The timeline of `written` (the plan without `--duration`) scaled to
    /// last `duration`.
    pub(super) fn new(written: &Plan, duration: Duration) -> Result<Self, PlanError> {
        let length = written.duration();
        if duration.is_zero() || duration > MAX_SCENARIO || length.is_zero() {
            return Err(PlanError {
                field: FLAG.into(),
                line: None,
                message: format!(
                    "must be above 0 and at most {}",
                    humantime::format_duration(MAX_SCENARIO)
                ),
            });
        }
        let factor = duration.as_secs_f64() / length.as_secs_f64();
        let scale = |d: Duration| {
            Duration::try_from_secs_f64(d.as_secs_f64() * factor)
                .unwrap_or(duration)
                .min(duration)
        };
        let scenarios = written
            .scenarios
            .iter()
            .map(|s| {
                // An open subscriber's hold is counted in the scenario's
                // length after its schedule.
                let hold = s.sse.as_ref().and_then(|sse| sse.hold);
                let held = match s.model {
                    Model::Open(_) => hold.unwrap_or_default(),
                    Model::Closed(_) => Duration::ZERO,
                };
                Scaled {
                    schedule: scale(s.duration.saturating_sub(held)),
                    start: scale(s.start),
                    hold: hold.map(scale),
                }
            })
            .collect();
        Ok(Timeline { scenarios })
    }

    /// Lays the scaled timeline over `raw`, the same plan read again; the
    /// fields it sets are recorded in `set` with the flag.
    pub(super) fn lay(&self, raw: &mut RawPlan, mut set: impl FnMut(String, &'static str)) {
        for (i, (s, scaled)) in raw.scenario.iter_mut().zip(&self.scenarios).enumerate() {
            let s = s.get_mut();
            s.reshape.duration = Some(scaled.schedule);
            if s.start.is_some() {
                s.start = Some(flag_value(scaled.start));
                set(format!("scenario[{i}].start"), FLAG);
            }
            if let (Some(_), Some(hold)) = (&s.hold, scaled.hold) {
                s.hold = Some(flag_value(hold));
                set(format!("scenario[{i}].hold"), FLAG);
            }
        }
    }
}

fn flag_value(d: Duration) -> toml::Spanned<String> {
    toml::Spanned::new(0..0, humantime::format_duration(d).to_string())
}
