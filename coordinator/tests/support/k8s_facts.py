#!/usr/bin/env python3
"""Reads the Kubernetes manifests in deploy/k8s and prints, as one JSON
line, the facts the deployment relies on (so the Rust test can check that
they agree with each other and with the binaries' flags).

Exit status 3 when PyYAML is missing (scripts/test.sh installs it).
"""

import glob
import json
import os
import sys

try:
    import yaml
except ImportError as e:  # pragma: no cover - reported to the Rust test
    print(f"MISSING yaml: {e}", file=sys.stderr)
    sys.exit(3)


def main(folder):
    docs = []
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    agents = by[("Job", "loadfleet-agents")]["spec"]
    coord = by[("Job", "loadfleet-coordinator")]["spec"]
    service = by[("Service", "loadfleet-coordinator")]["spec"]
    agent_pod = agents["template"]["spec"]
    coord_pod = coord["template"]["spec"]

    def env_secret(container):
        return {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        }

    anti = agent_pod["affinity"]["podAntiAffinity"]
    facts = {
        "completion_mode": agents.get("completionMode"),
        "parallelism": agents.get("parallelism"),
        "completions": agents.get("completions"),
        "agent_args": agent_pod["containers"][0]["args"],
        "coordinator_args": coord_pod["containers"][0]["args"],
        "agent_secret": env_secret(agent_pod["containers"][0]),
        "coordinator_secret": env_secret(coord_pod["containers"][0]),
        "secret_keys": list(by[("Secret", "loadfleet-token")].get("stringData", {})),
        "service_port": service["ports"][0]["port"],
        "service_selector": service["selector"],
        "coordinator_labels": coord["template"]["metadata"]["labels"],
        "agent_labels": agents["template"]["metadata"]["labels"],
        "anti_affinity_self": anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]["matchLabels"],
        "anti_affinity_required": [
            t["labelSelector"]["matchLabels"]
            for t in anti["requiredDuringSchedulingIgnoredDuringExecution"]
        ],
        "active_deadline_s": coord.get("activeDeadlineSeconds"),
        "plan": by[("ConfigMap", "loadfleet-plan")]["data"]["plan.toml"],
        "agent_resources": agent_pod["containers"][0].get("resources", {}),
        "coordinator_resources": coord_pod["containers"][0].get("resources", {}),
    }
    print("RESULT " + json.dumps(facts))


if __name__ == "__main__":
    main(sys.argv[1])
