#!/usr/bin/env python3
"""Reads an HdrHistogram interval log with an independent implementation
(the `hdrhistogram` package from PyPI, module `hdrh`) and prints one line:

    RESULT {"count": ..., "max": ..., "percentiles": {...}, ...}

Every interval of every tag is added into one histogram (`untagged` is the
count of the untagged all-outcomes series, kept apart); `seconds` lists
the distinct interval starts, in seconds from the log's StartTime. Values are in the
log's unit (microseconds for loadfleet). For each percentile it gives the
value under both common rank conventions (hdrh's rounded rank and the ceiling
rank used by the Rust crate), each with its bucket's lowest and highest
equivalent values, so the caller can compare "within one bucket".

Exit status 3 when the hdrh module is missing (scripts/test.sh installs it).
"""

import json
import math
import sys

try:
    from hdrh.histogram import HdrHistogram
    from hdrh.log import HistogramLogReader
except ImportError as e:  # pragma: no cover - reported to the Rust test
    print(f"MISSING hdrh: {e}", file=sys.stderr)
    sys.exit(3)

PERCENTILES = [50.0, 90.0, 95.0, 99.0, 99.9]


def main(path):
    # One day in microseconds: far above anything a run records.
    total = HdrHistogram(1, 24 * 3600 * 1_000_000, 3)
    reader = HistogramLogReader(path, HdrHistogram(1, 24 * 3600 * 1_000_000, 3))
    tags = {}
    untagged = 0
    intervals = 0
    seconds = set()
    while True:
        h = reader.get_next_interval_histogram()
        if h is None:
            break
        intervals += 1
        seconds.add(round(h.get_start_time_stamp() / 1000.0 - reader.get_start_time_sec(), 3))
        tag = h.get_tag() or ""
        if not tag:
            # The untagged all-outcomes series repeats the tagged entries'
            # values: counted apart, so nothing is counted twice.
            untagged += h.get_total_count()
            continue
        total.add(h)
        tags[tag] = tags.get(tag, 0) + h.get_total_count()
    reader.close()

    # Interval lines in the file, counted by hand, so that a line the reader
    # skipped cannot go unnoticed.
    with open(path, encoding="utf-8") as f:
        lines = [
            l for l in f
            if l.strip() and not l.startswith("#") and not l.startswith('"')
        ]

    buckets = [
        (item.value_iterated_to, item.count_added_in_this_iter_step)
        for item in total.get_recorded_iterator()
    ]

    def at_rank(rank):
        cum = 0
        for value, n in buckets:
            cum += n
            if cum >= rank:
                return total.get_highest_equivalent_value(value)
        return 0

    def bucket(value):
        return {
            "value": value,
            "lowest": total.get_lowest_equivalent_value(value),
            "highest": total.get_highest_equivalent_value(value),
        }

    n = total.get_total_count()
    percentiles = {}
    for p in PERCENTILES:
        exact = p * n / 100.0
        ranks = {max(1, int(exact + 0.5)), max(1, math.ceil(exact - 1e-9))}
        candidates = [bucket(total.get_value_at_percentile(p))]
        candidates += [bucket(at_rank(r)) for r in sorted(ranks)]
        percentiles[str(p)] = candidates

    print("RESULT " + json.dumps({
        "count": n,
        "intervals": intervals,
        "seconds": sorted(seconds),
        "interval_lines": len(lines),
        "tags": tags,
        "untagged": untagged,
        "max": bucket(total.get_max_value()),
        "min": total.get_min_value(),
        "mean": total.get_mean_value(),
        "percentiles": percentiles,
    }))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: hlog_summary.py LATENCY.hlog", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
