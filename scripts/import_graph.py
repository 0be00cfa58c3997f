"""spectui's import graph, read from the code's own imports: circles and imports that climb the layers.

    python scripts/import_graph.py [PACKAGE_DIR]      (default: spectui/ beside this folder)

Every `.py` file is a module, a package's `__init__.py` one of its own (`spectui.engine.drafters`).
An edge is any import the code writes, wherever it stands: at the top, in a function, under
`if TYPE_CHECKING:` (a type checker follows it, and it says what the module knows of), or
`importlib.import_module` / `__import__` given a literal name. `from pkg import name` is an edge to
the submodule `pkg.name` when there is one, else to `pkg` itself; `import_module(f"pkg.{x}")` is an
edge to every module under `pkg` (which one is not known before it runs). Importing `a.b.c` also
runs `a` and `a.b`'s `__init__`s; those implicit edges are left out, or every package that lists
its own modules would be a circle: a module that imports its package *by name* is counted.

It prints three things and exits 1 if any is there:
- circles between modules (strongly connected components of the graph, one shortest cycle each);
- circles between units: the top-level folders (engine, session, ...) and top-level modules;
- upward imports: a unit importing a unit of a higher layer in `LAYERS`, or, inside a unit that has
  layers of its own (`INNER_LAYERS`: the engine's), a part importing a part of a higher one.
tests/test_import_graph.py runs it on spectui/ and on small packages built to fail.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LAYERS: Sequence[tuple[str, frozenset[str]]] = (
    ("base", frozenset({"spectui", "paths", "errors", "safe_text", "limits", "user_files", "argtypes", "crashlog",
                        "output", "config_file"})),
    ("engine", frozenset({"engine"})),
    ("faults", frozenset({"faults", "signals"})),
    ("chat", frozenset({"chat"})),
    ("catalog", frozenset({"catalog"})),
    ("session", frozenset({"session"})),
    ("export", frozenset({"export"})),
    ("front ends", frozenset({"bench", "serve", "ui", "worker"})),
    ("command line", frozenset({"cli", "__main__"})),
)
"""spectui's layers, lowest first (docs/ARCHITECTURE.md, "Layers"): a unit (a top-level folder or
module) may import its own layer and those below it. The base modules know nothing of spectui
above them. The engine is the decoding core: no chat, catalog, session or UI. Faults turn what the
engine and the store report into one line per surface, and signals stop a run as a fault. Chat
(templates, reasoning, the store) and the catalog (what is on disk, what to fetch) describe
conversations and models; a session (the reply core, the memory plan, the options, doctor) is what
every front end drives. Export reads a saved chat (the app's F10 uses it too); the front ends (the
app, serve, bench, the RPC worker) each stand alone; the command line picks one."""

ENGINE_LAYERS: Sequence[tuple[str, frozenset[str]]] = (
    ("llama.cpp", frozenset({"llama"})),
    ("rpc", frozenset({"rpc"})),
    ("files", frozenset({"files"})),
    ("model", frozenset({"model"})),
    ("terms", frozenset({"generation_config", "events"})),
    ("step", frozenset({"step"})),
    ("planning", frozenset({"planning"})),
    ("drafters", frozenset({"drafters"})),
    ("doubles", frozenset({"doubles"})),
    ("loop", frozenset({"generator", "textstream"})),
)
"""The engine's own layers, lowest first (docs/ARCHITECTURE.md, "The engine by layer"): a part (a
folder or module of engine/) may import its own layer and those below it. llama.cpp's boundary
(bindings, devices, build, log, buffers), the target on other machines (rpc), facts from a GGUF
before a load (files), one loaded model and its rollback (model), what the engine is asked and
says (generation_config, events), the step (sampling, trees, the rule and its contracts with a target and a
drafter), planning K, the drafters, the test doubles, and the loop on top (generator)."""

INNER_LAYERS: Mapping[str, Sequence[tuple[str, frozenset[str]]]] = {"engine": ENGINE_LAYERS}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str
    """`path:line` of the import, relative to the package's parent."""


