"""Chat policies for the harness: local transformers models (incl. train_grpo.py runs) and OpenAI-compatible endpoints.

`load_local_chat` accepts a ``train_grpo.py`` run directory (full model or LoRA adapter, the base
rebuilt from the run's config), a directory saved with ``save_pretrained``, a PEFT adapter
directory, a hub id, or ``tiny-random`` / ``tiny-random-vl``. `OpenAIChat` speaks the
``/chat/completions`` API of OpenAI, vLLM, llama.cpp, Ollama and others: tools go out as JSON
schemas built from the same docstrings TRL uses, tool calls come back with ids that the tool
messages quote. Only text is sent to endpoints (no images).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path


def _is_vision_dir(path: Path) -> bool:
    return (path / "processor_config.json").is_file() or (path / "preprocessor_config.json").is_file()


def load_local_chat(model: str, vision: bool | None = None, max_new_tokens: int = 256):
    """A greedy `carla_gym.llm.rollout.TransformersChat` for ``model`` and its tool-env settings.

    Args:
        model: See the module docstring.
        vision: Force VLM (True) or text (False) loading; None: from the run config or the files.
        max_new_tokens: Token budget of one turn.

    Returns:
        ``(chat, settings)``: ``settings`` has ``vision``, ``ticks_per_action`` and ``image_size``
        (a train_grpo.py run's own values; 10 and 256 otherwise).

    Raises:
        OSError: The model cannot be loaded (message from `carla_gym.llm.grpo.load_model`).
        carla_gym.hints.MissingExtraError: Without the ``[grpo]`` extra (names its install command).
    """
    import warnings

    from carla_gym.hints import needs_extra
    from carla_gym.llm.grpo import is_grpo_run, load_model
    from carla_gym.llm.rollout import TransformersChat

    # TRL 1.16 / transformers 5 deprecation noise on every generation (as in train_grpo.py)
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
    path = Path(model)
    settings = {"ticks_per_action": 10, "image_size": 256}
    if is_grpo_run(path):
        saved = json.loads((path / "config.json").read_text())
        args = {**saved.get("grpo_config", {}), **saved["args"]}  # TRL's options beside the project's (before: in args)
        vision = args["vision"]
        ticks = args.get("ticks_per_action", args.get("ticks_per_tool", 10))  # ticks_per_tool: runs of 0.1.0
        settings = {"ticks_per_action": ticks, "image_size": args["image_size"]}
        if args["lora"]:
            with needs_extra("grpo"):
                from peft import PeftModel

            base, processing_class = load_model(args["model"], vision, seed=args["seed"])
            net = PeftModel.from_pretrained(base, str(path / "model"))
        else:
            net, processing_class = load_model(str(path / "model"), vision)
    elif (path / "adapter_config.json").is_file():  # a bare PEFT adapter
        with needs_extra("grpo"):
            from peft import PeftModel

        base_name = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if not base_name:
            raise OSError(f"{path}/adapter_config.json names no base model; pass the train_grpo.py run directory "
                          "(its config.json says which base model the adapter belongs to)")
        vision = _is_vision_dir(path) if vision is None else vision
        base, processing_class = load_model(base_name, vision)
        net = PeftModel.from_pretrained(base, str(path))
    else:
        if vision is None:
            vision = model == "tiny-random-vl" or (path.is_dir() and _is_vision_dir(path))
        net, processing_class = load_model(model, vision)
    net.eval()
    return TransformersChat(net, processing_class, max_new_tokens=max_new_tokens), {"vision": vision, **settings}


class OpenAIChat:
    """Chat turns from an OpenAI-compatible ``/chat/completions`` endpoint (greedy: temperature 0).

    Args:
        model: Model name the endpoint serves.
        base_url: API root, e.g. ``"http://127.0.0.1:8000/v1"`` or ``"https://api.openai.com/v1"``.
        api_key_env: Environment variable holding the key (unset: no Authorization header).
        max_tokens: Token budget of one turn.
        timeout_s: Timeout of one request [s].
    """

    def __init__(self, model: str, base_url: str, api_key_env: str = "OPENAI_API_KEY", max_tokens: int = 256,
                 timeout_s: float = 60.0) -> None:
        self.model, self.base_url = model, base_url.rstrip("/")
        self.api_key = os.environ.get(api_key_env)
        self.max_tokens, self.timeout_s = max_tokens, timeout_s
        from carla_gym.hints import needs_extra

        with needs_extra("compare"):
            import httpx  # noqa: F401  (imported here so the first episode's wall time is the endpoint's)
            from transformers.utils import get_json_schema  # noqa: F401

    def __call__(self, messages: list[dict], tools: list[Callable]) -> dict:
        """One assistant turn; malformed tool-call arguments are dropped and flagged ``parse_failed``."""
        import httpx
        from transformers.utils import get_json_schema

        schemas = []
        for tool in tools:  # transformers' schema (what TRL shows the model) without its non-standard "return"
            schema = get_json_schema(tool)
            schema["function"].pop("return", None)
            schemas.append(schema)
        payload = {"model": self.model, "messages": [self._wire(m) for m in messages], "tools": schemas,
                   "temperature": 0.0, "max_tokens": self.max_tokens}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = f"{self.base_url}/chat/completions"
        try:
            response = httpx.post(url, json=payload, headers=headers, timeout=self.timeout_s)
            response.raise_for_status()
            message = response.json()["choices"][0]["message"]
        except httpx.HTTPStatusError as exc:
            raise RuntimeError(f"chat endpoint {url} answered {exc.response.status_code}: "
                               f"{exc.response.text[:500]}") from None
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise RuntimeError(f"chat endpoint {url} failed: {exc!r}") from None
        turn = sum(m["role"] == "assistant" for m in messages)  # ids depend on the conversation only
        reply: dict = {"role": "assistant", "content": message.get("content") or ""}
        calls = []
        for i, call in enumerate(message.get("tool_calls") or []):
            try:
                name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
                if isinstance(arguments, str):
                    arguments = json.loads(arguments)
                if not isinstance(name, str) or not isinstance(arguments, dict):
                    raise ValueError(call)
            except (ValueError, KeyError, TypeError):
                reply["parse_failed"] = True
                continue
            calls.append({"type": "function", "id": call.get("id") or f"call_{turn}_{i}",
                          "function": {"name": name, "arguments": arguments}})
        if calls:
            reply["tool_calls"] = calls
        return reply

    @staticmethod
    def _wire(message: dict) -> dict:
        content = message.get("content")
        if isinstance(content, list):  # text blocks only
            content = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        out = {"role": message["role"], "content": content or ""}
        if message.get("tool_calls"):
            out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                  "function": {"name": c["function"]["name"],
                                               "arguments": json.dumps(c["function"].get("arguments") or {})}}
                                 for c in message["tool_calls"]]
        if message["role"] == "tool":
            out["tool_call_id"] = message.get("tool_call_id")
        return out
