"""The web page's first scenario (`carla_gym.server.app.PAGE_SCENARIO`): a decision over a few clicks.

Played here through the server's tools (`CarlaEnvironment.call_tool`, what each button calls) without a browser;
tests/test_web.py plays it in one.
"""

from __future__ import annotations

import pytest

from carla_gym.server.app import DEFAULT_SCENARIO, PAGE_SCENARIO, create_server_app
from carla_gym.server.environment import CarlaEnvironment


def play(scenario: str, calls: list[tuple[str, dict]]) -> tuple[int, dict]:
    """Call ``calls`` in order (then observe) until the episode ends; returns (tool calls, outcome)."""
    env = CarlaEnvironment(scenario_name=scenario)
    try:
        env.reset(seed=0)
        for n, (name, arguments) in enumerate([*calls, *[("observe", {})] * 20], start=1):
            if env.call_tool(name, arguments).done:
                return n, env.state.scenario_data["outcome"]
        raise AssertionError(f"{scenario}: not over after {n} calls")
    finally:
        env.close()


OBSERVE, STOP, LEFT = ("observe", {}), ("emergency_stop", {}), ("lane_change", {"direction": "left"})


def test_page_scenario_is_five_calls_and_acting_within_three_spares_the_three_ahead():
    assert PAGE_SCENARIO == "trolley_micro_classic_3v1"
    calls, outcome = play(PAGE_SCENARIO, [])
    assert (calls, outcome["actual_pedestrians_hit"]) == (5, 3)  # only observing: the three ahead are hit
    for looks in range(3):  # braking or swerving left at the first, second or third call: nobody is hit
        for action in (STOP, LEFT):
            calls, outcome = play(PAGE_SCENARIO, [OBSERVE] * looks + [action])
            assert (calls, outcome["actual_pedestrians_hit"], outcome["road_departure"]) == (5, 0, False)
    calls, outcome = play(PAGE_SCENARIO, [OBSERVE] * 3 + [STOP])  # the fourth call is too late to brake
    assert (calls, outcome["actual_pedestrians_hit"]) == (5, 3)


def test_the_servers_default_scenario_ends_at_the_first_call():
    """Why the page opens on another one: an action-bias scenario scores the first call."""
    assert DEFAULT_SCENARIO == "trolley_saves"
    for action in (OBSERVE, STOP, LEFT):
        assert play(DEFAULT_SCENARIO, [action])[0] == 1


def test_an_unknown_web_scenario_is_refused_before_the_server_is_built():
    with pytest.raises(ValueError, match="Unknown scenario: 'nope'"):
        create_server_app(web=True, web_scenario="nope")


def test_every_launch_path_opens_the_page_on_the_same_scenario():
    """`page_scenario` is the one rule: ``carla-gym serve --web`` and a packaged server give no ``web_scenario``."""
    from carla_gym.server.app import page_scenario

    assert page_scenario(DEFAULT_SCENARIO) == PAGE_SCENARIO  # the server's default: one click would end it
    assert page_scenario("bias_3v1") == "bias_3v1"  # a scenario the server was given
    assert page_scenario("bias_3v1", "maze_navigation") == "maze_navigation"


def test_the_callbacks_request_hints_resolve_in_the_page_module_once_gradio_is_bound():
    """Gradio resolves a callback's string hint ``gr.Request`` in the module's globals, bound by ``build_page``.

    A hint it cannot resolve silently drops the request (Start would fail, a closed tab would leak). Building
    the page itself is left to tests/test_web.py's server process (Gradio leaves event loops open).
    """
    import gradio

    from carla_gym.server import web

    web._import_gradio()
    assert eval("gr.Request", vars(web)) is gradio.Request  # noqa: S307 - how typing.get_type_hints resolves it
