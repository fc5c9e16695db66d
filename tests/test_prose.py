"""Prose that cannot drift: no private references in user-facing text, package indexes that match the files.

Private references (`PATTERNS`) are issue numbers ("issue 17", "Issue #5"), private upstream bug codes (B1 to
B29 as names of upstream bugs), paths outside the repository (``../shared``, ``/work/shared``,
``shared/spec``, ``spec/<name>.md``) and the names of the private reference documents. They are searched in
`scanned_files`: README.md, docs/**/*.md and docs/**/*.py, mkdocs.yml, pyproject.toml, .ci/run, the templates
``carla-gym package`` writes (carla_gym/**/*.tmpl) and every ``.py`` file of carla_gym/, agents/ and
benchmarks/ plus train_*.py and tests/*.py, docstrings, comments, test ids and strings alike. The one
file left out is this one, tests/test_prose.py, which plants such strings on purpose to check that the scanner
finds them. A source is named in words ("upstream's trolley_micro data", "VLM-RL's config") or by a link to the
public upstream file.

Package index format (`index_of`): the module docstring of every package ``__init__.py`` under carla_gym/
and agents/ lists each module and subpackage of the package on a line of its own that starts with
``* `name` -- `` (a bullet, the name in backticks, one or more spaces, two dashes, then what it holds); a
description may go on over indented lines. The index names exactly the package's modules (``*.py`` but
``__init__.py`` and ``__main__.py``) and subpackages (folders with an ``__init__.py``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PATTERNS = {
    "issue number": re.compile(r"\bissues? ?#?[0-9]+", re.IGNORECASE),
    "private bug code": re.compile(r"\bB(?:[1-9]|[12][0-9])\b"),
    "path outside the repository": re.compile(
        r"\.\./shared\b|/work/shared\b|\bshared/(?:spec|reference)\b|\bspec/[a-z_]+\.md\b"),
    "private reference document": re.compile(
        r"\b(?:openenv_carla|vlm_rl|trl_environment_factory|anchors)\.md\b|\bnavigation\.md,? sections?\b"
        r"|\bspec (?:sections? )?[0-9]|§ ?[0-9]"),
}
"""What user-facing text must not contain, by kind."""

INDEX_LINE = re.compile(r"^\* `([A-Za-z_][A-Za-z0-9_]*)` +-- ", re.MULTILINE)
"""One entry of a package index: ``* `name` -- what it holds``."""


def scan_text(text: str, name: str) -> list[str]:
    """Every private reference in ``text``, as ``name:line: 'match' (kind)``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for kind, pattern in PATTERNS.items():
            found += [f"{name}:{number}: {m.group(0)!r} ({kind})" for m in pattern.finditer(line)]
    return found


def scan_file(path: Path, root: Path = ROOT) -> list[str]:
    """`scan_text` of one file, named relative to ``root``."""
    return scan_text(path.read_text(encoding="utf-8"), str(path.relative_to(root)))


def scanned_files(root: Path = ROOT) -> list[Path]:
    """The user-facing files: README, docs pages, mkdocs.yml, pyproject.toml, the packages', scripts' and tests' code.

    tests/test_prose.py itself is left out: it plants private references on purpose.
    """
    files = [root / "README.md", root / "mkdocs.yml", root / "pyproject.toml", *sorted(root.glob("train_*.py"))]
    files += sorted((root / "docs").rglob("*.md")) + sorted((root / "docs").rglob("*.py")) + [root / ".ci" / "run"]
    files += sorted((root / "carla_gym").rglob("*.tmpl"))  # what carla-gym package writes for users
    for package in ("carla_gym", "agents", "benchmarks"):
        files += sorted((root / package).rglob("*.py"))
    files += [f for f in sorted((root / "tests").glob("*.py")) if f.name != "test_prose.py"]
    return [f for f in files if f.is_file()]


def index_of(init: Path) -> list[str]:
    """The names a package's ``__init__.py`` docstring indexes (lines ``* `name` -- ...``), in order."""
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    return INDEX_LINE.findall(doc)


def package_contents(package: Path) -> set[str]:
    """The modules (``*.py`` but ``__init__``/``__main__``) and subpackages of a package folder."""
    modules = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return modules | {d.name for d in package.iterdir() if (d / "__init__.py").is_file()}


