"""Is the model that is called the model that was constructed?

``model(*args)`` goes through ``type(model).__call__`` and then ``model.forward`` (an instance
attribute wins over the class's). A candidate that swaps either after construction, say after the
checked calls, would be timed running other code than was checked. The snapshot is taken right
after construction and compared after every call. A ``__call__`` that was assigned to the class
from outside a class body (its ``__qualname__`` does not end in ``.__call__``) is reported even at
construction: it is the ``ModelNew.__call__ = ...`` trick done before the model was built.

The model's and its classes' namespaces are read through ``type``'s and ``nn.Module``'s own
descriptors, so an instance's or a metaclass's ``__getattribute__`` does not run here.
"""

import torch

MODEL_PATCHED = "model_patched"

_type = type
_class_dict = type.__dict__["__dict__"].__get__
_class_mro = type.__dict__["__mro__"].__get__
_module_dict = torch.nn.Module.__dict__["__dict__"].__get__
_dict_get = dict.get


def _instance_dict(model) -> dict:
    try:
        return _module_dict(model)
    except TypeError:  # not an nn.Module
        try:
            return object.__getattribute__(model, "__dict__")
        except Exception:
            return {}


def _entry_points(model) -> dict:
    cls = _type(model)
    inst = _instance_dict(model)
    own = _class_dict(cls)
    return {
        "class": cls,
        "type(model).__call__": own.get("__call__", None) or _resolve(cls, "__call__"),
        "type(model).forward": _resolve(cls, "forward"),
        "model.forward (instance attribute)": _dict_get(inst, "forward"),
        "model.__call__ (instance attribute)": _dict_get(inst, "__call__"),
    }


def _resolve(cls, name: str):
    for base in _class_mro(cls):
        namespace = _class_dict(base)
        if name in namespace:
            return namespace[name]
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
