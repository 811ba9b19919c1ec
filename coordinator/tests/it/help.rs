//! What the three binaries say about their flags, held as snapshots: a
//! change to a flag, its help text or its default shows up here, in review,
//! rather than reaching users unnoticed. Update with `cargo insta review`
//! (or `INSTA_UPDATE=always`) when the change is meant.

use crate::common;

use std::process::Command;

use common::bin;

fn help(binary: &str, args: &[&str]) -> String {
    let output = Command::new(bin(binary))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
    assert!(output.status.success(), "{binary} {args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

#[test]
fn coordinator_help() {
    insta::assert_snapshot!(help("loadfleet-coordinator", &["--help"]));
}

#[test]
fn coordinator_run_help() {
    insta::assert_snapshot!(help("loadfleet-coordinator", &["run", "--help"]));
}

#[test]
fn coordinator_plan_preview_help() {
    insta::assert_snapshot!(help(
        "loadfleet-coordinator",
        &["plan", "preview", "--help"]
    ));
}

#[test]
fn agent_help() {
    insta::assert_snapshot!(help("loadfleet-agent", &["--help"]));
}

#[test]
fn testbed_help() {
    insta::assert_snapshot!(help("loadfleet-testbed", &["--help"]));
}
