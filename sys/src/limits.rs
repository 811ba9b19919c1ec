//! The open-file limit: every held stream and every connection is a file
//! descriptor, and distributions still start processes with a soft limit
//! of 1,024 while allowing far more, so the agent raises its own.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

use crate::Error;

/// The open-file limit before and after [`raise_open_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// Soft limit the process started with.
    pub before: u64,
    /// Soft limit now: the hard limit, when raising it worked.
    pub now: u64,
    /// The hard limit: the most an unprivileged process may raise to.
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard limit and says what it was
/// and is. Fails only when the limit cannot be read or set at all.
pub fn raise_open_files() -> Result<OpenFiles, Error> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|source| Error::Os {
        call: "getrlimit(RLIMIT_NOFILE)",
        source,
    })?;
    if soft >= hard {
        return Ok(OpenFiles {
            before: soft,
            now: soft,
            hard,
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|source| Error::Os {
        call: "setrlimit(RLIMIT_NOFILE)",
        source,
    })?;
    Ok(OpenFiles {
        before: soft,
        now: hard,
        hard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit() {
        let limits = raise_open_files().unwrap();
        assert_eq!(limits.now, limits.hard);
        assert!(limits.now >= limits.before);
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, limits.now);
    }
}
