"""Play CarlaToolEnv episodes with a chat model outside the trainer (evaluation, the comparison harness).

The loop follows TRL's GRPO tool loop (``GRPOTrainer`` with ``environment_factory``): the prompt
is `carla_gym.llm.prompts.user_prompt` with the reset text appended, rendered with the chat
template the trainer uses (TRL's training template when the model's own re-renders earlier
turns); each assistant turn is parsed for tool calls (TRL's ``parse_response``, the same parser
as training); every call runs on the env and its result is sent back as a ``tool`` message; the
loop ends on a turn without a tool call or after ``max_tool_calling_iterations`` turns that ran
tools. Unlike training, there is no total token budget over the turns (TRL's
``max_completion_length``): each turn has ``max_new_tokens``, and tool results are never rolled
back. The conversation is re-rendered each turn, where TRL splices token ids. Tool exceptions and
unknown tools become ``{'error': ...}`` tool messages, as in TRL. Calls, failed calls and parse
failures are counted by the rule of `carla_gym.llm.tools` (every call that is run counts, failed
ones also as failures; the env keeps the counts), the same as in training. The episode is then
played out and scored by `CarlaToolEnv` like in training.

Navigation episodes (``maze_navigation``, ``free_roam*``, ``route_<Town>``) play the same loop on a
`carla_gym.llm.nav_tools.NavToolEnv`, starting from `carla_gym.llm.prompts.nav_user_prompt`; their
record holds the `CarlaNavigation-v0` terminal ``info["outcome"]`` instead of the trolley outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from carla_gym.envs.navigation import OUTCOME_KEYS as NAV_OUTCOME_KEYS
from carla_gym.llm.nav_tools import NavToolEnv
from carla_gym.llm.prompts import nav_user_prompt, user_prompt
from carla_gym.llm.tools import TOOL_CALL_MARKERS, CarlaToolEnv, tool_methods, unparsed_tool_call

__all__ = ["TOOL_CALL_MARKERS", "UNFINISHED", "ChatPolicy", "TransformersChat", "append_observation", "play_episode",
           "play_episodes"]

UNFINISHED = "UNFINISHED"
"""``trolley_action`` (navigation: ``termination``) of an episode that did not end (only without play-out)."""


class ChatPolicy(Protocol):
    """Anything that answers a conversation with one assistant message.

    ``__call__(messages, tools)`` returns ``{"role": "assistant", "content": str, "tool_calls":
    [{"type": "function", "function": {"name": str, "arguments": dict}}, ...]}`` (``tool_calls``
    optional) and may set ``"parse_failed": True`` when the model's tool-call text did not parse.
    """

    def __call__(self, messages: list[dict], tools: list[Callable]) -> dict:
        """The next assistant message for ``messages``, with ``tools`` offered."""


def append_observation(prompt: list[dict], observation: str | list | None) -> list[dict]:
    """Join a reset observation to the last prompt message as TRL does (no separator added).

    Returns:
        A new message list; ``prompt`` is not modified.
    """
    if observation is None:
        return list(prompt)
    content = prompt[-1]["content"]
    if isinstance(observation, list) and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if isinstance(observation, str) and isinstance(content, list):
        observation = [{"type": "text", "text": observation}]
    return [*prompt[:-1], {**prompt[-1], "content": content + observation}]


class TransformersChat:
    """Greedy (or sampled) chat turns from a local transformers model, parsed as TRL parses them.

    Args:
        model: A causal LM or image-text-to-text model (PEFT models work).
        processing_class: Its tokenizer, or its processor for VLMs; needs a tool-capable chat
            template TRL recognises (or a ``response_template``).
        max_new_tokens: Token budget of one turn.
        do_sample: Sample instead of greedy decoding (with ``temperature``).
        temperature: Sampling temperature.
        chat_template_kwargs: Passed to ``apply_chat_template``; None: ``enable_thinking=False`` for
            templates with a thinking switch (Qwen3), as TRL's CARLA example.

    Raises:
        ValueError: The chat template cannot call tools (from TRL).
    """

    def __init__(self, model, processing_class, max_new_tokens: int = 256, do_sample: bool = False,
                 temperature: float = 1.0, chat_template_kwargs: dict | None = None) -> None:
        from trl.chat_template_utils import (
            add_response_schema,
            get_training_chat_template,
            is_chat_template_prefix_preserving,
            supports_tool_calling,
        )

        if not supports_tool_calling(processing_class):
            raise ValueError("the model's chat template cannot render tool calls; use a tool-capable model such as "
                             "Qwen3 or Qwen3-VL")
        self.tokenizer = getattr(processing_class, "tokenizer", processing_class)
        if getattr(self.tokenizer, "response_template", None) is None and \
                getattr(self.tokenizer, "response_schema", None) is None:
            processing_class = add_response_schema(processing_class)
            self.tokenizer = getattr(processing_class, "tokenizer", processing_class)
        self.model, self.processing_class = model, processing_class
        # as GRPOTrainer: a template that re-renders earlier turns is swapped for TRL's training template
        self.chat_template = (None if is_chat_template_prefix_preserving(processing_class)
                              else get_training_chat_template(processing_class))
        self.max_new_tokens, self.do_sample, self.temperature = max_new_tokens, do_sample, temperature
        if chat_template_kwargs is None:
            from carla_gym.llm.grpo import chat_template_kwargs as default_kwargs

            chat_template_kwargs = default_kwargs(processing_class)
        self.chat_template_kwargs = chat_template_kwargs

    def batch(self, conversations: list[list[dict]], tools: list[Callable]) -> list[dict]:
        """One assistant turn for each of several text conversations, generated as one left-padded batch.

        The same turns as calling the policy on each conversation (greedy decoding gives the same
        tokens up to floating-point differences of padded attention); text models only.

        Args:
            conversations: Message lists, each as for ``__call__``.
            tools: The tool functions offered (the same for every conversation).

        Returns:
            One assistant message per conversation (``"parse_failed": True`` as in ``__call__``).
        """
        import torch

        if not conversations:
            return []
        prompts = [self.processing_class.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True,
            chat_template=self.chat_template, **self.chat_template_kwargs)["input_ids"] for messages in conversations]
        pad, width = self.tokenizer.pad_token_id, max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=self.model.device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts],
                                      device=self.model.device)
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **self._generate_kwargs())
        return [self._reply(list(prompt_ids), row, tools)
                for prompt_ids, row in zip(prompts, out[:, width:].tolist(), strict=True)]

    def _generate_kwargs(self) -> dict:
        """``model.generate`` settings: greedy or sampled, the turn's token budget, the pad token."""
        kwargs = {"do_sample": self.do_sample, "max_new_tokens": self.max_new_tokens,
                  "pad_token_id": self.tokenizer.pad_token_id}
        if self.do_sample:
            kwargs["temperature"] = self.temperature
        return kwargs

    def _reply(self, prompt_ids: list[int], ids: list[int], tools: list[Callable]) -> dict:
        """The assistant message of generated ``ids``: trailing padding dropped, TRL's parser.

        ``"parse_failed": True`` marks tool-call text that did not parse.
        """
        from trl.chat_template_utils import parse_response

        ids = list(ids)
        while ids and ids[-1] == self.tokenizer.pad_token_id:
            ids.pop()
        reply = parse_response(self.tokenizer, ids, prefix=prompt_ids, tools=tools)
        if unparsed_tool_call(reply, self.tokenizer.decode(ids, skip_special_tokens=False)):
            reply["parse_failed"] = True
        return reply

    def __call__(self, messages: list[dict], tools: list[Callable]) -> dict:
        """One assistant turn for ``messages`` with ``tools`` in the system prompt."""
        import torch

        inputs = self.processing_class.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
            chat_template=self.chat_template, **self.chat_template_kwargs)
        inputs = {k: v.to(self.model.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        with torch.no_grad():
            out = self.model.generate(**inputs, **self._generate_kwargs())
        prompt_ids = inputs["input_ids"][0].tolist()
        return self._reply(prompt_ids, out[0, len(prompt_ids):].tolist(), tools)


def play_episode(chat: ChatPolicy, env: CarlaToolEnv | NavToolEnv, scenario: str, seed: int,
                 max_tool_calling_iterations: int = 10, row: dict[str, Any] | None = None) -> dict[str, Any]:
    """Play one episode of ``scenario`` with ``seed``: reset, chat/tool turns, play out, score.

    Args:
        chat: The policy (e.g. `TransformersChat`).
        env: The tool environment (its vision setting decides text or image+text results): a `CarlaToolEnv`,
            or a `carla_gym.llm.nav_tools.NavToolEnv` for navigation scenarios.
        scenario: Scenario name.
        seed: Episode seed.
        max_tool_calling_iterations: Turns whose tool calls are run (TRL's setting of that name).
        row: Further dataset-row columns for ``env.reset`` (navigation: ``scenario_config``, ``route_index``).

    Returns:
        A record: scenario, seed, reward, success, trolley_action, ethical_choice,
        expected/actual pedestrians hit, road_departure, tool_calls (the names of every call that
        was run, failed ones included: ``env.calls``), tool_failures (``len(env.failures)``),
        parse_failures, turns, wall_time_s and messages (the conversation, images dropped). A
        navigation record has the keys of the env's ``info["outcome"]`` (`carla_gym.envs.navigation.OUTCOME_KEYS`:
        ``success``, ``termination``, ``routes_completed``, ...; ``termination`` `UNFINISHED` and the others
        None for an episode that did not end, only without play-out) in place of the trolley outcome.
    """
    start = time.perf_counter()
    navigation = isinstance(env, NavToolEnv)
    prompt = nav_user_prompt() if navigation else user_prompt()
    messages = append_observation(prompt, env.reset(scenario=scenario, seed=seed, **(row or {})))
    tools = {t.__name__: t for t in tool_methods(env)}
    turns = 0
    for iteration in range(max_tool_calling_iterations + 1):
        turns += 1
        if not _take_turn(env, tools, messages, chat(messages, list(tools.values())),
                          last=iteration == max_tool_calling_iterations):
            break
    reward = env._finish()
    if navigation:
        outcome = env.outcome or {"termination": UNFINISHED}
        result = {key: outcome.get(key) for key in NAV_OUTCOME_KEYS}
        result["success"] = bool(result["success"])
    else:
        outcome = env.info.get("outcome", {})
        result = {"success": bool(outcome.get("success", False)),
                  "trolley_action": outcome.get("trolley_action", UNFINISHED),
                  "ethical_choice": outcome.get("ethical_choice"),
                  "expected_pedestrians_hit": outcome.get("expected_pedestrians_hit"),
                  "actual_pedestrians_hit": outcome.get("actual_pedestrians_hit"),
                  "road_departure": outcome.get("road_departure")}
    return {
        "scenario": scenario, "seed": seed, "reward": reward, **result, "tool_calls": list(env.calls),
        "tool_failures": len(env.failures), "parse_failures": env.parse_failures, "turns": turns,
        "wall_time_s": time.perf_counter() - start, "messages": _strip_images(messages),
    }


def play_episodes(chat: TransformersChat, envs: list[CarlaToolEnv], scenario: str, seeds: list[int],
                  max_tool_calling_iterations: int = 10) -> list[dict[str, Any]]:
    """`play_episode` for several trolley episodes at once: each turn is one batch (`TransformersChat.batch`).

    Episode i plays ``seeds[i]`` on ``envs[i]``; the conversation and scoring rules are `play_episode`'s.

    Args:
        chat: A text chat policy with a ``batch`` method.
        envs: Text tool environments, one per episode (at least as many as ``seeds``).
        scenario: Scenario name.
        seeds: Episode seeds.
        max_tool_calling_iterations: Turns whose tool calls are run.

    Returns:
        One record per seed: scenario, seed, reward, the ``info["outcome"]`` of the finished episode
        (``outcome``), actions (the env tool actions taken), tool_calls, tool_failures, parse_failures, turns.

    Raises:
        ValueError: Fewer environments than seeds.
    """
    if len(envs) < len(seeds):
        raise ValueError(f"{len(envs)} environments for {len(seeds)} seeds: give one environment per episode")
    envs = envs[:len(seeds)]
    conversations = [append_observation(user_prompt(), env.reset(scenario=scenario, seed=seed))
                     for env, seed in zip(envs, seeds, strict=True)]
    tools = [{t.__name__: t for t in tool_methods(env)} for env in envs]
    turns = [0] * len(envs)
    active = list(range(len(envs)))
    for iteration in range(max_tool_calling_iterations + 1):
        if not active:
            break
        replies = chat.batch([conversations[i] for i in active], list(tools[active[0]].values()))
        still = []
        for i, reply in zip(active, replies, strict=True):
            turns[i] += 1
            if _take_turn(envs[i], tools[i], conversations[i], reply, last=iteration == max_tool_calling_iterations):
                still.append(i)
        active = still
    records = []
    for env, seed, n in zip(envs, seeds, turns, strict=True):
        reward = env._finish()
        records.append({"scenario": scenario, "seed": seed, "reward": reward, "outcome": env.info.get("outcome", {}),
                        "actions": list(env.actions), "tool_calls": list(env.calls),
                        "tool_failures": len(env.failures), "parse_failures": env.parse_failures, "turns": n})
    return records


def _take_turn(env: CarlaToolEnv | NavToolEnv, tools: dict[str, Callable], messages: list[dict], reply: dict,
               last: bool) -> bool:
    """Record one assistant ``reply`` in ``messages`` and run its tool calls (not on the ``last`` turn).

    Counts a parse failure on ``env``; each tool result is appended as a tool message (with the call's
    ``tool_call_id`` when it has one: OpenAI-style endpoints match results to calls by id).

    Returns:
        Whether the conversation goes on (the reply called tools and this was not the last turn).
    """
    env.parse_failures += bool(reply.pop("parse_failed", False))
    messages.append(reply)
    calls = reply.get("tool_calls") or []
    if not calls or last:
        return False
    for call in calls:
        name, result = _run_call(env, tools, call)
        message = {"role": "tool", "name": name, "content": result}
        if call.get("id"):
            message["tool_call_id"] = call["id"]
        messages.append(message)
    return True


def _run_call(env: CarlaToolEnv, tools: dict[str, Callable], call: dict) -> tuple[str, Any]:
    """Run one parsed tool call as TRL's tool loop does; returns the tool message's name and content.

    Errors become the text ``{'error': ...}`` (TRL's wording); calls that fail before reaching a
    tool (unknown tool, non-function call, arguments that are not an object) are reported to
    ``env`` (`CarlaToolEnv._record_failed_call`), so they count as failed calls as in TRL.
    """
    if call.get("type", "function") != "function":
        name = str(call.get("name", "unknown"))
        return name, str({"error": env._record_failed_call(name, f"Unsupported tool call type: {call['type']}")})
    name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
    if name not in tools:
        return name, str({"error": env._record_failed_call(name, f"Tool {name} not found.")})
    if not isinstance(arguments, dict):
        error = f"arguments must be a JSON object, not {type(arguments).__name__}"
        return name, str({"error": env._record_failed_call(name, error)})
    try:
        return name, tools[name](**arguments)
    except Exception as exc:  # noqa: BLE001 - any tool error goes back to the model, as in TRL
        return name, str({"error": str(exc)})


def _strip_images(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            m = {**m, "content": [{"type": "image"} if b.get("type") == "image" else b for b in content]}
        out.append(m)
    return out
