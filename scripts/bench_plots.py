#!/usr/bin/python3
"""Draws the plots of docs/benchmarks.md from the bench's own JSON (redlock-bench --json).

  scripts/bench_plots.py                  bench/published/*.json -> docs/img/bench/*.svg
  scripts/bench_plots.py --out DIR        the same plots into DIR (CI draws them into a temporary
                                          directory and diffs: scripts/check_docs.sh)
  scripts/bench_plots.py --from FILE      first copies sections 5, 12 and 13 of a new run's
                                          bench-results.json into bench/published/ (each section
                                          that FILE holds, with FILE's "meta"), then draws

The plots: fleet scaling (section 12: acquisitions per second and per-process min/max for N = 8
to 512, against node-redlock and redis-py at N = 32), the async API against the blocking API and
the raw pipelined floor (section 13), and a degraded Redlock(5) against its healthy phase
(section 5). Debian's python3-matplotlib (hence /usr/bin/python3); the SVGs are byte-for-byte
reproducible for one matplotlib version (fixed hash salt, no date).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "published")
OUT = os.path.join(ROOT, "docs", "img", "bench")
SECTIONS = {"5_degraded": "section-5-degraded", "12_fleet": "section-12-fleet",
            "13_async": "section-13-async"}
FLEET_LINES = ["default Lock", "fair = false", "Redlock(3), default options",
               "Semaphore(2), default options", "Semaphore(2), fair = false", "zookeeper::Lock",
               "postgres::Lock"]
PEERS = ["node-redlock 5.0.0-beta.2 (ioredis)", "redis-py (Debian python3-redis)"]


def load(section):
    with open(os.path.join(DATA, SECTIONS[section] + ".json"), encoding="utf-8") as f:
        run = json.load(f)
    return run["meta"], run["sections"][section]


def source_line(meta):
    return f"redlock-bench at {meta.get('commit', '?')}: {meta['command_line']}"


def finish(fig, meta, path):
    fig.text(0.01, 0.01, source_line(meta), fontsize=7, color="#555555")
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)


def fleet(path):
    meta, data = load("12_fleet")
    rows = [r for r in data["rows"] if "acquisitions_per_s" in r]
    fig, (rate, share) = plt.subplots(1, 2, figsize=(10, 5))
    for variant in FLEET_LINES:
        mine = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["processes"])
        if not mine:
            continue
        n = [r["processes"] for r in mine]
        rate.plot(n, [r["acquisitions_per_s"] for r in mine], marker="o", label=variant)
        share.plot(n, [r["per_process_min"] / r["per_process_max"] for r in mine], marker="o",
                   label=variant)
    for marker, variant in zip(("s", "D"), PEERS):
        for r in (r for r in rows if r["variant"] == variant):
            label = variant.split(" (")[0] + f" (N = {r['processes']})"
            rate.plot([r["processes"]], [r["acquisitions_per_s"]], marker, color="black",
                      label=label)
            share.plot([r["processes"]], [r["per_process_min"] / r["per_process_max"]], marker,
                       color="black", label=label)
    for ax, title, unit in ((rate, "acquisitions per second", "acq/s"),
                            (share, "fairness: fewest / most acquisitions of one process",
                             "min/max")):
        ax.set_xscale("log", base=2)
        ax.set_xticks([8, 32, 128, 512], ["8", "32", "128", "512"])
        ax.set_xlabel("processes on one key (hold 1 ms)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    rate.set_yscale("log")
    share.set_ylim(-0.05, 1.05)
    share.axhline(0.8, color="grey", linestyle="--", linewidth=1)
    handles, labels = rate.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=5, frameon=False,
               bbox_to_anchor=(0.5, 0.04))
    fig.suptitle("A fleet on one key (section 12)", fontsize=11)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    finish(fig, meta, path)


def async_api(path):
    meta, data = load("13_async")
    fig, ax = plt.subplots(figsize=(10, 3.6))
    labels, base, mine = [], [], []
    for p in data["throughput"]:
        labels.append(f"C = {p['concurrency']}: {p['variant']}\nvs {p['baseline']}")
        base.append(p["baseline_figures"]["cycles_per_s"])
        mine.append(p["variant_figures"]["cycles_per_s"])
    y = range(len(labels))
    ax.barh([i + 0.2 for i in y], base, height=0.4, color="#999999",
            label="baseline: blocking API (C = 1) or raw pipelined floor (C = 64)")
    ax.barh([i - 0.2 for i in y], mine, height=0.4, color="#1f77b4", label="async API")
    for i, (b, m) in enumerate(zip(base, mine)):
        ax.text(m * 1.1, i - 0.2, f"{m:,.0f} ({m / b:.2f}x)", va="center", fontsize=8)
        ax.text(b * 1.1, i + 0.2, f"{b:,.0f}", va="center", fontsize=8)
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(1000, 1e6)
    ax.set_xlabel("lock cycles per second (acquire + release), log scale")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("The async API against the blocking API and the floor (section 13)", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    finish(fig, meta, path)


def degraded(path):
    meta, data = load("5_degraded")
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(10, 3.6))
    kinds = [("rate_ratio", "cycles/s vs healthy"), ("first_second_ratio", "first second"),
             ("p50_ratio", "acquire p50 vs healthy")]
    width = 0.26
    for k, (key, label) in enumerate(kinds):
        xs = [i + (k - 1) * width for i in range(len(rows))]
        values = [r[key] for r in rows]
        ax.bar(xs, values, width=width, label=label)
        for x, v in zip(xs, values):
            ax.text(x, v + 0.03, f"{v:.2f}x", ha="center", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(data["goal_rate_ratio"], color="grey", linestyle="--", linewidth=1,
               label=f"goal: rates >= {data['goal_rate_ratio']}x")
    ax.axhline(data["goal_p50_ratio"], color="grey", linestyle=":", linewidth=1,
               label=f"goal: p50 <= {data['goal_p50_ratio']}x")
    ax.set_xticks(range(len(rows)), [f"{r['fault']}, {r['threads']} threads" for r in rows])
    ax.set_ylabel("ratio to the healthy phase")
    ax.set_ylim(0, 2.1)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.set_title("Redlock(5) with one sick node (section 5)", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    finish(fig, meta, path)


def take_from(run_path):
    with open(run_path, encoding="utf-8") as f:
        run = json.load(f)
    for section, name in SECTIONS.items():
        if section in run.get("sections", {}):
            kept = {"meta": run["meta"], "sections": {section: run["sections"][section]},
                    "errors": run.get("errors", [])}
            with open(os.path.join(DATA, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(kept, f, indent=1)
                f.write("\n")
            print(f"bench/published/{name}.json: section {section} of {run_path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--from", dest="source")
    args = parser.parse_args()
    if args.source:
        take_from(args.source)
    plt.rcParams.update({"svg.hashsalt": "redlock", "font.family": "DejaVu Sans",
                         "font.size": 9})
    os.makedirs(args.out, exist_ok=True)
    for name, draw in (("fleet-scaling", fleet), ("async-vs-blocking", async_api),
                       ("degraded-redlock", degraded)):
        path = os.path.join(args.out, name + ".svg")
        draw(path)
        print(f"wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
