//! A row of the comparison before it is read: its title, its unit and
//! what it reads from each report (the totals, a share, a request, a
//! subscription scenario, a flow or a step).

use crate::figures::{Figure, FlowFigure, SseFigure, StepFigure, Unit};

/// What a row reads from a report.
pub(super) enum Read {
    /// A figure of the totals, and of each repeat run's.
    Totals(Figure),
    /// A figure's share of what it is a share of. Its median and range
    /// come from the runs, never from `repeats.min`/`.max`: the min of a
    /// ratio is not the ratio of the mins.
    Share(Figure),
    /// A figure of the subscription scenario of this name.
    Sse(String, SseFigure),
    /// A figure of a request (scenario name, request name), or with
    /// `share` its share, from the report's scenarios (the representative
    /// run's, when repeated: runs keep no per-request figures).
    Request(String, String, Figure, bool),
    /// A figure of the flows of the flow scenario of this name.
    Flow(String, FlowFigure),
    /// A figure of a step (scenario name, step name) of a flow scenario.
    Step(String, String, StepFigure),
}

/// A row to be: its title, unit and what it reads.
pub(super) struct Line {
    pub(super) name: String,
    pub(super) unit: Unit,
    pub(super) read: Read,
}

impl Line {
    pub(super) fn totals(figure: Figure) -> Line {
        Line {
            name: figure.label(),
            unit: figure.unit(),
            read: Read::Totals(figure),
        }
    }

    pub(super) fn share(figure: Figure) -> Line {
        Line {
            name: figure.share_label(),
            unit: Unit::Percent,
            read: Read::Share(figure),
        }
    }
}
