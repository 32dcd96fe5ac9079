"""Extension builds made by candidate programs: where they go, what they cost, and finding them all.

``install()`` wraps ``torch.utils.cpp_extension.load_inline`` and ``load`` in this process, before
the candidate is imported:

- in the compile role (``install(build=True)``), a program's own ``build_directory`` is dropped,
  so every build goes to ``TORCH_EXTENSIONS_DIR/<name>``: a fresh directory that the Rust side
  publishes whole (renames into place) once the role is done. Each build that returned is recorded
  with its arguments' fingerprint and the library it made (``save_builds``, ``BUILDS_FILE``);
- in a candidate's process, ``TORCH_EXTENSIONS_DIR`` is that published entry, which it may only
  read. A build recorded there is loaded directly from its library, as torch would load it after
  building: no ninja, no lock file, nothing written, so a build killed half-way in some earlier
  process can never be taken for a finished one or finished on a device's time. A build the pool
  did not make goes to a directory of the process's own (``own_builds_dir``);
- a name made of the process id is made the same in both processes (``_stable_name``), as are
  ``load``'s sources written to a fresh temporary directory (``_stable_sources``); paths under
  ``TORCH_EXTENSIONS_DIR`` count relative to it, since the pool's directory is renamed;
- the wall time of each call is added up (``spent_ms``): on a device that is the time a build, or
  loading what was built, held the device's slot;
- the program line of each call is recorded, so the compile role knows which builds happened;
- a build that failed in the compile role is recorded with its arguments' fingerprint, and the
  same build in the candidate's process fails at once with the same message (a program that falls
  back to PyTorch when its build fails would otherwise run the compiler again on device time).

``discover`` is the compile role's search for builds that neither importing the program nor
constructing its model triggers: builds in ``forward``, in helpers called from it, or behind
``if x.is_cuda``. It calls methods and functions that contain a build and need no arguments, then
evaluates the remaining calls' arguments from the module's globals and the simple assignments
before the call, and builds them as the program would. Failures there are notes, never verdicts:
only a build the program itself makes at import or construction can fail it.
"""

import ast
import functools
import hashlib
import importlib.util
import inspect
import json
import os
import re
import sys
import tempfile
import time
import types

_spent_ms = 0.0
_calls = []  # (file name, line) of every build call that finished, built or failed
_originals = {}
_building = 0  # build calls under way (nested calls count each)
_failed = {}  # fingerprint of a build's arguments -> why it failed, in this process
_known_failures = {}  # the same, read from the compile pool's record
_built = {}  # fingerprint of a build's arguments -> {"library", "kind"}, made here (compile role)
_published = {}  # the same, read from the published entry (a candidate's process)
_built_here = []  # names of the builds a candidate's process made itself: not among the published
_building_here = False  # the compile role: builds go to TORCH_EXTENSIONS_DIR and are recorded
FAILURES_FILE = ".cudal1-failed-builds.json"
BUILDS_FILE = ".cudal1-builds.json"  # compile::BUILDS on the Rust side
_ROOT_MARK = "<TORCH_EXTENSIONS_DIR>"
_HERE = os.path.abspath(__file__)


def install(build: bool = False) -> None:
    """Wraps the build functions of ``torch.utils.cpp_extension`` (once per process). ``build``:
    the compile role, which builds into ``TORCH_EXTENSIONS_DIR``; else builds recorded there are
    loaded, and others made in a directory of this process's own."""
    global _building_here
    if _originals:
        return
    import torch.utils.cpp_extension as cpp

    _building_here = build
    for name in ("load_inline", "load"):
        original = getattr(cpp, name)
        _originals[name] = original
        setattr(cpp, name, _wrap(original))
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        for file, into in ((FAILURES_FILE, _known_failures), (BUILDS_FILE, None if build else _published)):
            if into is None:
                continue
            try:
                with open(os.path.join(root, file), encoding="utf-8") as f:
                    into.update(json.load(f))
            except (OSError, ValueError):
                pass


