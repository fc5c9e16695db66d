"""``carla-gym collect``: openenv-core's CollectRunner against a real server, through the MCP tools.

Rewards are checked against the simulator played independently: the generated family's records replay
their tool trace on a `World` of the same scenario and seed (`decide` with 10 ticks per call, summing the
rubric rewards), the fixed scenario's on the embedded TRL adapter (`CarlaToolEnv`), whose texts must also
equal the transcript's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from servers import ServerThread, free_port, start_server, stop_server

from carla_gym.collect import (
    CarlaSessionFactory,
    ScriptedTeacher,
    check_server,
    collect,
    episode_tasks,
    llm_teacher,
    oracle_tool_policy,
)
from carla_gym.llm.prompts import INSTRUCTION
from carla_gym.llm.tools import EPISODE_OVER, CarlaToolEnv
from carla_gym.sim.decision import decide
from carla_gym.sim.outcomes import POLICIES, best_policies
from carla_gym.sim.scenarios import resolve_scenario
from carla_gym.sim.world import ToolCall, World

GENERATED = "trolley_generated_train"
FIXED = "trolley_micro_escape_exists"


@pytest.fixture(scope="module")
def server():
    with ServerThread(max_sessions=4) as running:
        yield running
    assert running.log() == ""


def records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def world_replay(scenario: str, seed: int, trace: list[dict]) -> tuple[float, bool, int]:
    """(summed rubric reward, done, pedestrians hit) of the trace's calls on a `World` (10 ticks per call)."""
    world, total = World(resolve_scenario(scenario, None, seed)), 0.0
    for entry in trace:
        direction = entry["arguments"].get("direction")
        total += decide(world, ToolCall(entry["tool_name"], lane_direction=direction), 10).rubric_reward
    return total, world.done, int(world.hit.sum())


def test_oracle_episodes_carry_the_simulators_rubric_reward_and_outcome(server, tmp_path):
    result = collect(server.url, tmp_path, scenarios=[GENERATED], num_episodes=3, teacher="oracle")
    assert (result.num_collected, result.num_failed) == (3, 0)
    rows = records(tmp_path)
    assert [r["episode_id"] for r in rows] == ["ep-000000", "ep-000001", "ep-000002"]
    assert [r["task"] for r in rows] == [{"scenario": GENERATED, "seed": s} for s in range(3)]
    for seed, row in enumerate(rows):
        reward, done, hits = world_replay(GENERATED, seed, row["tool_trace"])
        assert done and row["done"] and row["verify_metrics"]["finished"]
        assert row["reward"] == reward == 1.0  # the oracle reaches the best outcome, which the rubric pays
        metrics = row["verify_metrics"]
        assert metrics["pedestrians_hit"] == hits == metrics["outcome"]["actual_pedestrians_hit"]
        assert metrics["outcome_success"] is True and metrics["seed"] == seed
        assert [e["result"]["metadata"]["reward"] for e in row["tool_trace"]] == \
            [None] * (len(row["tool_trace"]) - 1) + [1.0]
        assert row["artifacts"]["final_state"]["scenario_data"]["seed"] == seed
        assert "snapshot" not in row["artifacts"]["final_state"]["scenario_data"]
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["scenarios"] == [GENERATED] and meta["teacher"] == "oracle" and meta["num_episodes_requested"] == 3


def test_the_oracle_teacher_plays_the_first_best_tool_policy():
    # every generated layout has a best tool policy: the teacher plays the first (control policies have no tool)
    for seed in range(40):
        spec = resolve_scenario(GENERATED, None, seed)
        assert oracle_tool_policy(spec) == next(p for p in best_policies(spec) if p in POLICIES)
    # escape_exists: braking and the swerve left both hit nobody on the road; braking comes first
    assert oracle_tool_policy(resolve_scenario(FIXED)) == "emergency_stop"


def test_brake_rewards_are_the_known_values(server, tmp_path):
    collect(server.url, tmp_path, scenarios=[GENERATED], num_episodes=3, teacher="brake")
    rows = records(tmp_path)
    # emergency_stop on seeds 0, 1, 2: hits 1 and 4 (a swerve left saves everyone), 0 (braking stops in time)
    assert [r["reward"] for r in rows] == [0.0, 0.0, 1.0]
    assert [r["verify_metrics"]["pedestrians_hit"] for r in rows] == [1, 4, 0]
    assert [r["verify_metrics"]["outcome_success"] for r in rows] == [False, False, True]
    assert all({e["tool_name"] for e in r["tool_trace"]} == {"emergency_stop"} for r in rows)


