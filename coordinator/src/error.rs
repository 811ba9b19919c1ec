//! What can stop a coordinator command, and the exit status each cause
//! gives: the table in the README ("Exit status") is this `match`.

use crate::plan::PlanErrors;

/// Why a command stopped before it could finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The plan (a file, flags, or a file with flags over it) has mistakes;
    /// each names its field and line, or its flag. Nothing was sent.
    #[error("{}", .0.to_string().trim_end())]
    Plan(#[from] PlanErrors),
    /// Flags that the plan does not cover are wrong or do not go together
    /// (agents, token, TLS files). Nothing was sent.
    #[error("{0}")]
    Flags(String),
    /// A report handed to `compare` cannot be read or compared.
    #[error("{0}")]
    CompareInput(String),
    /// Output could not be written (a closed pipe, a full disk).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// The run could not be carried out: a port did not bind, a process did
    /// not start, the report could not be written. The chain says why.
    #[error(transparent)]
    Run(#[from] anyhow::Error),
}

/// The process exit status of a command that stopped on an [`Error`]: 2 when
/// the user's input was wrong (fix it and run again), 3 when the run itself
/// could not be carried out. (0 and 1 are the report's verdict.)
impl Error {
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Error::Plan(_) | Error::Flags(_) | Error::CompareInput(_) => 2,
            Error::Output(_) | Error::Run(_) => 3,
        }
    }
}

impl Error {
    /// Did the output stop because its reader went away (`… | head`)? That
    /// is the reader's choice, not a failure: the command ends quietly.
    pub(crate) fn is_broken_pipe(&self) -> bool {
        match self {
            Error::Output(e) => e.kind() == std::io::ErrorKind::BrokenPipe,
            Error::Run(e) => e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }),
            _ => false,
        }
    }
}

/// Bad flags: exit status 2, with a message naming what to fix.
pub(crate) fn flags(message: impl Into<String>) -> Error {
    Error::Flags(message.into())
}
