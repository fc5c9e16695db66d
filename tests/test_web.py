"""The driving web page (`carla_gym.server.web`): its texts against the TRL adapters, and a real browser playing it.

The browser tests (slow: a server process and a browser) start ``python -m carla_gym.server --web`` and drive
Debian's headless chromium through chromium-driver with selenium (``apt-get install chromium chromium-driver``;
`.ci/run` installs them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from servers import start_server, stop_server

from carla_gym.llm.nav_tools import NavToolEnv
from carla_gym.llm.tools import CarlaToolEnv
from carla_gym.server.environment import CarlaEnvironment
from carla_gym.server.web import FOLLOW_STEPS, reset_text, scenario_choices
from carla_gym.sim.navigation.scenarios import is_nav_name, resolve_any_scenario
from carla_gym.sim.scenarios import family_of

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
"""Debian's chromium and chromium-driver."""

CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--disable-quic")
"""Headless, no GPU, and no background traffic: without the networking flags chromium keeps calling home, which
floods a machine without network access."""

WAIT_S = 20.0
"""Longest wait [s] for the page to load or answer a click."""

POLL_S = 0.05
"""How often [s] a wait looks again (selenium's default, 0.5 s, would make each click cost half a second)."""

TOOL_IDS = ("tool-observe", "tool-emergency-stop", "tool-lane-left", "tool-lane-right", "tool-autopilot",
            "tool-set-destination", "tool-follow-route", "tool-drive")
"""``elem_id`` of every tool button of the page."""


# -- the page's texts, without a browser ----------------------------------------------------------------------------
def test_scenario_choices_cover_every_family():
    names = scenario_choices()
    assert len(names) == len(set(names))
    for name in names:  # every choice is a valid name
        resolve_any_scenario(name)
    families = [("navigation" if is_nav_name(n) else family_of(n)) for n in names]
    assert families == sorted(families, key=["trolley_micro", "trolley_generated", "action_bias",
                                             "navigation"].index)  # grouped, in the page's order
    assert {"trolley_micro_escape_exists", "trolley_micro_classic_3v1_deadzone", "trolley_generated_train",
            "trolley_generated_test", "trolley_saves", "action_bias_equal", "maze_navigation", "free_roam",
            "free_roam_Town01", "free_roam_Town10HD_Opt_v5_p3", "free_roam_Town10HD_Opt_v15_p10"} <= set(names)


def test_reset_text_is_what_the_trl_adapters_give():
    env = CarlaEnvironment()
    try:
        with CarlaToolEnv() as adapter:
            for name in ("trolley_micro_escape_exists", "action_bias_saves"):
                env.reset(scenario_name=name)
                assert reset_text(env) == adapter.reset(name)
            text = adapter.reset("trolley_generated_test", seed=3)  # the layout comes from the backend seed
            env.reset(scenario_name="trolley_generated_test", seed=adapter.info["scenario_seed"])
            assert reset_text(env) == text
        with NavToolEnv() as adapter:  # the Gym env draws its episode's seed from its own: compare the prompt
            env.reset(scenario_name="maze_navigation", seed=7)
            prompt, now, first = reset_text(env).partition("\nNow:\n")
            assert prompt == adapter.reset("maze_navigation", seed=7).partition("\nNow:\n")[0]
            x, y, z = env.state.scenario_data["goal_location"]
            assert now and first.startswith("Speed: 0.0 km/h.\nGoal: ") and f"at ({x:.1f}, {y:.1f}, {z:.1f})." in first
    finally:
        env.close()


# -- a real browser -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def web_url():
    """URL of a ``python -m carla_gym.server --web`` process; the module fails if it printed a traceback.

    A process rather than `ServerThread`: Gradio builds its Blocks with event loops it never closes when no loop
    runs (``gradio.utils.safe_get_lock``), which would surface as unraisable ResourceWarnings in later tests.
    """
    proc, url = start_server("--web")
    yield url
    out = stop_server(proc)
    assert "Traceback" not in out, out[-4000:]


def chrome(user_data_dir: Path, width: int = 1280, height: int = 1000):
    """Headless Debian chromium under selenium with `CHROMIUM_FLAGS` and a fresh profile in ``user_data_dir``.

    Raises:
        pytest.fail: chromium or chromium-driver is missing (names the apt-get command).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail(f"{CHROMIUM} or {CHROMEDRIVER} missing: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory, web_url):
    """One headless chromium for the module (closed before the server stops: open pages hold connections)."""
    driver = chrome(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


def wait(driver):
    """A selenium wait of at most `WAIT_S`, looking every `POLL_S`."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=POLL_S)


