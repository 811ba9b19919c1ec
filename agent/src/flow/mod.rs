//! A flow scenario as the agent runs it: its steps parsed once per
//! assignment (captures, checks, think time), and the one judgement of a
//! step's answer: which checks held, what it captured, and whether the
//! flow goes on. The worker's flow driver (`worker::flows`) runs the steps
//! and records them; this holds no state of a flow but its values and its
//! cookies ([`jar`]).

pub(crate) mod hook;
pub(crate) mod jar;

use std::time::Duration;

use loadfleet_proto::bounds::MAX_ANSWER_KEPT_BYTES;
use loadfleet_proto::flow::{Answer, Capture, Check, FlowError};
use loadfleet_proto::v1;
use loadfleet_proto::vocab::{ErrorKind, FlowFailure, GrpcStatus};

use crate::client::grpc::Decoder;
use crate::client::{Kept, Outcome};

/// Why a flow's steps cannot be used. The coordinator checks plans the
/// same way, so reaching one means the assignment did not come from a
/// valid plan.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FlowSpecError {
    #[error("step {step:?} capture {name:?}")]
    Capture {
        step: String,
        name: String,
        #[source]
        source: FlowError,
    },
    #[error("step {step:?} check {text:?}")]
    Check {
        step: String,
        text: String,
        #[source]
        source: FlowError,
    },
    #[error("step {step:?} think {min_ns} ns..{max_ns} ns: the least is above the most")]
    Think {
        step: String,
        min_ns: u64,
        max_ns: u64,
    },
}

/// One step, beyond its request (which the scenario's request mix holds,
/// at the step's index).
pub(crate) struct StepSpec {
    /// Each capture with the index of the value it sets.
    pub(crate) captures: Vec<(usize, Capture)>,
    pub(crate) checks: Vec<Check>,
    /// The pause after the step, uniform in `think.0..=think.1`.
    pub(crate) think: (Duration, Duration),
    pub(crate) continue_on_failure: bool,
}

/// A flow scenario's steps.
pub(crate) struct FlowSpec {
    pub(crate) steps: Vec<StepSpec>,
    /// Every captured value's name, in the order the steps first capture
    /// it: a step's `{{NAME}}` renders the value at its index.
    pub(crate) vars: Vec<String>,
    /// Each flow keeps its cookies in a jar of its own.
    pub(crate) cookies: bool,
}

