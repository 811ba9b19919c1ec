#!/usr/bin/env python3
"""Runs a command as a child and writes the rusage wait4() returns for it.

Usage: rusage_of.py OUT.json -- COMMAND [ARG ...]

The figure is the child's own (every thread of it, and anything it reaped),
not this wrapper's: that is what lets bench/noise_free.py count one agent
process inside a local fleet, where the coordinator starts the agent through
LOADFLEET_AGENT_BIN. SIGTERM and SIGINT are passed on so that a coordinator
stopping its agent still ends it, and the child's exit status is returned.
"""

import json
import os
import signal
import sys


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: rusage_of.py OUT.json -- COMMAND [ARG ...]")
    out, cmd = sys.argv[1], sys.argv[3:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            print(f"rusage_of: cannot run {cmd[0]}: {e}", file=sys.stderr)
            os._exit(127)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    with open(out, "w") as f:
        json.dump({"user_s": usage.ru_utime, "system_s": usage.ru_stime,
                   "voluntary_switches": usage.ru_nvcsw,
                   "involuntary_switches": usage.ru_nivcsw,
                   "max_rss_kib": usage.ru_maxrss}, f)
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
