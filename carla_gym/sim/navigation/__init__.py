"""Navigation scenarios (maze_navigation, free_roam): names, goals, observation fields, rewards (issue 14).

Foundation only, not yet used by the env, the server or the scenario catalogue.
"""
