"""Agent specifications on the command line: ``[label=]kind[:argument]``.

| Spec | Agent |
|---|---|
| ``inaction``, ``brake``, ``swerve_left``, ``swerve_right`` | scripted (`agents.scripted`), trolley only: one tool |
| ``brake_every``, ``swerve_left_every``, ``swerve_right_every`` | scripted: the same tool at every decision |
| ``control_steer_<left/straight/right>_<brake/coast/throttle>`` | scripted: one control action at every step |
| ``rubric_answer`` | scripted: the catalogue's answer, the action class upstream's rubric pays most |
| ``oracle`` | scripted: a candidate policy that reaches the simulated best outcome (control actions if needed) |
| ``follow_route``, ``follow_route_cautious``, ``_aggressive``, ``_basic`` | navigation baselines (`agents.nav`) |
| ``random`` | uniformly random tool actions, seeded per episode |
| ``sb3:<run dir>`` | a ``train_sb3.py`` run (PPO or SAC; a ``--env CarlaNavigation-v0`` run plays navigation) |
| ``llm:<model>`` | a local transformers model, ``train_grpo.py`` run directory, adapter, hub id or ``tiny-random`` |
| ``vlm:<model>`` | the same, loaded as a VLM (tools return camera images); offline: ``vlm:tiny-random-vl`` |
| ``openai:<model>@<base url>`` | an OpenAI-compatible chat endpoint; key from ``$OPENAI_API_KEY`` |

The label defaults to the spec itself (``sb3:runs/ppo``); ``ppo=sb3:runs/ppo`` names it ``ppo``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.scripted import SCRIPTED_AGENTS

NAV_SCRIPTED_KINDS = ("follow_route", "follow_route_cautious", "follow_route_aggressive", "follow_route_basic")
"""The scripted navigation baselines: each calls the `CarlaNavigation-v0` tool of its name on every decision
(`agents.nav.NAV_SCRIPTED`)."""
NO_ARGUMENT_KINDS = (*SCRIPTED_AGENTS, *NAV_SCRIPTED_KINDS, "random")
GYM_KINDS = (*NO_ARGUMENT_KINDS, "sb3")
CHAT_KINDS = ("llm", "vlm", "openai")


@dataclass(frozen=True)
class AgentSpec:
    """A parsed agent spec: ``label``, ``kind`` and ``argument`` (empty for scripted agents)."""

    label: str
    kind: str
    argument: str = ""

    @property
    def parallel(self) -> bool:
        """Whether episodes may run in worker processes (scripted and SB3 agents)."""
        return self.kind in GYM_KINDS


def parse_spec(text: str) -> AgentSpec:
    """Parse ``[label=]kind[:argument]`` (a ``=`` inside the argument, as in URLs, is not a label).

    Raises:
        ValueError: An unknown kind, or a missing or unexpected argument (the message lists the valid forms).
    """
    head, sep, body = text.partition("=")
    if sep and ":" not in head:
        label = head
    else:
        label, body = text, text
    kind, colon, argument = body.partition(":")
    valid = (f"valid: {', '.join(NO_ARGUMENT_KINDS)}, sb3:<run dir>, llm:<model>, vlm:<model>, "
             "openai:<model>@<base url>, each optionally as label=spec")
    if kind not in GYM_KINDS + CHAT_KINDS:
        raise ValueError(f"agent {text!r}: unknown kind {kind!r}; {valid}")
    if kind in NO_ARGUMENT_KINDS and colon:
        raise ValueError(f"agent {text!r}: {kind} takes no argument; {valid}")
    if kind not in NO_ARGUMENT_KINDS and not argument:
        raise ValueError(f"agent {text!r}: {kind} needs an argument; {valid}")
    if kind == "openai":
        model, _, url = argument.partition("@")
        if not model or not url.startswith(("http://", "https://")):
            raise ValueError(f"agent {text!r}: write openai:<model>@<base url>, e.g. "
                             "openai:gpt-4.1-mini@https://api.openai.com/v1")
    if not label:
        raise ValueError(f"agent {text!r}: empty label before '='")
    return AgentSpec(label, kind, argument)


def check_spec(spec: AgentSpec) -> None:
    """Check what can be checked before anything runs: SB3 run files, local model directories.

    Raises:
        ValueError: A missing run directory, file or local model path (the message says what is expected).
    """
    from pathlib import Path

    path = Path(spec.argument).expanduser()
    if spec.kind == "sb3":
        missing = [name for name in ("config.json", "model.zip") if not (path / name).is_file()]
        if missing:
            raise ValueError(f"agent {spec.label!r}: {path} has no {' or '.join(missing)}; sb3:<dir> takes a run "
                             "directory written by train_sb3.py")
    if spec.kind in ("llm", "vlm") and (path / "model.zip").is_file():
        raise ValueError(f"agent {spec.label!r}: {path} is a train_sb3.py run; use sb3:{spec.argument}")
    if spec.kind in ("llm", "vlm"):
        looks_local = spec.argument.startswith(("/", ".", "~")) or spec.argument.count("/") > 1
        if looks_local and not path.is_dir():
            raise ValueError(f"agent {spec.label!r}: no such model directory {path}")


def build_agent(spec: AgentSpec, base_url: str | None = None, max_new_tokens: int = 256,
                max_tool_calling_iterations: int = 10, navigation: bool = False):
    """Construct the agent of ``spec``: `agents.players.GymAgent` or `ChatAgent` (navigation: `agents.nav`'s).

    Args:
        spec: The parsed spec.
        base_url: OpenEnv server for the agent's environment; None: embedded simulator.
        max_new_tokens: Token budget of one chat turn (chat agents).
        max_tool_calling_iterations: Turns whose tool calls run (chat agents).
        navigation: Build the agent for navigation cases (`agents.nav.build_nav_agent`).

    Raises:
        ValueError: A kind that does not play the chosen task, or an SB3 run of the other env.
    """
    if navigation:
        from agents.nav import build_nav_agent

        return build_nav_agent(spec, max_new_tokens, max_tool_calling_iterations)
    if spec.kind in NAV_SCRIPTED_KINDS:
        raise ValueError(f"agent {spec.label!r}: {spec.kind} plays navigation only (--scenario nav ...)")
    from agents.players import ChatAgent, GymAgent, RandomAgent

    env = {} if base_url is None else {"backend": "openenv", "base_url": base_url}
    if spec.kind in SCRIPTED_AGENTS:
        return GymAgent(spec.label, SCRIPTED_AGENTS[spec.kind](), {**env, "observation_mode": "state"})
    if spec.kind == "random":
        return GymAgent(spec.label, RandomAgent(), {**env, "observation_mode": "state"})
    if spec.kind == "sb3":
        from agents.sb3 import SB3Policy

        policy = SB3Policy(spec.argument)
        if policy.env_id != "CarlaTrolley-v0":
            raise ValueError(f"agent {spec.label!r}: {spec.argument} was trained on {policy.env_id}; compare it on "
                             "the navigation suites (--scenario nav, agents.nav)")
        return GymAgent(spec.label, policy, {**env, **policy.env_kwargs})
    if spec.kind == "openai":
        from agents.llm import OpenAIChat

        model, _, url = spec.argument.partition("@")
        chat, settings = OpenAIChat(model, url, max_tokens=max_new_tokens), {"vision": False}
    else:
        from agents.llm import load_local_chat

        chat, settings = load_local_chat(spec.argument, vision=True if spec.kind == "vlm" else None,
                                         max_new_tokens=max_new_tokens)
    return ChatAgent(spec.label, chat, max_tool_calling_iterations=max_tool_calling_iterations, base_url=base_url,
                     **settings)


def ticks_per_decision(spec: AgentSpec) -> int:
    """Ticks per decision of the agent's episodes (a trained run's own setting; 10 otherwise), for replays."""
    import json
    from pathlib import Path

    config = Path(spec.argument) / "config.json"
    if spec.kind in ("sb3", "llm", "vlm") and config.is_file():
        args = json.loads(config.read_text()).get("args", {})
        return int(args.get("ticks_per_action", args.get("ticks_per_tool", 10)))
    return 10
