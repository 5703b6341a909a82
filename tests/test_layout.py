"""The package's layout shows the pipeline: no import circles, presentation kept apart.

Data flows one way (scenario → data → market → schedule → replay → results): a module that imports
another, even inside a function, must not be imported back by it, directly or through others.
Imports under ``if TYPE_CHECKING:`` are annotations only and do not count; ``from pkg import sub``
of a submodule is an edge to the submodule, not to the package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dpmarket"


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
    return found


def import_graph(package: Path = PACKAGE) -> nx.DiGraph:
    """Module → modules it imports, over the whole package."""
    graph = nx.DiGraph()
    for path in package.rglob("*.py"):
        name = _module_name(path)
        graph.add_node(name)
        graph.add_edges_from((name, target) for target in _imports(path) if target != name)
    return graph


def _circles(graph: nx.DiGraph) -> list[list[str]]:
    """Cycles, ignoring a package's own ``__init__`` re-exporting its submodules."""
    def own_package(a: str, b: str) -> bool:
        return a.startswith(f"{b}.") or b.startswith(f"{a}.")

    return [c for c in nx.simple_cycles(graph)
            if not any(own_package(a, b) for a, b in zip(c, c[1:] + c[:1], strict=True))]


def test_no_import_circles():
    assert _circles(import_graph()) == []


def test_the_circle_check_finds_a_circle():
    """The check itself: a planted back edge (the market's calibration importing the run) is found."""
    graph = import_graph()
    graph.add_edge("dpmarket.market.calibration", "dpmarket.run")
    assert any({"dpmarket.run", "dpmarket.market.calibration"} <= set(c) for c in _circles(graph))


COMPUTATION = ["dpmarket.run", "dpmarket.replay", "dpmarket.schedule", "dpmarket.tape", "dpmarket.inline",
               "dpmarket.replications", "dpmarket.market.calibration", "dpmarket.sim.engine",
               "dpmarket.experiment.task"]


@pytest.mark.parametrize("layer", COMPUTATION)
def test_computation_does_not_import_presentation(layer):
    """The computation never reaches into the output package (results flow one way into it)."""
    reached = nx.descendants(import_graph(), layer)
    assert not {m for m in reached if m.startswith("dpmarket.output")}, layer


def test_the_output_package_holds_the_presentation():
    names = {p.stem for p in (PACKAGE / "output").glob("*.py")}
    assert {"results", "report", "plots", "sweep_plots", "timeline_plot", "painter", "market_plots"} <= names
    assert not any((PACKAGE / f"{n}.py").exists() for n in ("results", "report", "plots", "painter"))