def save_builds() -> None:
    """Records the builds made here (compile role) with the library each made, so that the
    candidate's process loads them from the published entry instead of building. Written even
    when there is none: its presence says the role finished."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        try:
            os.makedirs(root, exist_ok=True)
            with open(os.path.join(root, BUILDS_FILE), "w", encoding="utf-8") as f:
                json.dump(_built, f)
        except OSError:
            pass  # the entry is then not published, and the pool builds again next time


def own_builds_dir() -> str:
    """Where this process builds what the pool did not: below its own temporary directory (its
    scratch), never in the shared entry."""
    return os.path.join(tempfile.gettempdir(), "cudal1-own-builds")


def save_failures() -> None:
    """Records the builds that failed here (compile role), so that the candidate's process, which
    would make the same build with the same arguments and fail the same way, fails at once instead
    of running the compiler again on its device's time."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root and _failed:
        try:
            os.makedirs(root, exist_ok=True)
            with open(os.path.join(root, FAILURES_FILE), "w", encoding="utf-8") as f:
                json.dump(_failed, f)
        except OSError:
            pass  # the candidate then builds again, as without the record


def _fingerprint(bound, given_name) -> str:
    """What decides a build's outcome: every argument but where it goes and how much it prints,
    with the numbers in the name the program gave (``given_name``, before ``_stable_name``) left
    out. A name's numbers are often a process id (``f"ext_{os.getpid()}"``), which differs between
    the compile pool's process and any process outside a PID namespace (the profiling driver):
    the same code, built the same way, must be found under one fingerprint in all of them."""
    kept = {k: v for k, v in bound.arguments.items() if k not in ("build_directory", "verbose")}
    if isinstance(given_name, str):
        kept["name"] = re.sub(r"[0-9]+", "#", given_name)
    return hashlib.sha256(_portable(repr(sorted(kept.items()))).encode("utf-8", "replace")).hexdigest()


def _portable(text: str) -> str:
    """``text`` with ``TORCH_EXTENSIONS_DIR`` written as a mark: the compile role builds in a
    directory that is then renamed, so paths below it (sources copied by ``_stable_sources``)
    differ between that process and the candidate's."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        return text
    for form in {os.path.realpath(root), os.path.abspath(root), root}:
        text = text.replace(form.rstrip(os.sep) + os.sep, _ROOT_MARK + "/")
    return text


def spent_ms() -> float:
    """Wall time spent inside build calls so far, in milliseconds."""
    return _spent_ms


def calls() -> list:
    return list(_calls)


def built_here() -> list:
    """The names of the extensions this process built itself because the published entry had no
    build of the same arguments (never in the compile role)."""
    return list(_built_here)


def building() -> bool:
    """Whether a build call is under way (a time limit must not cut a build short: torch would
    leave its lock file behind, and every later build of that extension would wait on it)."""
    return _building > 0


def _wrap(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def build(*args, **kwargs):
        global _spent_ms
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # torch says what is wrong with the call
        if bound.arguments.get("build_directory") is not None and os.environ.get("TORCH_EXTENSIONS_DIR"):
            bound.arguments["build_directory"] = None
        given_name = bound.arguments.get("name")
        _stable_name(bound)
        _stable_sources(bound)
        global _building
        site = _caller()
        fingerprint = _fingerprint(bound, given_name)
        name = bound.arguments.get("name")
        if fingerprint in _known_failures:
            _calls.append(site)
            raise RuntimeError(f"Error building extension '{name}': {_known_failures[fingerprint]} (the same build failed in cudal1's compile pool; not run again)")
        started = time.perf_counter()
        _building += 1
        try:
            built = _load_published(_published.get(fingerprint))
            if built is None:
                if not _building_here and isinstance(name, str):
                    # Not built by the pool: built here, where only this process looks.
                    own = os.path.join(own_builds_dir(), name)
                    os.makedirs(own, exist_ok=True)
                    bound.arguments["build_directory"] = own
                built = original(*bound.args, **bound.kwargs)
                if not _building_here:
                    _built_here.append(str(name))
                if _building_here:
                    record = _library_of(built, bound)
                    if record is not None:
                        _built[fingerprint] = record
        except Exception as exc:
            # A build that ran and failed is made too: its outcome is known.
            _failed[fingerprint] = _one_line(exc)
            _calls.append(site)
            raise
        finally:
            _building -= 1
            _spent_ms += (time.perf_counter() - started) * 1e3
        _calls.append(site)
        return built

    return build


def _library_of(built, bound):
    """What a build that returned made, relative to ``TORCH_EXTENSIONS_DIR``: ``{"library",
    "kind"}`` (``python``: a module, ``library``: loaded into ``torch.ops``, ``standalone``: an
    executable), or None when it is not below that directory."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if bound.arguments.get("is_standalone"):
        path, kind = built, "standalone"
    elif isinstance(built, types.ModuleType):
        path, kind = getattr(built, "__file__", None), "python"
    else:
        path, kind = built, "library"
    if not root or not isinstance(path, str):
        return None
    relative = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    if relative.startswith(os.pardir) or os.path.isabs(relative):
        return None
    return {"library": relative, "kind": kind}


