"""The layout's promise (docs/layout.md), read from the source: ``zoo/`` imports no family, and a
family imports only itself, the build half (``zoo.nn``) and the core it is written against (the
family contract, weight tables, foreign layouts), so shared pieces (the recurrent net, its
ports) live in ``zoo.nn`` instead of one family borrowing another's. Inside ``zoo/`` imports run
one way: no module reaches itself again through its imports, and every module imports only from
its own line of :data:`LAYERS` or the lines below, so the foundation (the checkpoint package,
the family contract, the registry, the recipe schema) cannot depend on the data package or a
backend. Parsed, not imported: no framework is loaded.

Every import counts, at module level and inside functions (an import deferred to a call still
runs, and still says which module depends on which); only those under ``if TYPE_CHECKING:`` are
left out, since they never run. An edge goes to the module an import names: ``from zoo import
x`` is ``zoo.x`` where that is a module, relative imports resolve in their package, and a
package's ``__init__`` running on the way to its submodule is no edge (every package that
re-exports its submodules would otherwise be a cycle).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = sorted(p.name for p in (ROOT / "architectures").iterdir() if (p / "__init__.py").is_file())
# The lines of zoo/, bottom first, as docs/layout.md draws them: a module imports only from its own
# line and the lines below, inside functions too. A name is a module and, unless a longer name
# says otherwise, every module under it (the root package ``zoo`` is itself only). The first six
# lines are the foundation. zoo.nn.keras.skeleton is zoo.checkpoint.tensors' way of building a
# Keras twin without drawing its initial weights and imports nothing of zoo; zoo.nn.{torch,keras}
# .quantized, its way of holding a quantized checkpoint's integers in each twin, import only the
# quantizer and the tables; zoo.metrics_file,
# the metrics file's names, is read by data/ and tracking below runs/.
LAYERS = (
    ("zoo.errors", "zoo.limits", "zoo.overwrite", "zoo.progress", "zoo.memory", "zoo.preprocessing",
     "zoo.precision", "zoo.native_logs", "zoo.metrics_file", "zoo.cache_dir", "zoo.nn.keras.skeleton",
     "zoo.checkpoint", "zoo.checkpoint.aligned", "zoo.checkpoint.foreign"),
    ("zoo.checkpoint.file", "zoo.checkpoint.writer", "zoo.checkpoint.tables",
     "zoo.checkpoint.keras_variables", "zoo.checkpoint.state", "zoo.checkpoint.quantized"),
    ("zoo.family", "zoo.registry", "zoo.nn.torch.quantized", "zoo.nn.keras.quantized"),
    ("zoo.checkpoint.tensors",),
    ("zoo.checkpoint.metadata",),
    ("zoo.recipe",),
    ("zoo.hardware", "zoo.schedule", "zoo.early_stopping", "zoo.tokenizer", "zoo.checkpoint_tokenizer"),
    ("zoo.nn",),
    ("zoo.finetune", "zoo.initial_weights", "zoo.model_memory", "zoo.peak_memory"),
    ("zoo.data",),
    ("zoo.backend",),
    ("zoo.tracking", "zoo.runs", "zoo.lora"),
    ("zoo.lightning", "zoo.keras"),
    ("zoo.plan", "zoo.api", "zoo.interchange", "zoo.sample", "zoo.sampling", "zoo.plot", "zoo.deploy",
     "zoo.loading", "zoo.inference", "zoo.predict_inputs", "zoo.predict_outputs"),
    ("zoo.compare",),
    ("zoo.cli", "zoo"),
)  # fmt: skip
FOUNDATION = 6  # lines: the checkpoint package, the family contract and registry, the recipe schema
# Imports that run upward, each with its reason: none today. An entry is (importer, imported).
UPWARD_EXCEPTIONS: dict[tuple[str, str], str] = {}
# What a family may import of zoo: the build half and the core it is written against.
FAMILY_IMPORTS = (
    "zoo.nn", "zoo.family", "zoo.registry", "zoo.checkpoint.tables", "zoo.checkpoint.foreign",
    "zoo.preprocessing", "zoo.errors",
)  # fmt: skip


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute imports; relative ones stay in their package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_zoo_imports_no_family():
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in imported(path) if m.split(".")[0] == "architectures")
        for path in (ROOT / "zoo").rglob("*.py")
    }
    assert {path: modules for path, modules in offenders.items() if modules} == {}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_only_zoo_and_itself(family):
    borrowed = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported(path) if m.split(".")[0] == "architectures" and m.split(".")[1:2] != [family]
        )
        for path in (ROOT / "architectures" / family).rglob("*.py")
    }
    assert {path: modules for path, modules in borrowed.items() if modules} == {}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_imports_the_build_half_and_the_core_only(family):
    """No trainer, backend, data loader or checkpoint reader: a family builds models."""
    reached = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported(path) if m.split(".")[0] == "zoo" and not within(m, FAMILY_IMPORTS)
        )
        for path in (ROOT / "architectures" / family).rglob("*.py")
    }
    assert {path: modules for path, modules in reached.items() if modules} == {}


def within(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in names)


# ---------------------------------------------------------------------------- the module graph

Graph = dict[str, dict[str, str]]  # module -> {module it imports: "file:line" of the first such import}


def modules_under(root: Path, package: str) -> dict[str, Path]:
    """Module name -> file of every module in the package folder ``root / package``."""
    found = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _runtime_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports under ``node`` that run, wherever they stand (functions, methods, branches)."""
    return (found for found, _ in _imports_in(node, True))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(root: Path, package: str) -> Graph:
    """Who imports whom among the modules of ``package`` (its own imports of itself left out)."""
    modules = modules_under(root, package)
    graph: Graph = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph[name] = {}
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            targets = _absolute(node, here, set(modules))
            for target in targets:
                while target and target not in modules:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, f"{path.relative_to(root)}:{node.lineno}")
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module: each is a set of
    modules that all reach each other through imports, i.e. one or more cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def shortest_path(graph: Graph, start: str, goal: str, within: set[str] | None = None) -> list[str] | None:
    """The fewest imports that lead from ``start`` to ``goal`` (to itself: a cycle), or None."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for target in sorted(graph[module]):
            if within is not None and target not in within:
                continue
            if target == goal:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), goal]
            if target not in came_from:
                came_from[target] = module
                queue.append(target)
    return None


def describe(graph: Graph, path: list[str]) -> str:
    """``a -> b (zoo/a.py:12) -> c (zoo/b.py:40)``: each step with the import that makes it."""
    return path[0] + "".join(f" -> {b} ({graph[a][b]})" for a, b in pairwise(path))


def cycles_of(graph: Graph) -> list[str]:
    """Per knot of modules that import each other: its members, then the shortest cycle through
    each member (duplicates dropped), so the report shows every import that would need cutting."""
    report = []
    for knot in strongly_connected(graph):
        cycles = {}
        for module in knot:
            path = shortest_path(graph, module, module, set(knot))
            cycles.setdefault(frozenset(pairwise(path)), describe(graph, path))
        report.append(f"{len(knot)} modules import each other: {', '.join(knot)}")
        report += [f"  {cycle}" for cycle in cycles.values()]
    return report


def write_tree(root: Path, files: dict[str, str]) -> None:
    """A made-up package for a reader's self-test: each relative path with its text."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_graph_reads_every_kind_of_import(tmp_path):
    """The reader itself, on a package made for it: a cycle it cannot see would pass unseen."""
    files = {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg import high\n",  # inside a function; `from pkg import module`
        "pkg/high.py": "from . import sub\nfrom .sub.leaf import name\n",  # relative imports
        "pkg/sub/__init__.py": "import pkg.low as low\n",
        "pkg/sub/leaf.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n"
        "else:\n    import pkg\nname = 1\n",
    }
    write_tree(tmp_path, files)
    graph = import_graph(tmp_path, "pkg")
    assert {module: sorted(edges) for module, edges in graph.items()} == {
        "pkg": [], "pkg.low": ["pkg.high"], "pkg.high": ["pkg.sub", "pkg.sub.leaf"],
        "pkg.sub": ["pkg.low"], "pkg.sub.leaf": ["pkg"],
    }  # fmt: skip
    assert graph["pkg.low"]["pkg.high"] == "pkg/low.py:2"
    assert cycles_of(graph) == [
        "3 modules import each other: pkg.high, pkg.low, pkg.sub",
        "  pkg.high -> pkg.sub (pkg/high.py:1) -> pkg.low (pkg/sub/__init__.py:1) -> pkg.high (pkg/low.py:2)",
    ]


