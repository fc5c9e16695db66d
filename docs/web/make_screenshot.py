"""Make docs/web/web.png: the driving page at ``/web/`` after a few clicks of a trolley episode.

Run from the repository root (needs Debian's chromium and chromium-driver, as tests/test_web.py)::

    .venv/bin/python docs/web/make_screenshot.py

It starts ``python -m carla_gym.server --web`` on a free port (or uses ``--url`` of a running server), opens the
page in headless chromium at 1280 x 1000, plays ``trolley_micro_classic_3v1`` (three people ahead, one in the
lane to the right): Observe, the decision's button (``--tool``, default Emergency stop), then Observe until the
outcome shows, and saves the window. The browser helpers are the browser test's (tests/test_web.py), so the page
is driven as the test drives it: it needs the ``[test]`` extra (pytest, selenium).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from servers import start_server, stop_server  # noqa: E402
from test_web import chrome, click_tool, open_page, start, text  # noqa: E402

SCENARIO = "trolley_micro_classic_3v1"
"""The episode shown: a dilemma, so the outcome has casualties either way."""


def main(argv: list[str] | None = None) -> None:
    """Command line: serve (or use ``--url``), play, save the screenshot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running carla-gym serve --web (default: start one)")
    parser.add_argument("--out", type=Path, default=HERE / "web.png", help="PNG to write")
    parser.add_argument("--tool", default="tool-emergency-stop", help="elem_id of the decision's button")
    args = parser.parse_args(argv)
    proc, url = (None, args.url.rstrip("/")) if args.url else start_server("--web")
    try:
        with tempfile.TemporaryDirectory() as profile:
            driver = chrome(Path(profile), 1280, 1000)
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",  # the page area itself 1280 x 1000
                                   {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
            try:
                open_page(driver, url)
                start(driver, SCENARIO, 0)
                click_tool(driver, "tool-observe")
                click_tool(driver, args.tool)
                for _ in range(10):
                    if text(driver, "outcome"):
                        break
                    click_tool(driver, "tool-observe")
                driver.save_screenshot(str(args.out))
            finally:
                driver.quit()
    finally:
        if proc is not None:
            stop_server(proc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
