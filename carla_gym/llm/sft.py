"""Supervised warm start before GRPO: synthetic tool-call transcripts with a uniformly random tool (format only).

A model with random weights (the tiny models of `carla_gym.llm.tiny`) never writes a well-formed
tool call, so every GRPO group has the same reward and nothing is learnt (GRPO's advantage is the
reward minus the group mean, zero for every completion). The warm start teaches the *format* of an episode and
nothing about which tool is right: each transcript is

1. the GRPO prompt (`carla_gym.llm.prompts.user_prompt`) with the first observation appended exactly
   as `carla_gym.llm.tools.CarlaToolEnv.reset` returns it (TRL joins them the same way);
2. an assistant turn with one tool call, drawn uniformly from `TOOL_CHOICES` whatever the scene;
3. the tool's real result, from playing that call in the env;
4. a closing assistant turn `CLOSING` without a tool call (the model then stops and the episode is played out).

Every turn is rendered by the model's own chat template, with the template GRPOTrainer renders prompts
and tool results with (TRL's training template where the model's own re-renders earlier turns), so
the token ids are the ones a GRPO rollout of that choice holds: prompt, turn 1, the tool suffix
(``<tool_response>`` ... and the next generation prompt), turn 2. Only the model's own turns are
trained (``labels`` -100 elsewhere). `sft_dataset` builds the rows; `warm_start` trains them with
TRL's ``SFTTrainer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from carla_gym.llm.prompts import episode_rows, user_prompt
from carla_gym.llm.rollout import append_observation
from carla_gym.llm.tools import CarlaToolEnv, tool_methods

TOOL_CHOICES: tuple[tuple[str, dict[str, str]], ...] = (
    ("observe", {}), ("emergency_stop", {}), ("lane_change", {"direction": "left"}),
    ("lane_change", {"direction": "right"}))
"""The four first decisions of the trolley tools (the env's four tool actions), drawn uniformly (this project's)."""
CLOSING = "Decision made."
"""Text of the closing assistant turn (this project's wording)."""
IGNORE_INDEX = -100
"""Label of tokens outside the model's turns (PyTorch cross-entropy's ignore_index, as TRL's SFTTrainer)."""


def tool_call_message(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant message holding one tool call, as TRL's parser returns it.

    Examples:
        >>> tool_call_message("lane_change", {"direction": "left"})["tool_calls"][0]["function"]
        {'name': 'lane_change', 'arguments': {'direction': 'left'}}
    """
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": dict(arguments)}}]}


def transcript(env: CarlaToolEnv, scenario: str, seed: int, choice: int) -> list[dict[str, Any]]:
    """One synthetic episode: prompt with the reset text, the tool call ``TOOL_CHOICES[choice]``, its result, `CLOSING`.

    Args:
        env: A text tool environment (``vision=False``); it is reset and stepped once.
        scenario: Scenario name.
        seed: Episode seed.
        choice: Index into `TOOL_CHOICES`.

    Returns:
        The messages: user, assistant (tool call), tool (its real result), assistant (`CLOSING`).

    Raises:
        ValueError: ``choice`` out of range.
    """
    if not 0 <= choice < len(TOOL_CHOICES):
        raise ValueError(f"choice={choice!r}: must be in [0, {len(TOOL_CHOICES)}) (an index into TOOL_CHOICES)")
    name, arguments = TOOL_CHOICES[choice]
    messages = append_observation(user_prompt(), env.reset(scenario=scenario, seed=seed))
    result = getattr(env, name)(**arguments)
    return [*messages, tool_call_message(name, arguments), {"role": "tool", "name": name, "content": result},
            {"role": "assistant", "content": CLOSING}]


def training_template(processing_class) -> str | None:
    """The template GRPOTrainer renders with: None (the model's own) if prefix-preserving, else TRL's training one."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    if is_chat_template_prefix_preserving(processing_class):
        return None
    return get_training_chat_template(processing_class)


def transcript_ids(processing_class, messages: Sequence[dict], tools: Sequence, chat_template: str | None = None,
                   chat_template_kwargs: dict | None = None) -> tuple[list[int], list[int]]:
    """Token ids of a transcript as a GRPO rollout holds them, and labels that train the assistant turns only.

    The prompt is rendered with the generation prompt; each assistant turn is the tokens its rendering
    adds up to and including the end-of-turn token (the eos, where generation stops); a tool message
    adds the tokens up to the next generation prompt (TRL splices the same suffix after running a tool).

    Args:
        processing_class: The tokenizer (eos = end of turn, as Qwen's ``<|im_end|>``).
        messages: A `transcript`: user, then assistant and tool messages, ending with an assistant message.
        tools: The tool functions the prompt offers (`carla_gym.llm.tools.tool_methods`).
        chat_template: Template to render with (`training_template`); None: the model's own.
        chat_template_kwargs: Passed to ``apply_chat_template`` (e.g. ``{"enable_thinking": False}``).

    Returns:
        ``(input_ids, labels)``, equal lengths; labels are `IGNORE_INDEX` outside assistant turns.

    Raises:
        ValueError: The template re-renders earlier turns (a render is not a prefix of the next one).
    """
    kwargs = dict(chat_template_kwargs or {})
    eos = processing_class.eos_token_id

    def render(n: int, generation_prompt: bool) -> list[int]:
        out = processing_class.apply_chat_template(list(messages[:n]), tools=list(tools), chat_template=chat_template,
                                                   add_generation_prompt=generation_prompt, tokenize=True,
                                                   return_dict=True, **kwargs)
        return list(out["input_ids"])

    ids = render(1, True)
    labels = [IGNORE_INDEX] * len(ids)
    for n in range(2, len(messages) + 1):
        assistant = messages[n - 1]["role"] == "assistant"
        full = render(n, not assistant)
        if full[:len(ids)] != ids:
            raise ValueError(f"the chat template re-renders earlier turns at message {n - 1}; pass the template "
                             "GRPOTrainer uses (training_template)")
        new = full[len(ids):]
        if assistant:  # up to the end-of-turn token: generation stops there
            new = new[:new.index(eos) + 1]
        ids += new
        labels += new if assistant else [IGNORE_INDEX] * len(new)
    return ids, labels


def sft_dataset(processing_class, scenarios: Sequence[str], size: int, seed: int, ticks_per_action: int = 10,
                chat_template_kwargs: dict | None = None) -> dict[str, list]:
    """Rows for TRL's SFTTrainer: ``size`` transcripts with uniformly random tools.

    Row i plays ``scenarios[i % len]`` with episode seed ``seed + i`` (the GRPO rows' rule,
    `carla_gym.llm.prompts.episode_rows`) and the tool ``TOOL_CHOICES[c_i]``, ``c_i`` drawn from
    ``numpy.random.default_rng(seed)``: same arguments, same rows.

    Args:
        processing_class: The model's tokenizer.
        scenarios: Scenario names (at least one).
        size: Number of transcripts (>= 1).
        seed: Seed of the rows and of the tool draws.
        ticks_per_action: Simulator ticks per tool call (the GRPO run's).
        chat_template_kwargs: As GRPOConfig's (``{"enable_thinking": False}`` for Qwen3).

    Returns:
        ``{"input_ids": [...], "labels": [...], "tool": [...]}`` (tool: ``"lane_change_left"``-style names).

    Raises:
        ValueError: No scenarios or ``size < 1``.
    """
    episodes = episode_rows(scenarios, size, seed)  # GRPO's rule: transcript i plays scenario i mod len, seed + i
    choices = np.random.default_rng(seed).integers(len(TOOL_CHOICES), size=size)
    template = training_template(processing_class)
    rows: dict[str, list] = {"input_ids": [], "labels": [], "tool": []}
    with CarlaToolEnv(ticks_per_action=ticks_per_action) as env:
        tools = tool_methods(env)
        for scenario, episode_seed, choice in zip(episodes["scenario"], episodes["seed"], choices.tolist(),
                                                  strict=True):
            messages = transcript(env, scenario, episode_seed, choice)
            ids, labels = transcript_ids(processing_class, messages, tools, template, chat_template_kwargs)
            rows["input_ids"].append(ids)
            rows["labels"].append(labels)
            rows["tool"].append(env.actions[0])
    return rows


def warm_start(model, processing_class, rows: dict[str, list], output_dir: str, max_steps: int,
               learning_rate: float = 1e-2, batch_size: int = 8, seed: int = 0, use_cpu: bool = True,
               bf16: bool = False, report_to: str | list[str] = "none"):
    """Train ``model`` in place on `sft_dataset` rows with TRL's SFTTrainer; returns its log history.

    Args:
        model: The policy (trained in place).
        processing_class: Its tokenizer.
        rows: `sft_dataset` output.
        output_dir: SFTTrainer's output directory (nothing is saved there: ``save_strategy="no"``).
        max_steps: Optimizer steps (>= 1).
        learning_rate: Peak learning rate (linear decay; this project's choice for the tiny models, the default
            of ``train_grpo.py --sft-learning-rate``: docs/performance.md "GRPO learning on CPU"; a real model
            wants about 1e-5).
        batch_size: Transcripts per step (this project's choice, ``--sft-batch-size``).
        seed: Trainer seed (data order).
        use_cpu: Train on the CPU.
        bf16: bf16 mixed precision.
        report_to: Logging integrations (TrainingArguments').

    Returns:
        The trainer's ``state.log_history`` (loss per step, ...).

    Raises:
        ValueError: ``max_steps < 1``.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps={max_steps!r}: need at least one step")
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(output_dir=output_dir, max_steps=max_steps, learning_rate=learning_rate,
                       per_device_train_batch_size=batch_size, logging_steps=max(1, max_steps // 20),
                       save_strategy="no", report_to=report_to, seed=seed, use_cpu=use_cpu, bf16=bf16,
                       max_length=None, gradient_checkpointing=False, disable_tqdm=True)
    dataset = Dataset.from_dict({"input_ids": rows["input_ids"], "labels": rows["labels"]})
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=processing_class)
    trainer.train()
    return trainer.state.log_history
