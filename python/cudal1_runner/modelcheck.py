"""Is the model that is called the model that was constructed?

``model(*args)`` goes through ``type(model).__call__`` and then ``model.forward`` (an instance
attribute wins over the class's). A candidate that swaps either after construction, say after the
checked calls, would be timed running other code than was checked. The snapshot is taken right
after construction and compared after every call. A ``__call__`` that was assigned to the class
from outside a class body (its ``__qualname__`` does not end in ``.__call__``) is reported even at
construction: it is the ``ModelNew.__call__ = ...`` trick done before the model was built.
"""

import torch

MODEL_PATCHED = "model_patched"


def _entry_points(model) -> dict:
    cls = type(model)
    inst = getattr(model, "__dict__", {})
    return {
        "class": cls,
        "type(model).__call__": cls.__dict__.get("__call__", None) or _resolve(cls, "__call__"),
        "type(model).forward": _resolve(cls, "forward"),
        "model.forward (instance attribute)": inst.get("forward"),
        "model.__call__ (instance attribute)": inst.get("__call__"),
    }


def _resolve(cls, name: str):
    for base in cls.__mro__:
        if name in base.__dict__:
            return base.__dict__[name]
    return None


class ModelSnapshot:
    def __init__(self, model) -> None:
        self._model = model
        self._points = _entry_points(model)

    def construction_findings(self) -> list:
        call = self._points["type(model).__call__"]
        if call is None or call is torch.nn.Module.__call__ or call is getattr(torch.nn.Module, "_wrapped_call_impl", None):
            return []
        qualname = getattr(call, "__qualname__", "")
        if qualname.endswith(".__call__") and "<lambda>" not in qualname and "<locals>" not in qualname:
            return []  # defined in a class body: an ordinary override, judged by its outputs
        return [{"kind": MODEL_PATCHED, "detail": f"type(model).__call__ is {qualname or type(call).__name__}, assigned to the class from outside a class body"}]

    def findings(self) -> list:
        now = _entry_points(self._model)
        changed = [name for name, value in now.items() if value is not self._points[name]]
        if not changed:
            return []
        return [{"kind": MODEL_PATCHED, "detail": f"changed after construction: {', '.join(changed)}"}]
