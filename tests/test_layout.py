"""The package's layout is the pipeline: packages in one order, no import circle, presentation apart.

Data flows one way (scenario → data → markets → schedule → replay → runs → output → experiment):
a module may import modules of its own package and of packages *upstream* of it (earlier in
:data:`LAYERS`), never downstream, and no module reaches itself through others. Every kind of
import counts as an edge — at module level or inside a function, ``from pkg import sub``,
``import dpmarket.x`` and ``importlib.import_module("dpmarket.x")`` — except imports under
``if TYPE_CHECKING:``, which are annotations only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dpmarket"

# Upstream → downstream. Modules of one entry may import each other (no circle); an entry may import
# any entry before it. ``dpmarket`` (the package's own __init__) re-exports the API lazily, on top.
LAYERS = [
    ["dpmarket.errors", "dpmarket.rng", "dpmarket._version"],
    ["dpmarket.system"],
    ["dpmarket.scenario"],
    ["dpmarket.learning"],
    ["dpmarket.data"],
    ["dpmarket.privacy"],
    ["dpmarket.markets"],
    ["dpmarket.schedule"],
    ["dpmarket.replay"],
    ["dpmarket.runs"],
    ["dpmarket.output"],
    ["dpmarket.experiment"],
    ["dpmarket.api"],
    ["dpmarket.cli", "dpmarket.__main__"],
    ["dpmarket"],
]
MAX_MODULES = 10  # per package level, as the model codebases of the field keep them


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _is_module(name: str) -> bool:
    base = ROOT / name.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` blocks."""
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            hidden |= {id(n) for child in node.body for n in ast.walk(child)}
    return hidden


def _dynamic_import(node: ast.AST) -> str | None:
    """The module of ``importlib.import_module("dpmarket…")`` (or ``__import__``), if ``node`` is one."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__"):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("dpmarket"):
        return arg.value
    if isinstance(arg, ast.JoinedStr):  # an f-string names modules we cannot list: refuse it outright
        return "<dynamic>"
    return None


def _imports(path: Path) -> set[str]:
    """The dpmarket modules ``path`` imports anywhere in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hidden, found = _type_checking_nodes(tree), set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpmarket"):
            subs = {f"{node.module}.{a.name}" for a in node.names}
            modules = {s for s in subs if _is_module(s)}
            # names that are not submodules come from the module itself
            found |= modules if len(modules) == len(subs) else {node.module} | modules
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dpmarket")}
        elif (target := _dynamic_import(node)) is not None:
            found.add(target)
    return found


def import_graph(package: Path = PACKAGE) -> nx.DiGraph:
    """Module → modules it imports, over the whole package."""
    graph = nx.DiGraph()
    for path in package.rglob("*.py"):
        name = _module_name(path)
        graph.add_node(name)
        graph.add_edges_from((name, target) for target in _imports(path) if target != name)
    return graph


def _own_package(a: str, b: str) -> bool:
    return a.startswith(f"{b}.") or b.startswith(f"{a}.")


def _circles(graph: nx.DiGraph) -> list[list[str]]:
    """Cycles, ignoring a package's own ``__init__`` re-exporting its submodules."""
    return [c for c in nx.simple_cycles(graph)
            if not any(_own_package(a, b) for a, b in zip(c, c[1:] + c[:1], strict=True))]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the entry ``module`` belongs to (the longest matching prefix)."""
    best, index = "", None
    for i, entries in enumerate(LAYERS):
        for entry in entries:
            if (module == entry or module.startswith(f"{entry}.")) and len(entry) > len(best):
                best, index = entry, i
    if index is None:
        raise AssertionError(f"{module} belongs to no layer of tests/test_layout.py")
    return index


def upstream_violations(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """Edges from a module to a module of a package downstream of it."""
    return sorted((a, b) for a, b in graph.edges if layer_of(b) > layer_of(a))


def test_no_import_circles():
    assert _circles(import_graph()) == []


def test_nothing_upstream_imports_downstream():
    assert upstream_violations(import_graph()) == []


def test_no_module_is_imported_by_a_name_computed_at_run_time():
    assert not [a for a, b in import_graph().edges if b == "<dynamic>"]


def test_every_module_belongs_to_a_layer():
    for module in import_graph().nodes:
        if module != "<dynamic>":
            layer_of(module)


def test_the_checks_catch_a_planted_back_edge_circle_and_dynamic_import(tmp_path):
    """The checks themselves: a back edge (the market's forecast importing a run), a circle through
    it, and an ``importlib`` call hidden in a function are all found."""
    graph = import_graph()
    graph.add_edge("dpmarket.markets.forecast", "dpmarket.runs.run")
    assert ("dpmarket.markets.forecast", "dpmarket.runs.run") in upstream_violations(graph)
    graph.add_edge("dpmarket.runs.run", "dpmarket.markets.forecast")
    assert any({"dpmarket.runs.run", "dpmarket.markets.forecast"} <= set(c) for c in _circles(graph))
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    import importlib\n    return importlib.import_module('dpmarket.api')\n")
    assert _imports(planted) == {"dpmarket.api"}


def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


@pytest.mark.parametrize("package", _packages(), ids=lambda p: _module_name(p / "x.py").removesuffix(".x"))
def test_a_package_level_holds_few_modules_and_its_docstring_lists_them(package):
    modules = sorted(p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__"))
    subpackages = sorted(p.parent.name for p in package.glob("*/__init__.py"))
    assert len(modules) <= MAX_MODULES, modules
    if package == PACKAGE:
        return  # the top level: the API, the CLI, errors and streams (its docstring shows the pipeline)
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    name = _module_name(package / "__init__.py")
    missing = [m for m in modules + subpackages if f"{name}.{m}`" not in doc]
    assert missing == [], f"{name}'s docstring does not list {missing}"


COMPUTATION = ["dpmarket.runs.run", "dpmarket.replay.kernel", "dpmarket.schedule.scheduler",
               "dpmarket.schedule.tape", "dpmarket.runs.inline", "dpmarket.runs.replications",
               "dpmarket.runs.pilots", "dpmarket.schedule.sim.engine", "dpmarket.experiment.task"]


@pytest.mark.parametrize("layer", COMPUTATION)
def test_computation_does_not_import_presentation(layer):
    """The computation never reaches into the output package (results flow one way into it)."""
    reached = nx.descendants(import_graph(), layer)
    assert not {m for m in reached if m.startswith("dpmarket.output")}, layer


def test_only_the_figures_import_matplotlib():
    """As Mesa keeps ``visualization/``: drawing lives in ``output/figures`` alone."""
    drawing = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        if any(n.split(".")[0] == "matplotlib" for n in names):
            drawing.add(_module_name(path))
    assert drawing and all(m.startswith("dpmarket.output.figures.") for m in drawing), drawing


def test_the_engine_is_handed_a_network_not_the_scenario():
    """The SimPy layer takes the network specification built once from the scenario (Ciw's
    ``Network`` handed to the ``Simulation``), never the whole scenario."""
    for path in (PACKAGE / "schedule" / "sim").glob("*.py"):
        if path.stem == "network":
            continue
        assert not [m for m in _imports(path) if m.startswith("dpmarket.scenario")], path.name
        assert not re.search(r"\bScenario\b", path.read_text(encoding="utf-8")), path.name


def test_every_project_exception_lives_in_errors_under_the_one_base_class():
    """One place for the project's exceptions, one base class a caller catches (issue 23)."""
    import dpmarket.errors as errors

    defined = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exception", "Interrupt"))
                    for b in node.bases):
                defined[node.name] = _module_name(path)
    outside = {name: where for name, where in defined.items() if where != "dpmarket.errors"}
    assert outside == {"Terminated": "dpmarket.system.processes"}  # a KeyboardInterrupt, not an error
    for name, where in defined.items():
        if where == "dpmarket.errors" and name != "DPMarketError":
            assert issubclass(getattr(errors, name), errors.DPMarketError), name


