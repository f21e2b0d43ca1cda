"""Training throughput: gluonkit against a hand-written Gluon loop, the Estimator and the Module API.

    python -m benchmarks.throughput            # full run (about 12 minutes on 2 idle cores)
    python -m benchmarks.throughput --quick    # seconds, for the test suite; figures not meaningful

Every contestant trains the same network from the same initial weights on the same synthetic
images with the same optimizer (see _contestants.py), each in its own process, repeats
interleaved (see gluonkit/bench/harness.py). Also measured: the forward+backward floor, the cost of
gradient accumulation, several devices (the recipe CNN and cifar_resnet20_v1, Module.fit
among them) and the peak memory of accumulation (the cost of ``on_nonfinite='skip'`` and
``clip_global_norm`` is measured by nonfinite.py). The report checks each performance goal
(``targets``): gluonkit.fit and the gluonkit.Trainer loop at least as fast as Module.fit fed
by the same DataLoader, fit close to the floor, accumulation at a quarter of the batch not far
behind the full batch, and accumulation's memory kept at the small batch's.
Results go to a JSON file, a PNG chart and the "throughput" section of benchmarks/README.md.
"""
import json
import os
import sys
import time

from ._common import (HERE, ROOT, add_output_options, apply_defaults, benchmark_parser, parse_with_config,
                      set_env, template, thread_settings)
from ._contestants import NETWORKS, QUICK_SIZE, SIZES, build
from gluonkit.bench.harness import (WORKER_FLAG, compare, machine, markdown_table, measured_on, paired,
                      replace_section, serve, target_line, write_json)

__all__ = ["CONTESTANTS", "plan", "run_group", "derive", "targets", "report_text", "parse_args", "main"]

SECTION = "throughput"
MODULE = "benchmarks.throughput"
# name: (table label, tool, accumulate[, static memory and shapes])
CONTESTANTS = {
    "floor": ("forward+backward only (the floor)", "floor", 1),
    "gluon": ("Gluon loop + gluon.Trainer (baseline)", "gluon", 1),
    "gluon-2": ("the baseline again, in a second process (noise check)", "gluon", 1),
    "gluonkit": ("Gluon loop + gluonkit.Trainer", "gluonkit", 1),
    "gluonkit-acc4": ("Gluon loop + gluonkit.Trainer(accumulate=4), 1/4 batch", "gluonkit", 4),
    "fit": ("gluonkit.fit", "fit", 1),
    "fit-static": ("gluonkit.fit, net.hybridize(static_alloc=True, static_shape=True)", "fit", 1, True),
    "gluonkit-static": ("Gluon loop + gluonkit.Trainer, static_alloc + static_shape", "gluonkit", 1, True),
    "gluonkit-acc4-static": ("gluonkit.Trainer(accumulate=4), 1/4 batch, static_alloc + static_shape",
                             "gluonkit", 4, True),
    "estimator": ("Gluon Estimator.fit", "estimator", 1),
    "module": ("Module.fit on the exported symbol (NDArrayIter, no metric)", "module", 1),
    "module-loader": ("Module.fit, fed by the same DataLoader (no metric)", "module-loader", 1),
}
BASELINE, FLOOR, NOISE = "gluon", "floor", "gluon-2"
GLUONKIT = ("gluonkit", "fit", "fit-static")
MULTI_DEFAULT = "floor,gluon,gluonkit,fit,fit-static,module,module-loader"
FULL = {"nets": ",".join(NETWORKS), "repeats": 7, "multi_repeats": 5, "devices": "1,2,4",
        "kvstores": "device,local", "mem_net": "cifar_resnet20_v1", "mem_batch": 32,
        "mem_accumulate": 8, "mem_updates": 2}
QUICK = {"nets": "cnn", "repeats": 2, "multi_repeats": 2, "mem_net": "cnn", "mem_batch": 4,
         "mem_accumulate": 2, "mem_updates": 2, "devices": "1,2", "kvstores": "device"}
