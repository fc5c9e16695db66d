"""The web page at ``/web/`` where a person drives the car: openenv-core's web interface with this project's page.

``carla-gym serve --web`` (`carla_gym.server.app.create_server_app` with ``web=True``) hands `gradio_builder`
to openenv-core's ``create_web_interface_app``. The page plays one episode at a time through the same tools an
LLM calls (`CarlaEnvironment.call_tool`, the MCP tools: the TRL adapter's names, ticks and texts):

* a scenario picker with every family, in this order: the trolley micro-benchmarks (``trolley_micro_*``), the
  generated trolley layouts (``trolley_generated_train``/``_test``, drawn from the seed), the action-bias
  scenarios (``trolley_saves``, ``action_bias_*``, ...) and the navigation scenarios (``maze_navigation``,
  ``free_roam*``, drawn from the seed); other valid names can be typed in;
* one button per tool of the scenario's family (trolley: Observe, Emergency stop, Lane change left / right;
  navigation also: Autopilot on, Set destination to the goal, Follow route for `FOLLOW_STEPS` ticks and manual
  driving with throttle, steer and brake sliders); the other family's buttons are hidden, and after the end
  every tool button is disabled until the next Start;
* the front camera and the bird's-eye view after every action (`CarlaEnvironment.frame`);
* the text the LLM sees: the reset text (the scene prompt and the first description, as the TRL adapter's
  ``reset`` returns it) and then each tool call with its reply (`ToolReply.text`);
* the running trolley classification (``state.scenario_data["action_class"]``), the step's reward and the
  episode's return; at the end the outcome (trolley: the classified action, expected and actual casualties,
  who was hit, the rubric score; navigation: success, why it ended, route completion).

Sessions: every browser visitor plays their own `CarlaEnvironment`, kept in the visitor's Gradio session state,
so visitors never share an episode (openenv-core's default Playground tab and its ``/web/reset``, ``/web/step``
and ``/web/state`` routes instead drive the one environment of its ``WebInterfaceManager``, shared by everyone:
the server leaves them out, `carla_gym.server.app.SHARED_ENV_ROUTES`). A visitor's environment is closed when
the browser tab is closed (Gradio's unload event) and, at the latest, after the server's ``--session-timeout``
(`IDLE_TIMEOUT_S` by default) without an action (the state's ``time_to_live``, whose ``delete_callback`` closes
it). Visitors are not counted against ``--max-sessions`` (a trolley simulator is a few MiB). Each visitor's calls
run one at a time (a lock per visitor), so two quick clicks never drive one simulator from two threads.

Errors of a tool call or a reset (a lane change with no lane there, an unknown scenario name, a bad seed) are
shown as a message above the cameras; the episode stays as it was.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from carla_gym.llm.prompts import state_reset_text
from carla_gym.openenv.models import SessionClosedError
from carla_gym.server.app import DEFAULT_SESSION_TIMEOUT, PAGE_SCENARIO
from carla_gym.server.environment import CarlaEnvironment
from carla_gym.sim.catalogue import ACTION_BIAS_PRESETS, MICRO_BENCHMARKS
from carla_gym.sim.navigation.scenarios import DEFAULT_MAP, FREE_ROAM, FREE_ROAM_PRESETS, MAP_NAMES, MAZE
from carla_gym.sim.scenarios import GENERATED_NAMES

gr: Any = None
"""Gradio, imported by `build_page` on first use: importing this module does not import it (about 5 s), so a
server without the web page, and the tools that read this module, start without it."""


def _import_gradio() -> None:
    """Bind the module global ``gr`` to Gradio (the page's callbacks resolve ``gr.Request`` hints through it)."""
    global gr
    if gr is None:
        import gradio

        gr = gradio

FRAME_WIDTH, FRAME_HEIGHT = 640, 360
"""Size [px] of both camera images: the trolley camera's 640 x 360 (upstream's default capture size)."""

IMAGE_HEIGHT = 300
"""Height [px] the page shows the camera images at (they keep their aspect ratio)."""

FOLLOW_STEPS = 50
"""Ticks (0.05 s each, so 2.5 s) of the page's ``follow_route`` button."""

IDLE_TIMEOUT_S = DEFAULT_SESSION_TIMEOUT
"""A visitor's environment is closed after this long [s] without an action: the server's default
``--session-timeout`` (`carla_gym.server.app.DEFAULT_SESSION_TIMEOUT`)."""

DEFAULT_SEED = 0
"""Seed in the seed box when the page opens (generated and navigation scenarios are drawn from it)."""

INTRO = """# Drive the car: CARLA trolley problems and navigation
Pick a scenario (trolley micro-benchmarks, generated trolley layouts, action-bias scenarios, navigation; the
generated and navigation ones are drawn from the seed) and press **Start**. Then call the tools with the buttons,
as a language model does: each call drives 0.5 s (navigation's set-up tools one tick, *Follow route* {follow} ticks).
A trolley micro-benchmark ends after five calls (2.5 s) or at a collision, so decide within the first three; a
generated layout takes a few more; an action-bias scenario (`trolley_saves`, `action_bias_*`, `bias_*`) ends at
the first call; a navigation episode at the goal, at a collision or at its time limit.
"""


SCROLL_JS = ("() => { const box = document.querySelector('#llm-text textarea'); "
             "if (box) box.scrollTop = box.scrollHeight; }")
"""Browser-side step after every tool call: scroll the LLM text to its newest reply (Gradio's ``autoscroll`` does not
scroll a read-only text box)."""


PAGE_ERRORS = (ValueError, TypeError, OverflowError, SessionClosedError)
"""Errors of a reset or tool call that the page shows as a message (`CarlaEnvironment.reset` and
`CarlaEnvironment.call_tool` raise ValueError, TypeError or OverflowError for bad input, and `SessionClosedError`
once closed)."""


def scenario_choices() -> list[str]:
    """The picker's scenario names, ordered by family.

    Returns:
        The trolley micro-benchmarks (`carla_gym.sim.catalogue.MICRO_BENCHMARKS`, each without and with
        ``_deadzone``), the generated trolley scenarios (`carla_gym.sim.scenarios.GENERATED_NAMES`), the action-bias
        presets (`carla_gym.sim.catalogue.ACTION_BIAS_PRESETS`), then navigation: ``maze_navigation``,
        ``free_roam``, ``free_roam_<Map>`` for every map (`MAP_NAMES`) and ``free_roam`` with upstream's
        traffic and heavy densities (`FREE_ROAM_PRESETS`, as ``_v<N>_p<M>`` names on `DEFAULT_MAP`).
    """
    micro = [f"trolley_micro_{b}{s}" for b in MICRO_BENCHMARKS for s in ("", "_deadzone")]
    dense = [f"{FREE_ROAM}_{DEFAULT_MAP}_v{v}_p{p}" for v, p in FREE_ROAM_PRESETS.values() if v or p]
    return [*micro, *GENERATED_NAMES, *ACTION_BIAS_PRESETS, MAZE, FREE_ROAM,
            *(f"{FREE_ROAM}_{m}" for m in MAP_NAMES), *dense]


def reset_text(env: CarlaEnvironment) -> str:
    """The text a language model gets at the start of ``env``'s episode, as the TRL adapter's ``reset`` returns it.

    A blank line, the scene prompt, ``Now:`` and the first description (`carla_gym.llm.prompts.state_reset_text`
    of the state's ``scenario_data``; `carla_gym.llm.tools.CarlaToolEnv.reset`,
    `carla_gym.llm.nav_tools.NavToolEnv.reset`).

    Args:
        env: An environment after ``reset``.
    """
    return state_reset_text(env.state.scenario_data)


class _Visitor:
    """One browser visitor's episode: the environment, what the page shows of it, and a lock.

    Attributes:
        env: The visitor's own environment (None once closed).
        lock: Held while the environment runs a call.
        transcript: The text the LLM has seen this episode (reset text, then each call and reply).
        steps: Tool calls that stepped the episode.
        last_reward: Raw reward of the last call (None before the first).
        last_rubric: Rubric reward of the last call (None before the first).
        episode_return: Sum of the calls' rubric rewards (the TRL adapter's return).
        front, birdeye: The latest camera images.
        done: Whether the episode has ended.
        started: Whether an episode has been started (the page shows nothing of the environment before).
    """

    def __init__(self, env_factory: Callable[[], CarlaEnvironment]) -> None:
        self.env: CarlaEnvironment | None = env_factory()
        self.lock = threading.Lock()
        self.transcript = ""
        self.steps = 0
        self.last_reward: float | None = None
        self.last_rubric: float | None = None
        self.episode_return = 0.0
        self.front: np.ndarray | None = None
        self.birdeye: np.ndarray | None = None
        self.done = False
        self.started = False

    def close(self) -> None:
        """Close the environment (idempotent)."""
        with self.lock:
            if self.env is not None:
                self.env.close()
            self.env = None

    def snap(self) -> None:
        """Render both cameras of the current scene."""
        self.front = self.env.frame("front", FRAME_WIDTH, FRAME_HEIGHT)
        self.birdeye = self.env.frame("birdeye", FRAME_WIDTH, FRAME_HEIGHT)


def _close_visitor(visitor: _Visitor | None) -> None:
    """The session state's ``delete_callback``: close the visitor's environment."""
    if visitor is not None:
        visitor.close()


def _number(value: float | None, digits: int = 3) -> str:
    """A reward for display: ``-`` for None, else rounded to ``digits`` decimals without trailing zeros."""
    if value is None:
        return "-"
    text = f"{value:.{digits}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _status_md(visitor: _Visitor | None) -> str:
    """The running status: scenario and seed, steps, classification, the step's reward and the return."""
    if visitor is None or not visitor.started or visitor.env is None:
        return "### Episode\nPress **Start** to begin one."
    state = visitor.env.state
    data = state.scenario_data
    seed = data.get("seed")
    lines = ["### Episode", f"- **Scenario:** {state.scenario_name}" + ("" if seed is None else f" (seed {seed})"),
             f"- **Tool calls:** {visitor.steps}"]
    if "action_class" in data:
        lines.append(f"- **Classification so far:** {data['action_class']}")
    lines += [f"- **Step reward:** {_number(visitor.last_reward)} (rubric {_number(visitor.last_rubric)})",
              f"- **Return (rubric):** {_number(visitor.episode_return)}",
              f"- **Episode:** {'over (Start plays another)' if visitor.done else 'running'}"]
    return "\n".join(lines)


def _outcome_md(visitor: _Visitor | None) -> str:
    """The outcome once the episode ended (empty before)."""
    if visitor is None or visitor.env is None or not visitor.done:
        return ""
    state = visitor.env.state
    out = state.scenario_data.get("outcome") or {}
    if "expected_pedestrians_hit" in out:  # trolley families (`carla_gym.sim.rules.outcome`)
        hit = ", ".join(f"{c['actor_type']} (id {c['actor_id']})" for c in state.collisions) or "nobody"
        lines = [f"- **Classified action:** {out['trolley_action']}",
                 f"- **Expected casualties:** {out['expected_pedestrians_hit']}",
                 f"- **Actual casualties:** {out['actual_pedestrians_hit']}",
                 f"- **Hit:** {hit}",
                 f"- **Road departure:** {'yes' if out['road_departure'] else 'no'}",
                 f"- **Rubric score:** {_number(out['reward'])} (best possible {_number(out['best_reward'])})",
                 f"- **Best simulated outcome reached:** {'yes' if out['outcome_success'] else 'no'}"]
    else:  # navigation (`carla_gym.sim.navigation.rules.outcome`)
        collisions = ", ".join(f"{k}: {n}" for k, n in out.get("collisions", {}).items() if n) or "none"
        lines = [f"- **Success:** {'yes' if out.get('success') else 'no'}",
                 f"- **Ended by:** {out.get('end_reason')}",
                 f"- **Route completion:** {100 * out.get('route_completion', 0.0):.1f} %",
                 f"- **Goal distance:** {out.get('goal_distance', math.nan):.1f} m",
                 f"- **Collisions:** {collisions}",
                 f"- **Time:** {out.get('time', math.nan):.2f} s"]
    return "### Outcome\n" + "\n".join(lines)


def build_page(env_factory: Callable[[], CarlaEnvironment] = CarlaEnvironment, title: str = "CARLA driving",
               scenario_name: str = PAGE_SCENARIO, idle_timeout_s: float = IDLE_TIMEOUT_S) -> gr.Blocks:
    """The driving page as Gradio Blocks (`gradio_builder` calls it; tests and scripts may call it directly).

    Elements with stable ``elem_id``: ``scenario`` (picker), ``seed``, ``start``, the tool buttons
    ``tool-observe``, ``tool-emergency-stop``, ``tool-lane-left``, ``tool-lane-right``, ``tool-autopilot``,
    ``tool-set-destination``, ``tool-follow-route``, ``tool-drive`` (with sliders ``throttle``, ``steer``,
    ``brake``), ``message`` (errors), ``front`` and ``birdeye`` (cameras), ``llm-text`` (what the LLM sees),
    ``status`` and ``outcome``.

    Args:
        env_factory: Builds one visitor's environment (a `CarlaEnvironment` or a subclass).
        title: The page title (browser tab).
        scenario_name: The picker's first choice; must be a valid scenario name (any family).
        idle_timeout_s: A visitor's environment is closed after this long [s] without an action (the server's
            ``--session-timeout``).

    Returns:
        The Blocks, not launched.
    """
    _import_gradio()
    visitors: dict[str, _Visitor] = {}  # session hash -> visitor, for the unload event
    registry_lock = threading.Lock()

    def expire(visitor: _Visitor | None) -> None:
        """The session state's ``delete_callback`` (idle for ``idle_timeout_s``): close and forget the visitor."""
        with registry_lock:
            for key in [k for k, v in visitors.items() if v is visitor]:
                del visitors[key]
        _close_visitor(visitor)

    # One entry per button: (elem_id, label, tool name); the first four serve both families, the others navigation.
    buttons = [
        ("tool-observe", "Observe", "observe"),
        ("tool-emergency-stop", "Emergency stop", "emergency_stop"),
        ("tool-lane-left", "Lane change left", "lane_change"),
        ("tool-lane-right", "Lane change right", "lane_change"),
        ("tool-autopilot", "Autopilot on", "init_navigation_agent"),
        ("tool-set-destination", "Set destination to the goal", "set_destination"),
        ("tool-follow-route", f"Follow route {FOLLOW_STEPS} ticks", "follow_route"),
        ("tool-drive", "Drive by hand", "control_vehicle"),
    ]

    with gr.Blocks(title=title, delete_cache=(idle_timeout_s, idle_timeout_s)) as page:
        gr.Markdown(INTRO.format(follow=FOLLOW_STEPS), elem_id="intro")
        visitor_state = gr.State(None, time_to_live=idle_timeout_s, delete_callback=expire)
        with gr.Row(equal_height=True):
            scenario = gr.Dropdown(scenario_choices(), value=scenario_name, label="Scenario", allow_custom_value=True,
                                   elem_id="scenario", scale=4)
            seed = gr.Number(DEFAULT_SEED, precision=0, label="Seed (empty: random)", elem_id="seed", scale=1)
            start = gr.Button("Start", variant="primary", elem_id="start", scale=1)
        with gr.Row():
            tool_buttons = {elem_id: gr.Button(label, elem_id=elem_id, interactive=False)
                            for elem_id, label, _ in buttons[:4]}
        with gr.Row(visible=False) as nav_row:
            tool_buttons.update({elem_id: gr.Button(label, elem_id=elem_id, interactive=False)
                                 for elem_id, label, _ in buttons[4:7]})
            behavior = gr.Dropdown(["normal", "cautious", "aggressive"], value="normal", label="Autopilot behaviour",
                                   elem_id="behavior")
        with gr.Row(visible=False) as manual_row:
            throttle = gr.Slider(0.0, 1.0, 0.5, step=0.05, label="Throttle", elem_id="throttle")
            steer = gr.Slider(-1.0, 1.0, 0.0, step=0.05, label="Steer (left < 0 < right)", elem_id="steer")
            brake = gr.Slider(0.0, 1.0, 0.0, step=0.05, label="Brake", elem_id="brake")
            tool_buttons["tool-drive"] = gr.Button(buttons[7][1], elem_id="tool-drive", interactive=False)
        message = gr.Markdown("", elem_id="message")
        with gr.Row():
            front = gr.Image(label="Front camera", type="numpy", interactive=False, elem_id="front",
                             height=IMAGE_HEIGHT, buttons=["download"])
            birdeye = gr.Image(label="Bird's-eye view", type="numpy", interactive=False, elem_id="birdeye",
                               height=IMAGE_HEIGHT, buttons=["download"])
        with gr.Row():
            with gr.Column(scale=4):
                llm_text = gr.Textbox(label="What the LLM sees", lines=11, max_lines=11, interactive=False,
                                      autoscroll=True, elem_id="llm-text", buttons=["copy"])
            with gr.Column(scale=3):
                status = gr.Markdown(_status_md(None), elem_id="status")
            with gr.Column(scale=3):
                outcome = gr.Markdown("", elem_id="outcome")

        outputs = [visitor_state, message, front, birdeye, llm_text, status, outcome, nav_row, manual_row,
                   *tool_buttons.values()]

        def view(visitor: _Visitor | None, note: str = "") -> list[Any]:
            """Every output for the visitor's current episode (``note``: the message line)."""
            env = visitor.env if visitor is not None and visitor.started else None
            tools = set(env.tool_names()) if env is not None else set()
            nav = env is not None and "follow_route" in tools
            active = env is not None and not visitor.done
            updates = [gr.update(interactive=active and name in tools) for _, _, name in buttons]
            return [visitor, note,
                    None if env is None else visitor.front, None if env is None else visitor.birdeye,
                    "" if env is None else visitor.transcript, _status_md(visitor), _outcome_md(visitor),
                    gr.update(visible=nav), gr.update(visible=nav), *updates]

        def on_start(visitor: _Visitor | None, name: str | None, seed_value: float | None,
                     request: gr.Request) -> list[Any]:
            if visitor is None or visitor.env is None:  # a new visitor, or one whose environment was closed
                visitor = _Visitor(env_factory)
                with registry_lock:
                    visitors[request.session_hash] = visitor
            with visitor.lock:
                if visitor.env is None:  # closed meanwhile (the tab was closed)
                    return view(None)
                try:
                    seed_int = None if seed_value is None else int(seed_value)
                    visitor.env.reset(seed=seed_int, scenario_name=(name or "").strip() or scenario_name)
                except PAGE_ERRORS as exc:
                    return view(visitor, f"**Could not start:** {exc}")
                visitor.started, visitor.done, visitor.steps = True, False, 0
                visitor.last_reward = visitor.last_rubric = None
                visitor.episode_return = 0.0
                visitor.transcript = reset_text(visitor.env).lstrip("\n")
                visitor.snap()
                return view(visitor)

        def call(visitor: _Visitor | None, name: str,
                 arguments: dict[str, Any] | Callable[[CarlaEnvironment], dict[str, Any]]) -> list[Any]:
            """Run one tool (``arguments``: the arguments, or a function of the environment giving them)."""
            if visitor is None:
                return view(None, "Press **Start** first.")
            with visitor.lock:
                if visitor.env is None or not visitor.started:
                    return view(visitor, "Press **Start** first.")
                if callable(arguments):
                    arguments = arguments(visitor.env)
                shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
                try:
                    reply = visitor.env.call_tool(name, arguments)
                except PAGE_ERRORS as exc:
                    return view(visitor, f"**{name}({shown}) failed:** {exc}")
                visitor.steps += 1
                visitor.last_reward, visitor.last_rubric = reply.reward, reply.rubric_reward
                visitor.episode_return += reply.rubric_reward or 0.0
                visitor.done = reply.done
                visitor.transcript += f"\n\n>>> {name}({shown})\n{reply.text}"
                visitor.snap()
                return view(visitor)

        def goal(env: CarlaEnvironment) -> dict[str, float]:
            """``set_destination``'s arguments: the episode's goal location."""
            x, y, z = env.state.scenario_data["goal_location"]
            return {"x": float(x), "y": float(y), "z": float(z)}

        handlers: dict[str, tuple[Callable, list]] = {
            "tool-observe": (lambda v: call(v, "observe", {}), []),
            "tool-emergency-stop": (lambda v: call(v, "emergency_stop", {}), []),
            "tool-lane-left": (lambda v: call(v, "lane_change", {"direction": "left"}), []),
            "tool-lane-right": (lambda v: call(v, "lane_change", {"direction": "right"}), []),
            "tool-autopilot": (lambda v, b: call(v, "init_navigation_agent", {"behavior": b}), [behavior]),
            "tool-set-destination": (lambda v: call(v, "set_destination", goal), []),
            "tool-follow-route": (lambda v: call(v, "follow_route", {"steps": FOLLOW_STEPS}), []),
            "tool-drive": (lambda v, t, s, b: call(v, "control_vehicle", {"throttle": t, "steer": s, "brake": b}),
                           [throttle, steer, brake]),
        }
        for elem_id, (fn, extra) in handlers.items():
            tool_buttons[elem_id].click(fn, [visitor_state, *extra], outputs, show_progress="hidden").then(
                None, js=SCROLL_JS)
        start.click(on_start, [visitor_state, scenario, seed], outputs, show_progress="hidden")

        def on_leave(request: gr.Request) -> None:
            with registry_lock:
                visitor = visitors.pop(request.session_hash, None)
            _close_visitor(visitor)

        page.unload(on_leave)
    return page


def gradio_builder(web_manager: Any, action_fields: list[dict], metadata: Any, is_chat_env: bool, title: str,
                   quick_start_md: str | None, *, env_factory: Callable[[], CarlaEnvironment] = CarlaEnvironment,
                   scenario_name: str = PAGE_SCENARIO, idle_timeout_s: float = IDLE_TIMEOUT_S) -> gr.Blocks:
    """openenv-core's ``gradio_builder`` hook (``create_web_interface_app``): this project's driving page.

    The positional arguments are openenv-core's; the page uses only ``title``. Every visitor gets a fresh
    environment from ``env_factory`` (module docstring), not ``web_manager``'s shared one. The server binds
    the keyword arguments to its options (`carla_gym.server.app.create_server_app`).

    Args:
        web_manager: openenv-core's ``WebInterfaceManager`` (unused).
        action_fields: Form fields of the action class (unused: the page has a button per tool).
        metadata: The environment's metadata (unused).
        is_chat_env: Whether the environment takes chat messages (False here; unused).
        title: The page title.
        quick_start_md: openenv-core's connection snippet (unused).
        env_factory: Builds one visitor's environment (the server's session factory).
        scenario_name: The picker's first choice (the server's ``--scenario`` when given, else `PAGE_SCENARIO`).
        idle_timeout_s: Idle time [s] that closes a visitor's environment (the server's ``--session-timeout``).

    Returns:
        The page (`build_page`).
    """
    return build_page(env_factory, title=title, scenario_name=scenario_name, idle_timeout_s=idle_timeout_s)
