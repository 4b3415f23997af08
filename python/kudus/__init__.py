"""kudus: the Python binding of libkudus's worker API (kd_client).

A ctypes binding over libkudus.so, so that there is one implementation of
the protocol. Parameters and gradients are numpy float32 arrays passed by
pointer: a pull writes straight into the caller's array, and a push reads
straight from it.

    import numpy as np, kudus
    with kudus.Client("tcp://127.0.0.1:7000", "py-0", samples=60000) as c:
        c.register()
        release = c.wait_start()
        params = np.zeros(c.param_count, np.float32)
        grad = np.zeros_like(params)
        while c.pull(params):
            loss = my_gradient(params, release.rows, grad)
            if not (c.push(grad, len(release.rows)) and (release := c.arrive(loss))):
                break

kudus.torch.Worker trains any torch.nn.Module this way; kudus.snapshot and
`python3 -m kudus export` give a cluster's model back (from a running
cluster or the shards' checkpoints).

The library is found through KUDUS_LIB (a path to libkudus.so), then the
copy a wheel carries (built with KUDUS_WHEEL_LIB set), then the build tree
when this package is imported from a source checkout, then pkg-config
(`pkg-config --variable=libdir kudus`), then the system loader's path.
kudus.LIBRARY_PATH and kudus.LIBRARY_SOURCE say which one was loaded, and
the `kudus` logger says so at INFO.
"""
import ctypes
import ctypes.util
import logging
import os
import subprocess
from collections import namedtuple

import numpy as np

__all__ = ["Client", "Release", "Tensor", "KudusError", "library_version", "LIBRARY_PATH",
           "LIBRARY_SOURCE"]
__version__ = "0.1.0"

log = logging.getLogger("kudus")
log.addHandler(logging.NullHandler())

_TENSOR_NAME_MAX = 32


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * _TENSOR_NAME_MAX), ("offset", ctypes.c_size_t),
                ("count", ctypes.c_size_t), ("rows", ctypes.c_size_t), ("cols", ctypes.c_size_t)]


class _Release(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint64), ("clock", ctypes.c_uint64),
                ("min_clock", ctypes.c_uint64), ("group", ctypes.c_uint64),
                ("staleness", ctypes.c_uint64), ("dropped", ctypes.c_bool),
                ("rows", ctypes.POINTER(ctypes.c_uint64)), ("n_rows", ctypes.c_size_t)]


Release = namedtuple("Release", "version clock min_clock group staleness dropped rows")
Release.__doc__ = "A scheduler's decision: pull at least version, compute clock on rows (a lease)."
Tensor = namedtuple("Tensor", "name offset count rows cols")
Tensor.__doc__ = "One named tensor of the flat parameter vector, row-major rows x cols."


class KudusError(RuntimeError):
    """A call failed for a reason other than the end of the run."""