# The performance goals checked by ``targets``
GOAL_NETS = ("cnn", "cifar_resnet20_v1")
GOAL_DEVICES = (1, 2, 4)
REFERENCE = "module-loader"   # Module.fit fed by the same DataLoader: fit and gluonkit at least as fast
VS_REFERENCE = 1.0
OVER_FLOOR = {"cnn": 0.15, "cifar_resnet20_v1": 0.03}   # fit's time over the floor, one device
# (accumulated at a quarter of the batch, the same at the full batch), plain and with static memory
ACCUMULATION = (("gluonkit-acc4", "gluonkit"), ("gluonkit-acc4-static", "gluonkit-static"))
ACCUMULATION_NET = "cnn"
ACCUMULATION_SPEED = 0.6      # samples/s of the accumulated run over the full batch's
MEMORY = 1.1                  # peak RSS of the accumulated run over the small batch's


def _config(contestant, net, devices, kvstore, size, device, seed):
    """The ``_contestants`` config of one contestant: ``size`` is (batch per device, batches
    per epoch on one device); on several devices an epoch has the same number of samples."""
    _, tool, accumulate, *flags = CONTESTANTS[contestant]   # flags: (static,) where given
    batch, steps = size
    return {"tool": tool, "net": net, "devices": devices, "device": device, "kvstore": kvstore,
            "batch": batch * devices // accumulate, "steps": max(1, steps // devices) * accumulate,
            "accumulate": accumulate, "on_nonfinite": "ignore", "seed": seed, "static": any(flags)}


def _name(contestant, devices, kvstore):
    return contestant if devices == 1 else f"{contestant} x{devices} {kvstore}"


def _size(net, args):
    """(batch per device, batches per epoch) of a network: the defaults, or the options'."""
    batch, steps = QUICK_SIZE if args.quick else SIZES[net]
    return args.batch_size or batch, args.steps or steps


def plan(args):
    """The groups of contestants compared together: one per network and device count, and memory.

    Returns a list of dicts: 'kind' ('throughput' or 'memory'), 'net', 'devices', 'repeats'
    and 'configs' (name -> config, with the row's 'contestant' and 'kvstore').
    """
    groups = []
    for net in args.nets:
        size = _size(net, args)
        for devices in args.devices:
            contestants = args.contestants if devices == 1 else args.multi_contestants
            if devices > 1 and net not in args.multi_nets:
                continue
            configs = {}
            for kvstore in (["device"] if devices == 1 else args.kvstores):
                for contestant in contestants:
                    config = _config(contestant, net, devices, kvstore, size, args.device, args.seed)
                    configs[_name(contestant, devices, kvstore)] = dict(config, contestant=contestant)
            groups.append({"kind": "throughput", "net": net, "devices": devices, "configs": configs,
                           "repeats": args.repeats if devices == 1 else args.multi_repeats})
    b, k = args.mem_batch, args.mem_accumulate
    memory = {}
    for name, batch, accumulate in ((f"batch {b}", b, 1), (f"batch {b * k}", b * k, 1),
                                    (f"{k} x {b} accumulated", b, k)):
        steps = args.mem_updates * b * k // batch   # the same samples in every run
        config = _config("gluonkit", args.mem_net, 1, "device", (batch, steps), args.device, args.seed)
        memory[name] = dict(config, accumulate=accumulate, contestant=name)
    groups.append({"kind": "memory", "net": args.mem_net, "devices": 1, "configs": memory,
                   "repeats": args.repeats})
    return groups