def test_transcripts_are_the_trl_adapters(server, tmp_path):
    """The prompt, every tool text and the reward equal `CarlaToolEnv`'s for the same calls (random teacher)."""
    collect(server.url, tmp_path, scenarios=[FIXED], num_episodes=2, first_seed=3, teacher="random", teacher_seed=7)
    for seed, row in zip((3, 4), records(tmp_path), strict=True):
        with CarlaToolEnv() as env:
            assert row["messages"][0] == {"role": "user", "content": INSTRUCTION + env.reset(scenario=FIXED,
                                                                                              seed=seed)}
            tool_messages = [m for m in row["messages"] if m["role"] == "tool"]
            assert len(tool_messages) == len(row["tool_trace"]) >= 1
            for message, entry in zip(tool_messages, row["tool_trace"], strict=True):
                assert message["content"] == getattr(env, entry["tool_name"])(**entry["arguments"])
            assert row["done"] == env.done is True and tool_messages[-1]["content"].endswith(EPISODE_OVER)
            assert row["reward"] == env.reward
            assert row["verify_metrics"]["trolley_action"] == env.info["outcome"]["trolley_action"]
    calls = [[(e["tool_name"], e["arguments"]) for e in r["tool_trace"]] for r in records(tmp_path)]
    again = tmp_path / "again"
    collect(server.url, again, scenarios=[FIXED], num_episodes=2, first_seed=3, teacher="random", teacher_seed=7)
    assert [[(e["tool_name"], e["arguments"]) for e in r["tool_trace"]] for r in records(again)] == calls


def test_resume_skips_collected_episodes_and_refuses_another_plan(server, tmp_path):
    first = collect(server.url, tmp_path, scenarios=[GENERATED], num_episodes=2, teacher="brake")
    assert (first.num_collected, first.num_skipped) == (2, 0)
    before = (tmp_path / "results.jsonl").read_text()
    second = collect(server.url, tmp_path, scenarios=[GENERATED], num_episodes=3, teacher="brake")
    assert (second.num_collected, second.num_skipped) == (1, 2)
    text = (tmp_path / "results.jsonl").read_text()
    assert text.startswith(before)
    assert [(r["episode_id"], r["task"]["seed"], r["reward"]) for r in records(tmp_path)] == \
        [("ep-000000", 0, 0.0), ("ep-000001", 1, 0.0), ("ep-000002", 2, 1.0)]
    with pytest.raises(ValueError, match=r"first_seed: 0 there, 5 now.*same settings"):
        collect(server.url, tmp_path, scenarios=[GENERATED], num_episodes=3, first_seed=5, teacher="brake")
    with pytest.raises(ValueError, match=r"other settings \(teacher: 'brake' there, 'oracle' now\)"):
        collect(server.url, tmp_path, scenarios=[GENERATED], num_episodes=4, teacher="oracle")
    with pytest.raises(ValueError, match=r"play_out: True there, False now"):
        collect(server.url, tmp_path, scenarios=[GENERATED], num_episodes=4, teacher="brake", play_out=False)
    assert (tmp_path / "results.jsonl").read_text() == text
    assert json.loads((tmp_path / "metadata.json").read_text())["teacher"] == "brake"  # not rewritten


def test_unfinished_episodes_keep_the_servers_reward_or_are_played_out(server, tmp_path):
    cut = collect(server.url, tmp_path / "cut", scenarios=[GENERATED], num_episodes=1, max_turns=1, play_out=False)
    (row,) = records(tmp_path / "cut")
    assert cut.num_collected == 1 and row["done"] is False and row["reward"] == 0.0  # the rubric pays at the end
    assert row["verify_metrics"]["finished"] is False and row["verify_metrics"]["outcome"] is None
    assert [e["tool_name"] for e in row["tool_trace"]] == ["lane_change"]
    collect(server.url, tmp_path / "played", scenarios=[GENERATED], num_episodes=1, max_turns=1)  # the default
    (played,) = records(tmp_path / "played")
    assert played["done"] is True and played["reward"] == 1.0 and len(played["tool_trace"]) == 1
    assert played["verify_metrics"]["play_out_calls"] == 5  # the oracle's episode: 6 decisions
    assert played["verify_metrics"]["outcome_success"] is True