def _load_published(record):
    """The published build ``record`` names, loaded as torch loads a library it has just built;
    None when there is none (then the call builds)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not record or not root:
        return None
    path = os.path.join(root, record.get("library", ""))
    if not os.path.isfile(path):
        return None
    kind = record.get("kind")
    if kind == "standalone":
        return path
    if kind == "library":
        import torch

        torch.ops.load_library(path)
        return path
    module_name = os.path.basename(path).split(".")[0]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Below this a pid is not told apart from the other numbers of an extension's name.
_DISTINCT_PID = 100


def _stable_name(bound) -> None:
    """A name made of the process id (``f"ext_{os.getpid()}"``, seen in published kernels) differs
    between the compile pool's process and the candidate's, so the candidate would build the same
    code again on its device's time. The process id in the name becomes a tag of the build's other
    arguments: the same in both processes, and different for different code.

    Not in a PID namespace of its own (a sandboxed runner is pid 2 there, in the pool and in the
    candidate's process alike): a pid of one or two digits is as likely an ordinary number of the
    name (``cudal1_l2_1_gelu``), and renaming it there only made the name differ from what any
    process outside a namespace asks for."""
    name = bound.arguments.get("name")
    if not isinstance(name, str) or os.getpid() < _DISTINCT_PID:
        return
    pid = re.compile(rf"(?<![0-9]){os.getpid()}(?![0-9])")
    if not pid.search(name):
        return
    rest = {k: v for k, v in bound.arguments.items() if k not in ("name", "build_directory", "verbose")}
    tag = "p" + hashlib.sha256(_portable(repr(sorted(rest.items()))).encode("utf-8", "replace")).hexdigest()[:12]
    bound.arguments["name"] = pid.sub(tag, name)


_HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl", ".inc")


def _stable_sources(bound) -> None:
    """``load(sources=[...])`` with files the program wrote to a fresh temporary directory
    (``tempfile.mkdtemp()``, seen in published kernels): the paths differ between the compile
    pool's process and the candidate's, ninja sees new build commands, and the candidate builds
    the same code again on its device's time. Each source is copied to a path named by its
    content under ``TORCH_EXTENSIONS_DIR``, the same in both processes (the compile role copies,
    a candidate's process only uses a copy the pool made). A source whose directory holds headers
    it may include by a relative path is left where it is."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    sources = bound.arguments.get("sources")
    if not root or sources is None:
        return
    single = isinstance(sources, (str, os.PathLike))
    paths = [sources] if single else sources
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, (str, os.PathLike)) for p in paths):
        return
    moved = []
    for path in paths:
        path = os.fspath(path)
        try:
            folder = os.path.dirname(os.path.abspath(path))
            if any(f.endswith(_HEADER_SUFFIXES) for f in os.listdir(folder)):
                return
            with open(path, "rb") as f:
                content = f.read()
        except OSError:
            return  # torch reports the missing file
        digest = hashlib.sha256(content).hexdigest()[:16]
        target_dir = os.path.join(root, ".cudal1-sources", digest)
        target = os.path.join(target_dir, os.path.basename(path))
        if not os.path.isfile(target) and not _building_here:
            return  # not a source the pool built: this process builds it where it is, alone
        try:
            if not os.path.isfile(target):
                os.makedirs(target_dir, exist_ok=True)
                staging = f"{target}.{os.getpid()}.tmp"
                with open(staging, "wb") as f:
                    f.write(content)
                os.replace(staging, target)
        except OSError:
            return
        moved.append(target)
    bound.arguments["sources"] = moved[0] if single else moved