def test_zoo_modules_import_one_way():
    cycles = cycles_of(import_graph(ROOT, "zoo"))
    assert not cycles, (
        "imports in zoo/ run in a circle; move what the lower module needs down:\n" + "\n".join(cycles)
    )


def line_of(module: str) -> int | None:
    """The line (1 = bottom) of :data:`LAYERS` that holds ``module``: its longest name there."""
    held = [
        (len(name), number)
        for number, names in enumerate(LAYERS, 1)
        for name in names
        if module == name or (name != "zoo" and module.startswith(f"{name}."))
    ]
    return max(held)[1] if held else None


def upward_imports(graph: Graph) -> list[str]:
    """Each import from a line to a higher one, not among :data:`UPWARD_EXCEPTIONS`, described."""
    return [
        f"{describe(graph, [module, target])}: line {line_of(module)} -> line {line_of(target)}"
        + (" (out of the foundation)" if line_of(module) <= FOUNDATION else "")
        for module in sorted(graph)
        for target in sorted(graph[module])
        if None not in (line_of(module), line_of(target))
        and line_of(target) > line_of(module)
        and (module, target) not in UPWARD_EXCEPTIONS
    ]


def test_every_zoo_module_has_a_line():
    unplaced = sorted(m for m in import_graph(ROOT, "zoo") if line_of(m) is None)
    assert not unplaced, "modules on no line of LAYERS (add them there and in docs/layout.md):\n" + "\n".join(
        unplaced
    )


