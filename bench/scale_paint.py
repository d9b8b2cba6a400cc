"""Does the timeline paint in under 500 ms in Chromium at 1,000,000 runs?

What is measured
----------------
The SQLite database bench/scale_fill.py keeps (run it first: ``scale_pages.py`` does) is served
by Django's runserver (``--noreload``, one process, DEBUG off as in the benchmarks' scratch
environment) on a free loopback port. Headless Chromium (the one scripts/ensure-chromium.sh
installs) opens each timeline page once to warm up, then ``--repeats`` times (default 5):
the time from navigation start to Plotly's last ``plotly_afterplot`` and the frame after it
painted (bench/chart_speed.py's ``timeline_paint``: the overview, a month, one day before the
lab's end, and grouped by configuration + workload). The goal: under 500 ms. A missed goal is reported, not an error.

Usage (from the repository root)::

    .venv/bin/python bench/scale_paint.py [--runs N] [--repeats N] [--cache DIR] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import chart_speed
import common
import page_harness
from common import ROOT
from page_harness import Column

CACHE = Path.home() / ".cache" / "kvlab" / "scale"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000, help="the kept database's size (scale_fill.py)")
    parser.add_argument("--repeats", type=int, default=5, help="timed page loads per page")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where scale_fill.py keeps its databases")
    args = common.parse_args(parser, argv, smoke={"runs": 2_000, "repeats": 1})
    var_dir = args.cache / f"sqlite-{args.runs}"
    fill = json.loads((var_dir / "fill.json").read_text())
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    env = common.scratch_env(var_dir, allowed_hosts="127.0.0.1,localhost")
    common.setup_django(var_dir)  # for its URLconf: this process reads nothing of the database
    from django.urls import reverse

    log = args.out / "scale_paint_server.log"
    args.out.mkdir(parents=True, exist_ok=True)
    command = [str(ROOT / ".venv/bin/python"), "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    server = common.serve(command, env, log, base + reverse("chart-timeline"))
    try:
        pages = chart_speed.timeline_paint(base, args.repeats, fill["until"])
    finally:
        common.stop(server)
    title = f"Timeline paint in Chromium, {fill['runs']:,} runs (SQLite), {args.repeats} loads each after a warm-up"
    columns = [
        Column("page", lambda page: page["case"], "<20"),
        Column("traces", lambda page: page["traces"], ">6"),
        Column("points", lambda page: page["points"], ">7,"),
        Column("painted ms (median)", lambda page: page["painted_ms"], ">20.0f"),
        Column(
            f"goal (<{chart_speed.PAINT_AIM_MS:.0f} ms)",
            lambda page: "met" if page["paint_ok"] else "MISSED",
            "<14",
            gap="  ",
        ),
        Column("afterplots", lambda page: page["afterplots"], gap="  "),
    ]
    page_harness.print_table(title, columns, pages, underline=False)
    print(f"  (command: .venv/bin/python bench/scale_paint.py {' '.join(argv if argv is not None else sys.argv[1:])})")
    common.write_results(args.out, "scale_paint", {"runs": fill["runs"], "pages": pages, **common.machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
