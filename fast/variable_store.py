"""The session's Variables on the fast backend: a value a run leaves on the device is read back to the
host only when someone reads it.

Why: a training step assigns its Variables on every run, and the next run starts from the device
copies the last one handed back (``FastBackend._dev_vars``); the host copy in ``session.variables``
is read only by the user, by a checkpoint, or by a run that falls back to the reference
interpreter. Reading every assigned Variable back after every run cost a device-to-host copy each:
on the development machine about 7 µs per Variable, and on a GPU a synchronisation per Variable
(the small training step of ``benchmarks/run_overhead.py`` read back three arrays where
``jax.jit`` reads back one). So the backend offers the session a store (``variable_store``, which
``Session`` takes in place of its plain dict) whose entries may be *deferred*: the device array a run
wrote, read back once, on first access, and then cached.

What stays as it was: the store is a mapping from name to numpy array for everyone who reads it
(``sess.variables["w"]``, ``tn.checkpoint.save``, the reference interpreter); a value set from outside
replaces the entry, and the next run copies it to the device (``FastBackend._device_var`` compares
the entry with the one its device copy stands for). A run given any other mapping (the partitioned
executors pass plain dicts) reads its written Variables back at once, as before (``keep``).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any, Optional

import numpy as np

from turnout.store import VariableStore


class Deferred:
    """A Variable's value that a run left on the device, read back on first use and then kept.

    ``dtype`` and ``shape`` are the device array's: a run's plan signature reads them without a copy
    (``fast.shell.variable_signature``)."""

    __slots__ = ("dev", "_host")

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self._host: Optional[np.ndarray] = None

    @property
    def dtype(self) -> np.dtype[Any]:
        """The value's numpy dtype."""
        return np.dtype(self.dev.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's shape."""
        return tuple(self.dev.shape)

    def host(self) -> np.ndarray:
        """The value on the host, copied on the first call (read-only, as a run's fetched values are)."""
        if self._host is None:
            self._host = np.asarray(self.dev)
        return self._host


class DeviceVariables(VariableStore):
    """``session.variables`` of a fast-backend session: name -> numpy array, where an entry a run wrote
    stays on the device until it is read (see the module docstring). Values set from outside are
    checked as ``turnout.store.VariableStore`` checks them."""

    def __getitem__(self, name: str) -> np.ndarray:
        v = super().__getitem__(name)
        return v.host() if type(v) is Deferred else v  # type: ignore[no-any-return]

    def peek(self, name: str) -> Any:
        """The entry as it is held, without reading a deferred value back: a numpy array, a ``Deferred``,
        or ``None`` for a Variable not set yet. Runs compare it by identity with the entry their
        device copy was made for."""
        return self._slots.get(name)

    def defer(self, name: str, dev: Any) -> Deferred:
        """Hold ``dev``, a run's new value of ``name`` on the device, until it is read."""
        slot = self._slots[name] = Deferred(dev)
        return slot

    def settle(self) -> None:
        """Read every deferred value back and drop its device array (``FastBackend.release_buffers``):
        after it the store holds no device memory."""
        for name, v in self._slots.items():
            if type(v) is Deferred:
                self._slots[name] = v.host()


def peeker(variables: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """How a run looks at an entry of ``variables`` without reading a deferred value back:
    ``DeviceVariables.peek``, or ``get`` of any other mapping."""
    return variables.peek if type(variables) is DeviceVariables else variables.get


def put_fetched(variables: MutableMapping[str, Any], name: str, host: np.ndarray) -> None:
    """Store ``host``, a run's new value of Variable ``name`` that the run fetched too (so it is on the
    host already). A ``DeviceVariables`` takes it without the check a value set from outside gets: a
    run's values have the Variable's dtype and shape, and the check cost the repeated run of an
    update step about a microsecond."""
    if type(variables) is DeviceVariables:
        variables._slots[name] = host
    else:
        variables[name] = host


def keep(variables: MutableMapping[str, Any], name: str, dev: Any) -> Any:
    """Store a run's new value ``dev`` of Variable ``name``: deferred in a ``DeviceVariables``, read back
    into any other mapping. Returns the entry stored, which the backend's device-copy record holds."""
    if type(variables) is DeviceVariables:
        return variables.defer(name, dev)
    variables[name] = np.asarray(dev)
    return variables.get(name)  # (what the mapping holds: a checking store may have converted it)
