"""Navigation episodes in a town with traffic: upstream's maze and free roam, and VLM-RL's routes.

`CarlaNavigation-v0` (`carla_gym.envs.navigation`), the server's navigation sessions
(`carla_gym.server.navigation`) and the TRL adapter (`carla_gym.llm.nav_tools`) all run
`episode.NavEpisode`.

* `scenarios` -- scenario names and configs (``maze_navigation``, ``free_roam[_<Map>[_v<N>][_p<M>]]``).
* `world` -- a town with NPC traffic, traffic lights, walkers and the ego, ticked as arrays.
* `adapters` -- from a built town to the traffic arrays of `carla_gym.sim.traffic`.
* `junctions` -- junction negotiation: conflicting connector lanes, first-come-first-served reservations.
* `episode` -- one episode: reset, the 10 upstream actions, observation, rewards.
* `rules` -- episode end, raw reward, rubric reward and outcome of maze and free roam.
* `route_task` -- VLM-RL's route-following task: reward factors, terminations, route bookkeeping.
* `describe` -- observation fields and text: goal distance and direction, lane name, nearby actors, prompt.
"""
