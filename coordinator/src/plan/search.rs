//! The plan's `[search]` table (docs/search.md), with the `search` flags
//! laid over it and checked like the rest of the plan: each mistake names
//! its field and line, or its flag. What only a search needs (an SLO, the
//! highest step) is asked for by `crate::search`, since `plan check` and
//! `run` take a plan without them.

use std::time::Duration;

use loadfleet_proto::bounds::MAX_RATE;
use toml::Spanned;

use super::check::Check;
use super::overlay::Laid;
use super::raw::{RawPlan, RawSearch};
use crate::thresholds::Threshold;

/// The measured window of each step.
const DEFAULT_STEP: Duration = Duration::from_secs(30);
/// The warm-up before each step's window: fresh connections and a cold
/// target are reported apart.
const DEFAULT_WARMUP: Duration = Duration::from_secs(5);
/// 5%: the gap between the last pass and the first failure, as a share
/// of the passing rate, at which bisection stops.
const DEFAULT_RESOLUTION: f64 = 0.05;
/// Most times a step near the boundary is run.
const MAX_REPEAT: i64 = 9;

/// What a capacity search varies from step to step.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Vary {
    /// The open-model scenarios' arrival rate, scaled together.
    Rate,
    /// The closed-model scenarios' client count, scaled together.
    Clients,
}

impl Vary {
    /// The word of the flag and the plan.
    pub fn word(self) -> &'static str {
        match self {
            Vary::Rate => "rate",
            Vary::Clients => "clients",
        }
    }

    /// An amount of what is varied, as the summary writes it: whole
    /// requests or clients when it is one.
    pub fn amount(self, v: f64) -> String {
        let unit = match self {
            Vary::Rate => "req/s",
            Vary::Clients => "clients",
        };
        if (v - v.round()).abs() < 1e-6 {
            format!("{v:.0} {unit}")
        } else {
            format!("{v:.1} {unit}")
        }
    }

    /// What the steps are named by, in a sentence.
    pub fn noun(self) -> &'static str {
        match self {
            Vary::Rate => "rate",
            Vary::Clients => "client count",
        }
    }
}

/// A search's course and judge as the plan and flags give them, defaults
/// filled in; `slo` and `to` may still be missing.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPlan {
    pub slo: Vec<Threshold>,
    /// `None` until the plan's scenarios decide (see `crate::search`).
    pub vary: Option<Vary>,
    pub from: f64,
    pub to: Option<f64>,
    pub resolution: f64,
    /// The measured window of each step.
    pub step: Duration,
    /// The warm-up before it, reported apart.
    pub warmup: Duration,
    pub repeat: u32,
}

impl SearchPlan {
    /// The rate the ladder starts from when neither `--from` nor the plan
    /// says: low enough for almost any target to pass.
    pub const DEFAULT_FROM: f64 = 10.0;
}

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

/// A value a flag put into the raw plan: it has no place in the file.
fn flag_value<T>(v: T) -> Spanned<T> {
    Spanned::new(0..0, v)
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

/// The `[search]` table, defaults filled in.
pub(super) fn search(c: &mut Check<'_>, raw: Option<&Spanned<RawSearch>>) -> SearchPlan {
    let empty = RawSearch::default();
    let s = raw.map_or(&empty, Spanned::get_ref);
    let mut slo = Vec::new();
    for (i, t) in s.slo.iter().enumerate() {
        match t.get_ref().parse::<Threshold>() {
            Ok(th) => slo.push(th),
            Err(e) => c.err(format!("search.slo[{i}]"), Some(t.span()), e),
        }
    }
    let mut rate = |field: &str, v: &Option<Spanned<f64>>| {
        let v = v.as_ref()?;
        let r = *v.get_ref();
        if r.is_finite() && r > 0.0 && r <= MAX_RATE {
            return Some(r);
        }
        c.err(
            field,
            Some(v.span()),
            format!("{r}: a rate in req/s (or clients) above 0 and at most {MAX_RATE}"),
        );
        None
    };
    let from = rate("search.from", &s.from).unwrap_or(SearchPlan::DEFAULT_FROM);
    let to = rate("search.to", &s.to);
    if let Some(to) = to.filter(|&to| to <= from) {
        c.err(
            "search.to",
            s.to.as_ref().map(Spanned::span),
            format!("{to} must be above from ({from}): the search looks between them"),
        );
    }
    let resolution = s.resolution.as_ref().and_then(|r| {
        let read = super::percent(r.get_ref()).and_then(|v| {
            if (0.001..=1.0).contains(&v) {
                Ok(v)
            } else {
                Err(format!(
                    "{:.1}%: give 0.1% to 100% of the rate, e.g. 5%",
                    v * 100.0
                ))
            }
        });
        read.map_err(|e| c.err("search.resolution", Some(r.span()), e))
            .ok()
    });
    let step = c.duration("search.step", &s.step).unwrap_or(DEFAULT_STEP);
    if step < Duration::from_secs(1) {
        c.err(
            "search.step",
            s.step.as_ref().map(Spanned::span),
            "must be at least 1s: the window is read in whole seconds",
        );
    }
    let vary = s.vary.as_ref().and_then(|v| match v.get_ref().as_str() {
        "rate" => Some(Vary::Rate),
        "clients" => Some(Vary::Clients),
        other => {
            c.err(
                "search.vary",
                Some(v.span()),
                format!("{other:?}: use \"rate\" (the open scenarios' rate) or \"clients\" (the closed population)"),
            );
            None
        }
    });
    SearchPlan {
        slo,
        vary,
        from,
        to,
        resolution: resolution.unwrap_or(DEFAULT_RESOLUTION),
        step,
        warmup: c
            .duration("search.warmup", &s.warmup)
            .unwrap_or(DEFAULT_WARMUP),
        repeat: c
            .positive("search.repeat", &s.repeat, MAX_REPEAT)
            .unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{resolve_all, Flags};

    fn search(flags: SearchFlags) -> Result<SearchPlan, String> {
        let flags = Flags {
            search: Some(flags),
            ..Flags::default()
        };
        resolve_all(None, &flags)
            .map(|p| p.search)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_flags_win_and_their_mistakes_name_the_flag() {
        let s = search(SearchFlags {
            to: Some(80.0),
            step: Some(Duration::from_secs(3)),
            warmup: Some(Duration::from_secs(1)),
            ..SearchFlags::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.from, s.to, s.repeat), (10.0, Some(80.0), 1));
        assert_eq!(s.step, Duration::from_secs(3));
        let e = search(SearchFlags {
            from: Some(100.0),
            to: Some(50.0),
            ..SearchFlags::default()
        })
        .unwrap_err();
        assert!(e.contains("--to: 50 must be above from (100)"), "{e}");
        let e = search(SearchFlags {
            resolution: Some(0.0),
            ..SearchFlags::default()
        })
        .unwrap_err();
        assert!(e.contains("--resolution: 0.0%: give 0.1% to 100%"), "{e}");
    }

    #[test]
    fn each_step_lasts_its_warmup_and_window() {
        let flags = Flags {
            search: Some(SearchFlags {
                step: Some(Duration::from_secs(4)),
                warmup: Some(Duration::from_secs(2)),
                ..SearchFlags::default()
            }),
            ..Flags::default()
        };
        let plan = resolve_all(None, &flags).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.duration(), Duration::from_secs(6));
        assert_eq!(plan.scenarios[0].warmup, Duration::from_secs(2));
    }
}
