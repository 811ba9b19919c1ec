//! From flags and a plan to what a run needs, before anything starts:
//! every combination of flags that cannot work is refused here, by name,
//! with exit status 2. Nothing here binds, spawns or sends; files are read
//! only for the secrets the flags name (`--token-file`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::RunArgs;
use crate::error::{self, Error};
use crate::output::OutputSpec;
use crate::plan::{self, Plan};
use crate::report::FailureLimits;

/// Agents a local run starts when --local-agents is not given.
const DEFAULT_LOCAL_AGENTS: u32 = 2;
/// How long a local run waits for its own agents to join.
const LOCAL_AGENT_TIMEOUT: Duration = Duration::from_secs(20);
/// Where the control plane listens for remote agents by default.
const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 7070);

/// Every flag laid over the plan of `args`, with a search's own when it
/// is one.
pub(crate) fn flags(args: &RunArgs, search: Option<plan::SearchFlags>) -> plan::Flags {
    plan::Flags {
        plan: args.flags.clone(),
        outputs: args.outputs.clone(),
        search,
    }
}

/// The control plane's TLS files (`--tls-cert`, `--tls-key`,
/// `--client-ca`), read when it is served.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ControlTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Agents must show a certificate from this CA.
    pub client_ca: Option<PathBuf>,
}

/// What a run (or a search's runs) is made of, every flag checked.
#[derive(Debug)]
pub(crate) struct RunSetup {
    pub plan: Plan,
    /// Agent processes to start on this machine; `None`: the fleet is
    /// remote.
    pub local_agents: Option<u32>,
    /// Agents the run waits for, and how few it may start with.
    pub expect: usize,
    pub min_agents: usize,
    pub token: String,
    pub tls: Option<ControlTls>,
    pub listen: SocketAddr,
    pub agent_timeout: Duration,
    /// The built-in testbed's flags, when the run aims at it.
    pub testbed: Option<Vec<String>>,
    /// The least latency the target can answer with, when known.
    pub latency_floor: Option<Duration>,
    pub failure_limits: FailureLimits,
    pub repeats: usize,
    /// Live outputs, their credentials read.
    pub outputs: Vec<OutputSpec>,
    pub metrics_listen: Option<SocketAddr>,
}

impl RunSetup {
    /// Is the fleet made of local agent processes?
    pub(crate) fn is_local(&self) -> bool {
        self.local_agents.is_some()
    }
}