def run_group(group):
    """Compare a group's contestants; return its rows (the harness's, with the config's fields)."""
    configs = group["configs"]
    print(f"{group['kind']}: {group['net']} on {group['devices']} device(s), "
          f"{len(configs)} contestants, {group['repeats']} repeats")
    tic, load = time.perf_counter(), os.getloadavg()[0]
    rows = compare(MODULE, list(configs), {"configs": configs}, group["repeats"], cwd=ROOT)
    load = [round(load, 2), round(os.getloadavg()[0], 2)]
    print(f"  ({time.perf_counter() - tic:.0f} s, load average {load[0]} -> {load[1]})")
    for row in rows:
        config = configs[row["name"]]
        row.update(kind=group["kind"], net=config["net"], devices=config["devices"], load=load,
                   contestant=config["contestant"], batch=config["batch"] * config["accumulate"],
                   accumulate=config["accumulate"],
                   kvstore=config["kvstore"] if config["devices"] > 1 else None)
        row["ms_per_step"] = 1000.0 * row["batch"] / row["samples_per_s"]
    return rows


def derive(rows):
    """Add ratios to the baseline and overheads over the floor (same net, devices and kvstore),
    speed-ups over one device, and the memory runs' ratios to the plain small batch."""
    cells = {}
    for row in rows:
        cells.setdefault((row["kind"], row["net"], row["devices"], row["kvstore"]), {})[row["contestant"]] = row
    for (kind, net, _, _), cell in cells.items():
        if kind == "memory":
            small = min((r for r in cell.values() if r["accumulate"] == 1), key=lambda r: r["batch"])
            for row in cell.values():
                row["rss_ratio"] = row["peak_rss_mb"] / small["peak_rss_mb"]
                row["ratio"], row["ratio_min"], row["ratio_max"] = paired(row["runs"], small["runs"])
            continue
        one = cells.get((kind, net, 1, None), {})
        for name, row in cell.items():
            if BASELINE in cell:
                row["ratio"], row["ratio_min"], row["ratio_max"] = paired(row["runs"], cell[BASELINE]["runs"])
            if FLOOR in cell:
                # extra time per sample over pure compute: floor speed / own speed - 1
                row["over_floor"] = paired(cell[FLOOR]["runs"], row["runs"])[0] - 1
            if name in one:
                row["speedup"] = row["samples_per_s"] / one[name]["samples_per_s"]
                row["efficiency"] = row["speedup"] / row["devices"]
    return rows


def _find(rows, net, contestant, devices=1, kvstore=None):
    return next((r for r in rows if r["kind"] == "throughput" and r["net"] == net
                 and r["contestant"] == contestant and r["devices"] == devices
                 and r["kvstore"] == kvstore), None)


def _where(net, devices, kvstore):
    if devices == 1:
        return f"{net}, 1 device"
    return f"{net}, {devices} devices" + (f", kvstore {kvstore!r}" if kvstore else "")


def _target(target, value=None, met=None):
    """One checked goal; without a value it was not measured (its rows are missing)."""
    return {"target": target, "value": value or "not measured", "met": met}


def _at_least(target, row, reference, limit):
    """``row``'s speed over ``reference``'s, paired by repeat, checked against ``limit``."""
    if row is None or reference is None:
        return _target(target)
    ratio, low, high = paired(row["runs"], reference["runs"])
    return _target(target, f"{ratio:.3f}x (min {low:.3f}, max {high:.3f} over {len(row['runs'])} repeats)",
                   ratio >= limit)


