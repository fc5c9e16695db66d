"""``carla-gym serve`` starts without Gradio (the web page's toolkit), torch or transformers.

openenv-core's server package imports its web interface, and with it Gradio (about 6 s), whenever Gradio is
installed; `carla_gym.server.app.create_server_app` loads it without that module unless the web page is on.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from carla_gym.server import app as server_app

HEAVY = ("gradio", "torch", "transformers", "trl", "open_clip", "stable_baselines3", "matplotlib")
"""Modules the server without its web page never needs."""


def test_openenv_core_still_guards_its_web_interface_import():
    """What the start-up relies on: openenv-core imports its web interface in ``try``/``except``.

    ``env_server/__init__.py`` catches ``ModuleNotFoundError`` (which a ``None`` in sys.modules raises).
    """
    spec = importlib.util.find_spec("openenv.core.env_server")
    tree = ast.parse(Path(spec.origin).read_text())
    guarded = [node for node in ast.walk(tree) if isinstance(node, ast.Try)
               and any(isinstance(s, ast.ImportFrom) and s.module == "web_interface" and s.level == 1
                       for s in node.body)
               and any(isinstance(h.type, ast.Name) and h.type.id == "ModuleNotFoundError" for h in node.handlers)]
    assert len(guarded) == 1
    assert server_app.WEB_INTERFACE_MODULE == f"{spec.name}.web_interface"


def test_the_import_is_left_alone_with_the_web_page_or_once_openenv_is_imported():
    import openenv.core.env_server  # noqa: F401 - already imported in a test run: the helper must change nothing

    before = dict(sys.modules)
    server_app.import_openenv_core(web=False)
    server_app.import_openenv_core(web=True)
    assert sys.modules == before


SCRIPT = """
import sys
from carla_gym.server.app import create_server_app
create_server_app()
print(sorted(m for m in {heavy!r} if m in sys.modules))
create_server_app(web=True)  # the web interface still imports afterwards, in the same process
print("gradio" in sys.modules)
"""


@pytest.mark.slow
def test_a_fresh_server_imports_no_gradio_torch_or_transformers_until_the_web_page_is_on():
    env = {k: v for k, v in os.environ.items() if k != server_app.WEB_ENV_VAR}  # the web page off
    result = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY)], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["[]", "True"]


def test_openenv_cores_web_interface_names_still_import_after_the_skip():
    """Its packages' re-exports of the web interface are served on first use, not left None.

    The test run imports openenv-core through `import_openenv_core` (tests/conftest.py).
    """
    import openenv.core
    import openenv.core.env_server
    from openenv.core.env_server.web_interface import WebInterfaceManager, create_web_interface_app

    for module in (openenv.core.env_server, openenv.core):
        assert module.create_web_interface_app is create_web_interface_app
        assert module.WebInterfaceManager is WebInterfaceManager
    from openenv.core.env_server import create_web_interface_app as again

    assert again is create_web_interface_app
