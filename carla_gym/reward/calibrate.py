"""Does a CLIP model and prompt pair tell collisions from clear roads on this renderer?

Usage:
    python -m carla_gym.reward.calibrate --out calib [--model ViT-B-32 --pretrained laion2b_s34b_b79k]
        [--prompts trolley] [--scenarios ...] [--policies ...] [--speeds 40 50 60 70]

Rolls out fixed tool policies (the tool on the first decision, then observe) in the chosen
scenarios at several initial speeds (scenarios are deterministic: the speeds give the variety;
episodes end at the first collision, so each colliding episode gives one collision frame),
renders VLM-RL's top-down reward camera at every decision, and labels each frame
``collision`` (the ego has hit a pedestrian) or ``clear``. It scores every frame with the model
and reports, per label, the distribution of z = sim_neg - sim_pos (the quantity VLM-RL's CLG
window clips), the separation as AUROC (the probability that a collision frame has a larger z
than a clear one; 0.5 is chance), and a suggested CLG window: (median z of clear frames, median
z of collision frames). VLM-RL's (0, 0.03) window was tuned to photo-real CARLA frames and
ViT-bigG-14; check a pair here before training with it.

Writes ``report.json`` (summary) and ``frames.csv`` (one row per frame) into ``--out``.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from carla_gym.cli_args import arg, parser_for
from carla_gym.envs.spaces import TOOL_ACTIONS, TOOL_INDEX
from carla_gym.hints import as_flags, exit_without_extras
from carla_gym.io import write_csv_atomic, write_json_atomic

POLICIES = TOOL_ACTIONS
"""Fixed policies by their first tool: the env's tools (`carla_gym.envs.spaces.TOOL_ACTIONS`)."""
FLAGS = {"model_name": "--model", "pretrained": "--pretrained", "cache_dir": "--cache-dir", "device": "--device",
         "preprocess": "--preprocess", "batch_size": "--batch-size", "prompts": "--prompts"}
"""`OpenClipEncoder` and `CLIPRewardModel` keywords -> this command's flags (its errors name the flags, `as_flags`)."""
DEFAULT_SCENARIOS = ["trolley_micro_escape_exists", "trolley_micro_classic_3v1", "trolley_saves", "bias_3v1"]


@dataclass
class Args:
    """Calibration options (each is a ``--flag``)."""

    out: str = arg("calibration", "output folder")
    model: str = arg("ViT-B-32", "open_clip model name")
    pretrained: str | None = arg(None, "pretrained tag or checkpoint path; omitted: random weights (no signal)")
    cache_dir: str | None = arg(None, "open_clip weight cache (for pretrained tags)")
    prompts: Literal["trolley", "vlm_rl"] = arg("trolley", "prompt preset: trolley or vlm_rl")
    preprocess: Literal["openclip", "vlm_rl"] = arg("openclip", "openclip or vlm_rl")
    device: str = arg("cpu", "torch device")
    batch_size: int = arg(64, "frames per forward pass")
    frame_size: int = arg(0, "reward camera size [px]; 0: the size the preprocessing expects (openclip 224, "
                             "vlm_rl 517, VLM-RL's camera)")
    scenarios: list[str] = arg(DEFAULT_SCENARIOS, "scenarios")
    policies: list[Literal["observe", "emergency_stop", "lane_change_left", "lane_change_right"]] = arg(
        list(POLICIES), "first tools")
    speeds: list[float] = arg([40.0, 50.0, 60.0, 70.0], "initial speeds [km/h], one episode each")
    ticks_per_action: int = arg(5, "ticks per decision (a frame per decision)")


def parse_args(argv: list[str] | None = None) -> Args:
    """Parse the command line into `Args`."""
    parser = parser_for(Args, prog="python -m carla_gym.reward.calibrate", description=__doc__.splitlines()[0])
    args = Args(**vars(parser.parse_args(argv)))
    bad = [p for p in args.policies if p not in POLICIES]
    if bad:
        parser.error(f"--policies {bad}: choose from {list(POLICIES)}")
    if not all(0.0 <= v <= 120.0 for v in args.speeds):
        parser.error(f"--speeds {args.speeds}: each must be in [0, 120] km/h")
    if not 1 <= args.ticks_per_action <= 100:
        parser.error(f"--ticks-per-action {args.ticks_per_action}: must be in [1, 100]")
    from carla_gym.reward.encoder import FRAME_SIZES, PREPROCESS_MODES
    from carla_gym.reward.prompts import PROMPT_PRESETS
    from carla_gym.suites import resolve_scenarios

    if args.prompts not in PROMPT_PRESETS:
        parser.error(f"--prompts {args.prompts!r}: choose one of {sorted(PROMPT_PRESETS)}")
    if args.preprocess not in PREPROCESS_MODES:
        parser.error(f"--preprocess {args.preprocess!r}: choose one of {list(PREPROCESS_MODES)}")
    if not 1 <= args.batch_size <= 4096:
        parser.error(f"--batch-size {args.batch_size}: must be in [1, 4096]")
    if args.frame_size == 0:
        args.frame_size = FRAME_SIZES[args.preprocess]
    if not 16 <= args.frame_size <= 1024:
        parser.error(f"--frame-size {args.frame_size}: must be in [16, 1024] px")
    try:
        args.scenarios = list(resolve_scenarios(args.scenarios))
    except ValueError as exc:
        parser.error(f"--scenarios: {exc}")
    return args


