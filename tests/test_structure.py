"""Package layout rules (CPU; the package is not imported, its source is read with ``ast``).

* No import cycles between ``rl_zerosync`` modules through module-level imports (those that run when
  a module is imported).
* No cycles through imports inside functions (lazy imports) either, and none between folders: the
  folders (:data:`ROOMS`) and the few top-level modules (:data:`TOP_LEVEL_MODULES`) stack up in floors.
* One name per room: no two modules under ``rl_zerosync/`` share a file name (``__init__.py`` aside),
  so a file name alone says which module is meant.
* Public views only: no test, benchmark or example reads a private attribute of the learner, the GPU
  env runner, the replay or the Q module (:func:`private_attributes`, from their source); they use the
  read-only properties (``learner.params``, ``replay.packed``, ``algo.local_learner``, ...).

Edges of the graph: ``import rl_zerosync.a.b`` and ``from rl_zerosync.a import b`` (``b`` a submodule)
point at ``rl_zerosync.a.b``; ``from rl_zerosync.a import name`` (``name`` not a submodule) points at the
package ``rl_zerosync.a`` (its ``__init__``); relative imports are resolved against the importing
module. Importing a submodule also runs its parent packages' ``__init__`` once, but a package importing
its own submodules is the ordinary layout and works while the package is half initialised, so those
implicit parent edges are not drawn. Imports under ``if TYPE_CHECKING:`` never run and are skipped by
the run-time checks; a type-only import still says one module needs another to be read, so the
type-only checks count them and forbid circles through them too (between modules and between folders).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

PACKAGE = "rl_zerosync"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, lazy: bool, type_only: bool = False) -> Iterator[ast.stmt]:
    """Import statements run on import of the module (class bodies included); with ``lazy`` also those
    inside functions; with ``type_only`` also those under ``if TYPE_CHECKING:``."""
    def visit(node: ast.AST, in_function: bool) -> Iterator[ast.stmt]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if lazy or not in_function:
                    yield child
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                body = child.body + child.orelse if type_only else child.orelse
                yield from visit(ast.Module(body=body, type_ignores=[]), in_function)
            else:
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from visit(child, inner)

    yield from visit(tree, False)


def _targets(module: str, is_package: bool, node: ast.stmt, modules: Dict[str, Path]) -> Set[str]:
    out: Set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                out.add(alias.name)
        return out
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if not (source == PACKAGE or source.startswith(PACKAGE + ".")):
        return out
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        out.add(sub if sub in modules else source)
    return out


def import_graph(lazy: bool = False, type_only: bool = False) -> Dict[str, Set[str]]:
    """Module -> the package modules it imports (see :func:`_imports` for ``lazy`` and ``type_only``)."""
    modules = _modules()
    return graph_of({name: path.read_text() for name, path in modules.items()}, modules, lazy, type_only)


def graph_of(sources: Dict[str, str], modules: Dict[str, Path], lazy: bool, type_only: bool) -> Dict[str, Set[str]]:
    """The import graph of the modules whose source is ``sources`` (module name -> source text)."""
    graph: Dict[str, Set[str]] = defaultdict(set)
    for name, source in sources.items():
        tree = ast.parse(source, filename=str(modules[name]))
        graph[name]
        for node in _imports(tree, lazy, type_only):
            for target in _targets(name, modules[name].name == "__init__.py", node, modules):
                if target in modules and target != name:
                    graph[name].add(target)
    return dict(graph)


def strongly_connected_components(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (each a sorted list of modules)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return sorted(components)


def find_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """One concrete cycle per strongly connected component of more than one module."""
    return [_one_cycle(graph, set(c)) for c in strongly_connected_components(graph)]


def _one_cycle(graph: Dict[str, Set[str]], component: Set[str]) -> List[str]:
    start = min(component)
    # Breadth-first from start back to start inside the component: the shortest cycle through it.
    previous: Dict[str, Optional[str]] = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return list(reversed(path)) + [start]
                if w in component and w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def _report(cycles: List[List[str]]) -> str:
    return "import cycles:\n" + "\n".join("  " + " -> ".join(c) for c in cycles)


def test_graph_sees_the_package():
    graph = import_graph()
    assert "rl_zerosync.envs" in graph and "rl_zerosync.learner.replay" in graph
    assert "rl_zerosync.kernels.api" in graph["rl_zerosync.kernels.backend"]
    # ``from rl_zerosync.kernels import rng`` is an edge to the submodule, not to the package.
    assert "rl_zerosync.kernels.rng" in graph["rl_zerosync.kernels.reference"]


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve():
    modules = {"rl_zerosync.x": Path("x"), "rl_zerosync.x.y": Path("y"), "rl_zerosync.x.z": Path("z")}
    node = ast.parse("from .y import f").body[0]
    assert _targets("rl_zerosync.x.z", False, node, modules) == {"rl_zerosync.x.y"}
    node = ast.parse("from . import y").body[0]
    assert _targets("rl_zerosync.x", True, node, modules) == {"rl_zerosync.x.y"}
    node = ast.parse("from .. import x").body[0]
    assert _targets("rl_zerosync.x.z", False, node, modules) == {"rl_zerosync.x"}


def test_no_module_level_import_cycles():
    cycles = find_cycles(import_graph(lazy=False))
    assert not cycles, _report(cycles)


def test_no_import_cycles_counting_lazy_imports():
    """Imports inside functions count too: a lazy import that closes a circle only hides it."""
    cycles = find_cycles(import_graph(lazy=True))
    assert not cycles, _report(cycles)


def test_type_only_imports_close_a_planted_cycle():
    """``a`` needs ``b`` only for a type hint and ``b`` imports ``a``: no circle at run time, one counting
    type-only imports (the shape of ``config/sections.py`` naming ``config/settings.py``'s classes)."""
    modules = {"rl_zerosync.x.a": Path("a.py"), "rl_zerosync.x.b": Path("b.py"), "rl_zerosync.y.c": Path("c.py")}
    sources = {"rl_zerosync.x.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from rl_zerosync.x.b import B\nelse:\n    import rl_zerosync.y.c\n",
               "rl_zerosync.x.b": "from rl_zerosync.x.a import f\n",
               "rl_zerosync.y.c": "def g():\n    if TYPE_CHECKING:\n        from rl_zerosync.x import b\n"}
    run_time = graph_of(sources, modules, lazy=True, type_only=False)
    assert run_time == {"rl_zerosync.x.a": {"rl_zerosync.y.c"}, "rl_zerosync.x.b": {"rl_zerosync.x.a"},
                        "rl_zerosync.y.c": set()}
    assert find_cycles(run_time) == [] and find_cycles(room_graph(run_time)) == []
    typed = graph_of(sources, modules, lazy=True, type_only=True)
    assert find_cycles(typed) == [["rl_zerosync.x.a", "rl_zerosync.x.b", "rl_zerosync.x.a"]]
    assert find_cycles(room_graph(typed)) == [["x", "y", "x"]]


def test_no_import_cycles_counting_type_only_imports():
    """Imports under ``if TYPE_CHECKING:`` count too: a type-only import that closes a circle hides it
    from Python, not from a reader (the fix: import the type from a lower module, or pass what is used)."""
    cycles = find_cycles(import_graph(lazy=True, type_only=True))
    assert not cycles, _report(cycles)


# ---------------------------------------------------------------- folders by role
TOP_LEVEL_MODULES = frozenset({"__init__", "__main__", "actions", "algorithm", "cli", "module", "presets"})
"""The only modules at the top of the package: the action layout, the DQN presets, the CLI and the
classes RLlib pickles into checkpoints by their module path (``algorithm``, ``module``)."""
ROOMS = frozenset({"config", "data", "env_runner", "envs", "evaluation", "evidence", "kernels", "learner", "population",
                   "run", "rundir", "serving"})
"""The folders of the package, one role each (``docs/ARCHITECTURE.md`` opens with the map)."""
FLOORS = (("actions", "data"), ("presets", "kernels"), ("envs",), ("env_runner",), ("module",), ("learner",),
          ("algorithm",), ("rundir",), ("config",), ("evidence",), ("evaluation",), ("serving", "run"),
          ("population",), ("cli",), ("__main__", PACKAGE))
"""The rooms from the bottom up (the floors table of ``docs/ARCHITECTURE.md``; ``__main__`` and the
package's ``__init__`` over ``cli``): a room imports only from the floors below its own."""


def room_of(module: str) -> str:
    """``rl_zerosync.data.market`` -> ``data``; a top-level module is a room of its own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def room_graph(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    """The module graph folded onto rooms (folders and top-level modules), without self-edges."""
    rooms: Dict[str, Set[str]] = defaultdict(set)
    for source, targets in graph.items():
        rooms[room_of(source)]
        for target in targets:
            if room_of(target) != room_of(source):
                rooms[room_of(source)].add(room_of(target))
    return dict(rooms)


def test_room_graph_folds_modules_onto_folders():
    graph = {"rl_zerosync.data.market": set(), "rl_zerosync.envs.core": {"rl_zerosync.data.market",
                                                                        "rl_zerosync.envs.params"},
             "rl_zerosync.envs.params": {"rl_zerosync.actions"}, "rl_zerosync.actions": set()}
    assert room_graph(graph) == {"data": set(), "envs": {"data", "actions"}, "actions": set()}
    assert find_cycles(room_graph({"rl_zerosync.a.x": {"rl_zerosync.b.y"}, "rl_zerosync.b.y": {"rl_zerosync.a.z"},
                                   "rl_zerosync.a.z": set()})) == [["a", "b", "a"]]


def test_imports_between_folders_run_one_way():
    """No circle between rooms either (lazy imports counted): the folders stack up in floors."""
    cycles = find_cycles(room_graph(import_graph(lazy=True)))
    assert not cycles, "import circles between folders:\n" + "\n".join("  " + " -> ".join(c) for c in cycles)


def test_imports_between_folders_run_one_way_counting_type_only_imports():
    cycles = find_cycles(room_graph(import_graph(lazy=True, type_only=True)))
    assert not cycles, "import circles between folders (type-only imports counted):\n" + "\n".join(
        "  " + " -> ".join(c) for c in cycles)


def floor_of(room: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if room in floor)


def upward_imports(rooms: Dict[str, Set[str]]) -> List[str]:
    """``a -> b`` for every room ``a`` that imports a room ``b`` on its own floor or above."""
    return [f"{a} (floor {floor_of(a)}) -> {b} (floor {floor_of(b)})"
            for a in sorted(rooms) for b in sorted(rooms[a]) if floor_of(b) >= floor_of(a)]


def test_every_room_has_one_floor():
    placed = [room for floor in FLOORS for room in floor]
    expected = ROOMS | (TOP_LEVEL_MODULES - {"__init__"}) | {PACKAGE}
    assert len(placed) == len(set(placed)) and set(placed) == expected, \
        f"FLOORS: unplaced {sorted(expected - set(placed))}, unknown {sorted(set(placed) - expected)}"


def test_imports_run_down_the_floors():
    """Lazy imports counted: e.g. ``evidence`` (the statistics) never imports ``evaluation`` (the walks)."""
    assert upward_imports({"evidence": {"data", "rundir"}, "rundir": {"learner"}}) == []
    assert upward_imports({"evidence": {"evaluation"}}) == ["evidence (floor 9) -> evaluation (floor 10)"]
    found = upward_imports(room_graph(import_graph(lazy=True)))
    assert not found, "imports up or across the floors (docs/ARCHITECTURE.md):\n" + "\n".join("  " + f for f in found)


KNOWN_PRIVATE_IMPORTS = frozenset({("rl_zerosync.population.drive", "_Interrupt"),
                                   ("rl_zerosync.run.preflight", "_torch_cuda_reason")})
"""Private names still imported from another room (to be made public); nothing new may join them."""


def private_imports() -> List[tuple]:
    """``(module, name, source)`` of every ``from rl_zerosync.x import _name`` whose source is in another room."""
    found = []
    for name, path in _modules().items():
        for node in _imports(ast.parse(path.read_text(), filename=str(path)), lazy=True):
            if isinstance(node, ast.ImportFrom) and node.module and room_of(node.module) != room_of(name) \
                    and node.module.startswith(PACKAGE + "."):
                found += [(name, a.name, node.module) for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_rooms_import_only_public_names_of_other_rooms():
    """e.g. ``serving`` cleans live bars with ``data.loaders.clean_bars``, not a private helper."""
    found = [f"{m} imports {n} from {src}" for m, n, src in private_imports() if (m, n) not in KNOWN_PRIVATE_IMPORTS]
    assert not found, "private names imported across rooms (make them public):\n" + "\n".join(found)
    assert {(m, n) for m, n, _ in private_imports()} >= KNOWN_PRIVATE_IMPORTS, "a known one was fixed: drop it"


def test_top_level_holds_only_the_listed_modules_and_folders():
    modules = {p.stem for p in ROOT.glob("*.py")}
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert modules == TOP_LEVEL_MODULES, f"top-level modules outside the listed few: {sorted(modules - TOP_LEVEL_MODULES)}" \
        f"; missing: {sorted(TOP_LEVEL_MODULES - modules)}"
    assert folders == ROOMS, f"folders: unexpected {sorted(folders - ROOMS)}, missing {sorted(ROOMS - folders)}"


def test_no_two_modules_share_a_file_name():
    seen: Dict[str, List[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        if path.name != "__init__.py":
            seen[path.name].append(str(path.relative_to(ROOT.parent)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not shared, "file names used more than once: " + "; ".join(
        f"{name}: {', '.join(paths)}" for name, paths in sorted(shared.items()))


# ---------------------------------------------------------------- public views, not private attributes
REPO = ROOT.parent
HOLDERS_OF_PRIVATE_STATE = ("learner/dqn_learner.py", "env_runner/gpu_env_runner.py", "learner/replay.py",
                            "module.py", "evaluation/walk.py")
"""Sources whose ``self._name`` attributes callers outside the package must not touch."""
RLLIB_PRIVATE_WITH_PUBLIC_VIEW = {
    "_device": "learner.device",
    "_learner": "algo.local_learner (ZeroSyncDQN) or rl_zerosync.algorithm.local_learner_of(learner_group)",
    "_named_optimizers": "learner.get_optimizers_for_module(module_id)",
}
"""RLlib's private attributes that the package or RLlib offers a public view of."""
RLLIB_API = frozenset({"_forward", "_forward_train", "_forward_inference", "_forward_exploration", "_update",
                       "_compute_loss_for_module"})
"""Underscored names that are RLlib's documented extension points, never flagged."""
CALLERS = ("tests", "benchmarks", "examples")
_ATTR_FUNCS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _self_attributes(tree: ast.AST) -> Set[str]:
    """Underscored attributes assigned as ``self._name`` (plain, annotated, augmented or tuple targets)."""
    return {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
            and n.value.id == "self" and n.attr.startswith("_") and not n.attr.startswith("__")}


def private_attributes() -> Set[str]:
    """The private attributes of :data:`HOLDERS_OF_PRIVATE_STATE` as the source defines them now, plus
    :data:`RLLIB_PRIVATE_WITH_PUBLIC_VIEW`, less :data:`RLLIB_API`."""
    names: Set[str] = set(RLLIB_PRIVATE_WITH_PUBLIC_VIEW)
    for rel in HOLDERS_OF_PRIVATE_STATE:
        path = ROOT / rel
        names |= _self_attributes(ast.parse(path.read_text(), filename=str(path)))
    return names - RLLIB_API


def private_uses(source: str, banned: Set[str]) -> List[tuple]:
    """``(line, name)`` of every read or write of a ``banned`` attribute on another object than
    ``self`` (``x._name``, ``getattr(x, "_name")``, ``monkeypatch.setattr(x, "_name", ...)``).
    Names the file assigns as ``self._name`` itself belong to its own classes and are skipped."""
    tree = ast.parse(source)
    banned = banned - _self_attributes(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in banned:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                hits.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id in _ATTR_FUNCS)
                or (isinstance(node.func, ast.Attribute) and node.func.attr in ("setattr", "delattr"))):
            hits += [(node.lineno, a.value) for a in node.args[1:2]
                     if isinstance(a, ast.Constant) and a.value in banned]
    return sorted(hits)


