//! Credentials read from files (a token, a password, a header value): the
//! one reader the coordinator and the agent share, so a file that works
//! for one works for the other — a Docker or Kubernetes secret, or one
//! written by `echo`, whose trailing newline is no part of the secret.

use std::io::{Error, ErrorKind};
use std::path::Path;

/// The file's text without its trailing line break(s). A file over
/// `max_bytes` is refused before it is read: a credential is small, and a
/// path mistyped onto a log or a disk image must not be loaded whole.
/// An empty result is the caller's to judge (an empty header value may be
/// meant; an empty token never is).
pub fn read_secret(path: &Path, max_bytes: u64) -> Result<String, Error> {
    let len = std::fs::metadata(path)?.len();
    if len > max_bytes {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("{len} bytes is no credential; at most {max_bytes}"),
        ));
    }
    let text = std::fs::read_to_string(path)?;
    Ok(text.trim_end_matches(['\r', '\n']).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_line_breaks_and_refuses_big_files() {
        let dir = std::env::temp_dir().join(format!("loadfleet-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\r\n\n").unwrap();
        assert_eq!(read_secret(&file, 64).unwrap(), "s3cret");
        let e = read_secret(&file, 4).unwrap_err();
        assert!(e.to_string().contains("no credential; at most 4"), "{e}");
        assert!(read_secret(&dir.join("missing"), 64).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
