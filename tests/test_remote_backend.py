"""The remote (OpenEnv) backend's addresses: URL checks, fast refusals, timeouts, the ways forward.

A refused port fails at once (no connect timeout waited), a silent listener keeps the
timeout and names it, malformed URLs are refused before any connection by every entry point
(client, backend, ``gym.make``, the LLM tool envs, every ``--env-urls`` flag), and the
timeouts given to ``gym.make`` reach the client. And what the backend reads back: the
`Snapshot` wire form the server publishes (`Snapshot.to_wire` / `Snapshot.from_wire`).
"""

from __future__ import annotations

import asyncio
import http.server
import pickle
import re
import socket
import threading
import time

import gymnasium as gym
import openenv.core.env_client as env_client
import pytest
from servers import free_port
from websockets.sync.server import serve

import carla_gym  # noqa: F401 - registers CarlaTrolley-v0
from carla_gym import cli_args
from carla_gym.backends.openenv import OpenEnvBackend
from carla_gym.hints import serve_command
from carla_gym.llm.tools import CarlaToolEnv, ToolEnvFactory
from carla_gym.openenv import CarlaEnv
from carla_gym.openenv.urls import EXAMPLE_URL, TIMEOUT_RANGE_S, check_timeout, check_url, url_problem

WAYS_FORWARD = "or use the embedded simulator, which needs no server (backend='embedded'"


