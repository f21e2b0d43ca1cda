"""The layout's rules, read from the source: the trainer wing and the fit wing never import each
other, no module imports another package's private names, and each of MXNet's private members
that gluonkit touches is listed here with the reason (none has a public route)."""
import ast
import os

import pytest

import gluonkit

PACKAGE = os.path.dirname(gluonkit.__file__)

#: MXNet's private members gluonkit reads or sets, each with why.
MXNET_INTERNALS = {
    "_Symbol": "mx.sym.np has no public name for its symbol type, to refuse it in ops",
    "_all_index_update_counts": "an optimizer's per-device update counts, saved and restored by state_dict",
    "_index_update_count": "the optimizer's view of the current device's update counts",
    "_update_count": "counts an update as MXNet's own SGD does (the lr schedule reads the count)",
    "_get_lrs": "the learning rates with lr_mult and the schedule, as SGD computes them",
    "_get_wds": "the weight decays with wd_mult, as SGD computes them",
    "_amp_initialized": "MXNet records whether amp.init ran only in this module field",
    "_axis": "SoftmaxCrossEntropyLoss keeps its class axis only here",
    "_sparse_label": "SoftmaxCrossEntropyLoss keeps whether labels are indices only here",
    "_batch_sampler": "gluon's DataLoader has no public name for its batch sampler",
    "_batch_size": "gluon's BatchSampler has no public batch size",
    "_sampler": "gluon's BatchSampler has no public name for its sampler",
    "_last_batch": "gluon's BatchSampler has no public last_batch mode",
    "_prev": "gluon's BatchSampler keeps the samples a rollover carries over only here",
    "_check_and_get": "Parameter.list_data refuses row_sparse parameters; this reads any storage type",
    "_clear_cached_op": "the one way Gluon drops a block's cached graph",
    "_collect_params_with_prefix": "the structural names save_parameters writes",
    "_data": "Parameter has no public test for 'initialized' that does not raise",
    "_deferred_init": "Parameter has no public test for 'waiting for deferred initialization'",
    "_finish_deferred_init": "the one way to initialize a deferred parameter without a forward",
    "_differentiable": "Parameter marks running statistics (grad_req 'null' by design) only here",
    "_fresh_grad": "an array's 'written by backward since the last update' flag, as gluon.Trainer reads it",
    "_stype": "Parameter has no public storage type",
    "_grad_stype": "Parameter has no public gradient storage type",
    "_kwargs": "BatchNorm keeps use_global_stats and ndev only in its operator arguments",
    "_params": "gluon.Trainer keeps its parameter list only here (fit takes a gluon.Trainer too)",
    "_trainer": "a Parameter's Trainer, to tell whether it accumulates",
    "_updater": "a kvstore that updates holds its optimizer states only here",
}


def modules():
    """(path relative to gluonkit, syntax tree) of every module."""
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    yield os.path.relpath(path, PACKAGE), ast.parse(f.read())


def imported_modules(relpath, tree):
    """(absolute module name, imported names) of every gluonkit import in a module."""
    package = ["gluonkit"] + os.path.dirname(relpath).split(os.sep)
    package = [part for part in package if part]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []


def own_names(tree):
    """Names a module defines: functions, classes, class attributes, attributes it sets on
    ``self`` or ``cls``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
    return names


def private_reads(tree):
    """(line, attribute) of every ``x._name`` where ``x`` is not ``self``, ``cls`` or ``super()``."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
            continue
        yield node.lineno, node.attr


@pytest.mark.parametrize("wing, other", [("train", "gluonkit.trainer"), ("trainer", "gluonkit.train")])
def test_the_two_wings_never_import_each_other(wing, other):
    found = [(relpath, module) for relpath, tree in modules() if relpath.startswith(wing + os.sep)
             for module, _ in imported_modules(relpath, tree)
             if module == other or module.startswith(other + ".")]
    assert found == []


def test_no_module_imports_the_private_names_of_another_package():
    found = []
    for relpath, tree in modules():
        package = "gluonkit." + os.path.dirname(relpath).replace(os.sep, ".") if os.path.dirname(relpath) \
            else "gluonkit"
        for module, names in imported_modules(relpath, tree):
            if not module.startswith("gluonkit"):
                continue
            parts = module.split(".")
            private_module = any(part.startswith("_") for part in parts)
            same_package = module.rsplit(".", 1)[0] == package or module == package
            private_names = [name for name in names if name.startswith("_")]
            if (private_module or private_names) and not same_package:
                found.append((relpath, module, private_names))
    assert found == []


def test_every_private_member_read_is_the_module_s_own_or_a_listed_mxnet_internal():
    foreign, used = [], set()
    for relpath, tree in modules():
        own = own_names(tree)
        for line, attr in private_reads(tree):
            if attr in MXNET_INTERNALS:
                used.add(attr)
            elif attr not in own:
                foreign.append(f"{relpath}:{line} {attr}")
    assert foreign == []
    assert sorted(set(MXNET_INTERNALS) - used) == []   # the list names nothing gluonkit no longer uses


def test_the_rules_catch_what_they_forbid():
    tree = ast.parse("from ..data._sampling import DataLoader\nx = trainer._window\n")
    assert list(imported_modules(os.path.join("train", "loop.py"), tree))[0] == \
        ("gluonkit.data._sampling", ["DataLoader"])
    assert list(private_reads(tree)) == [(2, "_window")]
    assert "_window" not in own_names(tree) and "_window" not in MXNET_INTERNALS


#: The side of gluonkit.deploy that a serving machine runs (NumPy 2, onnxruntime, no mxnet).
WITHOUT_MXNET = ("metadata", "imagefiles", "preprocessing", "results", "serve")
#: What it may import from gluonkit: itself and the small modules that import no mxnet.
SERVING_IMPORTS = ["gluonkit.deploy." + name for name in WITHOUT_MXNET] + [
    "gluonkit.validate", "gluonkit.atomic", "gluonkit.errors", "gluonkit.arguments", "gluonkit"]


def test_the_serving_side_of_deploy_imports_neither_mxnet_nor_the_mxnet_side():
    found = []
    for relpath, tree in modules():
        parts = relpath.split(os.sep)
        if parts[0] != "deploy" or parts[1].removesuffix(".py") not in WITHOUT_MXNET:
            continue
        for module, names in imported_modules(relpath, tree):
            top = module.split(".")[0]
            if top in ("mxnet", "gluoncv") or (top == "gluonkit" and not any(
                    module == allowed or module.startswith(allowed + ".")
                    for allowed in SERVING_IMPORTS[:-1]) and module != "gluonkit"):
                found.append((relpath, module))
    assert found == []
    assert sorted(name for name in os.listdir(os.path.join(PACKAGE, "deploy"))
                  if not name.startswith("__")) == sorted(
        ["export.py", "onnx_export.py", "onnx_detection.py", "inference.py", "metadata.py",
         "preprocessing.py", "results.py", "imagefiles.py", "serve"])
