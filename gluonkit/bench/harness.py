"""The timing method: isolated contestants, interleaved repeats, paired ratios.

Every contestant runs in its own Python process, so that what one leaves behind (MXNet's
memory pools, oneDNN's compiled kernels for the shapes it met) cannot speed up or slow down
another, and so that its peak memory is its own. The processes take turns: repeat ``r`` runs
every contestant once, in an order rotated by ``r``, so a change in the machine's load spreads
over all of them. Inside a process the clock is read only after ``mx.nd.waitall()``.

A module that measures defines ``build(name, options)`` returning an object with ``setup()``
(the warm-up: hybridization's compilation, oneDNN's kernels, memory pools; timed apart) and
``run()`` (one timed repeat, returning the number of samples processed, or a dict with
``'samples'`` and any other counts of the work done), and calls :func:`serve` when started
with ``--worker``::

    if __name__ == "__main__":
        if sys.argv[1:] == [WORKER_FLAG]:
            serve(build)
        else:
            main(parse_args())

Workers run as ``python -m <module> --worker`` (from ``cwd`` when given, e.g. the folder that
holds a ``benchmarks`` package), with the parent's environment (thread settings included).
gluonkit-bench (:mod:`gluonkit.bench`) and the scripts of ``benchmarks/`` all time this way.
"""
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

__all__ = ["WORKER_FLAG", "machine", "measured_on", "serve", "compare", "paired", "markdown_table",
           "target_line", "write_json", "replace_section"]

WORKER_FLAG = "--worker"


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine():
    """What the figures depend on: CPU, cores, threads, versions, MXNet's build features, load
    (a dict)."""
    import mxnet as mx

    features = mx.runtime.Features()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "mxnet_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MXNET_")},
        "python": platform.python_version(),
        "mxnet": mx.__version__,
        "mkldnn": features.is_enabled("MKLDNN"),
        "mxnet_features": sorted(name for name, feature in features.items() if feature.enabled),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def measured_on(info, settings):
    """The sentence saying when and where figures were measured; ``info`` from :func:`machine`
    (with 'load_average_end'), ``settings`` e.g. 'OMP_NUM_THREADS=2, device cpu'."""
    return (f"Measured {info['date']} on {info['cpu']} ({info['cores']} cores, {settings}, "
            f"MXNet {info['mxnet']}, Python {info['python']}); load average "
            f"{info['load_average']} at the start, {info['load_average_end']} at the end.")


def _peak_rss_mb():
    """This process's peak resident memory in MB (ru_maxrss is kB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2 ** 20 if sys.platform == "darwin" else 2 ** 10)


def _rss_mb():
    """This process's resident memory now in MB (Linux), or None where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except OSError:
        return None


def serve(build):
    """Worker side: build one contestant, then answer 'setup', 'run' and 'stop' on stdin.

    The first line read is ``{"name": ..., "options": {...}}``; the worker replies once the
    contestant is built. Replies go to the original stdout, one JSON object per line; whatever
    else is printed goes to stderr.
    """
    import mxnet as mx

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(message):
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    spec = json.loads(sys.stdin.readline())
    tic = time.perf_counter()
    contestant = build(spec["name"], spec["options"])
    mx.nd.waitall()
    reply({"built": True, "seconds": time.perf_counter() - tic})
    for line in sys.stdin:
        command = line.strip()
        if command == "stop":
            reply({"peak_rss_mb": _peak_rss_mb()})
            return
        mx.nd.waitall()
        tic = time.perf_counter()
        result = contestant.setup() if command == "setup" else contestant.run()
        mx.nd.waitall()
        seconds = time.perf_counter() - tic
        work = result if isinstance(result, dict) else {"samples": result}
        reply({"seconds": seconds, "samples": work["samples"], "work": work, "rss_mb": _rss_mb()})


class _Worker:
    """One contestant's process, seen from the parent."""

    def __init__(self, module, name, options, env, cwd):
        self.name = name
        self._proc = subprocess.Popen([sys.executable, "-m", module, WORKER_FLAG],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      text=True, bufsize=1, cwd=cwd)
        self._send(json.dumps({"name": name, "options": options}))

    def _send(self, line):
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()

    def ask(self, command):
        try:
            self._send(command)
        except BrokenPipeError:   # it died; its exit code says more below
            pass
        return self.answer(command)

    def answer(self, command):
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.wait()
            raise RuntimeError(f"benchmark contestant {self.name!r} exited (code {code}) during "
                               f"{command!r}; its error is printed above.")
        return json.loads(line)

    def close(self):
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()


