"""stable-baselines3 training support for ``train_sb3.py``: presets, checkpoints, logging, curves.

Needs the ``sb3`` extra.
"""