def test_private_attributes_come_from_the_source():
    names = private_attributes()
    assert {"_params", "_optimizer", "_graphed", "_rollout", "_packed", "_target_q_net", "_learner"} <= names
    assert not names & RLLIB_API and all(n.startswith("_") for n in names)


def test_private_use_finder():
    banned = {"_params", "_packed"}
    src = ("x = learner._params\nreplay._packed.zero_()\ny = getattr(learner, '_params')\n"
           "monkeypatch.setattr(replay, '_packed', None)\nz = learner.params\n")
    assert private_uses(src, banned) == [(1, "_params"), (2, "_packed"), (3, "_params"), (4, "_packed")]
    # A file's own class: its self._name attributes, read on its own objects, are its business.
    own = "class Probe:\n    def __init__(self):\n        self._params = 1\n\nprobe = Probe()\nprobe._params\n"
    assert private_uses(own, banned) == []


def test_tests_benchmarks_and_examples_use_public_views():
    banned = private_attributes()
    found = []
    for folder in CALLERS:
        for path in sorted((REPO / folder).glob("*.py")):
            for line, name in private_uses(path.read_text(), banned):
                found.append(f"{path.relative_to(REPO)}:{line}: .{name}"
                             + (f" (use {RLLIB_PRIVATE_WITH_PUBLIC_VIEW[name]})"
                                if name in RLLIB_PRIVATE_WITH_PUBLIC_VIEW else ""))
    assert not found, "private attributes of the learner / runner / replay / module used outside the " \
                      "package (use their public properties):\n" + "\n".join(found)