@pytest.fixture
def no_connections(monkeypatch):
    """Fail the test on any WebSocket or TCP connection attempt."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(env_client, "ws_connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# -- URLs -------------------------------------------------------------------------------------------------------
BAD_URLS = [  # (url, what url_problem says)
    ("ftp://x", "the scheme 'ftp' is not one of http, https, ws, wss"),
    ("HTTP://127.0.0.1:8000", "the scheme 'HTTP' is not one of http, https, ws, wss (write it in lower case)"),
    ("127.0.0.1:8000", "no scheme (http://127.0.0.1:8000 ?)"),
    ("localhost:8000", "no scheme (http://localhost:8000 ?)"),
    ("http://", "no host"),
    ("http://:8000", "no host"),
    ("http://127.0.0.1:abc", "malformed address (Port could not be cast to integer value as 'abc')"),
    ("http://127.0.0.1:70000", "malformed address (Port out of range 0-65535)"),
    ("http://127.0.0.1:0", "the port must be a number in 1-65535"),
    ("http://127.0.0.1:", "the port must be a number in 1-65535"),
    ("http://[::1", "malformed address (Invalid IPv6 URL)"),
    ("http://127.0.0.1:8000/?x=1", "a query or fragment cannot be part of a server URL (the client appends /ws to "
                                   "the path)"),
    ("http://127.0.0.1:8000#top", "a query or fragment cannot be part of a server URL (the client appends /ws to "
                                  "the path)"),
    ("http://127.0.0.1 :8000", "contains whitespace or control characters"),
    ("http://127.0.0.1:8000\n", "contains whitespace or control characters"),
    ("", "empty"),
    (8000, "not a string (int)"),
]


@pytest.mark.parametrize(("url", "problem"), BAD_URLS)
def test_url_problem_says_what_is_wrong(url, problem):
    assert url_problem(url) == problem
    with pytest.raises(ValueError) as caught:
        check_url(url, "base_url")
    assert str(caught.value) == f"base_url={url!r}: {problem}; expected a URL such as 'http://127.0.0.1:8000'"


@pytest.mark.parametrize(("url", "ws_url"), [
    ("http://127.0.0.1:8000", "ws://127.0.0.1:8000/ws"),
    ("https://example.com", "wss://example.com/ws"),
    ("ws://[::1]:8000/ws", "ws://[::1]:8000/ws"),
    ("wss://example.com:9443/prefix/", "wss://example.com:9443/prefix/ws"),
    ("http://user@127.0.0.1:8000/", "ws://user@127.0.0.1:8000/ws"),
])
def test_valid_urls_pass_unchanged_and_map_to_the_websocket(url, ws_url):
    assert url_problem(url) is None
    assert check_url(url) == url
    assert CarlaEnv(base_url=url)._ws_url == ws_url


ENTRY_POINTS = {  # every way a user hands a server URL to the library, as f(url)
    "CarlaEnv": lambda url: CarlaEnv(base_url=url),
    "OpenEnvBackend": lambda url: OpenEnvBackend(url),
    "gym.make": lambda url: gym.make("CarlaTrolley-v0", backend="openenv", base_url=url, observation_mode="state"),
    "CarlaToolEnv": lambda url: CarlaToolEnv(base_url=url),
    "ToolEnvFactory": lambda url: ToolEnvFactory([EXAMPLE_URL, url]),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize(("url", "problem"), [BAD_URLS[0], BAD_URLS[3], BAD_URLS[6], BAD_URLS[-2]])
def test_every_entry_point_refuses_a_bad_url_before_connecting(no_connections, entry, url, problem):
    key = "env_urls[1]" if entry == "ToolEnvFactory" else "base_url"
    message = f"{key}={url!r}: {problem}; expected a URL such as 'http://127.0.0.1:8000'"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ENTRY_POINTS[entry](url)


def test_a_single_string_is_not_a_list_of_urls(no_connections):
    with pytest.raises(ValueError, match=re.escape("env_urls='http://127.0.0.1:8000': give a list of URLs, e.g. "
                                                   "['http://127.0.0.1:8000']")):
        ToolEnvFactory("http://127.0.0.1:8000")


def test_an_empty_base_url_is_refused_not_read_as_embedded(no_connections):
    with pytest.raises(ValueError, match=re.escape("base_url='': empty")):
        CarlaToolEnv(base_url="")


# -- refused ports and silent listeners ---------------------------------------------------------------------------
def test_refused_port_fails_at_once_through_gym_make(connects):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = gym.make("CarlaTrolley-v0", backend="openenv", base_url=url, observation_mode="state",
                   connect_timeout_s=30)
    start = time.monotonic()
    with pytest.raises(ConnectionError) as caught:
        env.reset(seed=0)
    elapsed = time.monotonic() - start
    # one attempt, given the 30 s timeout, ended by the refusal: far sooner than the timeout (a generous bound,
    # no speed claim; the figure is in the report)
    assert connects == [(f"ws://127.0.0.1:{port}/ws", 30.0)]
    assert elapsed < 5.0
    assert isinstance(caught.value.__cause__.__cause__, ConnectionRefusedError)
    assert str(caught.value) == (
        f"could not connect to ws://127.0.0.1:{port}/ws: connection refused: nothing listens on 127.0.0.1:{port} "
        "(refused at once, not retried; a server just started accepts connections once it prints its 'listening "
        f"on' line). Either start a server there ({serve_command('--port', str(port))}) or use the embedded simulator, "
        "which needs no server (backend='embedded', the default: no base_url, no --env-urls)")
    env.close()


@pytest.mark.parametrize("path", ["blocking", "sync", "with", "async with"])
def test_refused_port_fails_at_once_on_every_client_path(connects, path):
    port = free_port()
    client = CarlaEnv(base_url=f"http://localhost:{port}", connect_timeout_s=30)
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"nothing listens on localhost:{port}.*{re.escape(WAYS_FORWARD)}"):
        if path == "blocking":
            client.reset()
        elif path == "sync":
            client.sync().reset()
        elif path == "with":
            with client:
                pass
        else:
            async def run():
                async with client:
                    pass

            asyncio.run(run())
    assert time.monotonic() - start < 5.0
    assert connects == [(f"ws://localhost:{port}/ws", 30.0)]
    client.close()


def test_silent_listener_keeps_the_connect_timeout_and_names_it(connects):
    with socket.socket() as listener:  # accepts TCP connections (the kernel's backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        env = gym.make("CarlaTrolley-v0", backend="openenv", base_url=f"http://127.0.0.1:{port}",
                       observation_mode="state", connect_timeout_s=1)
        with pytest.raises(ConnectionError) as caught:
            env.reset(seed=0)
        env.close()
    assert connects == [(f"ws://127.0.0.1:{port}/ws", 1.0)]
    assert isinstance(caught.value.__cause__.__cause__, TimeoutError)
    assert f"could not connect to ws://127.0.0.1:{port}/ws: no WebSocket handshake within connect_timeout_s=1 s " \
           f"(nothing answered at 127.0.0.1:{port}; a busy or distant server may need a larger " \
           "connect_timeout_s)" in str(caught.value)
    assert WAYS_FORWARD in str(caught.value)


def test_unknown_host_is_named():
    client = CarlaEnv(base_url="http://no-such-host.invalid:8000")
    with pytest.raises(ConnectionError, match=re.escape("the host name 'no-such-host.invalid' is not known")):
        client.reset()
    client.close()


class NotFound(http.server.BaseHTTPRequestHandler):
    """A plain web server: 404 for everything, in HTTP/1.1 (as WebSocket handshakes need)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's name
        """Answer 404."""
        self.send_error(404)

    def log_message(self, *args):
        """Keep the test output quiet."""