def _caller():
    frame = sys._getframe(2)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) in (_HERE, functools.__file__):
        frame = frame.f_back
    if frame is None:
        return ("", 0)
    return (os.path.abspath(frame.f_code.co_filename), frame.f_lineno)


# --- finding build sites -------------------------------------------------------------------


class Site:
    """One call of ``load_inline``/``load`` in the program's source."""

    def __init__(self, call: ast.Call, function, owner, tree) -> None:
        self.call = call
        self.function = function  # the enclosing function definition, or None at module level
        self.owner = owner  # the class that defines that function, or None
        self.tree = tree  # the whole module

    @property
    def lines(self):
        return range(self.call.lineno, (self.call.end_lineno or self.call.lineno) + 1)

    def where(self) -> str:
        if self.function is None:
            return f"line {self.call.lineno} (module level)"
        name = f"{self.owner.name}.{self.function.name}" if self.owner is not None else self.function.name
        return f"line {self.call.lineno} in {name}"


def sites(source: str) -> list:
    """Build calls in ``source``: ``load_inline`` under any name, and ``load`` where it is
    ``torch.utils.cpp_extension``'s (imported by name, or reached through the module)."""
    tree = ast.parse(source)
    names, modules = set(), {"cpp_extension"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("cpp_extension"):
            for alias in node.names:
                if alias.name in ("load_inline", "load"):
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.utils":
            modules.update(a.asname or a.name for a in node.names if a.name == "cpp_extension")
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.asname and a.name.endswith("cpp_extension"))

    def is_build(func) -> bool:
        if isinstance(func, ast.Name):
            return func.id in names or func.id == "load_inline"
        if isinstance(func, ast.Attribute):
            if func.attr == "load_inline":
                return True
            if func.attr == "load":
                base = func.value
                return (isinstance(base, ast.Attribute) and base.attr in modules) or (isinstance(base, ast.Name) and base.id in modules)
        return False

    found = []

    def visit(node, function, owner):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, None, child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child, owner if function is None else None)
            else:
                if isinstance(child, ast.Call) and is_build(child.func):
                    found.append(Site(child, function, owner, tree))
                visit(child, function, owner)

    visit(tree, None, None)
    return found


def triggered(site: Site, path: str) -> bool:
    path = os.path.abspath(path)
    return any(f == path and line in site.lines for f, line in _calls)


def discover(module, path: str, instance, forward, notes: list) -> dict:
    """Makes the builds of ``module`` (loaded from ``path``) that have not happened yet happen, in
    the order that stays closest to the program's own calls: methods and functions holding a
    build that take no arguments; one call of the model (``forward``, a callable or None); then
    the calls' arguments worked out from the source. ``instance`` is the constructed model, if
    construction worked. Returns the number of build sites and where the missed ones are."""
    with open(path, encoding="utf-8") as f:
        found = sites(f.read())

    def pending():
        return [s for s in found if not triggered(s, path)]

    for site in pending():
        _call_enclosing(site, module, instance, notes)
    if pending() and forward is not None:
        forward()
    for site in pending():
        _evaluate_call(site, module, notes)
    return {"sites": len(found), "missed": [s.where() for s in pending()]}