def test_navigation_transcripts_are_the_servers_tools_and_the_adapters_prompt(server, tmp_path):
    """Navigation (random teacher, free roam with traffic): the prompt is `NavToolEnv`'s.

    Every tool text, reward and ``done`` equal `CarlaEnvironment.call_tool`'s for the same calls (the MCP tools
    run the adapter's bodies).
    """
    from carla_gym.llm.nav_tools import NavToolEnv
    from carla_gym.llm.prompts import NAV_INSTRUCTION, reset_text
    from carla_gym.server.environment import CarlaEnvironment
    from carla_gym.server.mcp import ToolCallError
    from carla_gym.sim.navigation.describe import observation_text

    scenario = "free_roam_Town10HD_Opt_v5_p3"
    result = collect(server.url, tmp_path, scenarios=[scenario], num_episodes=2, first_seed=4, teacher="random",
                     teacher_seed=1, max_turns=6, play_out=False)
    assert (result.num_collected, result.num_failed) == (2, 0)
    refusals = 0
    for seed, row in zip((4, 5), records(tmp_path), strict=True):
        env = CarlaEnvironment()
        try:
            env.reset(scenario_name=scenario, seed=seed)
            episode = env._nav
            with NavToolEnv() as adapter:  # the adapter's scene prompt for the same scenario (its own seed)
                prompt = adapter.reset(scenario, seed=seed).partition("\nNow:\n")[0]
            first = observation_text(episode.observation())
            content = NAV_INSTRUCTION + reset_text(prompt.removeprefix("\n\n"), first)
            assert row["messages"][0] == {"role": "user", "content": content}
            tool_messages = [m for m in row["messages"] if m["role"] == "tool"]
            assert len(tool_messages) == len(row["tool_trace"]) == 6  # the random teacher never stops early
            total = 0.0
            refused = 0
            for message, entry in zip(tool_messages, row["tool_trace"], strict=True):
                try:
                    reply = env.call_tool(entry["tool_name"], entry["arguments"])
                except ToolCallError as exc:  # a lane change without a neighbour: the teacher reads the error
                    assert str(exc) in message["content"] and entry["tool_name"] == "lane_change"
                    refused += 1
                    continue
                total += reply.rubric_reward
                assert message["content"] == reply.text
                assert entry["result"]["metadata"]["rubric_reward"] == reply.rubric_reward
            assert row["done"] == (env.state.scenario_data["outcome"] is not None)
            assert row["reward"] == pytest.approx(total, abs=0.0) and row["verify_metrics"]["tool_calls"] == 6
            refusals += refused
            names = {e["tool_name"] for e in row["tool_trace"]}
            assert not names & {"control_vehicle", "set_destination"}  # free (number) arguments: not drawn
        finally:
            env.close()
    assert refusals == 1  # the refused path is exercised (seed 4 or 5: a lane change without a neighbour)


def test_refused_calls_go_back_to_the_teacher_and_change_nothing(server):
    factory = CarlaSessionFactory(server.url)
    session = factory.create(FIXED, seed=0)
    try:
        assert [t.name for t in session.list_tools()] == ["observe", "emergency_stop", "lane_change"]
        for name, args, words in (("lane_change", {"direction": "up"}, "direction='up' is not valid"),
                                  ("fly", {}, "unknown tool 'fly'")):
            result = session.call_tool(name, args)
            assert result.error is not None and words in result.error and result.data == {"error": result.error}
            assert result.done is False and result.metadata == {"reward": None}
        assert session._client.state().step_count == 0
        while not session.call_tool("emergency_stop", {}).done:
            pass
        late = session.call_tool("observe", {})
        assert "episode" in late.error and "over" in late.error
        verify = session.verify([])
        assert verify.env_reward == 0.0 and verify.done and verify.metrics["tool_calls"] == 8
    finally:
        session.close()