class Http10(NotFound):
    """A plain web server that answers in HTTP/1.0, which no WebSocket handshake accepts."""

    protocol_version = "HTTP/1.0"


@pytest.mark.parametrize(("handler", "why"), [
    (NotFound, "answered the WebSocket handshake with HTTP 404: not an OpenEnv server, or the wrong path"),
    (Http10, "did not complete a WebSocket handshake (did not receive a valid HTTP response): not an OpenEnv "
             "server, or the wrong path"),
])
def test_a_plain_web_server_is_not_an_openenv_server(handler, why):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    client = CarlaEnv(base_url=f"http://127.0.0.1:{port}", connect_timeout_s=10)
    try:
        with pytest.raises(ConnectionError, match=re.escape(f"ws://127.0.0.1:{port}/ws: 127.0.0.1:{port} {why}")):
            client.reset()
    finally:
        client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# -- timeouts ----------------------------------------------------------------------------------------------------
def test_gym_make_timeouts_reach_the_client():
    env = gym.make("CarlaTrolley-v0", backend="openenv", base_url=EXAMPLE_URL, observation_mode="state",
                   connect_timeout_s=3.5, message_timeout_s=7.25)
    backend = env.unwrapped.backend
    client = backend._client._async
    assert (client._connect_timeout, client._message_timeout) == (3.5, 7.25)
    restored = pickle.loads(pickle.dumps(backend))  # a checkpointed env opens its next session with them too
    client = restored._new_client()._async
    assert (client._connect_timeout, client._message_timeout) == (3.5, 7.25)
    env.close()
    defaults = gym.make("CarlaTrolley-v0", backend="openenv", base_url=EXAMPLE_URL, observation_mode="state")
    client = defaults.unwrapped.backend._client._async
    assert (client._connect_timeout, client._message_timeout) == (10.0, 60.0)  # openenv-core's defaults