def _pkg_config_libdir():
    """libkudus's directory as pkg-config knows it, or None."""
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "kudus"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _mapped_path(name):
    """The file the loader mapped for a library loaded by name (Linux), else the name."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith("libkudus.so"):
                    return path
    except OSError:
        pass
    return name


def _candidates():
    """(source, path) pairs in the order they are tried."""
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "_lib")
    for name in ("libkudus.so.0", "libkudus.so"):
        if os.path.exists(os.path.join(bundled, name)):
            yield "bundled", os.path.join(bundled, name)
    # A source checkout (PYTHONPATH=python): the tree's own build.
    tree = os.path.join(here, "..", "..")
    if os.path.exists(os.path.join(tree, "CMakeLists.txt")):
        for build in ("build", "build-asan"):
            path = os.path.normpath(os.path.join(tree, build, "libkudus.so"))
            if os.path.exists(path):
                yield "build tree", path
    libdir = _pkg_config_libdir()
    if libdir:
        for name in ("libkudus.so.0", "libkudus.so"):
            if os.path.exists(os.path.join(libdir, name)):
                yield "pkg-config", os.path.join(libdir, name)
    yield "system", "libkudus.so.0"
    found = ctypes.util.find_library("kudus")
    if found and found != "libkudus.so.0":
        yield "system", found


def _find_library():
    """Load libkudus; returns (library, path, source)."""
    explicit = os.environ.get("KUDUS_LIB")
    if explicit:
        # Asked for by name: that one or none.
        try:
            lib = ctypes.CDLL(explicit)
        except OSError as e:
            raise ImportError(f"kudus: cannot load KUDUS_LIB={explicit!r}: {e}") from None
        return lib, (os.path.abspath(explicit) if os.sep in explicit else _mapped_path(explicit)), "KUDUS_LIB"
    tried = []
    for source, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({source}): {e}")
            continue
        return lib, (path if os.path.isabs(path) else _mapped_path(path)), source
    raise ImportError("kudus: libkudus.so not found; set KUDUS_LIB to its path, build the tree "
                      "(make build), or install it (cmake --install) where pkg-config or the "
                      "loader finds it. Tried: " + "; ".join(tried))


_lib, LIBRARY_PATH, LIBRARY_SOURCE = _find_library()
log.info("kudus: loaded %s (%s)", LIBRARY_PATH, LIBRARY_SOURCE)


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_P = ctypes.c_void_p
_FLOATS = ctypes.POINTER(ctypes.c_float)
_new = _fn("kd_client_new", _P, ctypes.c_char_p, ctypes.c_char_p)
_destroy = _fn("kd_client_destroy", None, ctypes.POINTER(_P))
_set_samples = _fn("kd_client_set_samples", None, _P, ctypes.c_uint64)
_set_monitor = _fn("kd_client_set_monitor", ctypes.c_int, _P, ctypes.c_char_p)
_set_evaluator = _fn("kd_client_set_evaluator", None, _P)
_report_eval = _fn("kd_client_report_eval", ctypes.c_int, _P, ctypes.c_char_p, ctypes.c_double,
                   ctypes.c_double, ctypes.c_uint64)
_set_rank = _fn("kd_client_set_rank", None, _P, ctypes.c_uint64)
_set_timeout = _fn("kd_client_set_timeout", None, _P, ctypes.c_int)
_set_heartbeat = _fn("kd_client_set_heartbeat", None, _P, ctypes.c_int)
_set_layout = _fn("kd_client_set_layout", ctypes.c_int, _P, ctypes.POINTER(_Tensor), ctypes.c_size_t)
_set_curve_keys = _fn("kd_client_set_curve_keys", ctypes.c_int, _P, ctypes.c_char_p)
_register = _fn("kd_client_register", ctypes.c_int, _P, ctypes.c_int)
_wait_start = _fn("kd_client_wait_start", ctypes.c_int, _P, ctypes.POINTER(_Release), ctypes.c_int)
_rank = _fn("kd_client_rank", ctypes.c_uint64, _P)
_param_count = _fn("kd_client_param_count", ctypes.c_size_t, _P)
_model = _fn("kd_client_model", ctypes.c_char_p, _P)
_hidden = _fn("kd_client_hidden", ctypes.c_uint32, _P)
_batch = _fn("kd_client_batch", ctypes.c_size_t, _P)
_seed = _fn("kd_client_seed", ctypes.c_uint64, _P)
_momentum = _fn("kd_client_momentum", ctypes.c_double, _P)
_consistency = _fn("kd_client_consistency", ctypes.c_char_p, _P)
_tensor_count = _fn("kd_client_tensor_count", ctypes.c_size_t, _P)
_tensor = _fn("kd_client_tensor", ctypes.POINTER(_Tensor), _P, ctypes.c_size_t)
_init_params = _fn("kd_client_init_params", ctypes.c_int, _P, _FLOATS)
_pull = _fn("kd_client_pull", ctypes.c_int, _P, _FLOATS)
_pull_version = _fn("kd_client_pull_version", ctypes.c_int, _P, _FLOATS, ctypes.c_uint64)
_pull_final = _fn("kd_client_pull_final", ctypes.c_int, _P, _FLOATS, ctypes.c_int)
_stop_version = _fn("kd_client_stop_version", ctypes.c_uint64, _P)
_version = _fn("kd_client_version", ctypes.c_uint64, _P)
_push = _fn("kd_client_push", ctypes.c_int, _P, _FLOATS, ctypes.c_uint64)
_arrive = _fn("kd_client_arrive", ctypes.c_int, _P, ctypes.c_float, ctypes.POINTER(_Release))
_sleep = _fn("kd_client_sleep", ctypes.c_int, _P, ctypes.c_double)
_set_emulated = _fn("kd_client_set_emulated_ms", None, _P, ctypes.c_double)
_telemetry = _fn("kd_client_telemetry", ctypes.c_int, _P)
_leave = _fn("kd_client_leave", ctypes.c_int, _P, ctypes.c_char_p)
_stopped = _fn("kd_client_stopped", ctypes.c_bool, _P)
_dropped = _fn("kd_client_dropped", ctypes.c_uint64, _P)
_refused = _fn("kd_client_refused", ctypes.c_uint64, _P)
_set_wire_dtype = _fn("kd_client_set_wire_dtype", ctypes.c_int, _P, ctypes.c_char_p)
_set_shm = _fn("kd_client_set_shm", None, _P, ctypes.c_bool)
_set_lease_ahead = _fn("kd_client_set_lease_ahead", None, _P, ctypes.c_bool)
_failure = _fn("kd_client_failure", ctypes.c_char_p, _P)
_version_str = _fn("kudus_version", ctypes.c_char_p)
_U64S = ctypes.POINTER(ctypes.c_uint64)
_set_keyed_layout = _fn("kd_client_set_keyed_layout", ctypes.c_int, _P, ctypes.c_char_p, ctypes.c_uint64,
                        ctypes.c_uint64)
_keyed = _fn("kd_client_keyed", ctypes.c_bool, _P)
_pull_keys = _fn("kd_client_pull_keys", ctypes.c_int, _P, _U64S, ctypes.c_size_t, _FLOATS)
_push_keys = _fn("kd_client_push_keys", ctypes.c_int, _P, _U64S, ctypes.c_size_t, _FLOATS, ctypes.c_uint64)
_ahead_rows = _fn("kd_client_ahead_rows", _U64S, _P, ctypes.POINTER(ctypes.c_size_t))
_admitted = _fn("kd_client_admitted", ctypes.c_bool, _P)


def library_version():
    """The loaded libkudus's version, "MAJOR.MINOR.PATCH"."""
    return _version_str().decode()


