"""gluonkit-bench refuses every option that cannot work in one line, before measuring anything."""
import os
import sys

import mxnet as mx
import pytest

from gluonkit.bench import main
from gluonkit.bench.options import parse_args

HERE = os.path.dirname(os.path.abspath(__file__))
CNN = ["--net", "gluonkit.recipes.models:small_cnn", "--input-shape", "1,8,8"]


@pytest.fixture(autouse=True)
def _nets_importable(monkeypatch):
    monkeypatch.syspath_prepend(HERE)


def _refused(argv):
    """The one-line message main() exits with."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    message = caught.value.code
    assert isinstance(message, str) and "\n" not in message and message.startswith("gluonkit-bench: "), message
    return message


@pytest.mark.parametrize("argv, names", [
    (["--net", "resnet18_v1z"], "--net resnet18_v1z: not a GluonCV model-zoo name"),
    (["--net", "no_such_module:net"], "cannot import 'no_such_module'"),
    (["--net", "bench_nets:missing"], "bench_nets has no callable 'missing'"),
    (CNN + ["--dtype", "float16"], "--dtype float16: this MXNet build has no float16 kernels"),
    (CNN + ["--devices", "2,4"], "--devices must include 1"),
    (CNN + ["--kvstore", "horovod"], "--kvstore horovod without --workers"),
    (CNN + ["--workers", "2"], "--workers must include 1"),
    (CNN + ["--workers", "1,2", "--kvstore", "local"], "--kvstore local with --workers"),
    (CNN + ["--workers", "1,2", "--devices", "1,2"], "give one --devices"),
    (CNN + ["--workers", "1,2", "--contestants", "gluon"], "--contestants gluon: a job of workers runs"),
    (CNN + ["--contestants", "gluonkit,fit,hvd"], "--contestants: unknown hvd"),
    (CNN + ["--contestants", "fit,gluonkit"], "--contestants must include gluon"),
    (CNN + ["--contestants", "gluon,module", "--accumulate", "2"], "--contestants module: does not apply"),
    (CNN + ["--threads", "2"], "--threads applies to --workers"),
    (CNN + ["--chart", "chart.svg"], "--chart chart.svg: the chart is a PNG"),
    (CNN + ["--json", os.path.join("no", "such", "folder", "a.json")], "--json no/such/folder/a.json"),
    (["--net", "bench_nets:two_branch_cnn", "--input-shape", "3,16,16"], "--input-shape 3,16,16: the network's forward"),
    (["--net", "bench_nets:fixed_ten", "--input-shape", "5", "--classes", "3"], "pass --classes 10"),
    (CNN + ["--params", "net-0000.params"], "--params applies to an exported network"),
    (["--input-shape", "3,8,8"], "--net is required"),
])
def test_bad_options_are_refused_in_one_line_naming_the_option(argv, names):
    assert names in _refused(argv)


def test_a_bad_option_ends_the_command_before_any_contestant_starts(monkeypatch):
    """The check comes first: a worker count that cannot run stops even a valid network."""
    started = []
    monkeypatch.setattr("gluonkit.bench.harness.subprocess.Popen", lambda *a, **k: started.append(a))
    _refused(CNN + ["--devices", "1,2", "--contestants", "gluon,estimator", "--accumulate", "3"])
    assert started == []


def test_the_plan_names_what_follows_from_the_options():
    args = parse_args(["--net", "bench_nets:two_branch_cnn", "--input-shape", "3,16,16", "--input-shape",
                       "3,8,8", "--accumulate", "2", "--classes", "5"])
    assert args.net_spec == {"source": "callable", "name": "bench_nets:two_branch_cnn", "args": {}}
    assert args.label_shape == [] and args.kvstore == "device"
    assert args.contestants == ["floor", "gluon", "gluonkit", "fit"]
    assert set(args.skipped) == {"module"}
    l2 = parse_args(CNN + ["--loss", "l2", "--classes", "7"])
    assert l2.label_shape == [7] and "module" in l2.skipped


def test_an_export_is_benchmarked_from_its_files(tmp_path):
    from gluonkit.recipes.models import small_cnn

    net = small_cnn(4)
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    net.export(str(tmp_path / "net"))
    args = parse_args(["--net", str(tmp_path / "net-symbol.json"), "--params", str(tmp_path / "net-0000.params"),
                       "--input-shape", "1,8,8", "--classes", "4"])
    assert args.net_spec["source"] == "exported" and "module" in args.contestants
    assert "pass --classes 4" in _refused(["--net", str(tmp_path / "net-symbol.json"), "--input-shape", "1,8,8"])


def test_compare_refuses_a_file_that_is_not_results(tmp_path):
    (tmp_path / "a.json").write_text('{"rows": []}')
    message = _refused(["--compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")])
    assert f"{tmp_path / 'a.json'}: not a gluonkit-bench results file" in message
    assert "no such file" in _refused(["--compare", str(tmp_path / "b.json"), str(tmp_path / "a.json")]).lower()


def test_python_m_runs_the_command():
    import subprocess

    result = subprocess.run([sys.executable, "-m", "gluonkit.bench", "--net", "resnet18_v1z"], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "not a GluonCV model-zoo name" in result.stderr
