"""The base install's version ranges leave nothing for the ``[test]`` extra to downgrade."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
SELF = canonicalize_name(PYPROJECT["name"])


def _own_requirements(extras: set[str]) -> list[Requirement]:
    reqs = [Requirement(r) for r in PYPROJECT["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in PYPROJECT["optional-dependencies"][extra]]
    return reqs


def installed_closure(extras: set[str]) -> dict[str, list[Requirement]]:
    """Requirements of this project with ``extras`` and of every installed distribution they pull in.

    Returns:
        ``{distribution name: its requirements that apply}``, this project's read from pyproject.toml.
    """
    wanted = {SELF: set(extras)}
    todo = [SELF]
    seen: dict[str, list[Requirement]] = {}
    while todo:
        name = todo.pop()
        extras_of = wanted[name]
        if name == SELF:
            while True:  # self-references such as openenv-carla-gym[sb3,server] in the test extra
                own = [r for r in _own_requirements(extras_of) if canonicalize_name(r.name) == SELF]
                more = set().union(*(r.extras for r in own)) - extras_of
                if not more:
                    break
                extras_of |= more
            reqs = [r for r in _own_requirements(extras_of) if canonicalize_name(r.name) != SELF]
        else:
            reqs = [Requirement(r) for r in metadata.requires(name) or []]
        applies = [r for r in reqs
                   if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras_of or {""})]
        seen[name] = applies
        for r in applies:
            dep = canonicalize_name(r.name)
            try:
                metadata.version(dep)
            except metadata.PackageNotFoundError:
                continue  # not installed here (an optional platform dependency)
            if dep not in wanted or not r.extras <= wanted[dep]:
                wanted[dep] = wanted.get(dep, set()) | set(r.extras)
                todo.append(dep)
    return seen


def downgrades(extras: set[str]) -> list[str]:
    """Versions the base install may choose that a requirement of the ``extras`` install forbids."""
    base = {canonicalize_name(r.name): r.specifier for r in _own_requirements(set())}
    found = []
    for who, reqs in installed_closure(extras).items():
        for r in reqs:
            name = canonicalize_name(r.name)
            if name not in base or who == SELF:
                continue
            installed = Version(metadata.version(name))
            for spec in [*r.specifier, *base[name]]:
                try:
                    candidate = Version(spec.version)
                except InvalidVersion:  # wildcards such as !=8.3.*
                    continue
                if candidate >= installed and base[name].contains(candidate) and not r.specifier.contains(candidate):
                    found.append(f"{name} {candidate}: allowed by the base pin {base[name]}, refused by {who}'s {r}")
    return found


def test_a_test_install_downgrades_nothing_the_base_install_chose():
    assert downgrades({"test"}) == []


def test_the_closure_reaches_the_pillow_cap_through_the_server_extra():
    closure = installed_closure({"test"})
    assert {"openenv-core", "gradio", "torch", "trl", "stable-baselines3", "open-clip-torch"} <= set(closure)
    assert "gradio" not in installed_closure(set())  # the base install alone is gymnasium, numpy and Pillow