def _release(r):
    rows = np.ctypeslib.as_array(r.rows, shape=(r.n_rows,)).copy() if r.n_rows else np.zeros(0, np.uint64)
    return Release(r.version, r.clock, r.min_clock, r.group, r.staleness, bool(r.dropped), rows)


class Client:
    """A worker's link to a Kudus cluster; mirrors kd_client (docs/client.md).

    Calls that talk to the cluster return a true value on success and False
    (or None) when the run ended: STOP, a signal, or after leave(). They
    raise KudusError when the cluster sent what this client cannot serve.
    """

    def __init__(self, scheduler, name=None, samples=0, monitor=None, layout=None,
                 rank=None, timeout_ms=None, curve_keys=None, wire_dtype=None, shm=True,
                 evaluator=False, lease_ahead=False):
        self._c = _new(scheduler.encode(), name.encode() if name else None)
        if not self._c:
            raise KudusError(f"kudus: cannot create a client for scheduler {scheduler!r}")
        self._arrays = []
        # An evaluator pulls and reports (report_eval), nothing else; it
        # registers with the evaluator's CURVE key, so this comes first.
        if evaluator:
            _set_evaluator(self._c)
        if samples:
            _set_samples(self._c, int(samples))
        if rank is not None:
            _set_rank(self._c, int(rank))
        if timeout_ms:
            _set_timeout(self._c, int(timeout_ms))
        if curve_keys and _set_curve_keys(self._c, curve_keys.encode()) != 0:
            raise KudusError(f"kudus: cannot load CURVE keys from {curve_keys!r}")
        if monitor and _set_monitor(self._c, monitor.encode()) != 0:
            raise KudusError(f"kudus: cannot connect to monitor {monitor!r}")
        if layout is not None:
            self.set_layout(layout)
        # "fp16" or "bf16" halve the bytes of pushes and pulls; the shards
        # keep float32 weights.
        if wire_dtype and _set_wire_dtype(self._c, wire_dtype.encode()) != 0:
            raise ValueError(f"kudus: wire_dtype is fp32, fp16 or bf16, not {wire_dtype!r}")
        # Shared memory with shards on this host (on by default); False
        # keeps every payload on TCP.
        if not shm:
            _set_shm(self._c, False)
        # ASP and SSP: every release also names the next clock's rows
        # (ahead_rows), to compute while this clock's push and pull travel;
        # a scheduler under another model refuses the registration.
        if lease_ahead:
            _set_lease_ahead(self._c, True)

    # Life cycle -------------------------------------------------------
    def close(self):
        """Leave the cluster if still in it and close every socket."""
        if self._c:
            p = _P(self._c)
            _destroy(ctypes.byref(p))
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def set_layout(self, layout):
        """Declare an external model: a list of (name, shape) pairs, shape a
        tuple of one or two dimensions (or more, flattened to rows x rest)."""
        arr = (_Tensor * len(layout))()
        for i, (name, shape) in enumerate(layout):
            shape = tuple(int(d) for d in shape) or (1,)
            rows, cols = shape[0], int(np.prod(shape[1:])) if len(shape) > 1 else 1
            arr[i].name = name.encode()[:_TENSOR_NAME_MAX - 1]
            arr[i].rows, arr[i].cols = rows, cols
        if _set_layout(self._c, arr, len(layout)) != 0:
            raise KudusError("kudus: malformed layout (see the log)")

    def set_keyed_layout(self, name, keys, dim=1):
        """Declare a keyed (sparse) model instead: one tensor of `keys` rows of
        `dim` values, of which each pull and push moves only the rows it names
        (pull_keys, push_keys)."""
        if _set_keyed_layout(self._c, name.encode(), int(keys), int(dim)) != 0:
            raise KudusError("kudus: malformed keyed layout (see the log)")

    keyed = property(lambda self: bool(_keyed(self._c)))

    def register(self, timeout_ms=-1):
        """HELLO, then wait for WELCOME (-1: for ever)."""
        if _register(self._c, int(timeout_ms)) != 0:
            if self.stopped:
                return False
            why = self.failure
            raise KudusError(f"kudus: {why}" if why else "kudus: registration failed or timed out (see the log)")
        return True

    def wait_start(self, timeout_ms=-1):
        """Wait for START and the first RELEASE, which it returns (an
        evaluator gets no RELEASE: an empty one)."""
        r = _Release()
        if _wait_start(self._c, ctypes.byref(r), int(timeout_ms)) != 0:
            if self.stopped:
                return None
            raise KudusError("kudus: no START (timeout, or an address book this client refused)")
        return _release(r)

    # What WELCOME said ----------------------------------------------------
    rank = property(lambda self: _rank(self._c))
    param_count = property(lambda self: _param_count(self._c))
    model = property(lambda self: _model(self._c).decode())
    hidden = property(lambda self: _hidden(self._c))
    batch = property(lambda self: _batch(self._c))
    seed = property(lambda self: _seed(self._c))
    # The shards' momentum, as WELCOME named it.
    momentum = property(lambda self: _momentum(self._c))
    consistency = property(lambda self: _consistency(self._c).decode())
    version = property(lambda self: _version(self._c))
    stopped = property(lambda self: bool(_stopped(self._c)))
    # Why the client gave up (a refused registration, a WELCOME or START it
    # cannot serve), or "".
    failure = property(lambda self: _failure(self._c).decode(errors="replace"))

    @property
    def ahead_rows(self):
        """With lease_ahead: the rows of the next clock's lease, as the last
        release named them (a copy); empty otherwise."""
        n = ctypes.c_size_t(0)
        rows = _ahead_rows(self._c, ctypes.byref(n))
        return np.ctypeslib.as_array(rows, shape=(n.value,)).copy() if n.value else np.zeros(0, np.uint64)
    # With lease_ahead: the last release admitted us (a start or a
    # readmission), so its lease is new, not the one named ahead before.
    admitted = property(lambda self: bool(_admitted(self._c)))
    dropped = property(lambda self: _dropped(self._c))
    # Gradients not applied because they held a NaN or an Inf (not sent) or a
    # shard refused them; their rows went back to be trained again.
    refused = property(lambda self: _refused(self._c))

    @property
    def tensors(self):
        out = []
        for i in range(_tensor_count(self._c)):
            t = _tensor(self._c, i).contents
            out.append(Tensor(t.name.decode(), t.offset, t.count, t.rows, t.cols))
        return out

    # One iteration ------------------------------------------------------------
    def _buffer(self, array, what):
        if (not isinstance(array, np.ndarray) or array.dtype != np.float32
                or not array.flags["C_CONTIGUOUS"] or array.size != self.param_count):
            raise ValueError(f"kudus: {what} must be a contiguous float32 numpy array of "
                             f"{self.param_count} values")
        return array.ctypes.data_as(_FLOATS)

    def init_params(self, params):
        """Seed an external model with these values (the first worker's win)."""
        return _init_params(self._c, self._buffer(params, "params")) == 0

    def pull(self, params, version=None):
        """Pull the released version (or at least version) into params, in place."""
        buf = self._buffer(params, "params")
        rc = _pull(self._c, buf) if version is None else _pull_version(self._c, buf, int(version))
        return rc == 0

    def pull_final(self, params, timeout_ms=2000):
        """After the scheduler stopped the run: pull its final model (the
        version STOP named, `stop_version`) into params while the shards
        still serve it. Call leave() afterwards so the run ends at once.
        False when the run was not stopped by the scheduler or the shards
        did not answer within timeout_ms."""
        return _pull_final(self._c, self._buffer(params, "params"), int(timeout_ms)) == 0

    @property
    def stop_version(self):
        """The final version the scheduler's STOP named (0 before STOP)."""
        return _stop_version(self._c)

    def push(self, gradient, samples):
        """Push the mean gradient over samples rows; it is read, not copied."""
        return _push(self._c, self._buffer(gradient, "gradient"), int(samples)) == 0

    def _keys(self, keys):
        if (not isinstance(keys, np.ndarray) or keys.dtype != np.uint64 or keys.ndim != 1
                or not keys.flags["C_CONTIGUOUS"]):
            raise ValueError("kudus: keys must be a contiguous 1-d uint64 numpy array "
                             "(np.unique gives sorted, distinct keys)")
        return keys.ctypes.data_as(_U64S)

    def _rows(self, array, n, what):
        if (not isinstance(array, np.ndarray) or array.dtype != np.float32
                or not array.flags["C_CONTIGUOUS"] or array.size % max(n, 1) != 0
                or (n == 0 and array.size != 0)):
            raise ValueError(f"kudus: {what} must be a contiguous float32 numpy array of "
                             f"len(keys) x dim values")
        return array.ctypes.data_as(_FLOATS)

    def pull_keys(self, keys, values):
        """Pull the rows of keys (sorted, distinct uint64) into values
        (len(keys) x dim float32), in place: a keyed model's pull."""
        return _pull_keys(self._c, self._keys(keys), keys.size, self._rows(values, keys.size, "values")) == 0

    def push_keys(self, keys, gradient, samples):
        """Push the gradient rows of keys (len(keys) x dim float32), the mean
        over samples rows: a keyed model's push."""
        return _push_keys(self._c, self._keys(keys), keys.size, self._rows(gradient, keys.size, "gradient"),
                          int(samples)) == 0

    def arrive(self, loss):
        """Finish the clock; returns the next Release, or None when the run ended."""
        r = _Release()
        if _arrive(self._c, float(loss), ctypes.byref(r)) != 0:
            return None
        return _release(r)

    def telemetry(self):
        return _telemetry(self._c) == 0

    def report_eval(self, metric, value, version, loss=float("nan")):
        """Report to the monitor that `metric` ("accuracy", "loss", ...) was
        `value` on the model at `version` (see kd_client_report_eval)."""
        return _report_eval(self._c, metric.encode(), float(value), float(loss), int(version)) == 0

    def sleep(self, ms):
        """Sleep while answering the scheduler (emulated compute)."""
        return _sleep(self._c, float(ms)) == 0

    def set_emulated_ms(self, ms):
        _set_emulated(self._c, float(ms))

    def leave(self, reason="leave"):
        return _leave(self._c, reason.encode()) == 0
