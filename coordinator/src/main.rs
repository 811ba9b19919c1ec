//! The `loadfleet-coordinator` binary; everything it does is in the library.

fn main() -> std::process::ExitCode {
    loadfleet_coordinator::main()
}
