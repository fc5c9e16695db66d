"""stable-baselines3 training support for ``train_sb3.py``: presets, run directories, checkpoints, callbacks, curves.

Needs the ``sb3`` extra.

* `presets` -- hyperparameter presets, with stable-baselines3's keyword names.
* `envs` -- the vectorised envs of a run: `CarlaTrolley-v0` (embedded or OpenEnv) or `CarlaNavigation-v0`.
* `vec_env` -- `CarlaTrolleyVecEnv`: an SB3 ``VecEnv`` over the array core's vector env.
* `extractor` -- VLM-RL's feature extractor for Dict observations.
* `runs` -- a run directory: its environment, its config.json, and whether and where it resumes.
* `checkpoint` -- checkpoints that resume exactly.
* `replay` -- SAC's replay buffer on disk.
* `callbacks` -- the other callbacks of ``train_sb3.py``.
* `evaluations` -- ``evaluations.csv``: the periodic evaluations.
* `nav_eval` -- evaluation on VLM-RL's evaluation routes of `CarlaNavigation-v0`.
* `plots` -- the learning curve of a run.
"""