def _class_members(tree: ast.AST) -> Set[str]:
    """Names a file's own classes define as methods or properties (``def _learner(self)``)."""
    return {f.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_package_reads_rllib_private_state_through_public_views():
    """Inside the package too: ``algo.local_learner`` / ``local_learner_of(learner_group)`` (RLlib's public
    ``foreach_learner``), never ``learner_group._learner``; ``learner.device``, never ``learner._device``."""
    assert private_uses("learner = algo.learner_group._learner\n", set(RLLIB_PRIVATE_WITH_PUBLIC_VIEW)) == [
        (1, "_learner")]
    found = []
    for name, path in _modules().items():
        source = path.read_text()
        banned = set(RLLIB_PRIVATE_WITH_PUBLIC_VIEW) - _class_members(ast.parse(source))
        found += [f"{name}:{line}: .{attr} (use {RLLIB_PRIVATE_WITH_PUBLIC_VIEW[attr]})"
                  for line, attr in private_uses(source, banned)]
    assert not found, "RLlib private attributes read in the package:\n" + "\n".join(found)


MAX_FUNCTION_LINES = 80
"""No library function or method is longer than this (its ``def`` line to its last line)."""


def _long_functions(limit: int) -> list[tuple[str, str, int]]:
    out = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append((name, node.name, lines))
    return out


def test_no_library_function_is_longer_than_the_limit():
    assert _long_functions(MAX_FUNCTION_LINES) == []
    assert _long_functions(40), "the finder sees long functions (a limit of 40 lines has some)"
