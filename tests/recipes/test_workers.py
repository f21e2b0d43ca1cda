"""The --num-workers default: the room the CPUs this process may use leave for workers."""
import json
import logging
import os
import subprocess
import sys

from gluonkit.recipes import classify
from gluonkit.commands import usable_cpus
from gluonkit.recipes.workers import MAX_WORKERS, room_for_workers

from conftest import CLONE_ENV

_ASK = "from gluonkit.recipes.workers import room_for_workers as r; print(r({!r}))"


def _in_a_process(code, cpus=None, **env):
    """The output of ``python -c code`` in a new process whose affinity is ``cpus`` (a set of
    CPU numbers, default this process's) and whose environment has ``env`` added."""
    def restrict():
        os.sched_setaffinity(0, cpus)
    clean = {k: v for k, v in CLONE_ENV.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, **env}, timeout=120, preexec_fn=restrict if cpus else None)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def _default_in_a_process(dataset, cpus=None, **env):
    """``room_for_workers(dataset)`` in a new process (see ``_in_a_process``)."""
    return int(_in_a_process(_ASK.format(dataset), cpus, **env))


def test_files_get_one_worker_per_usable_cpu_but_one_and_memory_none():
    cpus = len(os.sched_getaffinity(0))
    assert usable_cpus() == cpus
    for dataset in ("voc:data/VOC", "coco:a.json,b.json", "rec:a.rec,b.rec", "imagefolder:d"):
        assert room_for_workers(dataset) == min(cpus - 1, MAX_WORKERS)
    for dataset in ("digits", "cifar10", "shapes"):
        assert room_for_workers(dataset) == 0


def test_the_affinity_counts_not_the_machines_cpus():
    first = min(os.sched_getaffinity(0))
    assert _default_in_a_process("voc:data", {first}) == 0       # taskset -c <one cpu>
    assert _default_in_a_process("voc:data") == min(len(os.sched_getaffinity(0)) - 1, MAX_WORKERS)


def test_training_threads_count_the_same_cpus():
    first = min(os.sched_getaffinity(0))
    code = "from gluonkit.commands import thread_settings; print(thread_settings()['OMP_NUM_THREADS'])"
    assert _in_a_process(code, {first}) == "1"
    assert _in_a_process(code) == str(len(os.sched_getaffinity(0)))


def test_horovod_ranks_on_a_machine_share_its_cpus():
    cpus = len(os.sched_getaffinity(0))
    assert _default_in_a_process("voc:data", HOROVOD_LOCAL_SIZE=str(cpus)) == 0
    assert _default_in_a_process("voc:data", HOROVOD_LOCAL_SIZE="1") == min(cpus - 1, MAX_WORKERS)


def test_the_recipe_logs_and_records_the_number_chosen(tmp_path, caplog):
    with caplog.at_level(logging.INFO, "gluonkit"):
        classify.train(classify.parse_args(["--no-progress", "--out", str(tmp_path / "run"),
                                            "--epochs", "0", "--limit", "20"]))
    assert ("Loading data in this process (--num-workers 0, what this machine has room for)."
            in caplog.messages)
    assert json.loads((tmp_path / "run" / "args.json").read_text())["num_workers"] == 0


def test_the_default_is_the_room_for_files_and_a_given_number_wins(caplog):
    from gluonkit.recipes.workers import choose_num_workers

    room = room_for_workers("voc:data/VOC")
    with caplog.at_level(logging.INFO, "gluonkit"):
        assert choose_num_workers(None, "voc:data/VOC") == room
        assert choose_num_workers(3, "voc:data/VOC") == 3
        assert choose_num_workers(None, "digits") == 0
    where = "this process" if room == 0 else f"{room} worker process{'es' if room > 1 else ''}"
    assert caplog.messages == [
        f"Loading data in {where} (--num-workers {room}, what this machine has room for).",
        "Loading data in 3 worker processes (--num-workers 3)." if room >= 3 else
        f"Loading data in 3 worker processes (--num-workers 3, more than the {room} this machine has room for).",
        "Loading data in this process (--num-workers 0, what this machine has room for)."]


def test_each_distributed_worker_seeds_its_data_apart_and_worker_0_as_one_process():
    import mxnet as mx

    from gluonkit.recipes.common import worker_seed

    class Worker:                     # what a distributed kvstore tells a recipe of its place
        def __init__(self, rank):
            self.rank = rank

    local = mx.kv.create("local")     # a real kvstore of one process: rank 0
    assert worker_seed(7, "device") == worker_seed(7, local) == worker_seed(7, Worker(0)) == 7
    seeds = [worker_seed(7, Worker(rank)) for rank in range(1, 5)]
    assert len(set(seeds + [7])) == 5 and all(0 <= s < 2 ** 31 for s in seeds)
    assert seeds == [worker_seed(7, Worker(rank)) for rank in range(1, 5)]     # in every process
    assert worker_seed(8, Worker(1)) != seeds[0]