impl FlowSpec {
    pub(crate) fn from_proto(steps: &[v1::FlowStep], cookies: bool) -> Result<Self, FlowSpecError> {
        let mut vars: Vec<String> = Vec::new();
        let mut out = Vec::with_capacity(steps.len());
        for s in steps {
            let step = s.request.as_ref().map_or("", |r| r.name.as_str());
            let mut captures = Vec::with_capacity(s.captures.len());
            for c in &s.captures {
                let capture =
                    Capture::parse(&c.expression).map_err(|source| FlowSpecError::Capture {
                        step: step.to_string(),
                        name: c.name.clone(),
                        source,
                    })?;
                let index = match vars.iter().position(|v| *v == c.name) {
                    Some(i) => i,
                    None => {
                        vars.push(c.name.clone());
                        vars.len() - 1
                    }
                };
                captures.push((index, capture));
            }
            let checks = s
                .checks
                .iter()
                .map(|text| {
                    Check::parse(text).map_err(|source| FlowSpecError::Check {
                        step: step.to_string(),
                        text: text.clone(),
                        source,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if s.think_min_ns > s.think_max_ns {
                return Err(FlowSpecError::Think {
                    step: step.to_string(),
                    min_ns: s.think_min_ns,
                    max_ns: s.think_max_ns,
                });
            }
            out.push(StepSpec {
                captures,
                checks,
                think: (
                    Duration::from_nanos(s.think_min_ns),
                    Duration::from_nanos(s.think_max_ns),
                ),
                continue_on_failure: s.continue_on_failure,
            });
        }
        Ok(Self {
            steps: out,
            vars,
            cookies,
        })
    }

    /// The steps' requests, as the scenario's request mix takes them (one
    /// kind per step, at the step's index).
    pub(crate) fn requests(steps: &[v1::FlowStep]) -> Vec<v1::RequestTemplate> {
        steps
            .iter()
            .map(|s| s.request.clone().unwrap_or_default())
            .collect()
    }

    /// Whether step `k`'s answer must be kept: something reads it.
    pub(crate) fn keeps_answer(&self, k: usize) -> bool {
        let s = &self.steps[k];
        self.cookies || !s.captures.is_empty() || !s.checks.is_empty()
    }
}

/// What a step's answer came to.
pub(crate) struct Judged {
    /// Each check's result, in the step's order.
    pub(crate) checks: Vec<bool>,
    /// Why the step fails its flow, if it does.
    pub(crate) failure: Option<FlowFailure>,
}

/// Judges step `step`'s outcome and kept answer: runs its checks (a step
/// without checks passes below 400, and a gRPC call on OK), and sets the
/// values it captures in `vars` (a capture that finds nothing empties its
/// value and fails the step). A transport error fails it with no check
/// run: there is no answer to read.
pub(crate) fn judge(
    step: &StepSpec,
    outcome: Outcome,
    kept: Option<&Kept>,
    vars: &mut [Option<String>],
) -> Judged {
    let failed_at_once = match outcome {
        Outcome::Error(ErrorKind::Timeout) => Some(FlowFailure::Timeout),
        Outcome::Error(_) => Some(FlowFailure::Error),
        Outcome::Unsent(_) => Some(FlowFailure::Unsent),
        Outcome::Status(_) | Outcome::Grpc(_) => None,
    };
    if let Some(failure) = failed_at_once {
        for (i, _) in &step.captures {
            vars[*i] = None;
        }
        return Judged {
            checks: Vec::new(),
            failure: Some(failure),
        };
    }
    let empty = http::HeaderMap::new();
    let answer = match kept {
        Some(k) => Answer::new(k.status, &k.headers, &k.body),
        None => Answer::new(status_of(outcome), &empty, &[]),
    };
    let checks: Vec<bool> = step.checks.iter().map(|c| c.holds(&answer)).collect();
    let mut failure = if step.checks.is_empty() {
        let bad = match outcome {
            Outcome::Status(code) => code >= 400,
            Outcome::Grpc(s) => !s.class().is_ok(),
            _ => false,
        };
        bad.then_some(FlowFailure::Status)
    } else {
        checks.iter().any(|ok| !ok).then_some(FlowFailure::Check)
    };
    for (i, capture) in &step.captures {
        let value = capture.extract(&answer);
        if value.is_none() && failure.is_none() {
            failure = Some(FlowFailure::Capture);
        }
        vars[*i] = value;
    }
    Judged { checks, failure }
}

/// Turns a gRPC step's kept answer into what its captures and checks
/// read: the response message as JSON (see [`Decoder`]), at most
/// [`MAX_ANSWER_KEPT_BYTES`] of it. A call that ended in another status
/// has no message to read, and one that cannot be decoded (cut by the
/// keep, compressed) reads as an empty body, so its `json.` expressions
/// find nothing rather than something made up. An answer that never
/// reached gRPC (an HTTP status other than 200) stays as it came.
pub(crate) fn read_grpc(kept: &mut Kept, outcome: Outcome, decoder: &Decoder) {
    if kept.status != 200 {
        return;
    }
    kept.body = match outcome {
        Outcome::Grpc(GrpcStatus::Ok) => decoder
            .json(&kept.body, MAX_ANSWER_KEPT_BYTES)
            .unwrap_or_default(),
        _ => bytes::Bytes::new(),
    };
}

/// The HTTP status an outcome carries, for an answer that was not kept.
fn status_of(outcome: Outcome) -> u16 {
    match outcome {
        Outcome::Status(code) => code,
        _ => 200,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use loadfleet_proto::vocab::GrpcStatus;

    fn step(captures: &[(&str, &str)], checks: &[&str]) -> (FlowSpec, Vec<Option<String>>) {
        let proto = v1::FlowStep {
            captures: captures
                .iter()
                .map(|(name, expression)| v1::Capture {
                    name: name.to_string(),
                    expression: expression.to_string(),
                })
                .collect(),
            checks: checks.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        };
        let spec = FlowSpec::from_proto(&[proto], false).expect("a valid step");
        let vars = vec![None; spec.vars.len()];
        (spec, vars)
    }

    fn kept(status: u16, body: &str) -> Kept {
        Kept {
            status,
            headers: http::HeaderMap::new(),
            body: Bytes::from(body.to_string()),
            truncated: false,
        }
    }

    #[test]
    fn without_checks_a_step_passes_below_400() {
        let (spec, mut vars) = step(&[], &[]);
        let s = &spec.steps[0];
        let ok = judge(s, Outcome::Status(302), Some(&kept(302, "")), &mut vars);
        assert_eq!(ok.failure, None);
        let bad = judge(s, Outcome::Status(503), Some(&kept(503, "")), &mut vars);
        assert_eq!(bad.failure, Some(FlowFailure::Status));
        let grpc = judge(s, Outcome::Grpc(GrpcStatus::Unavailable), None, &mut vars);
        assert_eq!(grpc.failure, Some(FlowFailure::Status));
    }

    #[test]
    fn checks_decide_over_the_status_and_captures_set_values() {
        let (spec, mut vars) = step(&[("id", "json.id")], &["status == 404", "json.id exists"]);
        let s = &spec.steps[0];
        let j = judge(
            s,
            Outcome::Status(404),
            Some(&kept(404, r#"{"id": 7}"#)),
            &mut vars,
        );
        assert_eq!((j.checks, j.failure), (vec![true, true], None));
        assert_eq!(vars, vec![Some("7".to_string())]);
        let j = judge(s, Outcome::Status(200), Some(&kept(200, "{}")), &mut vars);
        assert_eq!(
            (j.checks, j.failure),
            (vec![false, false], Some(FlowFailure::Check))
        );
        assert_eq!(
            vars,
            vec![None],
            "a capture that found nothing empties its value"
        );
    }

    #[test]
    fn a_missing_capture_fails_the_step_and_errors_fail_it_unread() {
        let (spec, mut vars) = step(&[("token", "json.token")], &[]);
        let s = &spec.steps[0];
        let j = judge(
            s,
            Outcome::Status(200),
            Some(&kept(200, "not json")),
            &mut vars,
        );
        assert_eq!(j.failure, Some(FlowFailure::Capture));
        let j = judge(s, Outcome::Error(ErrorKind::Timeout), None, &mut vars);
        assert_eq!((j.checks.len(), j.failure), (0, Some(FlowFailure::Timeout)));
        let j = judge(s, Outcome::Error(ErrorKind::Reset), None, &mut vars);
        assert_eq!(j.failure, Some(FlowFailure::Error));
    }
}
