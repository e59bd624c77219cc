"""The wire between the grader's judge and the agent in a student's kernel.

A message is one frame: an 8-byte header (JSON length, number of buffers), the JSON
text, then each buffer with its 8-byte length. Values are encoded as plain data only
(numbers, strings, lists, dicts, NumPy arrays and PyTorch tensors of numeric dtypes);
nothing is ever pickled, so decoding what a hostile kernel sends cannot run code.
Objects that are not plain data stay where they live and travel as handles
(``{"t": "ref"}`` for the kernel's objects, ``{"t": "cb"}`` for the judge's callables).

Both sides import this module: it imports neither NumPy nor PyTorch at module level.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import sys
import time

#: Limits that a decoder enforces on what it is sent. Arrays travel as raw buffers; the JSON part
#: only holds their descriptions and small values, so it is capped far lower (checked before parsing).
MAX_MESSAGE_BYTES = 256 * 2**20
MAX_JSON_BYTES = 8 * 2**20
MAX_DEPTH = 40
MAX_ITEMS = 2_000_000
MAX_STRING = 1_000_000

_HEADER = struct.Struct("!II")
_LEN = struct.Struct("!Q")

NUMERIC_DTYPES = {
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "bfloat16",
}


class WireError(Exception):
    """A malformed, oversized or unexpected message."""


class Closed(WireError):
    """The other side closed the connection (for a kernel: it probably died)."""


def _recv_exact(sock, n: int, deadline: float | None = None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:  # the whole message by then, however slowly it trickles in
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("the message did not arrive whole in time")
            sock.settimeout(left)
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise Closed("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send(sock, obj: dict, buffers: list[bytes]) -> None:
    text = json.dumps(obj, allow_nan=True, separators=(",", ":")).encode()
    parts = [_HEADER.pack(len(text), len(buffers)), text]
    for buf in buffers:
        parts.append(_LEN.pack(len(buf)))
        parts.append(buf)
    sock.sendall(b"".join(parts))


def recv(sock, limit: int = MAX_MESSAGE_BYTES, deadline: float | None = None) -> tuple[dict, list[bytes]]:
    """One message; with ``deadline`` (``time.monotonic()``), all of it by then or ``socket.timeout``."""
    n_text, n_buf = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if n_text > min(limit, MAX_JSON_BYTES) or n_buf > MAX_ITEMS:
        raise WireError(f"message too large ({n_text} bytes of JSON, {n_buf} buffers)")
    total = n_text
    try:
        obj = json.loads(_recv_exact(sock, n_text, deadline))
    except ValueError as exc:
        raise WireError(f"malformed message: {exc}") from None
    buffers = []
    for _ in range(n_buf):
        (size,) = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline))
        total += size
        if total > limit:
            raise WireError(f"message larger than {limit} bytes")
        buffers.append(_recv_exact(sock, size, deadline))
    if not isinstance(obj, dict):
        raise WireError("a message must be a JSON object")
    return obj, buffers


# --- values --------------------------------------------------------------------------


def _torch():
    return sys.modules.get("torch")


def _numpy():
    return sys.modules.get("numpy")


def is_data(x) -> bool:
    """Whether ``x`` travels by value (a leaf of plain data)."""
    if x is None or isinstance(x, (bool, int, float, complex, str)) or x is Ellipsis or isinstance(x, slice):
        return True
    np = _numpy()
    if np is not None and isinstance(x, (np.ndarray, np.generic, np.dtype)):
        return not (isinstance(x, np.ndarray) and x.dtype.kind in "OUSV")
    torch = _torch()
    if torch is not None and isinstance(x, (torch.Tensor, torch.dtype, torch.Generator)):
        return True
    return np is not None and isinstance(x, np.random.Generator)


class Encoder:
    """Turns a value into JSON-able data plus buffers.

    ``handle(obj)`` is called for anything that is not plain data and returns its
    JSON description (a handle). ``arrays`` collects the arrays and tensors encoded,
    in order, so that a caller can send their state back after a call.
    """

    def __init__(self, handle):
        self.handle = handle
        self.buffers: list[bytes] = []
        self.arrays: list = []

    def _buffer(self, data: bytes) -> int:
        self.buffers.append(data)
        return len(self.buffers) - 1

    def encode(self, x, depth: int = 0):
        if depth > MAX_DEPTH:
            raise WireError("value nested too deeply")
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int):
            return x if -(2**63) <= x < 2**63 else {"t": "bigint", "v": str(x)}
        if isinstance(x, float):
            return x if math.isfinite(x) else {"t": "float", "v": repr(x)}
        if isinstance(x, complex):
            return {"t": "complex", "v": [x.real, x.imag]}
        if x is Ellipsis:
            return {"t": "ellipsis"}
        if isinstance(x, slice):
            return {"t": "slice", "v": [self.encode(x.start, depth + 1), self.encode(x.stop, depth + 1),
                                        self.encode(x.step, depth + 1)]}
        torch = _torch()
        np = _numpy()
        if torch is not None and isinstance(x, torch.Size):
            return {"t": "tuple", "v": [int(d) for d in x]}
        if type(x) in (tuple, list):
            return {"t": type(x).__name__, "v": [self.encode(i, depth + 1) for i in x]}
        if type(x) is dict:
            return {"t": "dict", "v": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in x.items()]}
        if torch is not None and isinstance(x, torch.dtype):
            return {"t": "ptdtype", "v": str(x).replace("torch.", "")}
        if torch is not None and isinstance(x, torch.Tensor):
            t = x.detach()
            if t.layout != torch.strided:
                t = t.to_dense()
            t = t.cpu().contiguous()
            dtype = str(t.dtype).replace("torch.", "")
            if dtype not in NUMERIC_DTYPES:
                return self.handle(x)
            raw = t.view(torch.int16).numpy().tobytes() if dtype == "bfloat16" else t.numpy().tobytes()
            self.arrays.append(x)
            return {"t": "pt", "dtype": dtype, "shape": list(t.shape), "rg": bool(x.requires_grad),
                    "b": self._buffer(raw)}
        if torch is not None and isinstance(x, torch.Generator) and x.device.type == "cpu":
            # a random generator travels as its state: the other side draws the same numbers
            return {"t": "ptgen", "b": self._buffer(x.get_state().numpy().tobytes())}
        if np is not None and isinstance(x, np.random.Generator):
            return {"t": "nprng", "v": json.dumps(x.bit_generator.state)}
        if np is not None and isinstance(x, np.dtype):
            return {"t": "npdtype", "v": x.str}
        if np is not None and isinstance(x, np.ndarray):
            if x.dtype.name not in NUMERIC_DTYPES:
                return self.handle(x)
            self.arrays.append(x)
            return {"t": "nd", "dtype": x.dtype.name, "shape": list(x.shape),
                    "b": self._buffer(np.ascontiguousarray(x).tobytes())}
        if np is not None and isinstance(x, np.generic) and x.dtype.name in NUMERIC_DTYPES:
            return {"t": "npscalar", "dtype": x.dtype.name, "b": self._buffer(x.tobytes())}
        return self.handle(x)


class Decoder:
    """Turns received data back into values; ``handle(desc)`` resolves handles."""

    def __init__(self, buffers: list[bytes], handle):
        self.buffers = buffers
        self.handle = handle
        self.items = 0
        self.arrays: list = []  # arrays and tensors decoded, in order (their state is echoed after a call)
        self.strings: list[str] = []  # text decoded (what a message must not quote when it came from a kernel)

    def _buf(self, index) -> bytes:
        if not isinstance(index, int) or not 0 <= index < len(self.buffers):
            raise WireError("bad buffer index")
        return self.buffers[index]

    def _shape(self, shape, nbytes: int, itemsize: int) -> tuple:
        if not isinstance(shape, list) or len(shape) > 32 or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise WireError("bad shape")
        count = math.prod(shape)
        if count * itemsize != nbytes:
            raise WireError("buffer size does not match the shape")
        return tuple(shape)

    def decode(self, x, depth: int = 0):
        if depth > MAX_DEPTH:
            raise WireError("value nested too deeply")
        self.items += 1
        if self.items > MAX_ITEMS:
            raise WireError("too many items")
        if x is None or isinstance(x, (bool, int, float)):
            return x
        if isinstance(x, str):
            if len(x) > MAX_STRING:
                raise WireError("string too long")
            self.strings.append(x)
            return x
        if not isinstance(x, dict) or not isinstance(x.get("t"), str):
            raise WireError("malformed value")
        t, v = x["t"], x.get("v")
        if t in ("tuple", "list"):
            if not isinstance(v, list):
                raise WireError("malformed sequence")
            items = [self.decode(i, depth + 1) for i in v]
            return tuple(items) if t == "tuple" else items
        if t == "dict":
            if not isinstance(v, list):
                raise WireError("malformed dict")
            out = {}
            for pair in v:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise WireError("malformed dict item")
                key = self.decode(pair[0], depth + 1)
                if not isinstance(key, (str, int, float, bool, tuple, type(None))):
                    raise WireError("unsupported dict key")
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if t == "bigint":
            return int(str(v)[:5000])
        if t == "float":
            if v not in ("nan", "inf", "-inf"):
                raise WireError("bad float")
            return float(v)
        if t == "complex":
            return complex(float(v[0]), float(v[1]))
        if t == "ellipsis":
            return Ellipsis
        if t == "slice":
            parts = [self.decode(i, depth + 1) for i in v]
            if len(parts) != 3 or not all(p is None or isinstance(p, int) for p in parts):
                raise WireError("bad slice")
            return slice(*parts)
        if t in ("nd", "npscalar", "npdtype"):
            import numpy as np

            if t == "npdtype":
                return np.dtype(str(v)) if str(v)[1:] in {"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                                                           "f2", "f4", "f8", "c8", "c16"} else np.dtype("float64")
            dtype = x.get("dtype")
            if dtype not in NUMERIC_DTYPES or dtype == "bfloat16":
                raise WireError("unsupported dtype")
            dt = np.dtype(dtype)
            raw = self._buf(x.get("b"))
            if t == "npscalar":
                if len(raw) != dt.itemsize:
                    raise WireError("bad scalar")
                return np.frombuffer(raw, dtype=dt)[0]
            shape = self._shape(x.get("shape"), len(raw), dt.itemsize)
            arr = np.frombuffer(raw, dtype=dt).reshape(shape).copy()
            self.arrays.append(arr)
            return arr
        if t in ("pt", "ptdtype"):
            import numpy as np
            import torch

            dtype = v if t == "ptdtype" else x.get("dtype")
            if dtype not in NUMERIC_DTYPES:
                raise WireError("unsupported dtype")
            tdtype = getattr(torch, dtype)
            if t == "ptdtype":
                return tdtype
            raw = self._buf(x.get("b"))
            np_dtype = np.dtype("int16") if dtype == "bfloat16" else np.dtype(dtype)
            shape = self._shape(x.get("shape"), len(raw), np_dtype.itemsize)
            arr = np.frombuffer(raw, dtype=np_dtype).reshape(shape).copy()
            tensor = torch.from_numpy(arr)
            if dtype == "bfloat16":
                tensor = tensor.view(torch.bfloat16)
            if x.get("rg") is True and tensor.is_floating_point():
                tensor.requires_grad_(True)
            self.arrays.append(tensor)
            return tensor
        if t == "ptgen":
            import torch

            gen = torch.Generator()
            try:
                gen.set_state(torch.frombuffer(bytearray(self._buf(x.get("b"))), dtype=torch.uint8))
            except (RuntimeError, ValueError, TypeError):
                raise WireError("bad generator state") from None
            return gen
        if t == "nprng":
            import numpy as np

            try:
                state = json.loads(str(v))
                bit = getattr(np.random, str(state["bit_generator"]))()
                if not isinstance(bit, np.random.BitGenerator):
                    raise TypeError
                bit.state = state
            except (ValueError, KeyError, TypeError, AttributeError):
                raise WireError("bad random generator state") from None
            return np.random.Generator(bit)
        if t in ("ref", "cb"):
            return self.handle(x)
        raise WireError(f"unknown value type {t!r}")


def same_value(original, new) -> bool:
    """Whether ``new`` (an array or tensor as the other side left it) equals ``original`` exactly."""
    torch = _torch()
    np = _numpy()
    try:
        if torch is not None and isinstance(original, torch.Tensor) and isinstance(new, torch.Tensor):
            a, b = original.detach(), new.detach()
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if a.is_floating_point() or a.is_complex():  # a NaN left where it was is unchanged (NaN != NaN)
                return bool(((a == b) | (a.isnan() & b.isnan())).all())
            return bool(torch.equal(a, b))
        if np is not None and isinstance(original, np.ndarray) and isinstance(new, np.ndarray):
            return original.shape == new.shape and original.dtype == new.dtype and \
                bool(np.array_equal(original, new, equal_nan=original.dtype.kind in "fc"))
    except Exception:
        return False
    return True