def _takes_no_arguments(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return not any(p.default is inspect.Parameter.empty and p.kind in kinds for p in params)


def _call_enclosing(site: Site, module, instance, notes: list) -> None:
    """Calls the method or function holding the build, where it takes no arguments."""
    fn_def = site.function
    if fn_def is None or fn_def.name in ("forward", "__init__", "__call__"):
        return
    target = None
    if site.owner is None:
        target = vars(module).get(fn_def.name)
    else:
        holders = [instance] + (list(vars(instance).values()) if instance is not None and hasattr(instance, "__dict__") else [])
        cls = vars(module).get(site.owner.name)
        for holder in holders:
            if cls is not None and isinstance(holder, cls):
                target = getattr(holder, fn_def.name, None)
                break
        if target is None and cls is not None:
            # A static or class method needs no instance.
            raw = inspect.getattr_static(cls, fn_def.name, None)
            if isinstance(raw, (staticmethod, classmethod)):
                target = getattr(cls, fn_def.name)
    if not callable(target) or not _takes_no_arguments(target):
        return
    try:
        target()
    except Exception as exc:
        notes.append(f"calling {site.where()} to build its extension failed: {_one_line(exc)}")


def _prelude(site: Site) -> list:
    """The imports and simple assignments that may run before the build call, in source order:
    those of its function, or at module level those inside blocks (`if`, `try`) that importing
    the module may have skipped."""
    if site.function is not None:
        nodes = [n for n in ast.walk(site.function) if n is not site.function]
    else:
        top = {id(n) for n in site.tree.body}
        nodes = [n for n in ast.walk(site.tree) if id(n) not in top and not isinstance(n, ast.Module)]
    wanted = [n for n in nodes if isinstance(n, (ast.Assign, ast.Import, ast.ImportFrom)) and (n.end_lineno or n.lineno) < site.call.lineno]
    return sorted(wanted, key=lambda n: (n.lineno, n.col_offset))


def _evaluate_call(site: Site, module, notes: list) -> None:
    """Evaluates the call's arguments from the module's globals and the imports and simple
    assignments that come before it, and makes the call."""
    import torch.utils.cpp_extension as cpp

    namespace = dict(vars(module))
    # A program that imports the builder inside the function that builds.
    namespace.setdefault("load_inline", cpp.load_inline)
    # A method keeps its sources on its instance (`self.source = ...`): a stand-in holds them.
    namespace.setdefault("self", types.SimpleNamespace())
    for node in _prelude(site):
        try:
            if isinstance(node, ast.Assign):
                simple = all(isinstance(t, ast.Name) or (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self") for t in node.targets)
                if not simple:
                    continue
                value = eval(compile(ast.Expression(node.value), "<cudal1 build discovery>", "eval"), namespace)
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        namespace[t.id] = value
                    else:
                        setattr(namespace["self"], t.attr, value)
            else:
                exec(compile(ast.Module(body=[node], type_ignores=[]), "<cudal1 build discovery>", "exec"), namespace)
        except Exception:
            continue
    try:
        func = eval(compile(ast.Expression(site.call.func), "<cudal1 build discovery>", "eval"), namespace)
        args = [eval(compile(ast.Expression(a), "<cudal1 build discovery>", "eval"), namespace) for a in site.call.args]
        kwargs = {k.arg: eval(compile(ast.Expression(k.value), "<cudal1 build discovery>", "eval"), namespace) for k in site.call.keywords if k.arg}
    except Exception as exc:
        notes.append(f"the arguments of the build at {site.where()} could not be worked out ahead: {_one_line(exc)}")
        return
    if any(k.arg is None for k in site.call.keywords) or any(isinstance(a, ast.Starred) for a in site.call.args):
        notes.append(f"the build at {site.where()} passes arguments through * or **: not built ahead")
        return
    # The call is made as the program makes it, so that the build lands where the program's own
    # will look (same name, sources and flags); it is recorded under the program's line.
    _calls_before = len(_calls)
    try:
        func(*args, **kwargs)
    except Exception as exc:
        notes.append(f"building {site.where()} ahead failed (the program may still build it itself): {_one_line(exc)}")
    finally:
        path = os.path.abspath(module.__file__) if getattr(module, "__file__", None) else ""
        for i in range(_calls_before, len(_calls)):
            _calls[i] = (path, site.call.lineno)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"