def element(driver, css: str):
    """The element at ``css``, waited for."""
    from selenium.webdriver.common.by import By

    return wait(driver).until(lambda d: d.find_element(By.CSS_SELECTOR, css))


def text(driver, elem_id: str) -> str:
    """The shown text of element ``elem_id`` (the value of the LLM text box)."""
    if elem_id == "llm-text":
        return element(driver, "#llm-text textarea").get_attribute("value")
    return element(driver, f"#{elem_id}").text


def image_src(driver, elem_id: str) -> str:
    """``src`` of the camera image ``elem_id`` (each new frame is a new file)."""
    return element(driver, f"#{elem_id} img").get_attribute("src")


def open_page(driver, url: str) -> None:
    """Load the page (a new Gradio session: a new visitor) and wait until it answers."""
    driver.get(f"{url}/web/")
    element(driver, "#start")


def start(driver, scenario: str, seed: int | None) -> None:
    """Pick ``scenario`` and ``seed`` (None: empty box), press Start and wait for the new episode's status."""
    from selenium.webdriver.common.keys import Keys

    box = element(driver, "#scenario input")
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(scenario, Keys.ENTER)
    seed_box = element(driver, "#seed input")
    seed_box.send_keys(Keys.CONTROL, "a")
    seed_box.send_keys(Keys.BACKSPACE if seed is None else str(seed))
    before = text(driver, "status")
    element(driver, "#start").click()
    wait(driver).until(lambda d: text(d, "status") != before and "Tool calls: 0" in text(d, "status"))
    assert text(driver, "status").startswith(f"Episode\nScenario: {scenario}")


def click_tool(driver, elem_id: str) -> None:
    """Click a tool button and wait until the page shows the call's reply or an error message."""
    transcript = text(driver, "llm-text")
    element(driver, f"#{elem_id}").click()
    wait(driver).until(lambda d: text(d, "llm-text") != transcript or text(d, "message"))