def test_no_exception_is_matched_by_its_class_name():
    pattern = "__name__ =="
    offenders = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                 if any("type(" in line and (pattern in line or "__name__ !=" in line)
                        for line in p.read_text(encoding="utf-8").splitlines())]
    assert offenders == []


# A signature with more than five parameters takes those past the fifth by keyword (issue 23), so a
# call reads what it passes. The exemptions, each with its reason, are here and nowhere else.
POSITIONAL_LIMIT = 5  # self and cls not counted
NUMBA = "a numba-compiled kernel (@njit), the innermost loop of the answers or the replay"
WIDE_SIGNATURES = {
    "dpmarket.learning.compiled._dot4": NUMBA,
    "dpmarket.learning.compiled._weighted_sums": NUMBA,
    "dpmarket.learning.compiled._logistic_parts": NUMBA,
    "dpmarket.learning.compiled.gradients": NUMBA,
    "dpmarket.learning.compiled._gradients_any": NUMBA,
    "dpmarket.replay.compiled._async_loop": NUMBA + "; called with one packed tuple, kernel(*args)",
    "dpmarket.schedule.events.EventLog.record": "once per event, its fields in Event's order: emit() "
                                                "calls record(*event)",
    "dpmarket.schedule.events.EventLog.market_row": "once per market row: record's fields and the amount",
}


def wide_signatures(source: str, module: str) -> list[str]:
    """The functions of ``source`` (qualified by ``module``) with more than :data:`POSITIONAL_LIMIT`
    parameters that can be passed by position (self/cls of a method not counted)."""
    found = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [a.arg for a in child.args.posonlyargs + child.args.args]
                static = any(getattr(d, "id", None) == "staticmethod" for d in child.decorator_list)
                if in_class and not static and names[:1] in (["self"], ["cls"]):
                    names = names[1:]
                if len(names) > POSITIONAL_LIMIT:
                    found.append(f"{prefix}.{child.name}")
                visit(child, f"{prefix}.{child.name}", False)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}", True)
            else:
                visit(child, prefix, in_class)

    visit(ast.parse(source), module, False)
    return found


def test_parameters_past_the_fifth_are_keyword_only():
    found = {name for path in PACKAGE.rglob("*.py")
             for name in wide_signatures(path.read_text(encoding="utf-8"), _module_name(path))}
    assert sorted(found - WIDE_SIGNATURES.keys()) == []
    assert sorted(WIDE_SIGNATURES.keys() - found) == []  # an exemption no longer needed goes


def test_the_signature_check_flags_six_positional_parameters_and_spares_keyword_only_ones():
    code = ("def wide(a, b, c, d, e, f): ...\n"
            "def narrow(a, b, c, d, e, *, f, g): ...\n"
            "def starred(a, b, c, d, e, *rest, f): ...\n"
            "class C:\n"
            "    def method(self, a, b, c, d, e): ...\n"
            "    def wide(self, a, b, c, d, e, f=0): ...\n"
            "    @staticmethod\n"
            "    def static(self, a, b, c, d, e): ...\n"
            "    def outer(self):\n"
            "        def inner(a, b, c, d, e, f, /): ...\n")
    assert wide_signatures(code, "m") == ["m.wide", "m.C.wide", "m.C.static", "m.C.outer.inner"]
