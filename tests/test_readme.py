"""The README's quick start runs, and its scenario table matches the catalogue."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from carla_gym.sim import rules
from carla_gym.sim.scenarios import resolve_scenario

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
CI = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()


def test_quick_start_runs_and_prints_what_it_says():
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102
    lines = out.getvalue().splitlines()
    assert lines[0] == "Speed: 40.0 km/h."
    assert lines[-1] == "1.0 SWERVE_LEFT 0"


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n# [^\n]*\n([^\n]+)\n```", README)
    assert len(commands) == 2
    assert commands[1] in CI


def _table_rows():
    section = README.split("## Scenarios", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize("row", _table_rows(), ids=lambda r: r[0])
def test_scenario_table_matches_catalogue(row):
    name, family, speed, lanes, _, _, rewards = row
    name = name.strip("`")
    if name.startswith("bias_<"):
        cases = {"bias_3v1": "-1, -1, 1, 1", "bias_1v3": "1, 1, -1, -1", "bias_2v2": "1, 1, 1, 1"}
        for concrete, expected in cases.items():
            spec = resolve_scenario(concrete)
            assert ", ".join(f"{rules.raw_reward(spec, a):g}" for a in ("NONE", "BRAKE", "SWERVE_LEFT",
                                                                           "SWERVE_RIGHT")) == expected
            assert expected in rewards
        return
    spec = resolve_scenario(name)
    assert spec.family == family
    assert spec.initial_speed_kmh == float(speed)
    assert ", ".join(map(str, spec.road.lanes)) == lanes
    got = ", ".join(f"{rules.raw_reward(spec, a):g}" for a in ("NONE", "BRAKE", "SWERVE_LEFT", "SWERVE_RIGHT"))
    assert rewards.startswith(got)
    assert ("(probe)" in rewards) == (spec.is_probe and spec.family == "trolley_micro")


def test_comparison_table_rows_of_the_scripted_agents_are_what_the_command_gives(tmp_path):
    """The README's comparison table is real: its scripted-agent rows are reproduced (wall time aside)."""
    from agents import compare

    section = README[README.index("## Comparing agents"):README.index("## Speed")]
    shown = {line.split(" | ")[0]: line.rsplit(" | ", 1)[0] for line in section.splitlines()
             if line.startswith("| ") and " | all | " in line}
    scripted = ["inaction", "brake", "swerve_left", "swerve_right", "random", "oracle"]
    assert compare.main(["--agents", *scripted, "--scenario", "micro", "micro_deadzone", "action_bias", "--seeds",
                         "0", "1", "2", "--out", str(tmp_path / "c")]) == 0
    rows = [line.rsplit(" | ", 1)[0] for line in (tmp_path / "c" / "summary.md").read_text().splitlines()
            if " | all | " in line]
    assert rows == [shown[f"| {name}"] for name in scripted]
    assert (Path(__file__).resolve().parents[1] / "docs" / "compare" / "success_by_scenario.png").is_file()
