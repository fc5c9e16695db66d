"""Pieces of ``train_grpo.py`` that are not the script's flow: model loading, LoRA, the trainer fix.

- `load_model`: a hub id or local directory (text: causal LM + tokenizer; VLM: image-text-to-text
  model + processor), or a tiny random model (`carla_gym.llm.tiny`).
- `lora_config`: PEFT LoRA on the language model only. PEFT's ``exclude_modules`` as a *list*
  matches only exact module names (``"visual"`` leaves ``model.visual.blocks.*`` adapted), so the
  vision tower is excluded with a regex.
- `CarlaGRPOTrainer`: GRPOTrainer whose completion log survives list-valued tool results (VLM
  image tools). TRL 1.16's ``log_completions`` writes a parquet table whose columns mix string and
  list message contents and fails with ``ArrowInvalid: cannot mix list and non-list``,
  and fails again (``Cannot write struct type 'arguments' with no child field``) when every
  logged tool call has empty arguments (``observe()``); this trainer logs every message content
  as text (``<image>`` for an image) and tool calls as JSON strings.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from carla_gym.llm.tiny import TINY_MODELS, tiny_model

VISION_MODULES = r".*(visual|vision_tower|vision_model|multi_modal_projector|embed_vision).*"
"""Regex of vision-side module names: Qwen2.5/3-VL ``model.visual``, Gemma ``vision_tower``/``embed_vision``."""


def is_grpo_run(path: str | Path) -> bool:
    """Whether ``path`` is a run directory written by ``train_grpo.py`` (its config.json names the script)."""
    try:
        return json.loads((Path(path) / "config.json").read_text()).get("script") == "train_grpo.py"
    except (OSError, ValueError, AttributeError):
        return False


def load_model(name: str, vision: bool, dtype: str = "float32", seed: int = 0, tiny_options: dict | None = None):
    """The policy and its processing class.

    Args:
        name: Hub id (e.g. ``"Qwen/Qwen3-0.6B"``), a local directory saved with
            ``save_pretrained``, or ``"tiny-random"`` / ``"tiny-random-vl"``.
        vision: Load an image-text-to-text model and its processor instead of a causal LM.
        dtype: ``"float32"`` or ``"bfloat16"`` weights.
        seed: Seed of the tiny models' random weights.
        tiny_options: `carla_gym.llm.tiny.tiny_text_model` arguments for ``"tiny-random"`` (size, tokenizer).

    Returns:
        ``(model, processing_class)``.

    Raises:
        ValueError: A tiny model of the wrong kind for ``vision``.
        OSError: The model cannot be found or downloaded (the message says what to try).
        carla_gym.hints.MissingExtraError: Without the ``[grpo]`` extra (names its install command).
    """
    from carla_gym.hints import needs_extra

    if name in TINY_MODELS:
        if (name == "tiny-random-vl") != vision:
            raise ValueError(f"model={name!r} does not match vision={vision}: tiny-random is the text model, "
                             "tiny-random-vl the VLM (train_grpo.py --vision, agents.compare vlm:)")
        with needs_extra("grpo"):
            return tiny_model(name, seed, **(tiny_options or {}))
    with needs_extra("grpo"):
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    path = Path(name).expanduser()
    local = name.startswith(("/", ".", "~")) or name.count("/") > 1 or path.exists() or \
        ("/" in name and Path(name.split("/")[0]).is_dir())
    if local and not path.is_dir():
        raise OSError(f"model {name!r}: no such local directory. Pass a directory written by save_pretrained, a hub "
                      "id such as Qwen/Qwen3-0.6B, or tiny-random (tiny-random-vl for a VLM) for an offline smoke run.")
    if local and is_grpo_run(path):
        raise OSError(f"model {name!r} is a train_grpo.py run directory: pass {path / 'model'} (a full fine-tune), or "
                      f"compare it with python -m agents.compare --agents llm:{name} (LoRA runs too)")
    if local and (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        raise OSError(f"model {name!r} is a LoRA adapter, not a model: load its base model and "
                      f"peft.PeftModel.from_pretrained(base, {name!r}), or compare the train_grpo.py run directory "
                      "that holds it with python -m agents.compare --agents llm:<run dir>")
    try:
        if vision:
            processing_class = AutoProcessor.from_pretrained(name)
            model = AutoModelForImageTextToText.from_pretrained(name, dtype=getattr(torch, dtype))
        else:
            processing_class = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, dtype))
    except OSError as exc:
        where = "local directory" if local else "hub id"
        raise OSError(f"could not load model {name!r} ({where}): {exc}\nPass a local directory written by "
                      "save_pretrained, or a hub id on a machine with internet access (not with HF_HUB_OFFLINE=1). "
                      "For an offline smoke run use tiny-random (tiny-random-vl for a VLM).") from None
    except ValueError as exc:
        if "Unrecognized configuration class" not in str(exc):
            raise
        kind = "an image-text-to-text model (VLM)" if vision else "a causal language model"
        raise ValueError(f"model {name!r} is not {kind}: "
                         + ("drop --vision for text models" if vision else "add --vision for VLMs")) from None
    return model, processing_class


def lora_config(r: int, lora_alpha: int, exclude_modules: str = VISION_MODULES, model=None):
    """A PEFT LoRA config on every linear layer of the language model.

    Args:
        r: LoRA rank.
        lora_alpha: LoRA scaling numerator.
        exclude_modules: Regex of module names left without adapters (default: vision modules).
        model: If given and no module name of it matches ``exclude_modules`` (a text model), the
            exclusion is dropped (PEFT warns about an exclusion that excludes nothing).

    Returns:
        ``peft.LoraConfig(task_type="CAUSAL_LM", target_modules="all-linear", ...)``.
    """
    import re

    from carla_gym.hints import needs_extra

    with needs_extra("grpo"):
        from peft import LoraConfig

    if model is not None and not any(re.fullmatch(exclude_modules, name) for name, _ in model.named_modules()):
        exclude_modules = None
    return LoraConfig(r=r, lora_alpha=lora_alpha, target_modules="all-linear", exclude_modules=exclude_modules,
                      task_type="CAUSAL_LM")


def as_text(conversation):
    """A copy of a logged conversation that parquet can store.

    Every content becomes a string (images -> ``<image>``) and ``tool_calls`` a JSON string
    (``{}`` arguments would be a struct without fields).
    """
    if not isinstance(conversation, list):
        return conversation
    out = []
    for message in conversation:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join("<image>" if b.get("type") == "image" else str(b.get("text", "")) for b in content)
        message = {**message, "content": content}
        if "tool_calls" in message and not isinstance(message["tool_calls"], str):  # logs are converted again
            message["tool_calls"] = json.dumps(message["tool_calls"], default=str)
        out.append(message)
    return out


def chat_template_kwargs(processing_class) -> dict:
    """``{"enable_thinking": False}`` when the chat template has a thinking switch (Qwen3, Qwen3.5), else ``{}``."""
    template = getattr(processing_class, "chat_template", None) or ""
    return {"enable_thinking": False} if "enable_thinking" in str(template) else {}


@functools.cache
def _trainer_class():
    from carla_gym.hints import needs_extra

    with needs_extra("grpo"):
        from trl import GRPOTrainer

    class CarlaGRPOTrainer(GRPOTrainer):
        """GRPOTrainer with text-only completion logs (see the module docstring, bug L1)."""

        def log(self, logs: dict, start_time: float | None = None) -> None:
            if self.log_completions:
                for key in ("prompt", "completion"):
                    logged = self._logs[key]
                    converted = [as_text(c) for c in logged]
                    logged.clear()
                    logged.extend(converted)
            super().log(logs, start_time)

    return CarlaGRPOTrainer


def __getattr__(name: str):
    if name == "CarlaGRPOTrainer":  # imported lazily: trl takes seconds to import
        return _trainer_class()
    raise AttributeError(name)