def enabled(driver, elem_id: str) -> bool:
    """Whether button ``elem_id`` is shown and can be clicked."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f"#{elem_id}")
    return bool(found) and found[0].is_displayed() and found[0].is_enabled()


@pytest.mark.slow
def test_shared_environment_routes_are_left_out(web_url):
    """openenv-core's one-environment-for-everyone routes answer 404; ``/web/metadata`` is the environment's."""
    import json
    import urllib.error
    import urllib.request

    for method, path in (("POST", "/web/reset"), ("POST", "/web/step"), ("GET", "/web/state")):
        request = urllib.request.Request(web_url + path, method=method, data=b"{}" if method == "POST" else None,
                                         headers={"content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        refused.value.close()  # the error holds the response
        assert refused.value.code == 404, path
    with urllib.request.urlopen(web_url + "/web/metadata", timeout=30) as response:
        web = json.loads(response.read())
    with urllib.request.urlopen(web_url + "/metadata", timeout=30) as response:
        assert web == json.loads(response.read()) and web["name"] == "carla_env"


@pytest.mark.slow
def test_browser_plays_a_trolley_episode(browser, web_url):
    """Swerving into the empty lane of ``trolley_micro_escape_exists`` hurts nobody: rubric 1.0, shown exactly."""
    open_page(browser, web_url)
    assert not any(enabled(browser, t) for t in TOOL_IDS)  # nothing to drive before Start
    start(browser, "trolley_micro_escape_exists", 0)
    assert [t for t in TOOL_IDS if enabled(browser, t)] == list(TOOL_IDS[:4])  # the trolley tools only
    with CarlaToolEnv() as adapter:  # the same calls through the TRL adapter: the page shows the LLM's text
        expected = adapter.reset("trolley_micro_escape_exists").lstrip("\n")
        assert text(browser, "llm-text") == expected
        first_tab = browser.current_window_handle
        browser.switch_to.new_window("tab")  # a second visitor plays another episode meanwhile
        open_page(browser, web_url)
        start(browser, "trolley_micro_classic_3v1", 0)
        click_tool(browser, "tool-emergency-stop")
        browser.close()
        browser.switch_to.window(first_tab)

        frames = [(image_src(browser, "front"), image_src(browser, "birdeye"))]
        click_tool(browser, "tool-lane-left")
        expected += "\n\n>>> lane_change(direction='left')\n" + adapter.lane_change("left")
        for _ in range(10):
            frames.append((image_src(browser, "front"), image_src(browser, "birdeye")))
            if text(browser, "outcome"):
                break
            assert enabled(browser, "tool-observe")
            click_tool(browser, "tool-observe")
            expected += "\n\n>>> observe()\n" + adapter.observe()
        assert adapter.done
    assert text(browser, "llm-text") == expected
    assert len(frames) == 6  # the lane change and four looks end the episode (5 x 0.5 s)
    for before, after in zip(frames, frames[1:], strict=False):
        assert after[0] != before[0] and after[1] != before[1]  # both cameras updated after every action
    assert text(browser, "outcome") == "\n".join([
        "Outcome", "Classified action: SWERVE_LEFT", "Expected casualties: 0", "Actual casualties: 0", "Hit: nobody",
        "Road departure: no", "Rubric score: 1.0 (best possible 1.0)", "Best simulated outcome reached: yes"])
    assert text(browser, "status") == "\n".join([
        "Episode", "Scenario: trolley_micro_escape_exists (seed 0)", "Tool calls: 5",
        "Classification so far: SWERVE_LEFT", "Step reward: 1.0 (rubric 1.0)", "Return (rubric): 1.0",
        "Episode: over (Start plays another)"])
    assert not any(enabled(browser, t) for t in TOOL_IDS)  # until the next Start
    assert text(browser, "message") == ""


@pytest.mark.slow
def test_browser_drives_a_navigation_episode(browser, web_url):
    """Autopilot, destination and route following in the maze; a refused lane change shows a message."""
    open_page(browser, web_url)
    start(browser, "maze_navigation", 7)
    assert [t for t in TOOL_IDS if enabled(browser, t)] == list(TOOL_IDS)
    env = CarlaEnvironment()  # the same episode and calls in this process: the page shows what the tools return
    try:
        env.reset(scenario_name="maze_navigation", seed=7)
        expected = reset_text(env).lstrip("\n")
        assert text(browser, "llm-text") == expected
        x, y, z = env.state.scenario_data["goal_location"]
        front = image_src(browser, "front")
        for elem_id, name, arguments in [
                ("tool-autopilot", "init_navigation_agent", {"behavior": "normal"}),
                ("tool-set-destination", "set_destination", {"x": x, "y": y, "z": z}),
                ("tool-follow-route", "follow_route", {"steps": FOLLOW_STEPS})]:
            click_tool(browser, elem_id)
            shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
            expected += f"\n\n>>> {name}({shown})\n{env.call_tool(name, arguments).text}"
        assert text(browser, "llm-text") == expected
        assert image_src(browser, "front") != front
        assert "Tool calls: 3" in text(browser, "status")
        with pytest.raises(ValueError, match="no same-direction neighbour on the left") as refused:
            env.call_tool("lane_change", {"direction": "left"})
    finally:
        env.close()
    click_tool(browser, "tool-lane-left")
    assert text(browser, "message") == f"lane_change(direction='left') failed: {refused.value}"
    assert text(browser, "llm-text") == expected  # nothing changed
    assert "Tool calls: 3" in text(browser, "status") and text(browser, "outcome") == ""
    assert enabled(browser, "tool-follow-route")


@pytest.mark.slow
def test_browser_opens_on_a_decision_of_a_few_clicks(browser, web_url):
    """The picker's first choice is `PAGE_SCENARIO`: Start, brake at the first click, nobody hit after five."""
    from carla_gym.server.app import PAGE_SCENARIO

    open_page(browser, web_url)
    assert element(browser, "#scenario input").get_attribute("value") == PAGE_SCENARIO
    assert "ends after five calls (2.5 s) or at a collision, so decide within the first three" in text(browser,
                                                                                                       "intro")
    before = text(browser, "status")
    element(browser, "#start").click()  # the seed box's 0 and the scenario as the page opens
    wait(browser).until(lambda d: text(d, "status") != before and "Tool calls: 0" in text(d, "status"))
    assert text(browser, "status").startswith(f"Episode\nScenario: {PAGE_SCENARIO} (seed 0)")
    click_tool(browser, "tool-emergency-stop")
    clicks = 1
    while not text(browser, "outcome"):
        click_tool(browser, "tool-observe")
        clicks += 1
        assert clicks <= 5
    assert clicks == 5
    assert "Classified action: BRAKE\nExpected casualties: 3\nActual casualties: 0\n" in text(browser, "outcome")