/// Checks `args` against each other and the plan. `token` is what
/// `--token`/`--token-file` gave; `env` reads the environment (the
/// outputs' credentials), a parameter for tests.
pub(crate) fn setup(
    args: &RunArgs,
    plan: Plan,
    token: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RunSetup, Error> {
    if args.failures_warn > args.failures_error {
        return Err(error::flags(format!(
            "--failures-warn {:.0}% is above --failures-error {:.0}%; the warning must come first",
            args.failures_warn * 100.0,
            args.failures_error * 100.0
        )));
    }
    let (local_agents, expect) = agents(args, &plan)?;
    let local = local_agents.is_some();
    let token = match (token, local) {
        (Some(t), _) => t,
        (None, true) => random_token(),
        (None, false) => {
            return Err(error::flags(
                "--token (or LOADFLEET_TOKEN), or --token-file (or LOADFLEET_TOKEN_FILE), is required with --expect-agents (or the plan's [agents] expect), so strangers cannot join the run",
            ))
        }
    };
    let tls = control_tls(args, local)?;
    let testbed = plan.target.url == plan::TESTBED_URL;
    if testbed && !local {
        return Err(error::flags(
            "--url is required with --expect-agents or the plan's [agents] expect (the built-in testbed only runs locally)",
        ));
    }
    let min_agents = min_agents(args, &plan, expect)?;
    let outputs = crate::output::specs(&plan.outputs, env)?;
    Ok(RunSetup {
        local_agents,
        expect,
        min_agents,
        token,
        tls,
        listen: match (args.listen, local) {
            (Some(a), _) => a,
            (None, true) => SocketAddr::from(([127, 0, 0, 1], 0)),
            (None, false) => DEFAULT_LISTEN,
        },
        agent_timeout: if local {
            LOCAL_AGENT_TIMEOUT
        } else {
            args.agent_timeout
        },
        testbed: testbed.then(|| testbed_args(args, plan.scenarios.iter().any(|s| s.is_flow()))),
        // The built-in testbed's floor is its configured delay.
        latency_floor: match testbed {
            true => plan.target.latency_floor.or(Some(args.testbed_delay)),
            false => plan.target.latency_floor,
        },
        failure_limits: FailureLimits {
            warn: args.failures_warn,
            error: args.failures_error,
        },
        repeats: args.repeat as usize,
        outputs,
        metrics_listen: args.metrics_listen,
        plan,
    })
}

/// A random token for a local run, from the OS's randomness.
fn random_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Local agents to start (none: the fleet is remote), and how many agents
/// the run waits for. The plan's `[agents] expect` asks for remote agents
/// as `--expect-agents` does; `--local-agents` overrides it.
fn agents(args: &RunArgs, plan: &Plan) -> Result<(Option<u32>, usize), Error> {
    let remote = match (args.local_agents, args.expect_agents) {
        (Some(0), _) => return Err(error::flags("--local-agents must be at least 1")),
        (_, Some(0)) => return Err(error::flags("--expect-agents must be at least 1")),
        (Some(_), Some(_)) => {
            return Err(error::flags(
                "give either --local-agents or --expect-agents, not both",
            ))
        }
        (Some(_), None) => None,
        (None, Some(n)) => Some(n),
        (None, None) => plan.shares.expect,
    };
    Ok(match remote {
        Some(n) => (None, n as usize),
        None => {
            let n = args.local_agents.unwrap_or(DEFAULT_LOCAL_AGENTS);
            (Some(n), n as usize)
        }
    })
}

/// How many of the expected agents the run may start with: all of them
/// unless `--min-agents` (or the plan's `[agents] min`) says fewer.
fn min_agents(args: &RunArgs, plan: &Plan, expect: usize) -> Result<usize, Error> {
    let Some(min) = args.min_agents.or(plan.shares.min) else {
        return Ok(expect);
    };
    let min = min as usize;
    if min > expect {
        return Err(error::flags(format!(
            "--min-agents {min} is more than the {expect} agent(s) the run waits for; it must be at most --expect-agents"
        )));
    }
    Ok(min)
}

/// The control plane's TLS: for agents on other hosts only.
fn control_tls(args: &RunArgs, local: bool) -> Result<Option<ControlTls>, Error> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(_), Some(_)) if local => {
            return Err(error::flags(
                "--tls-cert secures agents on other hosts; a local run stays on loopback, so leave it out (or use --expect-agents)",
            ))
        }
        (Some(cert), Some(key)) => Some(ControlTls {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.client_ca.clone(),
        }),
        _ => None,
    };
    if args.client_ca.is_some() && tls.is_none() {
        return Err(error::flags(if local {
            "--client-ca checks agents on other hosts; a local run stays on loopback, so leave it out (or use --expect-agents with --tls-cert/--tls-key)"
        } else {
            "--client-ca needs the control plane on TLS: add --tls-cert and --tls-key (the coordinator's own certificate and key)"
        }));
    }
    Ok(tls)
}

