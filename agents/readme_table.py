"""Regenerate the documentation's comparison tables and figures: ``python -m agents.readme_table``.

The section "Upstream's fixed scenarios" of `PAGE` (docs/comparing.md; with ``--navigation``, its section
"Navigation", `NAV_SECTION`, whose table is every row of its run's summary.md) holds one ``bash`` block
(the commands behind its table), the table of every agent's ``all`` row and links to figures under
``docs/compare/``. This module is the only reader of that section: `commands` and `compare_args`
give the commands as the README states them (the test of the table re-runs its scripted part from
them), `table_rows` the rows it shows, and `replace_table` swaps in the rows of a new ``summary.md``.

``python -m agents.readme_table`` runs the block's commands in the repository root (each with
``--overwrite`` when asked, so earlier ``runs/`` and ``results/`` are replaced), then writes the
new ``all`` rows into the page and copies the linked figures from the comparison's ``--out``
into ``docs/compare/``. ``--rows-only`` skips the commands and only rewrites from an existing
comparison output. The prose around the table (timings, the reading of the results) is not
rewritten: re-read it after regenerating.

Which rows are reproducible: scripted agents and ``random`` (seeded per episode) give the same
records on every machine, so their rows are checked exactly. Rows of trained agents (``sb3:``,
``llm:``, ``vlm:``, ``openai:``) depend on the floating-point arithmetic of the machine that trained
or serves them (`HARDWARE_DEPENDENT_KINDS`) and are only checked for what does not depend on it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from agents.specs import parse_spec
from carla_gym.cli_args import HelpFormatter
from carla_gym.io import write_text_atomic

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "comparing.md"
"""The documentation page with the comparison tables (the module's "README": every function takes its text)."""
SECTION = "## Upstream's fixed scenarios"
TABLE_INTRO = "The `all` rows of that run"
HARDWARE_DEPENDENT_KINDS = ("sb3", "llm", "vlm", "openai")
"""Agent kinds whose results depend on the machine (trained weights, remote models): not reproduced exactly."""
NAV_SECTION = "## Navigation"
"""The page's section with the navigation comparison (`agents.nav`)."""
NAV_TABLE_INTRO = "The rows of that run"
"""Start of the line above the navigation table (every row of its summary.md; all of them are reproducible)."""
HARDWARE_NOTE = "Rows that depend on the machine:"
"""Start of the README paragraph that names the machine-dependent rows and says by how much they vary."""


def section(readme: str, heading: str = SECTION) -> str:
    r"""The text of the README's section ``heading`` (up to the next ``##`` heading of its level or a higher one).

    >>> section("## A\n### B\nb\n#### c\n### D\n", "### B")
    '### B\nb\n#### c'

    Raises:
        ValueError: The README has no such section.
    """
    text = "\n" + readme
    start = text.find("\n" + heading + "\n")
    if start < 0:
        raise ValueError(f"the page has no {heading!r} section")
    level = len(heading) - len(heading.lstrip("#"))
    after = re.search(rf"\n#{{2,{level}}} ", text[start + 1:])  # "# " is a bash comment
    return text[start + 1:start + 1 + after.start() if after else len(text)]


def commands(readme: str, heading: str = SECTION) -> list[str]:
    r"""The commands of the section's first ``bash`` block, continuation lines joined, comments dropped.

    >>> commands("## Upstream's fixed scenarios\n\n```bash\npython a.py \\\n    --x 1\n# note\npython b.py\n```\n")
    ['python a.py --x 1', 'python b.py']
    """
    block = re.search(r"```bash\n(.*?)```", section(readme, heading), re.S)
    if block is None:
        raise ValueError(f"the page section {heading!r} has no bash block")
    joined = re.sub(r"\\\n\s*", "", block.group(1))
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def compare_args(readme: str, heading: str = SECTION) -> list[str]:
    """The arguments of the block's ``python -m agents.compare`` command.

    Raises:
        ValueError: The block has no such command.
    """
    for command in commands(readme, heading):
        words = shlex.split(command)
        if words[:3] == ["python", "-m", "agents.compare"]:
            return words[3:]
    raise ValueError(f"the page section {heading!r} runs no 'python -m agents.compare'")


def agent_kinds(compare_argv: list[str]) -> dict[str, str]:
    """``{label: kind}`` of the agents of an ``agents.compare`` command line, in order."""
    from agents.compare import parse_args

    return {spec.label: spec.kind for spec in map(parse_spec, parse_args(compare_argv).agents)}


def table_rows(readme: str) -> dict[str, str]:
    """``{agent: row}`` of the table after the line starting with `TABLE_INTRO` (rows as Markdown lines)."""
    text = section(readme)
    start = text.find(TABLE_INTRO)
    if start < 0:
        raise ValueError(f"the page section {SECTION!r} has no line starting with {TABLE_INTRO!r}")
    rows = {}
    for line in _table(text[start:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 1 and cells[1] == "all":
            rows[cells[0]] = line
    return rows


def hardware_note(readme: str) -> str:
    """The section's paragraph starting with `HARDWARE_NOTE` (up to the next blank line).

    Raises:
        ValueError: The section has no such paragraph.
    """
    text = section(readme)
    start = text.find(HARDWARE_NOTE)
    if start < 0:
        raise ValueError(f"the page section {SECTION!r} has no paragraph starting with {HARDWARE_NOTE!r}")
    end = text.find("\n\n", start)
    return text[start:end if end > 0 else len(text)]


def _table(text: str) -> list[str]:
    """The first run of consecutive ``|`` lines in ``text``."""
    lines, started = [], False
    for line in text.splitlines():
        if line.startswith("|"):
            lines.append(line)
            started = True
        elif started:
            break
    return lines


def replace_table(readme: str, summary_md: str) -> str:
    """``readme`` with the table after `TABLE_INTRO` replaced by the header and ``all`` rows of ``summary_md``.

    Args:
        readme: README text.
        summary_md: An ``agents.compare`` ``summary.md``.

    Raises:
        ValueError: No table in the README section, or no ``all`` row in ``summary_md``.
    """
    old_section = section(readme)
    start = old_section.find(TABLE_INTRO)
    old = _table(old_section[start:]) if start >= 0 else []
    if not old:
        raise ValueError(f"no table after {TABLE_INTRO!r} in the page section {SECTION!r}")
    new = _table(summary_md)
    rows = [line for line in new[2:] if line.split(" | ")[1:2] == ["all"]]
    if not rows:
        raise ValueError("summary.md has no 'all' row")
    block = "\n".join(old)
    head = old_section[:start] + old_section[start:].replace(block, "\n".join([*new[:2], *rows]), 1)
    return readme.replace(old_section, head, 1)


def nav_table_rows(readme: str) -> dict[tuple[str, str], str]:
    """``{(agent, case group): row}`` of the navigation subsection's table after `NAV_TABLE_INTRO` (Markdown lines).

    Raises:
        ValueError: The subsection or the line is missing.
    """
    text = section(readme, NAV_SECTION)
    start = text.find(NAV_TABLE_INTRO)
    if start < 0:
        raise ValueError(f"the page section {NAV_SECTION!r} has no line starting with {NAV_TABLE_INTRO!r}")
    rows = {}
    for line in _table(text[start:])[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(cells[0], cells[1])] = line
    return rows


def replace_nav_table(readme: str, summary_md: str) -> str:
    """``readme`` with the navigation table after `NAV_TABLE_INTRO` replaced by the table of ``summary_md``.

    Raises:
        ValueError: No table in the subsection, or none in ``summary_md``.
    """
    old_section = section(readme, NAV_SECTION)
    start = old_section.find(NAV_TABLE_INTRO)
    old = _table(old_section[start:]) if start >= 0 else []
    new = _table(summary_md)
    if not old or len(new) < 3:
        raise ValueError(f"no table after {NAV_TABLE_INTRO!r} in the page section {NAV_SECTION!r}, or no rows "
                         "in summary.md")
    head = old_section[:start] + old_section[start:].replace("\n".join(old), "\n".join(new), 1)
    return readme.replace(old_section, head, 1)


def figures(readme: str, heading: str = SECTION) -> list[str]:
    r"""File names of the figures the section links under ``docs/compare/``.

    >>> figures("## Upstream's fixed scenarios\n\n![a](compare/success_by_scenario.png)\n")
    ['success_by_scenario.png']
    """
    return re.findall(r"\]\(compare/([^)/]+)\)", section(readme, heading))


def main(argv: list[str] | None = None) -> int:
    """Run the README's comparison commands, then rewrite its table and copy its figures; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m agents.readme_table", description=__doc__.splitlines()[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--overwrite", action="store_true", help="pass --overwrite to every command (replaces "
                        "the runs/ and results/ directories an earlier regeneration wrote)")
    parser.add_argument("--rows-only", action="store_true", help="do not run the commands; rewrite the table "
                        "and figures from the comparison output that exists")
    parser.add_argument("--readme", default=str(PAGE), help="the documentation page to update")
    parser.add_argument("--navigation", action="store_true", help=f"regenerate the navigation table ({NAV_SECTION!r}) "
                        "instead of the trolley one")
    args = parser.parse_args(argv)
    readme_path = Path(args.readme)
    readme = readme_path.read_text()
    from agents.compare import parse_args

    heading = NAV_SECTION if args.navigation else SECTION
    out = REPO / parse_args(compare_args(readme, heading)).out
    if not args.rows_only:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        for command in commands(readme, heading):
            command += " --overwrite" if args.overwrite else ""
            print(f"$ {command}", flush=True)
            result = subprocess.run(["bash", "-c", command], cwd=REPO, env=env)
            if result.returncode:
                print(f"failed with status {result.returncode}: {command}", file=sys.stderr)
                return result.returncode
    summary = out / "summary.md"
    if not summary.is_file():
        sys.exit(f"{summary} does not exist: run without --rows-only first")
    # re-read: the commands take minutes, and the README may have been edited meanwhile
    replace = replace_nav_table if args.navigation else replace_table
    write_text_atomic(readme_path, replace(readme_path.read_text(), summary.read_text()))
    for name in figures(readme, heading):
        shutil.copyfile(out / name, REPO / "docs" / "compare" / name)
    print(f"rewrote the table in {readme_path} from {summary} and copied {', '.join(figures(readme, heading))} to "
          f"docs/compare/; re-read the prose around the table (timings, what it shows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