def compare(module, names, options, repeats, reference=None, log=None, cwd=None):
    """Run every contestant ``repeats`` times, interleaved, each in its own process.

    Parameters
    ----------
    module : str
        The benchmark's module name (``'benchmarks.throughput'``); run with ``--worker``, it
        must call :func:`serve`.
    names : list of str
        The contestants, passed to the script's ``build(name, options)``.
    options : dict
        JSON-serializable settings passed to every contestant.
    repeats : int
        Timed runs of each contestant (after its ``setup``).
    reference : str, optional
        A name in ``names``: every row gets ``ratio``, its median throughput over the
        reference's median.
    log : callable, optional
        Receives a line of progress per step; by default printed at once.
    cwd : str, optional
        The workers' working directory (the folder ``module`` is imported from).

    Returns
    -------
    list of dict
        One row per contestant: ``samples_per_s`` (median), ``min``, ``max``, ``runs`` (each
        repeat's samples/s), ``samples_per_run``, ``work`` (the last repeat's counts, e.g.
        samples and updates), ``ratio``, ``build_s`` (building the network and its data),
        ``setup_s`` (the warm-up: compilation and the first epoch), ``rss_mb`` (resident
        memory after the setup and after each repeat), ``peak_rss_mb``.
    """
    if reference is not None and reference not in names:
        raise ValueError(f"reference {reference!r} is not among the contestants {names}.")
    log = log or (lambda line: print(line, flush=True))
    env = dict(os.environ)
    workers = [_Worker(module, name, options, env, cwd) for name in names]
    try:
        built = {}
        for worker in workers:   # built in parallel; set up and timed one at a time
            built[worker.name] = worker.answer("build")["seconds"]
        rows = {}
        for worker in workers:
            setup = worker.ask("setup")
            rows[worker.name] = {"name": worker.name, "build_s": built[worker.name],
                                 "setup_s": setup["seconds"], "runs": [], "rss_mb": [setup["rss_mb"]]}
            log(f"  {worker.name}: ready in {setup['seconds']:.1f} s")
        for r in range(repeats):
            shift = r % len(workers)
            for worker in workers[shift:] + workers[:shift]:
                result = worker.ask("run")
                rows[worker.name]["runs"].append(result["samples"] / result["seconds"])
                rows[worker.name]["samples_per_run"] = result["samples"]
                rows[worker.name]["work"] = result["work"]
                rows[worker.name]["rss_mb"].append(result["rss_mb"])
                log(f"  repeat {r + 1}/{repeats} {worker.name}: "
                    f"{rows[worker.name]['runs'][-1]:.1f} samples/s")
        for worker in workers:
            rows[worker.name]["peak_rss_mb"] = worker.ask("stop")["peak_rss_mb"]
    finally:
        for worker in workers:
            worker.close()
    for row in rows.values():
        row.update(samples_per_s=statistics.median(row["runs"]), min=min(row["runs"]),
                   max=max(row["runs"]))
    if reference is not None:
        base = rows[reference]["samples_per_s"]
        for row in rows.values():
            row["ratio"] = row["samples_per_s"] / base
    return [rows[name] for name in names]


def paired(runs, reference):
    """Median, min and max over repeats of ``runs[r] / reference[r]``: the two ran in the same
    round, one after the other, so a change of the machine's load hits both."""
    ratios = sorted(a / b for a, b in zip(runs, reference))
    return statistics.median(ratios), ratios[0], ratios[-1]


def markdown_table(rows, columns):
    """A Markdown table of ``rows`` (dicts); ``columns`` is a list of (header, key or callable)."""
    lines = ["| " + " | ".join(header for header, _ in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        cells = [get(row) if callable(get) else str(row.get(get, "")) for _, get in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def target_line(target):
    """A checked goal as a Markdown list item: its 'target', then its 'value' and **met** or
    **NOT met**, or that it was not measured ('met' None)."""
    if target["met"] is None:
        return f"- {target['target']}: not measured in this run"
    return f"- {target['target']}: {target['value']}, **{'met' if target['met'] else 'NOT met'}**"


def write_json(path, payload):
    """Write ``payload`` as indented JSON, creating the directory."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)
        f.write("\n")


def replace_section(path, name, text):
    """Put ``text`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in the file at
    ``path``, appending the markers if they are missing (the rest of the file is kept)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    try:
        with open(path) as f:
            content = f.read()
    except FileNotFoundError:
        content = ""
    block = f"{begin}\n{text.strip()}\n{end}"
    if begin in content and end in content:
        head, rest = content.split(begin, 1)
        content = head + block + rest.split(end, 1)[1]
    else:
        content = content.rstrip() + ("\n\n" if content.strip() else "") + block + "\n"
    with open(path, "w") as f:
        f.write(content)
