"""A folder named ``carla_gym`` where Python starts (a clone of this project) must not shadow the package.

An install that reaches the package through an import hook (setuptools' editable installs without pyproject's
``package-dir``) is asked only after Python's search of ``sys.path``; a folder named ``carla_gym`` in the current
folder wins there as a namespace package (no ``__init__.py``), so the package's ``__init__.py`` never runs and
gymnasium says "Environment CarlaTrolley doesn't exist". This project's editable install puts the clone on
``sys.path`` instead, so the package wins. Where a hook install is shadowed all the same, `carla_gym.sim` refuses
to load under a namespace parent with an ImportError that names the folder and the fix (``python -m agents...``,
``python -m carla_gym...``, ``import carla_gym.envs``; a bare ``import carla_gym`` runs none of the package's
code, so nothing can explain it there).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

import carla_gym

SIM_INIT = Path(carla_gym.__file__).parent / "sim" / "__init__.py"


def _message(folder: Path) -> str:
    return (f"ImportError: import carla_gym found the folder {folder}, which has no __init__.py (a clone of this "
            "project named carla_gym, in the folder Python started in or in the script's folder), instead of the "
            f"package {Path(carla_gym.__file__).resolve().parent}; start Python in another folder (inside the "
            "clone works too) or rename the clone folder (e.g. git clone <url> carla_gym_repo)")


def _namespace(folder: Path) -> types.ModuleType:
    """What ``import carla_gym`` gives when ``folder`` (without ``__init__.py``) shadows the package."""
    spec = ModuleSpec("carla_gym", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    return importlib.util.module_from_spec(spec)


def test_sim_refuses_a_namespace_parent_naming_the_folder_and_the_fix(tmp_path, monkeypatch):
    """In this process: ``carla_gym/sim/__init__.py`` run as a fresh module under a namespace ``carla_gym``."""
    folder = tmp_path / "carla_gym"
    folder.mkdir()
    monkeypatch.setitem(sys.modules, "carla_gym", _namespace(folder))
    probe = importlib.util.spec_from_file_location("carla_gym_sim_probe", SIM_INIT)
    with pytest.raises(ImportError) as refused:
        probe.loader.exec_module(importlib.util.module_from_spec(probe))
    assert f"ImportError: {refused.value}" == _message(folder)


def test_sim_loads_under_the_real_package():
    probe = importlib.util.spec_from_file_location("carla_gym_sim_probe", SIM_INIT)
    module = importlib.util.module_from_spec(probe)
    probe.loader.exec_module(module)  # sys.modules["carla_gym"] is the package itself: no refusal
    assert module.World is carla_gym.World


@pytest.mark.slow
def test_a_clone_folder_named_carla_gym_in_the_start_folder_does_not_shadow_the_editable_install(tmp_path):
    """A fresh interpreter in a folder holding a folder ``carla_gym`` without ``__init__.py`` (a clone).

    The editable install (pyproject's ``package-dir``) puts the clone on sys.path, so the package wins.
    """
    (tmp_path / "carla_gym").mkdir()
    code = ("import gymnasium as gym, carla_gym; print(carla_gym.__file__); "
            "print(gym.make('CarlaTrolley-v0', scenario='trolley_micro_escape_exists').reset(seed=0)[1]['scenario'])")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(Path(carla_gym.__file__)), "trolley_micro_escape_exists"]
