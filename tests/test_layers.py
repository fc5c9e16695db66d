"""Dependencies point down: the package's import graph, read from the source with `ast`.

Every ``import`` and ``from ... import`` of every module of ``carla_gym`` counts, at module level
and inside functions alike (a function-local import is still a dependency, only a later one).
Nodes are the subpackages (``sim``, ``backends``, ``openenv``, ``envs``, ``reward``, ``sb3``,
``llm``), the top-level modules (``cli``, ``cli_args``, ``hints``, ``io``, ...) and the package
root (``carla_gym/__init__.py``, which registers the envs).

The rules:

* The library never imports the harness (``agents``) or the scripts (``train_sb3``, ``train_grpo``).
* ``carla_gym.sim``, the simulator at the bottom, imports nothing else of ``carla_gym``: no
  utility module either (today it needs none; a shared helper it needs belongs in ``sim``).
* The graph between nodes has no cycle (a cycle means no layer order exists).
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "carla_gym"
FORBIDDEN = ("agents", "train_sb3", "train_grpo")
"""Top-level names the library must not import: the comparison harness and the scripts."""


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """``(line, dotted module name)`` of every import in ``path``, top-level and function-local.

    ``from a.b import c`` gives ``a.b.c`` (``c`` may be a submodule) and relative imports are
    resolved against ``path``'s package (``root`` is the directory holding the top package).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parents = parts[:len(parts) - node.level + 1]
                base = ".".join([*parents, base] if base else parents)
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def node_of(module: str, package: Path) -> str | None:
    """The graph node of a dotted module name inside ``carla_gym`` (None outside the package).

    ``carla_gym.sim.world`` -> ``sim``, ``carla_gym.hints.needs_extra`` -> ``hints``, and a name
    imported from the root (``from carla_gym import ENV_IDS``) -> ``carla_gym``.
    """
    parts = module.split(".")
    if parts[0] != "carla_gym":
        return None
    if len(parts) > 1 and ((package / parts[1]).is_dir() or (package / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "carla_gym"


def module_node(path: Path, package: Path) -> str:
    """The graph node of a source file of ``package``."""
    rel = path.relative_to(package)
    if len(rel.parts) > 1:
        return rel.parts[0]
    return "carla_gym" if rel.name == "__init__.py" else rel.stem


def build_graph(package: Path = PACKAGE) -> tuple[dict[str, set[str]], list[str]]:
    """The node graph of ``package`` (a ``carla_gym`` directory) and every import of a forbidden name.

    Returns:
        ``{node: nodes it imports}`` (self-imports left out) and ``"file:line imports name"``
        entries for imports of `FORBIDDEN` names.
    """
    graph: dict[str, set[str]] = {}
    forbidden = []
    for path in sorted(package.rglob("*.py")):
        source = module_node(path, package)
        edges = graph.setdefault(source, set())
        for line, module in imported_modules(path, package.parent):
            if module.split(".")[0] in FORBIDDEN:
                forbidden.append(f"{path.relative_to(package.parent)}:{line} imports {module}")
            target = node_of(module, package)
            if target is not None and target != source:
                edges.add(target)
    return graph, forbidden


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a node list (first node repeated at the end), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return exc.args[1]
    return None


@pytest.fixture(scope="module")
def package_graph() -> tuple[dict[str, set[str]], list[str]]:
    return build_graph()


def test_the_graph_sees_every_subpackage_and_local_imports(package_graph):
    graph, _ = package_graph
    assert {"carla_gym", "sim", "backends", "openenv", "envs", "reward", "sb3", "llm", "cli", "hints"} <= set(graph)
    # function-local imports count: backends/openenv.py imports the client inside methods only
    assert "openenv" in graph["backends"] and "backends" in graph["envs"] and "envs" in graph["carla_gym"]


def test_the_library_never_imports_the_harness_or_the_scripts(package_graph):
    _, forbidden = package_graph
    assert forbidden == []


def test_the_simulator_imports_nothing_else_of_the_package(package_graph):
    graph, _ = package_graph
    assert graph["sim"] == set()


def test_the_package_graph_has_no_cycle(package_graph):
    graph, _ = package_graph
    assert find_cycle(graph) is None, f"import cycle {' -> '.join(find_cycle(graph))}: {graph}"


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The rules fail on a package that breaks them.

    The cycle runs through a function-local import, as ``backends`` <-> ``openenv`` did before
    the snapshot moved to ``sim``.
    """
    pkg = tmp_path / "carla_gym"
    for sub in ("sim", "backends", "openenv"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "hints.py").write_text("")
    (pkg / "sim" / "world.py").write_text("from carla_gym.hints import needs_extra\n")
    (pkg / "backends" / "embedded.py").write_text("from carla_gym.sim.world import World\n")
    (pkg / "openenv" / "environment.py").write_text(
        "def step():\n    from carla_gym.backends.embedded import snapshot_of\n    import agents.players\n")
    (pkg / "backends" / "remote.py").write_text("from ..openenv import environment\n")
    graph, forbidden = build_graph(pkg)
    assert graph == {"carla_gym": set(), "hints": set(), "sim": {"hints"}, "backends": {"sim", "openenv"},
                     "openenv": {"backends"}}
    assert forbidden == ["carla_gym/openenv/environment.py:3 imports agents.players"]
    assert find_cycle(graph) in (["backends", "openenv", "backends"], ["openenv", "backends", "openenv"])
