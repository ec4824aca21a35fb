#!/usr/bin/env python3
"""River's ADWIN and Page-Hinkley on the streams tests/bench/drift_quality dumped.

    drift_quality --quick --dump DIR
    python3 tests/bench/drift_quality_river.py DIR

Each dumped stream is one watched series of one run of a scenario (float64 little-endian), with
its change point in DIR/index.json. Both detectors run at River's defaults on the raw values, as
a user would run them, and the table shows what driftd's table shows: false alarms where nothing
changed, the delay from the change to the first alarm (values of the series, which are records of
the model), and the alarms while the change lasts (each one a page).

Exits 77 (ctest's "skipped") when river is not installed: pip install river.
"""
import json
import os
import struct
import sys
import time


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 64
    try:
        from river import drift
    except ImportError:
        print("river is not installed (pip install river): comparison skipped")
        return 77
    directory = argv[1]
    with open(os.path.join(directory, "index.json")) as f:
        index = json.load(f)

    detectors = {"ADWIN": drift.ADWIN, "PageHinkley": drift.PageHinkley}
    # scenario -> detector -> tallies
    table = {}
    order = []
    started = time.time()
    for entry in index:
        with open(os.path.join(directory, entry["file"]), "rb") as f:
            data = f.read()
        values = struct.unpack("<%dd" % (len(data) // 8), data)
        change_from = entry.get("change_from")
        change_to = entry.get("change_to")
        scenario = entry["scenario"]
        if scenario not in table:
            table[scenario] = {}
            order.append(scenario)
        for name, make in detectors.items():
            detector = make()
            false_alarms = 0
            first = None
            during = 0
            for i, x in enumerate(values):
                detector.update(x)
                if not detector.drift_detected:
                    continue
                active = change_from is not None and i >= change_from and (
                    change_to is None or i < change_to)
                if active:
                    during += 1
                    if first is None:
                        first = i - change_from
                elif change_from is None or i < change_from:
                    false_alarms += 1
            t = table[scenario].setdefault(
                name, {"values": 0, "false": 0, "delays": [], "during": 0, "streams": 0})
            t["values"] += len(values)
            t["false"] += false_alarms
            t["during"] += during
            t["streams"] += 1
            if change_from is not None:
                t["delays"].append(first)

    print("River %s at its defaults on the same streams (run 0 of each scenario; stationary "
          "scenarios: every series of two models)\n" % __import__("river").__version__)
    print("%-55s %-12s %9s %10s %12s %14s" % ("scenario", "detector", "values", "false",
                                               "delay", "alarms during"))
    for scenario in order:
        for name in detectors:
            t = table[scenario][name]
            delays = [d for d in t["delays"] if d is not None]
            if not t["delays"]:
                delay = "-"
            elif not delays:
                delay = "never"
            else:
                delay = str(sorted(delays)[len(delays) // 2])
            per_million = 1e6 * t["false"] / max(1, t["values"])
            false_cell = "%d (%.1f/M)" % (t["false"], per_million) if t["false"] else "0"
            print("%-55s %-12s %8.2fM %10s %12s %14s" % (
                scenario, name, t["values"] / 1e6, false_cell, delay,
                t["during"] if t["delays"] else "-"))
    print("\nfalse: alarms before the change or on streams without one; alarms during: alarms "
          "while the change lasts (River's detectors restart after each).")
    print("runtime %.0f s" % (time.time() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
