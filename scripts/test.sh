#!/usr/bin/env bash
# The test command: installs what the suite needs on a Debian machine, then
# builds the binaries the end-to-end tests start and runs every test.
#
#   scripts/test.sh [NEXTEST ARGS...]
#
# The same command as root and as a user. Installing (apt and pip packages)
# needs root: run as a user, it asks sudo for that part only, and each part
# is installed only when missing, so a second run is silent until the build
# starts. Under sudo, the build and the tests run as the user who called
# sudo, so that no root-owned files land in the checkout. The two tests that
# need root (the network namespaces of coordinator/tests/it/faults.rs, the
# silent name server of frictions.rs) run only when the whole script runs
# as root (nextest profile `root`, .config/nextest.toml); otherwise the
# summary says they were left out. Arguments are passed to
# `cargo nextest run`, e.g. `-E 'test(/^fleet::/)'`. At the end it lists the
# tests that needed a second try.
set -euo pipefail
cd "$(dirname "$0")/.."
# nginx and ip live in the sbin folders, which a user's PATH may leave out;
# the tests look for them on this PATH too.
export PATH="$PATH:/usr/sbin:/sbin"

as_root() {
    if ((EUID == 0)); then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "scripts/test.sh: installing $* needs root, and sudo is not installed; run scripts/test.sh as root" >&2
        exit 1
    fi
}

# The programs the tests start, by the Debian package that ships them:
# coordinator/tests/it/html.rs renders report.html in headless Chromium;
# deploy.rs checks the systemd unit with systemd-analyze; containers.rs
# needs the Docker engine and docker-compose, swarm.rs the same engine in
# a one-node swarm of its own (`docker swarm`, `stack` and `secret` are in
# docker.io's CLI; it refuses an engine already in swarm mode); http2.rs
# serves HTTP/1.1, h2c and h2 over TLS with nginx; faults.rs cuts agents
# off with ip and unshare and pins them with taskset; the python3 scripts
# in tests/support need pip.
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need chromium chromium
need systemd-analyze systemd
need docker docker.io
need docker-compose docker-compose
need nginx nginx
need ip iproute2
need unshare util-linux
need taskset util-linux
need python3 python3
# outputs_*.rs push live results to Prometheus (remote-write receiver,
# native histograms), VictoriaMetrics and InfluxDB 1.6 and read them back;
# outputs_hlog.rs reads latency.hlog with Java HdrHistogram's
# HistogramLogProcessor, which needs a Java runtime that
# libhdrhistogram-java does not pull in.
need prometheus prometheus
need victoria-metrics victoria-metrics
need influxd influxdb
[[ -f /usr/share/java/hdrhistogram.jar ]] || missing+=(libhdrhistogram-java)
need java default-jre-headless
if ((${#missing[@]})); then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python modules the tests import: hlog.rs reads latency.hlog with an
# independent reader (hdrh); deploy.rs reads the Kubernetes manifests
# (yaml) and validates them against the bundled schemas, offline
# (kubernetes_validate); grpc.rs serves gRPC with grpcio and its
# reflection (tests/support/grpc_server.py); outputs_otlp.rs decodes OTLP
# exports with opentelemetry-proto (tests/support/otlp_receiver.py). They
# go into the python3 the tests will find on this PATH; Debian's is marked externally managed,
# which PIP_BREAK_SYSTEM_PACKAGES lets pip install into (pip versions
# without that option ignore the variable).
python=$(command -v python3)
pip_missing=()
for module in hdrh:hdrhistogram yaml:pyyaml kubernetes_validate:kubernetes-validate grpc:grpcio grpc_reflection:grpcio-reflection opentelemetry.proto.metrics.v1.metrics_pb2:opentelemetry-proto; do
    "$python" -c "import ${module%%:*}" >/dev/null 2>&1 || pip_missing+=("${module##*:}")
done
if ((${#pip_missing[@]})); then
    if ! "$python" -m pip --version >/dev/null 2>&1; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    fi
    as_root env PIP_ROOT_USER_ACTION=ignore PIP_BREAK_SYSTEM_PACKAGES=1 \
        "$python" -m pip install -q --disable-pip-version-check "${pip_missing[@]}"
fi

# Under sudo, hand the build and the tests back to the calling user.
if ((EUID == 0)) && [[ -n "${SUDO_USER:-}" && "$SUDO_USER" != root ]]; then
    exec sudo -u "$SUDO_USER" -H -- "$0" "$@"
fi

# sudo's PATH leaves out rustup's folder.
if ! command -v cargo >/dev/null 2>&1; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts/test.sh: cargo is not installed; install Rust with rustup (https://rustup.rs)" >&2
    exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install cargo-nextest --locked --quiet
fi

# Root runs every test; anyone else runs all but the two that need root.
profile=default
if ((EUID == 0)); then
    profile=root
fi
junit=target/nextest/$profile/junit.xml
rm -f "$junit"
status=0
cargo build --workspace --bins && cargo nextest run --workspace --profile "$profile" "$@" || status=$?

# The tests that failed at least once, from nextest's JUnit file: a test
# that passed on its second try is FLAKY, one that failed both is FAILED.
if [[ -f "$junit" ]]; then
    python3 - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET

retried = []
for case in ET.parse(sys.argv[1]).iter("testcase"):
    kinds = {child.tag for child in case}
    if kinds & {"flakyFailure", "flakyError", "rerunFailure", "rerunError"}:
        verdict = "FAILED" if kinds & {"failure", "error"} else "FLAKY"
        retried.append(f"  {verdict} {case.get('classname')} {case.get('name')}")
print(f"scripts/test.sh: {len(retried)} test(s) retried")
for line in retried:
    print(line)
PY
else
    echo "scripts/test.sh: nextest wrote no $junit, so the retried tests are unknown"
fi
if [[ "$profile" != root ]]; then
    echo "scripts/test.sh: not root, so the 2 tests that need root were left out (profile root in .config/nextest.toml)"
fi
exit "$status"
