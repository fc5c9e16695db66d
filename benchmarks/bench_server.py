"""Speed of the OpenEnv CARLA server on loopback: per-step latency and aggregate throughput.

Usage:
    python benchmarks/bench_server.py [--steps 2000] [--sessions 1 8 64] [--json results.json]

Starts `python -m carla_gym.server` on a free 127.0.0.1 port, then measures with the project's
client: round-trip latency p50/p99 of ``observe`` steps in one session (``CarlaEnv(...).sync()``);
aggregate steps/s with N concurrent sessions, first as N async clients on one event loop (how an
async rollout loop uses the client), then as N blocking clients in N threads;
and a TRL-style tool call (the action plus 10 observes: 11 ticks) done as 11 round trips versus
one round trip with the batching extension (``metadata={"ticks": 11}``); and an MCP tool call (
openenv-core's ``MCPToolClient`` sending ``CallToolAction("observe")`` over ``/ws``, one decision of 10 ticks)
against the same 10 ticks as one ``CarlaAction`` (``metadata={"ticks": 10}``), alternating in one session each.
Targets (this project's): p50 <= 1 ms, >= 5,000 steps/s at 64 sessions on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from carla_gym.cli_args import HelpFormatter
from carla_gym.io import report_results
from carla_gym.openenv import CarlaAction, CarlaEnv

OBSERVE = CarlaAction(action_type="observe")
CONFIG = {"max_steps": 100_000, "initial_speed_kmh": 0.0}  # a long, collision-free episode


def start_server(max_sessions: int) -> tuple[subprocess.Popen, str]:
    """Start the server on a free port and wait (at most 60 s) until it accepts connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "carla_gym.server", "--port", str(port), "--max-sessions",
                             str(max_sessions)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start within 60 s")


def latency(url: str, steps: int) -> dict:
    """Per-step round-trip times [ms] of one session."""
    with CarlaEnv(base_url=url, message_timeout_s=30).sync() as env:
        env.reset(scenario_name="trolley_micro_escape_exists", scenario_config=CONFIG)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            env.step(OBSERVE)
            times.append((time.perf_counter() - start) * 1e3)
        one_by_one, batched = [], []
        for _ in range(50):
            start = time.perf_counter()
            for _ in range(11):
                env.step(OBSERVE)
            one_by_one.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            env.step(CarlaAction(action_type="observe", metadata={"ticks": 11}))
            batched.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"p50_ms": times[len(times) // 2], "p99_ms": times[int(len(times) * 0.99) - 1],
            "tool_call_11_round_trips_ms": statistics.median(one_by_one),
            "tool_call_batched_ms": statistics.median(batched)}


def mcp_latency(url: str, calls: int) -> dict:
    """Median round trip [ms] of an MCP ``observe`` tool call and of the same 10 ticks as one ``CarlaAction``."""
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    observe = CallToolAction(tool_name="observe", arguments={})
    ticks = CarlaAction(action_type="observe", metadata={"ticks": 10})
    with MCPToolClient(base_url=url, message_timeout_s=30).sync() as mcp, \
            CarlaEnv(base_url=url, message_timeout_s=30).sync() as env:
        mcp.reset(scenario_name="trolley_micro_escape_exists", scenario_config=CONFIG)
        env.reset(scenario_name="trolley_micro_escape_exists", scenario_config=CONFIG)
        tool, action = [], []
        for _ in range(calls):  # alternating, so both see the same machine load
            start = time.perf_counter()
            mcp.step(observe)
            tool.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            env.step(ticks)
            action.append((time.perf_counter() - start) * 1e3)
    return {"mcp_tool_call_ms": statistics.median(tool), "carla_action_10_ticks_ms": statistics.median(action)}


def throughput_async(url: str, sessions: int, steps: int) -> float:
    """Aggregate steps/s of ``sessions`` async clients sharing one event loop (a GRPO rollout loop)."""
    connected = []

    async def run(ready: asyncio.Event) -> None:
        async with CarlaEnv(base_url=url, message_timeout_s=120) as env:
            await env.reset(scenario_name="trolley_micro_escape_exists", scenario_config=CONFIG)
            connected.append(1)
            await ready.wait()
            for _ in range(steps):
                await env.step(OBSERVE)

    async def measure() -> float:
        ready = asyncio.Event()
        tasks = [asyncio.create_task(run(ready)) for _ in range(sessions)]
        deadline = time.monotonic() + 120
        while len(connected) < sessions:  # every session connected and reset
            if time.monotonic() > deadline or any(t.done() for t in tasks):
                await asyncio.gather(*tasks)  # raises the failure, if any
                raise RuntimeError(f"only {len(connected)} of {sessions} sessions started")
            await asyncio.sleep(0.05)
        start = time.perf_counter()
        ready.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=600)
        return sessions * steps / (time.perf_counter() - start)

    return asyncio.run(measure())


def throughput_threads(url: str, sessions: int, steps: int) -> float:
    """Aggregate steps/s of ``sessions`` blocking clients (``.sync()``), one thread each."""
    ready, errors = threading.Barrier(sessions + 1), []

    def run() -> None:
        try:
            with CarlaEnv(base_url=url, message_timeout_s=120).sync() as env:
                env.reset(scenario_name="trolley_micro_escape_exists", scenario_config=CONFIG)
                ready.wait()
                for _ in range(steps):
                    env.step(OBSERVE)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))
            ready.abort()

    threads = [threading.Thread(target=run) for _ in range(sessions)]
    for t in threads:
        t.start()
    try:
        ready.wait(timeout=120)
    except threading.BrokenBarrierError:
        for t in threads:
            t.join(timeout=60)
        raise RuntimeError(f"{len(errors)} sessions failed: {errors[:3]}") from None
    start = time.perf_counter()
    for t in threads:
        t.join(timeout=600)
    if errors:
        raise RuntimeError(f"{len(errors)} sessions failed: {errors[:3]}")
    return sessions * steps / (time.perf_counter() - start)


def main() -> None:
    """Run the measurements, print them and optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="latency samples")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--steps-per-session", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    proc, url = start_server(max(args.sessions))
    try:
        results = latency(url, args.steps)
        results.update(mcp_latency(url, args.steps // 4))
        for n in args.sessions:
            results[f"async_steps_per_s_{n}_sessions"] = throughput_async(url, n, args.steps_per_session)
        for n in args.sessions:
            results[f"sync_threads_steps_per_s_{n}_sessions"] = throughput_threads(url, n, args.steps_per_session)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    report_results(results, args.json)


if __name__ == "__main__":
    main()