def test_imports_run_down_the_layers():
    upward = upward_imports(import_graph(ROOT, "zoo"))
    assert not upward, "imports from a lower line to a higher one (docs/layout.md):\n" + "\n".join(upward)


def test_the_upward_exceptions_are_still_needed():
    graph = import_graph(ROOT, "zoo")
    stale = [pair for pair in UPWARD_EXCEPTIONS if pair[1] not in graph.get(pair[0], {})]
    assert not stale, f"exceptions for imports that no longer exist: {stale}"


def test_the_layers_catch_an_upward_import():
    """The table and its reader, on a made-up graph: the foundation reaching a backend is refused,
    a backend reaching the foundation is not; a module's longest name decides its line."""
    graph = {
        "zoo.checkpoint.metadata": {"zoo.backend": "zoo/checkpoint/metadata.py:9"},
        "zoo.backend": {"zoo.checkpoint.metadata": "zoo/backend.py:3"},
    }
    assert upward_imports(graph) == [
        "zoo.checkpoint.metadata -> zoo.backend (zoo/checkpoint/metadata.py:9): line 5 -> line 11"
        " (out of the foundation)"
    ]
    assert line_of("zoo.nn.keras.skeleton") == 1 and line_of("zoo.nn.keras.remat") == line_of("zoo.nn")
    assert line_of("zoo") == len(LAYERS) and line_of("zoo.unlisted") is None


# The training halves: what zoo compare may take from them (their public step kits).
STEP_KITS = {"zoo.lightning": "zoo.lightning.steps", "zoo.keras": "zoo.keras.steps"}


def imports_of(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """Every import of ``path`` (inside functions and ``if TYPE_CHECKING:`` too): its line, the
    module it names (absolute) and the names it takes from it (empty for ``import module``)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def test_no_module_imports_another_modules_private_names():
    """A name starting with ``_`` is its module's own: another module that imports it (a
    backend's pieces, a helper of the memory estimate) reaches past the module's door."""
    reached = [
        f"{path.relative_to(ROOT)}:{line}: {name} from {module}"
        for path in sorted((ROOT / "zoo").rglob("*.py"))
        for line, module, names in imports_of(path)
        if module.split(".")[0] == "zoo"
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not reached, "private names imported from another module:\n" + "\n".join(reached)


def test_compare_steps_the_trainers_through_their_step_kits():
    """zoo compare steps what zoo train steps, through one door per framework: the step kit
    (zoo.lightning.steps, zoo.keras.steps), never a trainer's or backend's other modules."""
    reached = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "zoo" / "compare").rglob("*.py"))
        for line, module, names in imports_of(path)
        for package, kit in STEP_KITS.items()
        if (module == package and set(names) - {kit.rsplit(".", 1)[1]})
        or (module.startswith(f"{package}.") and module != kit)
    ]
    assert not reached, "zoo/compare imports a trainer's pieces past its step kit:\n" + "\n".join(reached)


# ------------------------------------------------------------------ the one laziness boundary

# What `import zoo`, `zoo list`, `zoo show` and `zoo validate` must not load: the frameworks, and
# the libraries only some commands need (slow to import, or an optional extra that may be absent).
# ``safetensors.torch`` and the like carry their framework.
FRAMEWORKS = ("torch", "tensorflow", "keras", "lightning", "tf_keras", "torchmetrics")
DEFERRED = (
    "matplotlib", "PIL", "sklearn", "tokenizers", "pyarrow", "tensorboard", "tensorboardX", "mlflow",
    "onnx", "onnxruntime", "onnxscript", "tf2onnx", "pydoc_data",
)  # fmt: skip
CARRIERS = {"safetensors.torch": "torch", "safetensors.tensorflow": "tensorflow"}


def weight_of_library(module: str) -> set[str]:
    """The heavy libraries importing ``module`` loads (empty for a light one)."""
    for carrier, framework in CARRIERS.items():
        if within(module, (carrier,)):
            return {framework}
    top = module.split(".")[0]
    return {top} if top in FRAMEWORKS + DEFERRED else set()


def _imports_in(tree: ast.AST, at_top: bool) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import, runs when the module is imported) for every runtime import under ``tree``."""
    found = []

    def walk(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, top))
            return
        inner = top and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
                continue
            walk(child, inner)

    walk(tree, at_top)
    return found


