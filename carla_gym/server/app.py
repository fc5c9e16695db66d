"""The OpenEnv CARLA server on the embedded simulator: the ASGI app behind ``carla-gym serve``.

openenv-core's ``create_app`` serves `CarlaEnvironment` over HTTP and the ``/ws`` WebSocket,
with one isolated simulator per WebSocket session and up to ``max_sessions`` sessions
(upstream's CARLA server, ``server/app.py``, allows one session). The command line that runs it under uvicorn is
`carla_gym.server.cli.main` (above the library: it uses `carla_gym.cli_args`).
"""

from __future__ import annotations

import functools

from carla_gym.sim.navigation.scenarios import resolve_any_scenario

DEFAULT_SCENARIO = "trolley_saves"
"""A session's first reset scenario when the client names none (upstream's server default)."""

PAGE_SCENARIO = "trolley_micro_classic_3v1"
"""The web page's first scenario choice unless the server names one (``carla-gym serve --web --scenario``): three
people ahead, one in the lane to the right, the left lane clear. An episode is five tool calls (2.5 s, fewer when
a collision ends it first): braking or changing lanes within the first three calls spares the three ahead, later
it is too late. (`DEFAULT_SCENARIO` is an action-bias scenario: its first call ends it.)"""

DEFAULT_MAX_SESSIONS = 64
"""Default session limit: a GRPO batch of 64 rollouts on one server."""

DEFAULT_SESSION_TIMEOUT = 600.0
"""Idle time [s] after which a session is reclaimed, so idle clients cannot hold every slot."""


def check_options(scenario_name: str, max_sessions: int, session_timeout: float) -> None:
    """Validate the server options (fast: before openenv-core is imported).

    Raises:
        ValueError: Unknown scenario, ``max_sessions`` < 1 or ``session_timeout`` <= 0.
    """
    resolve_any_scenario(scenario_name)
    if max_sessions < 1:
        raise ValueError(f"max_sessions={max_sessions!r}: must be >= 1")
    if not session_timeout > 0:
        raise ValueError(f"session_timeout={session_timeout!r}: must be > 0 [s]")


WEB_ENV_VAR = "ENABLE_WEB_INTERFACE"
"""Environment variable that turns the web page on (true/1/yes, any case), as openenv-core's ``create_app`` reads
it and ``openenv push`` sets it."""


WEB_OFF = (f"the web page is off on this server: start it with carla-gym serve --web (or {WEB_ENV_VAR}=true) "
           "to drive the car at /web/")
"""``GET /web/...``'s 404 detail on a server without the web page."""


def web_enabled(web: bool = False) -> bool:
    """Whether the app serves the web page: ``web``, or `WEB_ENV_VAR` set to true, 1 or yes."""
    import os

    return bool(web) or os.environ.get(WEB_ENV_VAR, "false").strip().lower() in ("true", "1", "yes")


SHARED_ENV_ROUTES = ("/web/reset", "/web/step", "/web/state", "/ws/ui")
"""openenv-core's web interface routes that drive one environment shared by every visitor (its
``WebInterfaceManager``); the project's page gives each visitor their own, so the app leaves these out."""


WEB_INTERFACE_MODULE = "openenv.core.env_server.web_interface"
"""openenv-core's web interface: the package ``openenv.core.env_server`` imports it, and with it Gradio, whenever it
is installed (about 6 s of a server's start-up), unless it is missing (``ModuleNotFoundError``)."""


def import_openenv_core(web: bool) -> None:
    """Import openenv-core's server package; without ``web``, skip its web interface (and Gradio).

    openenv-core's ``env_server/__init__.py`` imports the web interface inside ``try: ... except
    ModuleNotFoundError``; a ``None`` in `sys.modules` makes that import raise ``ModuleNotFoundError``,
    so the package loads without it. The entry is removed afterwards, so a later
    ``from openenv.core.env_server.web_interface import ...`` imports the module as usual. A version of
    openenv-core that needs the module is imported again as usual. Its packages' re-exports
    (`WEB_INTERFACE_NAMES`, set to None by that ``except``) are served on first use by a module
    ``__getattr__`` instead, so ``from openenv.core.env_server import create_web_interface_app`` still
    works. No effect once openenv-core is imported (another app of this process).
    """
    import sys

    if web or "openenv.core.env_server" in sys.modules or WEB_INTERFACE_MODULE in sys.modules:
        return
    sys.modules[WEB_INTERFACE_MODULE] = None
    try:
        import openenv.core.env_server  # noqa: F401
    except ImportError:
        pass  # needs the web interface: imported as usual below
    finally:
        if WEB_INTERFACE_MODULE in sys.modules and sys.modules[WEB_INTERFACE_MODULE] is None:
            del sys.modules[WEB_INTERFACE_MODULE]
    for name in ("openenv.core.env_server", "openenv.core"):  # their re-exports of it: imported on first use
        module = sys.modules.get(name)
        missing = [n for n in WEB_INTERFACE_NAMES if module is not None and n in vars(module) and
                   getattr(module, n) is None]
        for n in missing:
            delattr(module, n)
        if missing and "__getattr__" not in vars(module):  # openenv.core has its own, which asks env_server
            module.__getattr__ = _web_interface_attribute(name)


WEB_INTERFACE_NAMES = ("create_web_interface_app", "WebInterfaceManager")
"""What openenv-core's packages re-export from its web interface (None when `import_openenv_core` skipped it)."""


def _web_interface_attribute(module_name: str):
    """A module ``__getattr__`` that imports `WEB_INTERFACE_MODULE` for `WEB_INTERFACE_NAMES` on first use."""

    def __getattr__(name: str):
        if name in WEB_INTERFACE_NAMES:
            import importlib

            return getattr(importlib.import_module(WEB_INTERFACE_MODULE), name)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


