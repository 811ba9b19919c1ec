//! The `loadfleet-agent` binary; everything it does is in the library.

fn main() -> std::process::ExitCode {
    loadfleet_agent::main()
}