def _absolute(node: ast.Import | ast.ImportFrom, here: str, modules: set[str]) -> list[str]:
    """The modules an import names, absolute: ``from pkg import sub`` is ``pkg.sub`` where that is
    a module of ``modules``, else ``pkg``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names})


def module_imports(root: Path) -> dict[str, list[tuple[str, bool, str]]]:
    """zoo module -> (imported name, runs at import, "file:line") for each runtime import."""
    found = {}
    paths = modules_under(root, "zoo")
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        found[name] = [
            (target, top, f"{path.relative_to(root)}:{node.lineno}")
            for node, top in _imports_in(tree, True)
            for target in _absolute(node, here, set(paths))
        ]
    return found


def weights(imports: dict[str, list[tuple[str, bool, str]]]) -> dict[str, set[str]]:
    """zoo module -> the heavy libraries importing it loads: through its imports that run at
    import time, its packages' ``__init__`` (which run first) and the zoo modules those reach,
    transitively."""
    modules = set(imports)

    def zoo_module(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def parents(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules]

    memo: dict[str, set[str]] = {}

    def weigh(module: str, seen: frozenset[str]) -> set[str]:
        if module in memo:
            return memo[module]
        total: set[str] = set()
        for target, top, _ in imports[module]:
            if not top:
                continue
            total |= weight_of_library(target)
            inner = zoo_module(target) if target.split(".")[0] == "zoo" else None
            for reached in [inner, *parents(inner)] if inner else []:
                if reached not in seen and reached != module:
                    total |= weigh(reached, seen | {module})
        memo[module] = total
        return total

    own = {module: weigh(module, frozenset()) for module in sorted(modules)}
    return {module: own[module].union(*(own[p] for p in parents(module))) for module in own}


def deferred_without_reason(root: Path) -> list[str]:
    """Each import inside a function that loads nothing heavy its module does not load already:
    it belongs at the top of the file (docs/layout.md, "The laziness boundary")."""
    imports = module_imports(root)
    weight = weights(imports)
    modules = set(imports)
    offenders = []
    for module, rows in imports.items():
        for target, top, where in rows:
            if top:
                continue
            if target.split(".")[0] == "zoo":
                inner = target
                while inner and inner not in modules:
                    inner = inner.rpartition(".")[0]
                brings = weight.get(inner, set())
            else:
                brings = weight_of_library(target)
            if not brings - weight[module]:
                offenders.append(f"{where}: {target} (loads nothing {module} does not)")
    return sorted(set(offenders))


def test_imports_inside_functions_only_cross_the_laziness_boundary():
    """A function defers an import only when the import loads a framework or a deferred library
    (FRAMEWORKS, DEFERRED) that its module does not load when imported; every other import is at
    the top of its file, where a reader sees the module's dependencies."""
    offenders = deferred_without_reason(ROOT)
    assert not offenders, f"{len(offenders)} imports inside functions belong at the top:\n" + "\n".join(
        offenders
    )


def test_the_laziness_boundary_reads_what_a_module_loads(tmp_path):
    files = {
        "zoo/__init__.py": "",
        "zoo/light.py": "import json\ndef f():\n    import torch\n    import os\n    from zoo import heavy\n",
        "zoo/heavy.py": "import torch\ndef g():\n    from zoo import light\n    import tensorflow\n"
        "    from zoo.nn import low\n",
        "zoo/nn/__init__.py": "import keras\n",
        "zoo/nn/low.py": "",
        "zoo/tf.py": "from zoo.heavy import x\n"
        "def h():\n    import matplotlib\n    from safetensors.torch import load\n",
    }
    write_tree(tmp_path, files)
    assert weights(module_imports(tmp_path)) == {
        "zoo": set(), "zoo.heavy": {"torch"}, "zoo.light": set(), "zoo.tf": {"torch"},
        "zoo.nn": {"keras"}, "zoo.nn.low": {"keras"},
    }  # fmt: skip
    assert deferred_without_reason(tmp_path) == [
        "zoo/heavy.py:3: zoo.light (loads nothing zoo.heavy does not)",
        "zoo/light.py:4: os (loads nothing zoo.light does not)",
        "zoo/tf.py:4: safetensors.torch (loads nothing zoo.tf does not)",
    ]
