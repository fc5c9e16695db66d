"""VLM-RL's CLIP scoring heads and hierarchical reward synthesis, as plain numpy formulas.

Every head maps cosine similarities (or unit image embeddings) of a batch of N frames to N
rewards. Constants are VLM-RL's (github zihaosheng/VLM-RL, ``config.py``, ``clip_reward_model.py``
and ``rewards.py``).
"""

from __future__ import annotations

import math

import numpy as np

CLG_LOW = 0.0
"""Lower end of the CLG window on z = sim_neg - sim_pos (VLM-RL config)."""
CLG_HIGH = 0.03
"""Upper end of the CLG window on z = sim_neg - sim_pos (VLM-RL config)."""
VLM_RM_ALPHA = 0.5
"""VLM-RM projection strength alpha (VLM-RL config ``reward_vlm_rm.alpha``)."""
VLM_SR_THRESHOLD = 0.32
"""VLM-SR success threshold on the target similarity (VLM-RL code)."""
TARGET_SPEED_KMH = 25.0
"""Synthesis target speed [km/h] (VLM-RL ``reward_fn_5_default.target_speed``)."""
CENTER_SCALE_M = 3.0
"""Distance from the lane centre [m] at which the centring factor reaches 0 (VLM-RL ``max_distance``)."""
LORD_SPEED_TARGET_KMH = 20.0
"""Speed [km/h] at which LORD-Speed's speed term is 1 (VLM-RL LORD-Speed, its ``min_speed``)."""
ANGLE_SCALE_RAD = math.pi / 2
"""Heading error [rad] at which the angle factor reaches 0 (VLM-RL: 90 deg)."""
STABILITY_SCALE_M = 0.4
"""Standard deviation [m] of recent lane-centre distances at which the stability factor reaches 0 (VLM-RL)."""
STABILITY_WINDOW_S = 2.0
"""Time span [s] of the recent lane-centre distances in the stability factor (VLM-RL: the last 30
steps at 15 Hz)."""

HEADS = ("clg", "lord", "lord_speed", "vlm_rm", "vlm_sr", "roboclip")
"""Scoring heads: VLM-RL's contrasting language goal and the baselines of its paper."""


def clg(sim_pos, sim_neg, low: float = CLG_LOW, high: float = CLG_HIGH) -> np.ndarray:
    """VLM-RL's contrasting-language-goal score in [0, 1].

    z = sim_neg - sim_pos is clipped to [low, high] and mapped linearly to 1 (at low) .. 0 (at
    high). VLM-RL uses low = 0, high = 0.03; `carla_gym.reward.calibrate` suggests a window for
    other renderers and models.

    Args:
        sim_pos: Cosine similarities to the positive goal, shape (N,).
        sim_neg: Cosine similarities to the negative goal, shape (N,).
        low: Lower window end.
        high: Upper window end, > low.

    Returns:
        float64 array of shape (N,).

    Raises:
        ValueError: If ``high <= low``.

    Examples:
        >>> clg([0.180], [0.195]).round(6).tolist()  # z = 0.015: halfway through the window
        [0.5]
    """
    if not high > low:
        raise ValueError(f"CLG window [{low}, {high}]: high must be greater than low")
    z = np.clip(np.asarray(sim_neg, dtype=np.float64) - np.asarray(sim_pos, dtype=np.float64), low, high)
    return 1.0 - (z - low) / (high - low)


def lord(sim_neg) -> np.ndarray:
    """LORD: 1 - similarity to the negative goal, shape (N,)."""
    return 1.0 - np.asarray(sim_neg, dtype=np.float64)


def lord_speed(sim_neg, speed_kmh, target_kmh: float = LORD_SPEED_TARGET_KMH) -> np.ndarray:
    """LORD-Speed: (1 - sim_neg) + (1 - |v - 20| / 20), v in km/h (VLM-RL's LORD-Speed baseline).

    Args:
        sim_neg: Cosine similarities to the negative goal, shape (N,).
        speed_kmh: Ego speeds v [km/h], shape (N,).
        target_kmh: Speed [km/h] of the full speed term, > 0.

    Returns:
        float64 array of shape (N,).

    Examples:
        >>> lord_speed([0.25, 0.25], [20.0, 30.0]).tolist()  # 0.75 + 1 and 0.75 + 0.5
        [1.75, 1.25]
    """
    v = np.asarray(speed_kmh, dtype=np.float64)
    return lord(sim_neg) + (1.0 - np.abs(v - target_kmh) / target_kmh)


