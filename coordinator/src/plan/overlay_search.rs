//! The `search` command's flags as an overlay on the plan's `[search]`
//! table: a value a flag gives wins over the table's, and its mistakes
//! name the flag ([`super::search`] checks them all).

use std::time::Duration;

use toml::Spanned;

use super::overlay::{flag_value, Laid};
use super::raw::{RawPlan, RawSearch};
use super::search::{Vary, DEFAULT_STEP, DEFAULT_WARMUP};
use crate::thresholds::Threshold;

/// The `search` command's flags, laid over `[search]`.
#[derive(Debug, Clone, Default)]
pub struct SearchFlags {
    pub slo: Vec<Threshold>,
    pub vary: Option<Vary>,
    pub from: Option<f64>,
    pub to: Option<f64>,
    pub resolution: Option<f64>,
    pub step: Option<Duration>,
    /// `--warmup`: before each step's window.
    pub warmup: Option<Duration>,
    /// `--repeat`, when above 1: runs of a step near the boundary.
    pub repeat: Option<u32>,
}

impl SearchFlags {
    pub(super) fn lay_over(&self, raw: &mut RawPlan, laid: &mut Laid) {
        let s = raw
            .search
            .get_or_insert_with(|| flag_value(RawSearch::default()))
            .get_mut();
        if !self.slo.is_empty() {
            s.slo = self.slo.iter().map(|t| flag_value(t.to_string())).collect();
            for i in 0..s.slo.len() {
                laid.set(format!("search.slo[{i}]"), "--slo");
            }
        }
        let mut set = |field: &str, flag: &'static str, given: bool| {
            if given {
                laid.set(format!("search.{field}"), flag);
            }
        };
        set("vary", "--vary", self.vary.is_some());
        set("from", "--from", self.from.is_some());
        set("to", "--to", self.to.is_some());
        set("resolution", "--resolution", self.resolution.is_some());
        set("step", "--step", self.step.is_some());
        set("warmup", "--warmup", self.warmup.is_some());
        set("repeat", "--repeat", self.repeat.is_some());
        let text = |d: Duration| flag_value(humantime::format_duration(d).to_string());
        if let Some(v) = self.vary {
            s.vary = Some(flag_value(v.word().to_string()));
        }
        s.from = self.from.map(flag_value).or(s.from.take());
        s.to = self.to.map(flag_value).or(s.to.take());
        if let Some(r) = self.resolution {
            s.resolution = Some(flag_value(format!("{}%", r * 100.0)));
        }
        s.step = self.step.map(text).or(s.step.take());
        s.warmup = self.warmup.map(text).or(s.warmup.take());
        s.repeat = self
            .repeat
            .map(|r| flag_value(i64::from(r)))
            .or(s.repeat.take());
    }

    /// Each step's warm-up and measured window, read before the plan is
    /// checked: they set the length of every step's schedule. A value
    /// that does not read is left to the validator to name.
    pub(super) fn step_length(&self, raw: &RawPlan) -> (Duration, Duration) {
        let table = raw.search.as_ref().map(Spanned::get_ref);
        let read = |flag: Option<Duration>, key: Option<&Spanned<String>>, default| {
            flag.or_else(|| key.and_then(|t| humantime::parse_duration(t.get_ref()).ok()))
                .unwrap_or(default)
        };
        (
            read(
                self.warmup,
                table.and_then(|t| t.warmup.as_ref()),
                DEFAULT_WARMUP,
            ),
            read(self.step, table.and_then(|t| t.step.as_ref()), DEFAULT_STEP),
        )
    }
}
