"""Has the candidate edited the reference module it shares a process with?

The candidate role imports the reference program to call its ``get_inputs``. Inputs always come
from a snapshot (``inputs.InputSource``), so editing ``N`` or ``get_inputs`` in the live module
changes nothing; but trying is the "shrink the problem" exploit, and it is reported. The watch
records each global's identity (and, for functions, code and defaults; for classes, their
attributes; for mutable data, its pickled bytes) before the candidate is imported.
"""

import pickle
import types

# Bound when the runner starts: a candidate's replacement of ``types.FunctionType`` is reported
# (group ``inputs``), and must not make the reference look edited.
_ModuleType, _FunctionType = types.ModuleType, types.FunctionType

TAMPERED_REFERENCE = "tampered_reference"
_MAX_BLOB = 1 << 20  # larger values are compared by identity only
_MISSING = object()


def _blob(value):
    if isinstance(value, (_ModuleType, _FunctionType, type)):
        return None
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    return data if len(data) <= _MAX_BLOB else None


def _details(value):
    if isinstance(value, _FunctionType):
        return (value.__code__, value.__defaults__, value.__kwdefaults__)
    if isinstance(value, type):
        return tuple(sorted((k, id(v)) for k, v in vars(value).items()))
    return None


class ReferenceWatch:
    def __init__(self, module) -> None:
        self._namespace = vars(module)
        self._saved = []
        for key, value in list(self._namespace.items()):
            if key.startswith("__") and key.endswith("__"):
                continue
            self._saved.append((key, value, _blob(value), _details(value)))

    def changed(self) -> list:
        names = []
        for key, value, blob, details in self._saved:
            now = self._namespace.get(key, _MISSING)
            if now is _MISSING:
                names.append(f"{key} (deleted)")
            elif now is not value:
                # Rebinding to an equal value (N = 4096 again) changes nothing.
                if blob is None or type(now) is not type(value) or _blob(now) != blob:
                    names.append(key)
            elif _details(now) != details or (blob is not None and _blob(now) != blob):
                names.append(f"{key} (edited in place)")
        return names

    def findings(self) -> list:
        names = self.changed()
        if not names:
            return []
        return [{"kind": TAMPERED_REFERENCE, "detail": f"the candidate changed the reference module's globals: {', '.join(names[:8])}"}]