def vlm_rm(image_embeddings, target, baseline, alpha: float = VLM_RM_ALPHA) -> np.ndarray:
    """VLM-RM: 1 - ||(x - t) P||^2 / 2 with P = alpha d d^T / ||d||^2 + (1 - alpha) I, d = t - b.

    Args:
        image_embeddings: Unit image embeddings x, shape (N, D).
        target: Unit embedding t of the target prompt, shape (D,).
        baseline: Unit embedding b of the baseline prompt, shape (D,).
        alpha: Projection strength in [0, 1].

    Returns:
        float64 array of shape (N,).
    """
    x = np.asarray(image_embeddings, dtype=np.float64)
    t, b = np.asarray(target, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    d = t - b
    diff = x - t
    along = (diff @ d)[:, None] * d[None, :] / float(d @ d)  # projection of (x - t) onto d
    projected = alpha * along + (1.0 - alpha) * diff  # (x - t) P; P is symmetric
    return 1.0 - 0.5 * np.sum(projected**2, axis=1)


def vlm_sr(sim_target, threshold: float = VLM_SR_THRESHOLD) -> np.ndarray:
    """VLM-SR: +1 where the target similarity exceeds ``threshold``, else -1, shape (N,)."""
    return np.where(np.asarray(sim_target, dtype=np.float64) > threshold, 1.0, -1.0)


def roboclip(sim_target) -> np.ndarray:
    """RoboCLIP, per frame: the raw target similarity, shape (N,)."""
    return np.asarray(sim_target, dtype=np.float64)


def centering_factor(lane_offset) -> np.ndarray:
    """max(1 - |d| / 3 m, 0) for distances d [m] from the lane centre.

    d is ``info["lane_offset"]``: the distance from the centre of the nearest road lane
    (`carla_gym.sim.road.Road.nearest_lane`), so the factor falls to 0 once the car is 3 m from it,
    e.g. off the road (VLM-RL measures d against the route it should follow).

    Examples:
        >>> centering_factor([0.0, -1.5, -3.475]).tolist()
        [1.0, 0.5, 0.0]
    """
    return np.maximum(1.0 - np.abs(np.asarray(lane_offset, dtype=np.float64)) / CENTER_SCALE_M, 0.0)


def angle_factor(yaw) -> np.ndarray:
    """max(1 - |yaw| / (pi/2), 0) for heading errors [rad] relative to the road.

    The road is straight, so every lane (the route VLM-RL measures against) has the road's heading:
    the factor needs no lane reference and is the same on and off the road.
    """
    return np.maximum(1.0 - np.abs(np.asarray(yaw, dtype=np.float64)) / ANGLE_SCALE_RAD, 0.0)


def stability_factor(recent_distances) -> float:
    """max(1 - std(recent distances from the lane centre) / 0.4 m, 0); 1.0 for an empty history.

    Args:
        recent_distances: Unsigned distances [m] from the lane centre over the last
            `STABILITY_WINDOW_S` seconds (the caller keeps the window).
    """
    recent = np.abs(np.asarray(recent_distances, dtype=np.float64))
    return float(max(1.0 - recent.std() / STABILITY_SCALE_M, 0.0)) if recent.size else 1.0


def synthesis(score, speed_kmh, centering=1.0, angle=1.0, stability=1.0, env_reward=0.0,
              target_speed_kmh: float = TARGET_SPEED_KMH) -> np.ndarray:
    """VLM-RL's hierarchical reward: the CLG score sets the desired speed.

    desired = clip(score, 0, 1) * target_speed; r = (1 - |v - desired| / target_speed) *
    centering * angle * stability; where the env reward is negative (VLM-RL's terminal
    penalty) it is kept instead.

    Args:
        score: CLG scores in [0, 1], shape (N,).
        speed_kmh: Ego speeds v [km/h], shape (N,).
        centering: Centring factors, shape (N,) or scalar.
        angle: Angle factors, shape (N,) or scalar.
        stability: Stability factors, shape (N,) or scalar.
        env_reward: The env's rewards, shape (N,) or scalar.
        target_speed_kmh: Target speed [km/h], > 0.

    Returns:
        float64 array of shape (N,).

    Examples:
        >>> synthesis([1.0, 0.5, 0.0], [20.0, 20.0, 20.0]).round(6).tolist()  # VLM-RL's worked example
        [0.8, 0.7, 0.2]
    """
    score = np.clip(np.asarray(score, dtype=np.float64), 0.0, 1.0)
    desired = score * target_speed_kmh
    r_speed = 1.0 - np.abs(np.asarray(speed_kmh, dtype=np.float64) - desired) / target_speed_kmh
    r = r_speed * centering * angle * stability
    env_reward = np.broadcast_to(np.asarray(env_reward, dtype=np.float64), r.shape)
    return np.where(env_reward < 0.0, env_reward, r)