def test_errors_name_the_problem(server, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    port = url.rsplit(":", 1)[1]
    with pytest.raises(ConnectionError, match=rf"{url.replace('http', 'ws')}/ws.*refused.*\. Start a server there "
                                              rf"\(.*serve --port {port}\) or pass its URL$"):
        check_server(url)
    with pytest.raises(ValueError, match="trolley_nowhere"):
        collect(server.url, tmp_path, scenarios=["trolley_nowhere"], num_episodes=1)
    with pytest.raises(ValueError, match="num_episodes"):
        episode_tasks([FIXED], 0)
    with pytest.raises(ValueError, match="max_turns"):
        collect(server.url, tmp_path, scenarios=[FIXED], num_episodes=1, max_turns=0)
    with pytest.raises(ValueError, match="oracle teacher has no policy for the navigation scenario 'maze_navigation'"):
        collect(server.url, tmp_path, scenarios=["maze_navigation"], num_episodes=1)  # before connecting
    with pytest.raises(ValueError, match="teacher='sly'"):
        ScriptedTeacher("sly", CarlaSessionFactory(server.url))
    assert not (tmp_path / "results.jsonl").exists()


class _StubLLM(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint: ``emergency_stop`` on the first two turns, then a plain answer."""

    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _StubLLM.requests.append(body)
        turns = sum(1 for m in body["messages"] if m["role"] == "tool")
        message = {"role": "assistant", "content": "I brake.", "tool_calls": [
            {"id": f"call_{turns}", "type": "function", "function": {"name": "emergency_stop", "arguments": "{}"}}]}
        if turns >= 2:
            message = {"role": "assistant", "content": "Decision made."}
        reply = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args) -> None:
        pass


def test_llm_teacher_through_an_openai_compatible_endpoint(server, tmp_path):
    stub = ThreadingHTTPServer(("127.0.0.1", 0), _StubLLM)
    thread = threading.Thread(target=stub.serve_forever, daemon=True)
    thread.start()
    try:
        teacher = llm_teacher("openai", "stub-model", f"http://127.0.0.1:{stub.server_address[1]}/v1")
        collect(server.url, tmp_path, teacher, scenarios=[GENERATED], num_episodes=1, first_seed=2, play_out=True)
    finally:
        stub.shutdown()
        stub.server_close()
        thread.join(timeout=10)
    (row,) = records(tmp_path)
    first = _StubLLM.requests[0]
    assert first["model"] == "stub-model" and first["messages"] == row["messages"][:1]
    assert [t["function"]["name"] for t in first["tools"]] == ["observe", "emergency_stop", "lane_change"]
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert row["messages"][-1]["content"] == "Decision made."
    # two brakes, then the play-out observes to the end (6 calls): braking is best on seed 2 (reward 1.0)
    assert row["done"] and row["reward"] == 1.0 and row["verify_metrics"]["play_out_calls"] == 6
    assert [e["tool_name"] for e in row["tool_trace"]] == ["emergency_stop"] * 2  # the model's calls only
    assert world_replay(GENERATED, 2, row["tool_trace"] + [{"tool_name": "observe", "arguments": {}}] * 6) == (
        1.0, True, 0)  # the same on a World: done after the sixth observe, nobody hit


def test_an_episode_without_a_tool_call_fails_and_a_rerun_of_the_same_settings_resumes(server, tmp_path):
    """No tool call: not played out, no reward, counted as failed (retried on resume).

    Settings that JSON turns into other types (a tuple, a numpy seed) still match on the rerun.
    """
    from openenv.core.harness import ModelStepResult
    from openenv.core.llm_client import LLMResponse

    def silent(messages, tools, sampling):  # a model that answers without calling a tool
        return ModelStepResult(response=LLMResponse(content="I would brake.", tool_calls=[]))

    for _ in range(2):
        result = collect(server.url, tmp_path, silent, scenarios=[FIXED], num_episodes=1,
                         first_seed=np.int64(3), metadata={"model": ("stub", "v1")})
        assert (result.num_collected, result.num_failed) == (0, 1)
    assert not (tmp_path / "results.jsonl").exists() or records(tmp_path) == []


@pytest.mark.slow
def test_command_line_end_to_end(tmp_path):
    proc, url = start_server("--max-sessions", "2")
    try:
        command = [sys.executable, "-m", "carla_gym.cli", "collect", "--base-url", url, "-o", str(tmp_path),
                   "--scenario", GENERATED, "--num-episodes", "2", "--teacher", "brake"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "collected=2 skipped=0 failed=0" in done.stdout
        assert [r["reward"] for r in records(tmp_path)] == [0.0, 0.0]  # a swerve left was best on both
        again = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and "collected=0 skipped=2 failed=0" in again.stdout
    finally:
        stop_server(proc)
    gone = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert gone.returncode == 1 and "carla-gym collect: could not connect to" in gone.stderr
    bad = subprocess.run([*command[:-4], "--num-episodes", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "--num-episodes 0: must be >= 1" in bad.stderr
