"""What gluonkit-bench writes: the table on stdout, the JSON and CSV files, the PNG chart, the
warning when the repeats' spread exceeds the differences reported, and ``--compare``."""
import csv
import json
import os

from .harness import write_json

__all__ = ["SCHEMA", "table", "spread_warnings", "write_csv", "write_chart", "write_results",
           "read_results", "compare_table"]

#: the version of the JSON layout (``--compare`` refuses files of another)
SCHEMA = 1
_MAX_RESULTS_BYTES = 16 << 20   # a results file is a few kB; anything far larger is not one
CSV_FIELDS = ("name", "contestant", "devices", "workers", "kvstore", "batch_per_device", "accumulate",
              "global_batch", "samples_per_s", "min", "max", "ratio", "ratio_min", "ratio_max", "speedup",
              "speedup_min", "speedup_max", "efficiency", "over_floor", "build_s", "setup_s", "peak_rss_mb")


def _fmt(value, pattern):
    return "" if value is None else format(value, pattern)


def _range(row, key):
    if key not in row:
        return ""
    return f"{row[key]:.3f} ({row[key + '_min']:.3f}-{row[key + '_max']:.3f})"


COLUMNS = (
    ("contestant", lambda r: r["label"]),
    ("devices", lambda r: str(r["devices"])),
    ("workers", lambda r: str(r["workers"])),
    ("global batch", lambda r: str(r["global_batch"])),
    ("samples/s", lambda r: f"{r['samples_per_s']:.1f}"),
    ("min-max", lambda r: f"{r['min']:.1f}-{r['max']:.1f}"),
    ("vs Gluon loop", lambda r: _range(r, "ratio")),
    ("speed-up (efficiency)", lambda r: f"{_range(r, 'speedup')} ({r['efficiency']:.0%})" if "speedup" in r else ""),
    ("over floor", lambda r: _fmt(r.get("over_floor"), "+.1%")),
    ("build s", lambda r: _fmt(r.get("build_s"), ".1f")),
    ("warm-up s", lambda r: _fmt(r.get("setup_s"), ".1f")),
)


def _layout(header, lines):
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                for line in [header, ["-" * w for w in widths]] + lines]
    return "\n".join(rendered)


def table(rows):
    """The rows as an aligned text table (ratios: median and min-max over the paired repeats)."""
    return _layout([name for name, _ in COLUMNS], [[get(row) for _, get in COLUMNS] for row in rows])


def spread_warnings(rows):
    """One line per ratio whose repeats spread wider than its distance from 1: the difference it
    reports is within the noise of this run."""
    found = []
    for row in rows:
        for key, what in (("ratio", "against the Gluon loop"), ("speedup", "over one device or worker")):
            if key not in row:
                continue
            half_spread = (row[key + "_max"] - row[key + "_min"]) / 2
            if half_spread > abs(row[key] - 1):
                found.append(f"{row['name']}: {key} {what} {row[key]:.3f}, but its repeats spread "
                             f"{row[key + '_min']:.3f}-{row[key + '_max']:.3f}")
    return found


def write_csv(path, rows):
    """One line per row, the fields of ``CSV_FIELDS``."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_chart(path, rows, title):
    """Samples/s per contestant (bars: median, whiskers: min-max), one bar per device or worker count."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    contestants = list(dict.fromkeys(r["contestant"] for r in rows))
    series = list(dict.fromkeys((r["devices"], r["workers"]) for r in rows))
    fig = Figure(figsize=(1.6 + 1.2 * len(contestants), 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(series)
    for k, (devices, workers) in enumerate(series):
        points = [(i, r) for i, c in enumerate(contestants) for r in rows
                  if r["contestant"] == c and (r["devices"], r["workers"]) == (devices, workers)]
        ax.bar([i + (k - (len(series) - 1) / 2) * width for i, _ in points],
               [r["samples_per_s"] for _, r in points], width,
               yerr=[[r["samples_per_s"] - r["min"] for _, r in points],
                     [r["max"] - r["samples_per_s"] for _, r in points]],
               label=f"{devices} device(s)" + (f" x {workers} workers" if workers > 1 else ""))
    ax.set_xticks(range(len(contestants)))
    ax.set_xticklabels(contestants, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("samples/s (median, min-max)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=80)


def write_results(path, results):
    """The results as indented JSON (``--json``)."""
    write_json(path, results)


def read_results(path):
    """A ``--json`` file of gluonkit-bench; ValueError naming the file if it is not one."""
    try:
        if os.path.getsize(path) > _MAX_RESULTS_BYTES:
            raise ValueError(f"{path}: {os.path.getsize(path)} bytes is not a gluonkit-bench results file.")
        with open(path) as f:
            results = json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err}).") from None
    if not isinstance(results, dict) or results.get("schema") != SCHEMA or not isinstance(results.get("rows"), list):
        raise ValueError(f"{path}: not a gluonkit-bench results file (schema {SCHEMA}); write one with "
                         "gluonkit-bench --json FILE.")
    return results


def compare_table(a, b, names):
    """Two runs' rows side by side, matched by contestant, devices and workers (``B / A``: the
    two ran at different times, so the ratio is not paired by repeat)."""
    key = lambda r: (r["contestant"], r["devices"], r["workers"])   # noqa: E731
    first, second = {key(r): r for r in a["rows"]}, {key(r): r for r in b["rows"]}
    lines = []
    for k in list(first) + [k for k in second if k not in first]:
        ra, rb = first.get(k), second.get(k)
        cell = lambda r: "" if r is None else f"{r['samples_per_s']:.1f} ({r['min']:.1f}-{r['max']:.1f})"  # noqa: E731
        ratio = f"{rb['samples_per_s'] / ra['samples_per_s']:.3f}" if ra and rb else ""
        lines.append([(ra or rb)["label"], str(k[1]), str(k[2]), cell(ra), cell(rb), ratio])
    header = ["contestant", "devices", "workers", f"A samples/s: {names[0]}", f"B samples/s: {names[1]}", "B / A"]
    described = [f"{label}: {r['settings']['net']}, input {r['settings']['input_shapes']}, batch "
                 f"{r['settings']['batch_size']}/device, {r['machine']['cpu']}, load "
                 f"{r['machine']['load_average'][0]} -> {r['machine']['load_average_end'][0]}"
                 for label, r in (("A", a), ("B", b))]
    return "\n".join(described + ["", _layout(header, lines)])
