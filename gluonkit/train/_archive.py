"""The checkpoint file format: JSON and arrays in a zip whose comment is a SHA-256 of the rest.

Nothing read from a file is executed: the structure (numbers, strings, lists, dicts) is JSON,
and every array is a NumPy ``.npy`` member read with ``allow_pickle=False``, after its header
is checked against the bytes the member holds, so that no declared size allocates more than
the file brings.
"""
import hashlib
import io
import json
import numbers
import zipfile

import mxnet as mx
import numpy as np

__all__ = ["CheckpointError", "ARRAY", "to_tree", "from_tree", "write_archive", "read_archive", "npy_bytes",
           "read_npz", "json_bytes"]

class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded or resumed here: damaged, of another format or
    version, saved from another network or trainer, or at a position this run cannot continue
    from. The message names the file or the settings, and what to do.

    ``damaged`` is the path of a damaged file (else None), and ``reason`` the message without
    the fix, so that a command can word the fix for its own options.
    """

    def __init__(self, message, *, damaged=None, reason=None):
        super().__init__(message)
        self.damaged, self.reason = damaged, reason or message


ARRAY = "__array__"   # the key of a reference to an array: {"__array__": "<member>"}
_DIGEST = 64          # hex characters of the SHA-256 kept in the archive's comment
_DATE = (1980, 1, 1, 0, 0, 0)   # fixed member times: a file depends on its contents only


def to_tree(value, arrays, where):
    """``value`` as JSON values, each array moved into ``arrays`` and referred to by its key.

    Accepted: None, bool, int, float, str (NumPy scalars become Python numbers), lists and
    tuples (which come back as lists), dicts with str keys, NumPy arrays and NDArrays (which
    come back as NumPy arrays). Anything else raises ``TypeError`` naming ``where``.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (np.ndarray, mx.nd.NDArray)):
        array = value.asnumpy() if isinstance(value, mx.nd.NDArray) else value
        if array.dtype.hasobject:
            raise TypeError(f"{where} is an array of Python objects, which a checkpoint does not "
                            "store; pass an array of numbers.")
        key = f"{len(arrays)}"
        arrays[key] = array
        return {ARRAY: key}
    if isinstance(value, (list, tuple)):
        return [to_tree(item, arrays, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        keys = [key for key in value if not isinstance(key, str) or key == ARRAY]
        if keys:
            raise TypeError(f"{where} has the key {keys[0]!r}; a checkpoint stores dicts whose keys "
                            f"are strings other than {ARRAY!r}.")
        return {key: to_tree(item, arrays, f"{where}[{key!r}]") for key, item in value.items()}
    raise TypeError(f"{where} is a {type(value).__name__}, which a checkpoint does not store; pass "
                    "JSON values (numbers, strings, lists, dicts) and arrays.")


def from_tree(tree, arrays):
    """The value ``to_tree`` stored: references replaced by the arrays (KeyError if missing)."""
    if isinstance(tree, list):
        return [from_tree(item, arrays) for item in tree]
    if isinstance(tree, dict):
        if set(tree) == {ARRAY}:
            return arrays[tree[ARRAY]]
        return {key: from_tree(item, arrays) for key, item in tree.items()}
    return tree


def npy_bytes(array):
    """An array in NumPy's ``.npy`` format."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(array), allow_pickle=False)
    return buf.getvalue()


def write_archive(members):
    """A zip of ``members`` (name -> bytes) whose comment is the SHA-256 of every byte before it."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=_DATE), data)
        zf.comment = b"0" * _DIGEST
    body = buf.getvalue()[:-_DIGEST]
    return body + hashlib.sha256(body).hexdigest().encode()


def _stored_members(zf, size):
    """The members of a zip read from ``size`` bytes; ValueError if they could hold more."""
    infos = zf.infolist()
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"its member {info.filename!r} is compressed; checkpoints store "
                             "members as they are")
    if sum(info.file_size for info in infos) > size:
        raise ValueError("its members declare more bytes than the file holds")
    return infos


def read_archive(blob):
    """The members of a ``write_archive`` zip; ValueError if any byte differs from what was
    written, or if the members could allocate more than the file holds."""
    body, digest = blob[:-_DIGEST], blob[-_DIGEST:]
    if len(blob) < _DIGEST or hashlib.sha256(body).hexdigest().encode() != digest:
        raise ValueError("its checksum does not match its contents")
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        return {info.filename: zf.read(info) for info in _stored_members(zf, len(blob))}


def read_npz(members, prefix):
    """{name: array} of the ``.npy`` members named ``prefix + name + '.npy'``, read without pickle.

    Each header is checked before its array is read: an object dtype, or more bytes than the
    member holds, raises ValueError.
    """
    arrays = {}
    for member, data in members.items():
        if not (member.startswith(prefix) and member.endswith(".npy")):
            continue
        f = io.BytesIO(data)
        version = np.lib.format.read_magic(f)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(f)
        if dtype.hasobject:
            raise ValueError(f"its array {member!r} holds Python objects")
        if int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > len(data):
            raise ValueError(f"its array {member!r} declares {shape} {dtype} but holds {len(data)} bytes")
        f.seek(0)
        arrays[member[len(prefix):-4]] = np.lib.format.read_array(f, allow_pickle=False)
    return arrays


def json_bytes(tree):
    """``tree`` (JSON values) as UTF-8 JSON."""
    return json.dumps(tree, separators=(",", ":")).encode()
