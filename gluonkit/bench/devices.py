"""Runs on 1, 2 or N devices of one process: every contestant on every device count, all in one
set of interleaved repeats, so that each ratio (to the hand-written loop, to one device, to the
floor) divides figures measured in the same round."""
from .contestants import TOOLS
from .harness import compare, paired

__all__ = ["WORKER_MODULE", "row_name", "base_config", "configs", "describe", "measure", "derive"]

#: the module each contestant's process runs (``python -m gluonkit.bench.worker --worker``)
WORKER_MODULE = "gluonkit.bench.worker"
BASELINE, FLOOR = "gluon", "floor"


def row_name(tool, devices, workers=1):
    """A row's name: ``'fit x2'`` (2 devices), ``'fit x1 w2'`` (2 workers of one device)."""
    return f"{tool} x{devices}" + (f" w{workers}" if workers > 1 else "")


def base_config(args):
    """The settings every contestant of a run shares (a config without 'tool' and 'devices')."""
    return {"net": args.net_spec, "input_shapes": args.input_shapes, "label_shape": args.label_shape,
            "classes": args.classes, "loss": args.loss, "dtype": args.dtype, "device": args.device,
            "kvstore": args.kvstore, "batch": args.batch_size, "accumulate": args.accumulate,
            "steps": args.steps, "hybridize": args.hybridize, "seed": args.seed}


def configs(args):
    """name -> config of every contestant on every device count."""
    base = base_config(args)
    return {row_name(tool, devices): dict(base, tool=tool, devices=devices)
            for devices in args.devices for tool in args.contestants}


def describe(row, config, workers=1):
    """Fill a harness row with what it ran: contestant, devices, workers, batches."""
    row.update(contestant=config["tool"], label=TOOLS[config["tool"]], devices=config["devices"],
               workers=workers, kvstore=config["kvstore"] if config["devices"] * workers > 1 else None,
               batch_per_device=config["batch"], accumulate=config["accumulate"],
               global_batch=config["batch"] * config["devices"] * workers * config["accumulate"])
    return row


def measure(args, log=None):
    """Every contestant on every device count, ``args.repeats`` interleaved repeats; the rows."""
    plan = configs(args)
    rows = compare(WORKER_MODULE, list(plan), {"configs": plan}, args.repeats, log=log)
    return derive([describe(row, plan[row["name"]]) for row in rows])


def _put(row, key, values):
    row[key], row[key + "_min"], row[key + "_max"] = values


def derive(rows):
    """Add the paired ratios: ``ratio`` to the hand-written loop on the same devices,
    ``speedup`` over the same contestant on one device (and ``efficiency``, the speed-up over
    the device count), ``over_floor`` (extra time per sample over forward+backward alone)."""
    cells = {(row["contestant"], row["devices"]): row for row in rows}
    for row in rows:
        baseline = cells.get((BASELINE, row["devices"]))
        if baseline is not None:
            _put(row, "ratio", paired(row["runs"], baseline["runs"]))
        floor = cells.get((FLOOR, row["devices"]))
        if floor is not None:
            row["over_floor"] = paired(floor["runs"], row["runs"])[0] - 1
        one = cells.get((row["contestant"], 1))
        if one is not None and row["devices"] > 1:
            _put(row, "speedup", paired(row["runs"], one["runs"]))
            row["efficiency"] = row["speedup"] / row["devices"]
    return rows