@dataclass
class Graph:
    package: str
    modules: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)

    def successors(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {name: set() for name in self.modules}
        for edge in self.edges:
            out[edge.source].add(edge.target)
        return out

    def unit(self, module: str) -> str:
        """The top-level folder or module a module belongs to (`engine`, `cli`); the package's own
        `__init__` is the package's name."""
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    def part(self, module: str) -> str | None:
        """The folder or module of its unit a module belongs to (`step` for `spectui.engine.step.tree`);
        None for the unit itself (its package's `__init__`)."""
        parts = module.split(".")
        return parts[2] if len(parts) > 2 else None

    def unit_successors(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {self.unit(name): set() for name in self.modules}
        for edge in self.edges:
            source, target = self.unit(edge.source), self.unit(edge.target)
            if source != target:
                out[source].add(target)
        return out


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module under `package_dir`, by dotted name (the folder's name first)."""
    names: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_package(name: str, modules: Mapping[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module an imported dotted name runs last: itself, or the longest known prefix."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _string_prefix(node: ast.expr) -> tuple[str, bool] | None:
    """A literal module name (name, True), or an f-string's literal start (prefix, False)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value, False
    return None


def _targets(node: ast.AST, module: str, modules: Mapping[str, Path]) -> Iterable[str]:
    """The modules of `modules` that one AST node imports."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            found = _known(alias.name, modules)
            if found is not None:
                yield found
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if _is_package(module, modules) else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            origin = ".".join([*base, *([node.module] if node.module else [])])
        else:
            origin = node.module or ""
        for alias in node.names:
            sub = f"{origin}.{alias.name}"
            found = sub if sub in modules else _known(origin, modules)
            if found is not None:
                yield found
    elif isinstance(node, ast.Call) and node.args:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called not in ("import_module", "__import__"):
            return
        literal = _string_prefix(node.args[0])
        if literal is None:
            return
        name, whole = literal
        if whole:
            found = _known(name, modules)
            if found is not None:
                yield found
        elif name.endswith("."):
            yield from (other for other in modules if other.startswith(name))


def build_graph(package_dir: Path) -> Graph:
    modules = module_names(package_dir)
    graph = Graph(package_dir.name, modules)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(package_dir.parent)
        seen: set[tuple[str, int]] = set()
        for node in ast.walk(tree):
            for target in _targets(node, module, modules):
                line = getattr(node, "lineno", 0)
                if target != module and (target, line) not in seen:
                    seen.add((target, line))
                    graph.edges.append(Edge(module, target, f"{where}:{line}"))
    return graph


def strongly_connected(successors: Mapping[str, set[str]]) -> list[list[str]]:
    """The components of more than one node (Tarjan), each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(successors.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(successors) + 100))
    try:
        for node in sorted(successors):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def shortest_cycle(component: Sequence[str], successors: Mapping[str, set[str]]) -> list[str]:
    """A shortest way from the component's first member back to itself, inside the component."""
    start, inside = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(successors[node] & inside):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{component} is not a circle")


def layer_of(unit: str, layers: Sequence[tuple[str, frozenset[str]]] = LAYERS) -> int:
    for rank, (_, units) in enumerate(layers):
        if unit in units:
            return rank
    raise KeyError(f"{unit!r} is in no layer: add it to LAYERS in scripts/import_graph.py")


@dataclass
class Report:
    circles: list[list[str]]
    """Each module circle as one shortest cycle (first member repeated at the end)."""
    unit_circles: list[list[str]]
    upward: list[Edge]
    unplaced: list[str]
    """Units in no layer."""

    @property
    def clean(self) -> bool:
        return not (self.circles or self.unit_circles or self.upward or self.unplaced)

    def lines(self) -> list[str]:
        out = [f"circle: {' -> '.join(cycle)}" for cycle in self.circles]
        out += [f"circle between folders: {' -> '.join(cycle)}" for cycle in self.unit_circles]
        out += [f"upward: {edge.source} -> {edge.target} ({edge.where})" for edge in self.upward]
        out += [f"in no layer: {unit} (add it to LAYERS, or INNER_LAYERS for a part)" for unit in self.unplaced]
        return out


def _placed(name: str, layers: Sequence[tuple[str, frozenset[str]]]) -> bool:
    return any(name in members for _, members in layers)


def _inner_upward(graph: Graph, edge: Edge, inner: Mapping[str, Sequence[tuple[str, frozenset[str]]]]) -> bool:
    """An edge inside one unit with layers of its own, from a part to a part of a higher layer."""
    unit = graph.unit(edge.source)
    source, target = graph.part(edge.source), graph.part(edge.target)
    if unit != graph.unit(edge.target) or unit not in inner or source is None or target is None:
        return False
    layers = inner[unit]
    if not (_placed(source, layers) and _placed(target, layers)):
        return False
    return layer_of(source, layers) < layer_of(target, layers)


def check(package_dir: Path, layers: Sequence[tuple[str, frozenset[str]]] = LAYERS,
          graph: Graph | None = None,
          inner: Mapping[str, Sequence[tuple[str, frozenset[str]]]] = INNER_LAYERS) -> Report:
    graph = graph or build_graph(package_dir)
    modules = graph.successors()
    units = graph.unit_successors()
    circles = [shortest_cycle(c, modules) for c in strongly_connected(modules)]
    unit_circles = [shortest_cycle(c, units) for c in strongly_connected(units)]
    unplaced = sorted(u for u in units if not _placed(u, layers))
    unplaced += sorted({f"{graph.unit(m)}.{part}" for m in graph.modules
                        if graph.unit(m) in inner and (part := graph.part(m)) is not None
                        and not _placed(part, inner[graph.unit(m)])})
    upward = [edge for edge in graph.edges
              if (graph.unit(edge.source) not in unplaced and graph.unit(edge.target) not in unplaced
                  and layer_of(graph.unit(edge.source), layers) < layer_of(graph.unit(edge.target), layers))
              or _inner_upward(graph, edge, inner)]
    return Report(circles, unit_circles, upward, unplaced)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    package_dir = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "spectui"
    graph = build_graph(package_dir)
    report = check(package_dir, graph=graph)
    for line in report.lines():
        print(line)
    print(f"{len(graph.modules)} modules, {len(graph.edges)} imports: {len(report.circles)} circles, "
          f"{len(report.unit_circles)} between folders, {len(report.upward)} upward")
    return 0 if report.clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