def targets(rows):
    """The performance goals, checked on this run's rows (``run_group``'s; ``derive`` not needed).

    Returns a list of dicts 'target' (the goal, where it applies), 'value' (the figures) and
    'met' (True, False, or None where the rows it needs were not measured). Ratios are
    paired by repeat (see ``gluonkit.bench.harness.paired``); the goals:

    * ``fit`` and ``gluonkit`` at least ``VS_REFERENCE`` x the samples/s of ``REFERENCE``,
      for each of ``GOAL_NETS`` on each of ``GOAL_DEVICES`` (and each kvstore measured);
    * ``fit`` (and ``fit-static``) within ``OVER_FLOOR[net]`` of the floor's time per sample,
      one device;
    * each accumulated run of ``ACCUMULATION`` at least ``ACCUMULATION_SPEED`` x its full
      batch's samples/s on ``ACCUMULATION_NET``, one device;
    * the accumulated memory run's peak RSS within ``MEMORY`` x the small batch's.
    """
    found = []
    for net in GOAL_NETS:
        for devices in GOAL_DEVICES:
            kvstores = sorted({r["kvstore"] for r in rows if r["kind"] == "throughput"
                               and r["net"] == net and r["devices"] == devices}, key=str) or [None]
            for kvstore in kvstores:
                reference = _find(rows, net, REFERENCE, devices, kvstore)
                for name in GLUONKIT:
                    found.append(_at_least(f"{_where(net, devices, kvstore)}: {name} >= "
                                           f"{VS_REFERENCE}x {REFERENCE}",
                                           _find(rows, net, name, devices, kvstore), reference, VS_REFERENCE))
    for net, limit in OVER_FLOOR.items():
        for name in ("fit", "fit-static"):
            target = f"{net}, 1 device: {name} within {limit:.0%} of the forward+backward floor"
            row, floor = _find(rows, net, name), _find(rows, net, FLOOR)
            if row is None or floor is None:
                found.append(_target(target))
                continue
            ratio, low, high = paired(floor["runs"], row["runs"])   # floor speed / fit's = time ratio
            found.append(_target(target, f"{ratio - 1:+.1%} over the floor ({low - 1:+.1%} .. {high - 1:+.1%})",
                                 ratio - 1 <= limit))
    net = ACCUMULATION_NET
    for accumulated, full in ACCUMULATION:
        found.append(_at_least(f"{net}, 1 device: {accumulated} (a quarter of the batch) >= "
                               f"{ACCUMULATION_SPEED}x {full} (the full batch)",
                               _find(rows, net, accumulated), _find(rows, net, full), ACCUMULATION_SPEED))
    memory = [r for r in rows if r["kind"] == "memory"]
    accumulated = next((r for r in memory if r["accumulate"] > 1), None)
    plain = [r for r in memory if r["accumulate"] == 1]
    if accumulated is None or not plain:
        found.append(_target(f"memory: peak RSS of the accumulated run within {MEMORY}x the small batch"))
    else:
        small = min(plain, key=lambda r: r["batch"])
        ratio = accumulated["peak_rss_mb"] / small["peak_rss_mb"]
        found.append(_target(f"{accumulated['net']}: peak RSS of {accumulated['name']} within {MEMORY}x "
                             f"{small['name']}",
                             f"{ratio:.3f}x ({accumulated['peak_rss_mb']:.0f} MB vs {small['peak_rss_mb']:.0f} MB)",
                             ratio <= MEMORY))
    return found


def _fmt(value, digits=1):
    return f"{value:.{digits}f}"


def _range(row, key, digits=2):
    return f"{row[key]:.{digits}f} ({row[key + '_min']:.{digits}f} - {row[key + '_max']:.{digits}f})"


THROUGHPUT_COLUMNS = [
    ("contestant", lambda r: CONTESTANTS[r["contestant"]][0]),
    ("batch", lambda r: f"{r['accumulate']} x {r['batch'] // r['accumulate']}" if r["accumulate"] > 1
     else str(r["batch"])),
    ("samples/s (median)", lambda r: _fmt(r["samples_per_s"])),
    ("min - max", lambda r: f"{_fmt(r['min'])} - {_fmt(r['max'])}"),
    ("ms/step", lambda r: _fmt(r["ms_per_step"])),
    ("ratio to baseline (min - max)", lambda r: _range(r, "ratio") if "ratio" in r else ""),
    ("time over floor", lambda r: f"{r['over_floor']:+.1%}" if "over_floor" in r else ""),
    ("peak RSS MB", lambda r: f"{r['peak_rss_mb']:.0f}"),
    ("setup s", lambda r: _fmt(r["setup_s"])),
]
MEMORY_COLUMNS = [
    ("run", "name"),
    ("samples per update", "batch"),
    ("peak RSS MB", lambda r: f"{r['peak_rss_mb']:.0f}"),
    ("RSS vs small batch", lambda r: f"{r['rss_ratio']:.3f}"),
    ("samples/s (median)", lambda r: _fmt(r["samples_per_s"])),
    ("speed vs small batch (min - max)", lambda r: _range(r, "ratio")),
]