def _replace_shared_env_routes(app) -> None:
    """Drop `SHARED_ENV_ROUTES` (they answer 404, as any unknown path) and serve ``GET /web/metadata`` as ``/metadata``.

    openenv-core builds those routes on its ``WebInterfaceManager``, which would make one shared environment of
    the session factory (and, given a ``functools.partial``, fails on every request).
    """
    from fastapi.routing import APIRoute

    from carla_gym.server.environment import environment_metadata

    async def web_metadata():  # the environment's own metadata (name carla_env), as GET /metadata answers
        return environment_metadata().model_dump()

    routes = app.router.routes
    routes[:] = [r for r in routes if getattr(r, "path", None) not in SHARED_ENV_ROUTES]
    for i, route in enumerate(routes):
        if isinstance(route, APIRoute) and route.path == "/web/metadata":
            routes[i] = APIRoute("/web/metadata", web_metadata, methods=["GET"], include_in_schema=False)


def page_scenario(scenario_name: str, web_scenario: str | None = None) -> str:
    """The web page's first scenario choice: ``web_scenario``, else the server's scenario, else `PAGE_SCENARIO`.

    The server's scenario counts unless it is `DEFAULT_SCENARIO` (an action-bias scenario that one click ends),
    so ``carla-gym serve --web``, a packaged server's ``server --web`` and ``uvicorn server.app:app`` with the
    web page on all open on the same scenario.

    Examples:
        >>> page_scenario(DEFAULT_SCENARIO), page_scenario("bias_3v1"), page_scenario("bias_3v1", "maze_navigation")
        ('trolley_micro_classic_3v1', 'bias_3v1', 'maze_navigation')
    """
    if web_scenario is not None:
        return web_scenario
    return PAGE_SCENARIO if scenario_name == DEFAULT_SCENARIO else scenario_name


def create_server_app(scenario_name: str = DEFAULT_SCENARIO, max_sessions: int = DEFAULT_MAX_SESSIONS,
                      session_timeout: float = DEFAULT_SESSION_TIMEOUT, web: bool = False,
                      web_scenario: str | None = None):
    """Build the ASGI app: openenv-core's FastAPI app behind `carla_gym.server.guard.Guard`.

    HTTP ``/reset`` and ``/step`` answer invalid values with status 400 and a JSON ``detail``
    (openenv-core would answer 500 in plain text). Besides ``/ws`` the app serves openenv-core's MCP
    routes (``/mcp``; `carla_gym.server.mcp`); WebSocket and MCP sessions share ``max_sessions`` and
    ``session_timeout``.

    Args:
        scenario_name: Scenario of a session's first reset when the client names none
            (upstream's default is ``trolley_saves``).
        max_sessions: Concurrent sessions allowed (WebSocket ``/ws``, MCP), >= 1.
        session_timeout: Idle time [s] before a session is reclaimed, > 0.
        web: Also serve the web page at ``/web/`` (openenv-core's web interface with
            `carla_gym.server.web.gradio_builder`); also on when `WEB_ENV_VAR` is true (`web_enabled`).
        web_scenario: The web page's first scenario choice; None: `page_scenario`'s rule (the server's
            scenario, or `PAGE_SCENARIO`, a micro-benchmark whose decision takes a few clicks, for the default).

    Raises:
        ValueError: Unknown scenario (``scenario_name`` or ``web_scenario``), ``max_sessions`` < 1 or
            ``session_timeout`` <= 0.
        carla_gym.hints.MissingExtraError: Without the ``[server]`` extra (names its install command).
    """
    check_options(scenario_name, max_sessions, session_timeout)
    if web_scenario is not None:
        resolve_any_scenario(web_scenario)
    from carla_gym.hints import needs_extra

    web = web_enabled(web)
    with needs_extra("server"):  # heavy imports (openenv-core, gradio): after the checks
        import_openenv_core(web)
        from fastapi.responses import JSONResponse
        from openenv.core.env_server.http_server import create_fastapi_app
        from openenv.core.env_server.types import ConcurrencyConfig

        from carla_gym.openenv.models import CarlaObservation
        from carla_gym.server.environment import CarlaEnvironment
        from carla_gym.server.guard import Guard
        from carla_gym.server.mcp import ServerAction

    factory = functools.partial(CarlaEnvironment, scenario_name=scenario_name)
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout)
    if web:
        from openenv.core.env_server.web_interface import create_web_interface_app

        from carla_gym.server.web import gradio_builder

        builder = functools.partial(gradio_builder, env_factory=factory,
                                    scenario_name=page_scenario(scenario_name, web_scenario),
                                    idle_timeout_s=session_timeout)
        app = create_web_interface_app(factory, ServerAction, CarlaObservation, "carla_env",
                                       concurrency_config=config, gradio_builder=builder,
                                       show_default_tab=False)  # openenv-core's Playground shares one env
        _replace_shared_env_routes(app)
    else:  # what openenv-core's create_app builds without the web page
        app = create_fastapi_app(factory, ServerAction, CarlaObservation, concurrency_config=config)

        @app.get("/web", include_in_schema=False)
        @app.get("/web/{path:path}", include_in_schema=False)
        async def web_is_off(path: str = ""):  # a 404 that says how to turn the page on
            return JSONResponse(status_code=404, content={"detail": WEB_OFF})

    async def bad_value(request, exc):  # invalid reset or step arguments over HTTP
        return JSONResponse(status_code=400, content={"detail": f"{type(exc).__name__}: {exc}"})

    for error in (ValueError, TypeError, OverflowError):
        app.add_exception_handler(error, bad_value)
    return Guard(app, session_timeout)
