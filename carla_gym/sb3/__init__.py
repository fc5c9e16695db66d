"""stable-baselines3 training support for ``train_sb3.py``: presets, run directories, checkpoints, callbacks, curves.

Needs the ``sb3`` extra.
"""