def test_message_timeout_is_honoured_and_named():
    def mute(connection):  # a WebSocket server that reads every request and never answers
        for _ in connection:
            pass

    with serve(mute, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.socket.getsockname()[1]
        env = gym.make("CarlaTrolley-v0", backend="openenv", base_url=f"http://127.0.0.1:{port}",
                       observation_mode="state", message_timeout_s=0.5)
        with pytest.raises(TimeoutError) as caught:
            env.reset(seed=0)
        env.close()
        server.shutdown()
        thread.join(timeout=10)
    assert str(caught.value) == (f"no reply from ws://127.0.0.1:{port}/ws within message_timeout_s=0.5 s to 'reset'; "
                                 "the session is lost, call reset() (a slow server may need a larger "
                                 "message_timeout_s)")


@pytest.mark.parametrize("value", [0, -1, 0.001, 86_401, float("nan"), float("inf"), True, "10", None])
@pytest.mark.parametrize("key", ["connect_timeout_s", "message_timeout_s"])
def test_bad_timeouts_are_refused_everywhere(no_connections, key, value):
    low, high = TIMEOUT_RANGE_S
    message = f"{key}={value!r}: must be a number in [{low}, {high}]"
    if value is not None:  # None means "the default" in gym.make only
        for make in (lambda: CarlaEnv(base_url=EXAMPLE_URL, **{key: value}),
                     lambda: OpenEnvBackend(EXAMPLE_URL, **{key: value})):
            with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
                make()
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            gym.make("CarlaTrolley-v0", backend="openenv", base_url=EXAMPLE_URL, **{key: value})
    else:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            check_timeout(value, key)


@pytest.mark.parametrize("key", ["connect_timeout_s", "message_timeout_s"])
def test_timeouts_belong_to_the_openenv_backend(key):
    with pytest.raises(ValueError, match=re.escape(f"{key}=5 is only used with backend='openenv' (got "
                                                   "backend='embedded')")):
        gym.make("CarlaTrolley-v0", **{key: 5})


# -- command lines -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "problem"), [BAD_URLS[0], BAD_URLS[2], BAD_URLS[7]])
def test_cli_url_check_uses_the_same_rule(no_connections, url, problem):
    with pytest.raises(SystemExit, match=f"^{re.escape(f'--env-urls {url!r}: {problem}; expected a URL such as')}"):
        cli_args.check_url(url)


def test_cli_url_check_refuses_a_dead_port_at_once_with_both_ways_forward():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(SystemExit) as caught:
        cli_args.check_url(f"http://127.0.0.1:{port}", timeout_s=30, embedded="leave out --env-urls")
    assert time.monotonic() - start < 5.0
    assert str(caught.value) == (f"--env-urls http://127.0.0.1:{port}: cannot connect ([Errno 111] Connection "
                                 f"refused); start a server there ({serve_command('--port', str(port))}) or use the "
                                 "embedded simulator, which needs no server (leave out --env-urls)")


@pytest.mark.parametrize("script", ["train_grpo", "agents.compare", "train_sb3"])
def test_every_env_urls_flag_refuses_a_bad_url(tmp_path, script):
    import importlib

    main = importlib.import_module(script).main
    backend = [] if script == "train_grpo" else ["--backend", "openenv"]
    out = ["--output-dir" if script != "agents.compare" else "--out", str(tmp_path / "x")]
    with pytest.raises(SystemExit, match=re.escape("--env-urls 'ftp://x': the scheme 'ftp' is not one of http, "
                                                   "https, ws, wss; expected a URL such as http://127.0.0.1:8000")):
        main([*backend, "--env-urls", "ftp://x", *out])
    assert not (tmp_path / "x").exists()


# -- the snapshot on the wire: one form for the server and the remote backend ----------------------------------
def _finished_snapshot():
    """The snapshot of a finished episode with pedestrians near and hit: every field set, an outcome, tuples."""
    from carla_gym.sim import World, resolve_scenario
    from carla_gym.sim.snapshot import snapshot_of

    world = World(resolve_scenario("trolley_micro_classic_3v1", {"camera_width": 320, "camera_height": 200}))
    while not world.tick().done:
        pass
    return snapshot_of(world, "a prompt")


def test_snapshot_wire_round_trip_keeps_every_field():
    import dataclasses
    import json

    from carla_gym.sim.snapshot import WIRE_KEYS, Snapshot

    snap = _finished_snapshot()
    assert snap.done and snap.collided and snap.outcome["actual_pedestrians_hit"] > 0 and snap.actor_types
    wire = snap.to_wire()
    assert tuple(wire) == WIRE_KEYS == tuple(f.name for f in dataclasses.fields(Snapshot))
    assert (wire["actor_types"], wire["camera_size"]) == (list(snap.actor_types), [320, 200])
    back = Snapshot.from_wire(json.loads(json.dumps(wire, allow_nan=False)))  # as JSON carries it
    assert back == snap and type(back.actor_types) is tuple and back.camera_size == (320, 200)
    for field in WIRE_KEYS:  # field by field, exact
        assert getattr(back, field) == getattr(snap, field), field
    wire["outcome"]["success"] = "changed"  # copies: neither side shares mutable values
    assert snap.outcome["success"] is not wire["outcome"]["success"]
    assert Snapshot.from_wire(snap.to_wire()).outcome is not snap.outcome


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("ticks_left"), r"missing keys \['ticks_left'\], unknown keys \[\]; valid keys: \['scenario'"),
    (lambda d: d.update(gear=3), r"missing keys \[\], unknown keys \['gear'\]"),
    (lambda d: d.update(camera_size=[640]), r"camera_size=\[640\]: must be \[width, height\]"),
    (lambda d: d.update(camera_size=[640.0, 360]), r"camera_size=\[640.0, 360\]"),
])
def test_snapshot_from_wire_refuses_missing_unknown_and_bad_keys(change, message):
    from carla_gym.sim.snapshot import Snapshot

    wire = _finished_snapshot().to_wire()
    change(wire)
    with pytest.raises(ValueError, match=message):
        Snapshot.from_wire(wire)
    with pytest.raises(ValueError, match="expected a dict with keys"):
        Snapshot.from_wire([1, 2])


def test_remote_backend_names_the_server_of_an_unreadable_snapshot(no_connections):
    from types import SimpleNamespace

    backend = OpenEnvBackend("http://127.0.0.1:9")
    state = SimpleNamespace(scenario_data={"snapshot": {"scenario": "trolley_saves"}})
    with pytest.raises(ValueError, match=r"OpenEnv server at http://127.0.0.1:9 sent an unreadable "
                                         r"scenario_data\['snapshot'\] \(snapshot: missing keys \['tick'"):
        backend._snapshot(None, state, False)