def collect_frames(args: Args) -> tuple[np.ndarray, list[dict]]:
    """Roll out the policies; returns uint8 frames (N, S, S, 3) and one record per frame.

    Raises:
        ValueError: An unknown scenario name (from the env).
    """
    import gymnasium as gym

    frames, records = [], []
    for scenario in args.scenarios:
        env = gym.make("CarlaTrolley-v0", scenario=scenario, observation_mode="state",
                       ticks_per_action=args.ticks_per_action, reward_frame_size=args.frame_size)
        try:
            for policy in args.policies:
                for speed in args.speeds:
                    _, info = env.reset(seed=0, options={"scenario_config": {"initial_speed_kmh": speed}})
                    action, step, done = TOOL_INDEX[policy], 0, False
                    while True:
                        frames.append(info.pop("reward_frame"))
                        records.append({"scenario": scenario, "policy": policy, "speed_kmh": speed, "step": step,
                                        "label": "collision" if info["collision"] else "clear"})
                        if done:
                            break
                        _, _, terminated, truncated, info = env.step(action)
                        action, step, done = TOOL_INDEX["observe"], step + 1, terminated or truncated
        finally:
            env.close()
    return np.stack(frames), records


def auroc(positive, negative) -> float | None:
    """P(a positive score > a negative score) + 0.5 P(equal): the Mann-Whitney AUROC; None if a side is empty.

    Examples:
        >>> auroc([0.3, 0.4], [0.1, 0.3])
        0.875
    """
    pos, neg = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    if pos.size == 0 or neg.size == 0:
        return None
    greater = (pos[:, None] > neg[None, :]).sum()
    equal = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * equal) / (pos.size * neg.size))


def summarize(z: np.ndarray) -> dict:
    """Count, mean, std and percentiles (5, 25, 50, 75, 95) of z values."""
    if z.size == 0:
        return {"count": 0}
    q = np.percentile(z, [5, 25, 50, 75, 95])
    return {"count": int(z.size), "mean": float(z.mean()), "std": float(z.std()),
            **{f"p{p}": float(v) for p, v in zip((5, 25, 50, 75, 95), q, strict=True)}}


def report(z: np.ndarray, labels: list[str]) -> dict:
    """Per-label z statistics, AUROC and the suggested CLG window."""
    labels_arr = np.asarray(labels)
    hit, clear = z[labels_arr == "collision"], z[labels_arr == "clear"]
    out = {"z": "sim_neg - sim_pos", "collision": summarize(hit), "clear": summarize(clear),
           "auroc": auroc(hit, clear), "vlm_rl_window": [0.0, 0.03]}
    if hit.size and clear.size and np.median(hit) > np.median(clear):
        out["suggested_window"] = [float(np.median(clear)), float(np.median(hit))]
    else:
        out["suggested_window"] = None
        out["note"] = ("no separation: collision frames do not score a larger z than clear ones; try other prompts, "
                       "another model or real weights")
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the calibration; returns the report (also written to ``--out``).

    Raises:
        SystemExit: Bad arguments, the ``clip`` extra is missing (the message names its install
            command), or the model or a scenario cannot be loaded; nothing is written then.
    """
    from carla_gym.reward.encoder import OpenClipEncoder
    from carla_gym.reward.model import CLIPRewardModel

    args = parse_args(argv)
    exit_without_extras("clip", prefix="carla_gym.reward.calibrate: ")
    out = Path(args.out)
    try:
        encoder = OpenClipEncoder(args.model, args.pretrained, device=args.device, preprocess=args.preprocess,
                                  batch_size=args.batch_size, cache_dir=args.cache_dir)
        model = CLIPRewardModel(encoder, head="clg", prompts=args.prompts)
        frames, records = collect_frames(args)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        sys.exit(f"error: {as_flags(exc, FLAGS)}")
    scores = model.score(frames)
    out.mkdir(parents=True, exist_ok=True)
    pos, neg = scores.similarities["pos"], scores.similarities["neg"]
    z = neg - pos
    write_csv_atomic(out / "frames.csv", [*records[0], "sim_pos", "sim_neg", "z"],
                     ([*rec.values(), f"{p:.6f}", f"{n:.6f}", f"{zi:.6f}"]
                      for rec, p, n, zi in zip(records, pos, neg, z, strict=True)))
    result = {"config": dataclasses.asdict(args), "random_weights": args.pretrained is None,
              **report(z, [r["label"] for r in records])}
    write_json_atomic(out / "report.json", result)
    print(f"{'label':10s} {'frames':>6s} {'median z':>10s} {'p5':>10s} {'p95':>10s}")
    for label in ("clear", "collision"):
        s = result[label]
        if s["count"]:
            print(f"{label:10s} {s['count']:6d} {s['p50']:10.5f} {s['p5']:10.5f} {s['p95']:10.5f}")
    auc = result["auroc"]
    print(f"AUROC {auc:.3f}" if auc is not None else "AUROC n/a (one label has no frames)")
    if min(result["clear"]["count"], result["collision"]["count"]) < 10:
        print("note: fewer than 10 frames of a label: the AUROC is a rough estimate; add scenarios or --speeds")
    print(f"suggested CLG window: {result['suggested_window']} (VLM-RL: [0.0, 0.03]); report in {out}")
    if "note" in result:
        print(f"note: {result['note']}")
    if args.pretrained is None:
        print("note: random weights (no --pretrained): no signal is expected")
    return result


if __name__ == "__main__":
    main()