def index_problems(package: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with a package's index: missing, unlisted modules, names of no module, duplicates."""
    name = str(package.relative_to(root))
    listed, present = index_of(package / "__init__.py"), package_contents(package)
    if not listed:
        return [f"{name}/__init__.py: no index (lines '* `module` -- ...')"]
    problems = [f"{name}: {m} is not in the index" for m in sorted(present - set(listed))]
    problems += [f"{name}: the index lists {m}, which is no module of it" for m in sorted(set(listed) - present)]
    return problems + [f"{name}: {m} is listed twice" for m in sorted({m for m in listed if listed.count(m) > 1})]


def packages(root: Path = ROOT) -> list[Path]:
    """Every package folder under carla_gym/ and agents/."""
    return sorted(p.parent for top in ("carla_gym", "agents") for p in (root / top).rglob("__init__.py"))


# -- the scanner finds what it must and nothing else -------------------------------------------------------------

@pytest.mark.parametrize("text, kind", [
    ("Changed in issue 12.", "issue number"),
    ("see Issue #5's training mix", "issue number"),
    ("as before issues 14 and 15", "issue number"),
    ("Contract: ../shared/spec/trl_environment_factory.md section 1", "path outside the repository"),
    ("from /work/shared/reference/data.json", "path outside the repository"),
    ("spec/navigation.md lists them", "path outside the repository"),
    ("upstream bug B9: rewards after done", "private bug code"),
    ("(B18, B25)", "private bug code"),
    ("openenv_carla.md section 4.2", "private reference document"),
    ("navigation.md section 2's table", "private reference document"),
    ("VLM-RL ``waypoints``; spec 2.2", "private reference document"),
    ("(§2.7)", "private reference document"),
])
def test_the_scanner_finds_each_kind(text, kind):
    found = scan_text(f"first line\n{text}\n", "planted.py")
    assert found and all(f.startswith("planted.py:2: ") for f in found), found
    assert any(f.endswith(f"({kind})") for f in found), found


@pytest.mark.parametrize("text", [
    "Open a GitHub issue for anything else.",
    "colour 0xB2 and 0xB29, Qwen2.5-VL-3B, B2B, AB12, B30, B0",
    "docs/environments/navigation.md and docs/training/sb3.md",
    "the shared fixture and shared/ folders of the test tier; a spec of the scenario",
    "tissue 5 mm",
    "the resolved spec (a ScenarioSpec) and its 2 lanes; JSON-RPC 2.0 (section 5.1 of its specification)",
])
def test_the_scanner_leaves_legitimate_text_alone(text):
    assert scan_text(text, "ok.md") == []


def test_a_planted_file_fails_with_its_name_line_and_match(tmp_path):
    (tmp_path / "carla_gym").mkdir()
    planted = tmp_path / "carla_gym" / "planted.py"
    planted.write_text('"""Docstring."""\n\nX = 1  # see issue 12\nPATH = "../shared/spec/openenv_carla.md"\n')
    (tmp_path / "README.md").write_text("# Title\n\nClean.\n")
    found = [f for path in scanned_files(tmp_path) for f in scan_file(path, tmp_path)]
    assert found == [
        "carla_gym/planted.py:3: 'issue 12' (issue number)",
        "carla_gym/planted.py:4: '../shared' (path outside the repository)",
        "carla_gym/planted.py:4: 'spec/openenv_carla.md' (path outside the repository)",
        "carla_gym/planted.py:4: 'openenv_carla.md' (private reference document)",
    ]


def test_the_index_checker_names_missing_and_stale_entries(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text('"""Sub.\n\n* `x` -- x.\n"""\n')
    (package / "sub" / "x.py").write_text("")
    (package / "a.py").write_text("")
    (package / "b.py").write_text("")
    (package / "__main__.py").write_text("")
    (package / "__init__.py").write_text('"""Pkg.\n\n* `a` -- the a\n  module.\n* `gone` -- removed.\n"""\n')
    assert index_of(package / "__init__.py") == ["a", "gone"]
    assert index_problems(package, tmp_path) == ["pkg: b is not in the index", "pkg: sub is not in the index",
                                                 "pkg: the index lists gone, which is no module of it"]
    (package / "__init__.py").write_text('"""Pkg.\n\n* `a` -- a.\n* `b` -- b.\n* `sub` -- sub.\n"""\n')
    assert index_problems(package, tmp_path) == [] and index_problems(package / "sub", tmp_path) == []
    (package / "__init__.py").write_text('"""Pkg without an index."""\n')
    assert index_problems(package, tmp_path) == ["pkg/__init__.py: no index (lines '* `module` -- ...')"]


# -- the tree ------------------------------------------------------------------------------------------------------

def test_no_private_references_in_user_facing_files():
    files = scanned_files()
    assert ROOT / "README.md" in files and ROOT / "carla_gym" / "__init__.py" in files and len(files) > 100
    found = [f for path in files for f in scan_file(path)]
    assert not found, (f"{len(found)} private references (name the source in words or link the public upstream "
                       "file; history goes to docs/changelog.md):\n" + "\n".join(found))


def test_every_package_index_lists_its_modules():
    found = packages()
    assert ROOT / "carla_gym" / "sim" / "navigation" in found and ROOT / "agents" in found
    problems = [p for package in found for p in index_problems(package)]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_the_documentation_site_builds_strictly(tmp_path):
    import importlib.util

    missing = [m for m in ("mkdocs", "mkdocstrings", "material") if importlib.util.find_spec(m) is None]
    assert not missing, f"{missing} not installed: the docs extra, pip install -e '.[docs]' (in [test])"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "api" / "envs" / "index.html").is_file()