/// The built-in testbed's flags; a plan with flows gets its shop, so the
/// purchase flow of docs/plans.md runs against it unchanged.
fn testbed_args(args: &RunArgs, flows: bool) -> Vec<String> {
    let mut tb = vec![
        "--delay".to_string(),
        humantime::format_duration(args.testbed_delay).to_string(),
    ];
    if args.flags.grpc {
        tb.push("--grpc".to_string());
    } else if flows {
        tb.push("--shop".to_string());
    }
    if let Some(pool) = args.testbed_pool {
        tb.extend([
            "--pool".to_string(),
            pool.to_string(),
            "--pool-timeout".to_string(),
            humantime::format_duration(args.testbed_pool_timeout).to_string(),
        ]);
    }
    tb
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(flags: &[&str]) -> RunArgs {
        let cli =
            crate::cli::Cli::try_parse_from(["loadfleet-coordinator", "run"].iter().chain(flags))
                .unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            crate::cli::Command::Run(args) => *args,
            _ => panic!("not a run"),
        }
    }

    /// The setup of `flags` over a plan made of flags, or its refusal.
    fn setup_of(flags: &[&str], token: Option<&str>) -> Result<RunSetup, String> {
        let args = args(flags);
        let plan =
            plan::resolve_all(None, &super::flags(&args, None)).map_err(|e| e.to_string())?;
        setup(&args, plan, token.map(str::to_string), &|_| None).map_err(|e| {
            assert_eq!(e.exit_code(), 2, "{e}");
            e.to_string()
        })
    }

    fn refused(flags: &[&str], token: Option<&str>, says: &str) {
        match setup_of(flags, token) {
            Ok(_) => panic!("{flags:?} was not refused"),
            Err(e) => assert!(e.contains(says), "{flags:?}: {e}"),
        }
    }

    #[test]
    fn a_local_run_needs_nothing_more() {
        let s = setup_of(&[], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.local_agents, s.expect, s.min_agents), (Some(2), 2, 2));
        assert_eq!(s.token.len(), 32, "a random token");
        assert_eq!(s.listen, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(s.agent_timeout, LOCAL_AGENT_TIMEOUT);
        assert_eq!(s.testbed.as_deref().map(|a| a[0].as_str()), Some("--delay"));
        assert_eq!(s.latency_floor, Some(Duration::from_millis(20)));
    }

    #[test]
    fn a_remote_fleet_listens_widely_and_waits_for_its_agents() {
        let s = setup_of(
            &[
                "--url",
                "http://127.0.0.1:9/",
                "--expect-agents",
                "3",
                "--min-agents",
                "2",
            ],
            Some("t"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.local_agents, s.expect, s.min_agents), (None, 3, 2));
        assert_eq!((s.listen, s.token.as_str()), (DEFAULT_LISTEN, "t"));
        assert_eq!(s.testbed, None);
    }

    #[test]
    fn each_refusal_names_its_flags() {
        let url = "http://127.0.0.1:9/";
        refused(
            &["--failures-warn", "60%"],
            None,
            "--failures-warn 60% is above",
        );
        refused(
            &["--local-agents", "0"],
            None,
            "--local-agents must be at least 1",
        );
        refused(
            &["--expect-agents", "0"],
            None,
            "--expect-agents must be at least 1",
        );
        refused(
            &["--url", url, "--expect-agents", "2"],
            None,
            "--token (or LOADFLEET_TOKEN)",
        );
        refused(&["--expect-agents", "2"], Some("t"), "--url is required");
        refused(
            &["--url", url, "--expect-agents", "2", "--min-agents", "3"],
            Some("t"),
            "--min-agents 3 is more than the 2",
        );
        refused(
            &["--tls-cert", "c.pem", "--tls-key", "k.pem"],
            None,
            "--tls-cert secures agents on other hosts",
        );
        refused(
            &["--client-ca", "ca.pem"],
            None,
            "a local run stays on loopback",
        );
        refused(
            &[
                "--url",
                url,
                "--expect-agents",
                "1",
                "--client-ca",
                "ca.pem",
            ],
            Some("t"),
            "--client-ca needs the control plane on TLS",
        );
    }

    #[test]
    fn an_output_credential_named_but_unset_is_refused() {
        let dir = std::env::temp_dir().join(format!("loadfleet-setup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("plan.toml");
        std::fs::write(
            &path,
            "[target]\nurl = \"testbed\"\n[[scenario]]\nrate = 1\nduration = \"1s\"\n[[output]]\nkind = \"otlp\"\nurl = \"http://127.0.0.1:9/v1/metrics\"\ntoken_env = \"NOT_SET_HERE\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let args = args(&[path.to_str().unwrap_or_default()]);
        let plan = plan::resolve_all(args.plan.as_deref(), &flags(&args, None))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = setup(&args, plan, None, &|_| None).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string()
                .contains("output[0].token_env names NOT_SET_HERE, which is not set"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
