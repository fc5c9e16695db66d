"""Tiny random Qwen3 / Qwen3-VL models built in code, for offline tests, benchmarks and smoke runs.

Nothing is downloaded: a byte-level BPE tokenizer is trained in memory on this project's own
prompts, tool names and tool-call JSON, and given TRL's bundled Qwen3 (or Qwen3-VL) chat
template, so TRL recognises it and parses ``<tool_call>`` JSON exactly as for the real models.
The weights are random (seeded): these models only exercise the plumbing, they learn nothing
useful.

``train_grpo.py --model tiny-random`` (or ``tiny-random-vl``) uses them.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Sequence

TINY_TEXT = "tiny-random"
TINY_VL = "tiny-random-vl"
TINY_MODELS = (TINY_TEXT, TINY_VL)

_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_MARKUP = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"]
"""Single tokens that are *not* special, as in Qwen3's tokenizer: decoding with ``skip_special_tokens`` keeps them
(TRL's parse fallback then shows an unparsed ``<tool_call>`` as text, as with the real model)."""
_VISION_SPECIAL = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def _corpus() -> list[str]:
    """Text the tokenizer is trained on: prompts, descriptions, tool calls and chat markup."""
    from carla_gym.llm.prompts import INSTRUCTION
    from carla_gym.sim.describe import TOOLS_TEXT, scene_prompt
    from carla_gym.sim.scenarios import resolve_scenario
    from carla_gym.suites import SUITES

    names = sorted({n for suite in SUITES.values() for n in suite})
    texts = [INSTRUCTION, TOOLS_TEXT] + [scene_prompt(resolve_scenario(n)) for n in names]
    calls = [{"name": "observe", "arguments": {}}, {"name": "emergency_stop", "arguments": {}},
             {"name": "lane_change", "arguments": {"direction": "left"}},
             {"name": "lane_change", "arguments": {"direction": "right"}}]
    texts += [f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls]
    texts += [f"Speed: {v:.1f} km/h.\n- walker at {d:.1f}m" for v in range(0, 76, 5) for d in range(0, 30, 3)]
    texts += ['{"type": "function", "function": {"name": "lane_change", "description": "Change lane", '
              '"parameters": {"type": "object", "properties": {"direction": {"type": "string", '
              '"enum": ["left", "right"]}}, "required": ["direction"]}}}',
              "# Tools\n\nYou may call one or more functions to assist with the user query.",
              "The episode is over. COLLISION detected with walker.pedestrian.0001!"]
    return texts * 3


def tiny_tokenizer(vision: bool = False, vocab_size: int = 1024, merge_words: bool = False,
                   texts: Sequence[str] = ()):
    """A byte-level BPE tokenizer with TRL's Qwen3 or Qwen3-VL chat template.

    Args:
        vision: Add the Qwen-VL vision tokens and use TRL's ``qwen3_vl.jinja`` template.
        vocab_size: Vocabulary size of the BPE training (a larger one writes the prompts in fewer tokens).
        merge_words: Let merges cross word and punctuation boundaries but not line ends, so lines that
            recur verbatim (the tool schema, a tool call, a scene line) become one or a few tokens; a
            learning run's choice (with `episode_texts` as ``texts``); the default keeps GPT-2's word split.
        texts: More training text, e.g. `episode_texts` (the default corpus is this project's prompts).

    Returns:
        A transformers fast tokenizer; eos ``<|im_end|>``, pad ``<|endoftext|>``, left padding.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = _SPECIAL + (_VISION_SPECIAL if vision else [])
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not merge_words)
    if merge_words:  # merges never cross a line end
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\n", "isolated"), tk.pre_tokenizer])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(_corpus() + list(texts), trainer=trainer)
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in _MARKUP])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  padding_side="left")
    template = "qwen3_vl.jinja" if vision else "qwen3.jinja"
    tok.chat_template = (importlib.resources.files("trl") / "chat_templates" / template).read_text(encoding="utf-8")
    return tok


def episode_texts(scenarios: Sequence[str], count: int, seed: int = 0) -> list[str]:
    """Whole rendered episodes (chat template text) of ``scenarios``, as tokenizer training text.

    Episode i is `carla_gym.llm.sft.transcript` of ``scenarios[i % len]``, seed ``seed + i`` and tool
    ``i % 4``, rendered with TRL's Qwen3 training template and its tools, thinking off: the system
    prompt with the tool schema, the prompt, a tool call, its result and the closing turn.

    Args:
        scenarios: Scenario names (at least one).
        count: Episodes (>= 1).
        seed: Episode seed of the first.

    Returns:
        ``count`` strings.
    """
    from carla_gym.llm.sft import TOOL_CHOICES, training_template, transcript
    from carla_gym.llm.tools import CarlaToolEnv, tool_methods

    tok = tiny_tokenizer()  # only its chat template is used
    template = training_template(tok)
    texts = []
    with CarlaToolEnv() as env:
        tools = tool_methods(env)
        for i in range(count):
            messages = transcript(env, scenarios[i % len(scenarios)], seed + i, i % len(TOOL_CHOICES))
            texts.append(tok.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False,
                                                 enable_thinking=False))
    return texts


LINES_EPISODES = 256
"""Rendered episodes a `lines_tokenizer` is trained on (this project's choice: every line kind recurs often)."""
LINES_VOCAB = 2048
"""Vocabulary size of a `lines_tokenizer` (this project's choice)."""


def lines_tokenizer(scenarios: Sequence[str], seed: int = 0, episodes: int = LINES_EPISODES,
                    vocab_size: int = LINES_VOCAB):
    """A tokenizer whose BPE merges run up to line ends, trained on rendered episodes of ``scenarios``.

    ``train_grpo.py --tiny-tokenizer lines``: recurring lines (the tool schema, a whole tool call, a
    scene line such as ``- Your lane: 2 pedestrian(s) about 16 m ahead.``) become one or a few tokens,
    so a prompt is about 150 tokens instead of about 900 and a tool call is one token.

    Args:
        scenarios: Training scenarios (only their text is seen: train a generated run on its train split).
        seed: Episode seed of the first rendered episode.
        episodes: Rendered episodes (`episode_texts`).
        vocab_size: BPE vocabulary size.

    Returns:
        The tokenizer (`tiny_tokenizer` with ``merge_words=True``).
    """
    return tiny_tokenizer(vocab_size=vocab_size, merge_words=True, texts=episode_texts(scenarios, episodes, seed))


def tiny_text_model(seed: int = 0, hidden_size: int = 32, num_layers: int = 2, tokenizer=None):
    """A small Qwen3 causal LM (default: 2 layers, hidden size 32) with random weights, and its tokenizer.

    Four attention heads (two key/value heads) of ``hidden_size / 4`` each and an MLP of twice the hidden
    size, whatever the size (this project's choice, the proportions of the real Qwen3 models).

    Args:
        seed: Seed of the weight initialisation.
        hidden_size: Width of the model (a multiple of 4, >= 8).
        num_layers: Decoder layers (>= 1).
        tokenizer: Its tokenizer (`tiny_tokenizer`, e.g. with ``merge_words``); None: ``tiny_tokenizer()``.

    Returns:
        ``(model, tokenizer)``.

    Raises:
        ValueError: ``hidden_size`` or ``num_layers`` out of range.
    """
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    if hidden_size < 8 or hidden_size % 4:
        raise ValueError(f"hidden_size={hidden_size!r}: must be a multiple of 4, at least 8 (four attention heads)")
    if num_layers < 1:
        raise ValueError(f"num_layers={num_layers!r}: must be >= 1")
    tok = tiny_tokenizer() if tokenizer is None else tokenizer
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=hidden_size // 4, max_position_embeddings=8192,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return model, tok


def tiny_vl_model(seed: int = 0):
    """A 2-layer Qwen3-VL model (vision depth 2, patch 16) with random weights, and its processor.

    Images are resized to at most 64x64 pixels (4 image tokens each) by the processor.

    Args:
        seed: Seed of the weight initialisation.

    Returns:
        ``(model, processor)``.
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2VLImageProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    tok = tiny_tokenizer(vision=True)
    image_processor = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32,
                                            max_pixels=64 * 64, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok,
                                 video_processor=Qwen3VLVideoProcessor(), chat_template=tok.chat_template)
    ids = {t: tok.convert_tokens_to_ids(t) for t in _VISION_SPECIAL}
    torch.manual_seed(seed)
    config = Qwen3VLConfig(
        text_config={"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 8192, "eos_token_id": tok.eos_token_id,
                     "pad_token_id": tok.pad_token_id,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 2, 2],
                                         "mrope_interleaved": True}},
        vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 4, "out_hidden_size": 32,
                       "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "deepstack_visual_indexes": [1], "num_position_embeddings": 64},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return model, processor


def tiny_model(name: str, seed: int = 0, **options):
    """``(model, processing_class)`` for ``"tiny-random"`` (text) or ``"tiny-random-vl"`` (VLM).

    Args:
        name: ``"tiny-random"`` or ``"tiny-random-vl"``.
        seed: Seed of the weight initialisation.
        **options: `tiny_text_model` arguments (hidden_size, num_layers, tokenizer); text model only.

    Raises:
        ValueError: Any other name, or options for the VLM.
    """
    if name == TINY_TEXT:
        return tiny_text_model(seed, **options)
    if options:
        raise ValueError(f"options {sorted(options)} shape the text model only; leave them out for {name!r}")
    if name == TINY_VL:
        return tiny_vl_model(seed)
    raise ValueError(f"model={name!r} is not a tiny model; choose one of {list(TINY_MODELS)}")