def scaling_table(rows, net):
    """Samples/s, speed-up over one device and ratio to the baseline, per device count and kvstore."""
    multi = sorted({(r["devices"], r["kvstore"]) for r in rows
                    if r["kind"] == "throughput" and r["net"] == net and r["devices"] > 1})
    if not multi:
        return ""
    contestants = [c for c in CONTESTANTS if any(_find(rows, net, c, d, k) for d, k in multi)]
    lines = ["| contestant | 1 device | " + " | ".join(f"{d} x {k}" for d, k in multi) + " |",
             "|---|---|" + "---|" * len(multi)]
    for contestant in contestants:
        cells = [_fmt(_find(rows, net, contestant)["samples_per_s"])]
        for devices, kvstore in multi:
            row = _find(rows, net, contestant, devices, kvstore)
            cells.append("" if row is None else
                         f"{_fmt(row['samples_per_s'])} ({row['speedup']:.2f}x, {row['efficiency']:.0%}; "
                         f"{row['ratio']:.2f} of baseline)")
        lines.append(f"| {CONTESTANTS[contestant][0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(rows, path):
    """Samples/s per contestant and device count, one panel per network (a PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    nets = list(dict.fromkeys(r["net"] for r in rows if r["kind"] == "throughput"))
    fig = Figure(figsize=(5.5 * len(nets), 4.5))
    FigureCanvasAgg(fig)
    for index, net in enumerate(nets):
        ax = fig.add_subplot(1, len(nets), index + 1)
        mine = [r for r in rows if r["kind"] == "throughput" and r["net"] == net]
        series = sorted({(r["devices"], r["kvstore"]) for r in mine}, key=lambda s: (s[0], s[1] or ""))
        contestants = [c for c in CONTESTANTS if any(r["contestant"] == c for r in mine)]
        width = 0.8 / len(series)
        for k, (devices, kvstore) in enumerate(series):
            points = [(i, _find(rows, net, c, devices, kvstore)) for i, c in enumerate(contestants)]
            points = [(i, r) for i, r in points if r]
            ax.bar([i + (k - (len(series) - 1) / 2) * width for i, _ in points],
                   [r["samples_per_s"] for _, r in points], width,
                   yerr=[[r["samples_per_s"] - r["min"] for _, r in points],
                         [r["max"] - r["samples_per_s"] for _, r in points]],
                   label="1 device" if devices == 1 else f"{devices} x {kvstore}")
        ax.set_xticks(range(len(contestants)))
        ax.set_xticklabels(contestants, rotation=35, ha="right", fontsize=8)
        ax.set_title(net)
        ax.set_ylabel("samples/s (median, min-max)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=80)


def parse_args(argv=None):
    parser = benchmark_parser(__doc__)
    run = parser.add_argument_group("run")
    run.add_argument("--nets", help=f"comma-separated, among {', '.join(NETWORKS)} (default all; "
                     "cnn with --quick)")
    run.add_argument("--contestants", default=",".join(CONTESTANTS),
                     help="comma-separated contestants on one device (default all)")
    run.add_argument("--repeats", type=int, help="timed epochs per contestant (default 7; 2 with --quick)")
    run.add_argument("--batch-size", type=int, help="samples per device and step, for every network "
                     f"(default per network: {SIZES})")
    run.add_argument("--steps", type=int, help="batches per timed epoch, for every network")
    run.add_argument("--seed", type=int, default=0)
    devices = parser.add_argument_group("devices")
    devices.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                         help="cpu(i) contexts (simulated devices sharing the cores) or gpu(i)")
    devices.add_argument("--devices", help="device counts (default 1,2,4; 1,2 with --quick)")
    devices.add_argument("--kvstores", help="kvstores for several devices (default device,local; "
                         "device with --quick)")
    devices.add_argument("--multi-nets", default=",".join(GOAL_NETS),
                         help=f"networks also run on several devices (default {','.join(GOAL_NETS)})")
    devices.add_argument("--multi-contestants", default=MULTI_DEFAULT,
                         help="contestants also run on several devices")
    devices.add_argument("--multi-repeats", type=int, help="timed epochs on several devices (default 5)")
    memory = parser.add_argument_group("memory (gluonkit.Trainer, one device)")
    memory.add_argument("--mem-net", help="network (default cifar_resnet20_v1; cnn with --quick)")
    memory.add_argument("--mem-batch", type=int, help="the small batch (default 32)")
    memory.add_argument("--mem-accumulate", type=int, help="micro-batches per update (default 8)")
    memory.add_argument("--mem-updates", type=int, help="updates per epoch (default 2)")
    out = add_output_options(parser, SECTION)
    out.add_argument("--from-json", metavar="FILE", help="measure nothing: rewrite the chart and "
                     "the README section from the results in FILE")
    out.add_argument("--chart", help="PNG chart (none unless given, or with --update-committed: "
                     "benchmarks/results/throughput.png)")
    args = parse_with_config(parser, sys.argv[1:] if argv is None else argv)
    apply_defaults(args, QUICK if args.quick else FULL, SECTION)
    if args.update_committed:
        args.chart = args.chart or os.path.join(HERE, "results", "throughput.png")
    _check_lists(parser, args)
    return args


def _check_lists(parser, args):
    """Split and check the comma-separated options (``parser.error`` on a bad one)."""
    for key, allowed in (("nets", NETWORKS), ("multi_nets", NETWORKS), ("contestants", CONTESTANTS),
                         ("multi_contestants", CONTESTANTS), ("kvstores", ("device", "local"))):
        values = getattr(args, key).split(",")
        bad = [v for v in values if v not in allowed]
        if bad:
            parser.error(f"--{key.replace('_', '-')}: unknown {', '.join(bad)}; choose among {', '.join(allowed)}.")
        setattr(args, key, values)
    try:
        args.devices = sorted({int(d) for d in args.devices.split(",")})
    except ValueError:
        parser.error(f"--devices must be comma-separated integers, got {args.devices!r}.")
    if args.devices[0] != 1:
        parser.error("--devices must include 1: scaling and ratios are measured against one device.")
    if BASELINE not in args.contestants or FLOOR not in args.contestants:
        parser.error(f"--contestants must include {BASELINE!r} and {FLOOR!r} (the references).")
    args.multi_nets = [n for n in args.multi_nets if n in args.nets]   # several devices: a subset
    args.multi_contestants = [c for c in args.multi_contestants if c in args.contestants]
    for key in ("repeats", "multi_repeats", "mem_batch", "mem_accumulate", "mem_updates", "batch_size", "steps"):
        value = getattr(args, key)
        if value is not None and value < 1:
            parser.error(f"--{key.replace('_', '-')} must be positive, got {value}.")
    if args.mem_accumulate < 2:
        parser.error("--mem-accumulate must be at least 2 (micro-batches per update).")


def _check_devices(device, count):
    """Refuse to ask for more GPUs than are visible."""
    import mxnet as mx

    if device == "gpu" and mx.context.num_gpus() < count:
        raise SystemExit(f"--devices asks for {count} GPUs but {mx.context.num_gpus()} are visible.")


def measure(args):
    """Run every group; return the results (machine, settings, rows)."""
    _check_devices(args.device, max(args.devices))
    info = dict(machine(), threads=thread_settings())
    print(f"{info['cpu']}, {info['cores']} cores, {info['threads']}, load {info['load_average']}")
    rows = []
    for group in plan(args):
        rows += run_group(group)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    settings = {k: v for k, v in vars(args).items()
                if k not in ("out", "chart", "readme", "config", "from_json")}
    return {"machine": info, "args": settings, "rows": derive(rows)}


def main(args):
    """Measure (or read ``--from-json``), then write the JSON, the chart and the README section."""
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        results = measure(args)
    results["targets"] = targets(results["rows"])
    report = report_text(results)
    print(report)
    if args.out and not args.from_json:
        write_json(args.out, results)
    if args.chart:
        chart(results["rows"], args.chart)
    if args.readme:
        chart_link = os.path.relpath(args.chart, os.path.dirname(os.path.abspath(args.readme))) if args.chart else None
        replace_section(args.readme, SECTION, readme_section(results, report, chart_link))
    return results


def _load(rows):
    """' (load average a - b)': the 1-minute load over the groups of ``rows``."""
    loads = [x for r in rows for x in r["load"]]
    return f" (load average {min(loads):.1f} - {max(loads):.1f})"


def report_text(results):
    """The tables and the targets, as Markdown."""
    rows = results["rows"]
    parts = []
    for net in dict.fromkeys(r["net"] for r in rows if r["kind"] == "throughput"):
        one = [r for r in rows if r["kind"] == "throughput" and r["net"] == net and r["devices"] == 1]
        parts.append(f"#### {net}, one device, batch {one[0]['batch']}{_load(one)}\n\n"
                     f"{markdown_table(one, THROUGHPUT_COLUMNS)}")
        scaling = scaling_table(rows, net)
        if scaling:
            multi = [r for r in rows if r["kind"] == "throughput" and r["net"] == net and r["devices"] > 1]
            parts.append(f"#### {net} on several devices (batch {one[0]['batch']} per device){_load(multi)}\n\n"
                         "samples/s (speed-up over one device, scaling efficiency; ratio to the Gluon "
                         f"loop on the same devices)\n\n{scaling}")
    memory = [r for r in rows if r["kind"] == "memory"]
    if memory:
        parts.append(f"#### Memory: {memory[0]['net']}, gluonkit.Trainer, one device{_load(memory)}\n\n"
                     f"{markdown_table(memory, MEMORY_COLUMNS)}")
    lines = [target_line(t) for t in results["targets"]]
    lines += [f"- {r['net']}: the baseline in a second process ran at {_range(r, 'ratio')}x the first: "
              "differences of that size are noise" for r in rows
              if r["kind"] == "throughput" and r["contestant"] == NOISE and "ratio" in r]
    parts.append("#### Targets\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def readme_section(results, report, chart_link):
    """The README section: how to reproduce, what the figures mean, the conditions, the tables."""
    info, a = results["machine"], results["args"]
    goals = {"vs_reference": VS_REFERENCE, "goal_nets": " and ".join(GOAL_NETS),
             "goal_devices": ", ".join(map(str, GOAL_DEVICES)), "accumulation": ACCUMULATION_SPEED,
             "over_floor": " and ".join(f"{v:.0%} on {k}" for k, v in OVER_FLOOR.items()),
             "accumulation_net": ACCUMULATION_NET, "memory": MEMORY}
    parts = [template(SECTION).format(repeats=a["repeats"], multi_repeats=a["multi_repeats"],
                                      multi_nets=", ".join(a["multi_nets"]),
                                      multi=", ".join(a["multi_contestants"]),
                                      devices=", ".join(map(str, a["devices"])), **goals)]
    threads = ", ".join(f"{k}={v}" for k, v in info["threads"].items())
    parts.append(measured_on(info, f"{threads}, device {a['device']}"))
    if chart_link:
        parts.append(f"![samples/s per contestant and device count]({chart_link})")
    parts.append(report)
    return "\n\n".join(parts)


def _build(name, options):
    return build(options["configs"][name])


if __name__ == "__main__":
    if sys.argv[1:] == [WORKER_FLAG]:
        serve(_build)
    else:
        set_env(MODULE)
        main(parse_args())
