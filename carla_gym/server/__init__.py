"""The OpenEnv CARLA server on the embedded simulator, and what serves around it.

One file per part, each above the wire models and client of `carla_gym.openenv` (which the
Gymnasium envs' remote backend imports, so the server's modules, which use the envs and the TRL
adapters, cannot live there):

* `app` -- the ASGI app (``create_server_app``) and its options.
* `cli` -- ``carla-gym serve`` / ``python -m carla_gym.server``, uvicorn until interrupted.
* `environment` -- `CarlaEnvironment`, one simulator per session (OpenEnv's ``MCPEnvironment``).
* `mcp` -- the MCP tools, one definition with the TRL adapters' tools.
* `rubrics` -- the server's rubrics on openenv-core's rubric classes.
* `guard` -- bad-input handling in front of openenv-core's app (HTTP, WebSocket, MCP).
* `navigation` -- navigation sessions (maze, free roam).
* `web` -- the web page at ``/web/`` where a person drives the car.
* `package` -- ``carla-gym package``, the deployable OpenEnv environment folder.

Nothing is imported here, so ``carla-gym serve`` checks its options before the slow openenv-core import.
"""
