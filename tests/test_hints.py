"""Every hint a script prints works when followed: install commands, --resume and --overwrite commands."""

import json
import re
import shlex
import shutil
import sys
import tomllib
from pathlib import Path

import gymnasium as gym
import pytest
from servers import free_port

import train_grpo
from agents import compare
from carla_gym import cli, hints
from carla_gym.hints import EXTRA_MODULES, MissingExtraError, install_command, needs_extra, require_extra

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
TINY = ["--agents", "oracle", "brake", "--scenario", "trolley_generated_test"]  # a new layout every episode


def requirement_names(extra: str) -> set[str]:
    """Normalized distribution names an extra of pyproject.toml requires (nested extras expanded)."""
    names = set()
    for req in PYPROJECT["project"]["optional-dependencies"][extra]:
        name = re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower().replace("_", "-")
        if name == PYPROJECT["project"]["name"]:
            for inner in re.search(r"\[(.+)\]", req).group(1).split(","):
                names |= requirement_names(inner)
        else:
            names.add(name)
    return names


def check_install_command(text: str, extra: str, cwd: Path) -> None:
    """``text`` ends with a pip command that installs ``extra`` of this checkout, run from ``cwd``."""
    command = shlex.split(text.split(f"Install the {extra} extra: ")[-1].strip())
    python = shutil.which("python") if command[0] == "python" else command[0]
    assert Path(python).absolute() == Path(sys.executable).absolute(), command
    assert command[1:5] == ["-m", "pip", "install", "-e"], command
    path, _, rest = command[5].partition("[")
    assert path.startswith((".", "/")), path  # a path, never a package name of the index
    assert ((cwd / path) / "pyproject.toml").resolve() == REPO / "pyproject.toml" and rest == f"{extra}]"
    assert extra in PYPROJECT["project"]["optional-dependencies"]


def test_extra_modules_come_from_their_extras():
    from importlib.metadata import packages_distributions

    distributions = packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        for module in modules:
            if module in distributions:  # installed: the distribution that provides it is a requirement of the extra
                names = {d.lower().replace("_", "-") for d in distributions[module]}
            else:  # not installed by the [test] extra (bench's highway_env): its name is the distribution's
                names = {module.replace("_", "-")}
            assert names & requirement_names(extra), (extra, module, names)


@pytest.mark.parametrize("where", ["root", "elsewhere", "inside"])
def test_install_command_installs_this_checkout_from_any_directory(tmp_path, monkeypatch, where):
    cwd = {"root": REPO, "elsewhere": tmp_path, "inside": REPO / "tests"}[where]
    monkeypatch.chdir(cwd)
    for extra in EXTRA_MODULES:
        check_install_command(f"Install the {extra} extra: {install_command(extra)}", extra, cwd)
    with pytest.raises(ValueError, match=r"extra 'sb4': not an extra of openenv-carla-gym; valid: \['bench'"):
        install_command("sb4")


def test_install_command_outside_a_checkout_names_the_extra_and_the_clone(monkeypatch):
    monkeypatch.setattr(hints, "checkout", lambda: None)
    text = install_command("server")
    assert text.startswith("install the extra server of openenv-carla-gym from your clone of it: ")
    assert shlex.split(text.split(": ", 1)[1])[1:] == ["-m", "pip", "install", "<clone>[server]"]


def test_a_missing_extra_is_a_gymnasium_dependency_error_naming_the_install_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # what a missing package looks like to find_spec / import
    with pytest.raises(MissingExtraError) as info:
        require_extra("server")
    assert isinstance(info.value, gym.error.DependencyNotInstalled) and isinstance(info.value, ImportError)
    assert str(info.value).startswith("No module named 'uvicorn'. ") and info.value.name == "uvicorn"
    check_install_command(str(info.value), "server", tmp_path)
    require_extra("server", ("openenv",))  # only the modules asked for
    with pytest.raises(MissingExtraError, match="Install the grpo extra") as info:
        with needs_extra("grpo"):
            import uvicorn  # noqa: F401
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    with pytest.raises(ModuleNotFoundError) as info:  # this package's own module: a bug, not an extra
        with needs_extra("grpo"):
            import carla_gym.no_such_module  # noqa: F401
    assert not isinstance(info.value, MissingExtraError)


def _openenv_backend():
    from carla_gym.backends.openenv import OpenEnvBackend

    OpenEnvBackend("http://127.0.0.1:1")


def _openenv_client():
    from carla_gym.openenv import CarlaEnv  # noqa: F401


def _server_app():
    from carla_gym.server.app import create_server_app

    create_server_app("trolley_saves")


def _clip_encoder():
    from carla_gym.reward.encoder import OpenClipEncoder

    OpenClipEncoder()


def _tiny_model():
    from carla_gym.llm.grpo import load_model

    load_model("tiny-random", vision=False)


def _lora():
    from carla_gym.llm.grpo import lora_config

    lora_config(4, 8, "x")


def _trainer():
    from carla_gym.llm import grpo

    grpo._trainer_class.cache_clear()
    try:
        grpo._trainer_class()
    finally:
        grpo._trainer_class.cache_clear()


def _sb3_policy(tmp_path):
    from agents.sb3 import SB3Policy

    SB3Policy(tmp_path)


def _endpoint():
    from agents.llm import OpenAIChat

    OpenAIChat("m", "http://127.0.0.1:1/v1")


def _gif(tmp_path):
    from agents.video import write_gif

    write_gif({}, tmp_path / "x.gif")


def _compare_plots():
    from agents.plots import _pyplot

    _pyplot()


def _learning_curve(tmp_path):
    from carla_gym.sb3.plots import plot_learning_curve

    plot_learning_curve(tmp_path / "evaluations.csv", tmp_path / "x.png", "x")


@pytest.mark.parametrize(("use", "module", "extra"), [
    (_openenv_backend, "openenv", "server"), (_openenv_client, "openenv", "server"),
    (_server_app, "openenv", "server"), (_clip_encoder, "open_clip", "clip"), (_tiny_model, "transformers", "grpo"),
    (_lora, "peft", "grpo"), (_trainer, "trl", "grpo"), (_sb3_policy, "stable_baselines3", "sb3"),
    (_endpoint, "httpx", "compare"), (_gif, "imageio", "compare"), (_compare_plots, "matplotlib", "compare"),
    (_learning_curve, "matplotlib", "sb3"),
], ids=lambda v: getattr(v, "__name__", v).lstrip("_") if callable(v) else v)
def test_every_lazy_import_of_an_extra_names_its_install_command(tmp_path, monkeypatch, use, module, extra):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)
    for name in [n for n in sys.modules if n.startswith(f"{module}.")]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("carla_gym.openenv.client", "carla_gym.openenv.models", "carla_gym.server.environment"):
        if module == "openenv" and name in sys.modules:  # imported by an earlier test: import them afresh
            monkeypatch.delitem(sys.modules, name)
    with pytest.raises(MissingExtraError) as info:
        use(tmp_path) if "tmp_path" in use.__code__.co_varnames else use()
    assert module in str(info.value)
    check_install_command(str(info.value), extra, tmp_path)


def test_scripts_refuse_a_missing_extra_with_its_install_command_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "--port", "0"])
    check_install_command(str(info.value.code), "server", tmp_path)
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(SystemExit) as info:
        compare.main(["--agents", "gpt=openai:m@http://127.0.0.1:1/v1", "--out", "c"])
    check_install_command(str(info.value.code), "compare", tmp_path)
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(SystemExit) as info:
        train_grpo.main(["--model", "tiny-random", "--output-dir", "g"])
    check_install_command(str(info.value.code), "grpo", tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_trackio_hint_installs_trackio_into_this_interpreter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "trackio", None)
    with pytest.raises(SystemExit) as info:
        train_grpo.main(["--model", "tiny-random", "--report-to", "trackio", "--output-dir", "g"])
    command = shlex.split(str(info.value.code).split("install it with: ")[1])
    python = shutil.which("python") if command[0] == "python" else command[0]
    assert Path(python).absolute() == Path(sys.executable).absolute()
    assert command[1:] == ["-m", "pip", "install", "trackio"]


# -- agents.compare: --resume and --overwrite hints, followed ----------------------------------------

def follow_compare(command: str) -> int:
    """Run a printed agents.compare command line in-process; returns its exit code."""
    tokens = shlex.split(command)
    if tokens[0] == "carla-gym":  # the console script of this environment
        assert Path(shutil.which("carla-gym")).parent == Path(sys.executable).parent
        with pytest.raises(SystemExit) as info:
            cli.main(tokens[1:])
        return info.value.code
    python = shutil.which("python") if tokens[0] == "python" else tokens[0]
    assert Path(python).absolute() == Path(sys.executable).absolute() and tokens[1:3] == ["-m", "agents.compare"]
    return compare.main(tokens[3:])


def refusal(argv: list[str], main=compare.main) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return str(info.value.code)


def interrupt_after(monkeypatch, episodes: int) -> None:
    """Make compare's episode loop see Ctrl-C after ``episodes`` episodes."""
    play, calls = compare._play, [0]

    def interrupted(*args):
        calls[0] += 1
        if calls[0] > episodes:
            raise KeyboardInterrupt
        return play(*args)

    monkeypatch.setattr(compare, "_play", interrupted)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def test_compare_interrupt_prints_the_command_that_finishes_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    interrupt_after(monkeypatch, 1)
    assert compare.main([*TINY, "--seeds", "0", "1", "--out", "c"]) == 130
    hint = re.search(r"continue with: (.+)", capsys.readouterr().err).group(1)
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert follow_compare(hint) == 0
    assert len(records(tmp_path / "c")) == 4 and (tmp_path / "c" / "summary.md").is_file()


def test_compare_unfinished_run_hints_resume_with_its_own_settings_and_overwrite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    interrupt_after(monkeypatch, 1)
    assert compare.main([*TINY, "--out", "c", "--workers", "1"]) == 130
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    # the same command again, and one with other seeds: both hint at continuing the saved run
    for argv in ([*TINY, "--out", "c"], [*TINY, "--seeds", "3", "--out", "c"]):
        text = refusal(argv)
        assert "c is not empty; continue the unfinished run in it with: " in text, text
        resume = text.split("with: ")[1].split("; or replace")[0]
        assert "--resume" in resume and "--seeds" not in resume  # the saved seeds (the default)
    text = refusal([*TINY, "--seeds", "3", "--out", "c", "--resume"])  # resuming with other settings
    assert "differ from the run's config.json" in text
    assert follow_compare(text.split("its own settings: ")[1].split("; or start")[0]) == 0
    assert {(r["agent"], r["seed"]) for r in records(tmp_path / "c")} == {("oracle", 0), ("brake", 0)}
    replace = refusal([*TINY, "--out", "c"]).split("replace it with: ")[1].split("; or choose")[0]
    assert "--resume" not in replace  # finished now: only replacing applies
    assert follow_compare(replace) == 0 and len(records(tmp_path / "c")) == 2


def test_compare_finished_run_hints_only_overwrite_and_a_foreign_folder_neither(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli.main(["compare", *TINY, "--out", "c"])
    assert info.value.code == 0
    text = refusal(["compare", *TINY, "--episodes", "2", "--out", "c"], main=cli.main)
    assert "--resume" not in text and "holds a finished comparison" in text
    assert follow_compare(text.split("replace it with: ")[1].split("; or choose")[0]) == 0
    assert len(records(tmp_path / "c")) == 4  # the replacing run's two episodes per agent
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me")
    (tmp_path / "sb3run").mkdir()  # a train_sb3.py run has a config.json too, but not a comparison's
    (tmp_path / "sb3run" / "config.json").write_text(json.dumps({"format": 2, "args": {}}))
    for out in ("notes", "sb3run"):
        text = refusal([*TINY, "--out", out])
        assert "--resume" not in text and "--overwrite" not in text and "not an agents.compare output" in text
        for flag in ("--resume", "--overwrite"):
            assert "not an agents.compare output" in refusal([*TINY, "--out", out, flag])
    assert (foreign / "todo.txt").read_text() == "keep me" and sorted(p.name for p in foreign.iterdir()) == ["todo.txt"]


def test_carla_gym_usage_hint_works():
    assert "carla-gym compare --help lists every option" in cli.USAGE
    with pytest.raises(SystemExit) as info:
        cli.main(["compare", "--help"])
    assert info.value.code == 0


# -- train_grpo.py -------------------------------------------------------------------------------------

def test_train_grpo_non_empty_output_hints_overwrite_only_for_its_own_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "g"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"script": "train_grpo.py"}))
    argv = ["--model", "tiny-random", "--max-steps", "1", "--lora-exclude=-x", "--output-dir", "g"]
    text = refusal(argv, main=train_grpo.main)
    assert "g is not empty; pass --overwrite to replace the run in it: " in text
    tokens = shlex.split(text.split("replace the run in it: ")[1].split("; or choose")[0])
    python = shutil.which("python") if tokens[0] == "python" else tokens[0]
    assert Path(python).absolute() == Path(sys.executable).absolute()
    assert (tmp_path / tokens[1]).resolve() == REPO / "train_grpo.py"
    args, config = train_grpo.parse_args(tokens[2:])
    args = train_grpo.resolve(args, config, tokens[2:])  # the hinted command passes every check
    assert args.overwrite and config.max_steps == 1 and args.lora_exclude == "-x" and config.output_dir == "g"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    text = refusal(["--model", "tiny-random", "--output-dir", "notes"], main=train_grpo.main)
    assert "--overwrite" not in text and "is not a train_grpo.py run directory" in text


# -- train_sb3.py --------------------------------------------------------------------------------------

def test_train_sb3_non_empty_output_hints_the_full_command_with_overwrite(tmp_path, monkeypatch):
    import train_sb3
    from carla_gym.sb3 import runs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "r").mkdir()
    runs.write_config(tmp_path / "r", {"algo": "ppo", "policy": "MlpPolicy"}, {}, {})  # a run without checkpoints
    argv = ["--total-timesteps", "64", "--n-envs", "2", "--hp", "n_steps=32", "policy_kwargs={'net_arch': [8]}",
            "--output-dir", "r"]
    with pytest.raises(SystemExit) as info:
        train_sb3.main(argv)
    text = str(info.value.code)
    assert text.startswith("r is not empty; replace the run in it with: ") and text.endswith(
        "; or choose another --output-dir") and "--resume" not in text, text
    tokens = shlex.split(text.split("replace the run in it with: ")[1].split("; or choose")[0])
    python = shutil.which("python") if tokens[0] == "python" else tokens[0]
    assert Path(python).absolute() == Path(sys.executable).absolute()
    assert (tmp_path / tokens[1]).resolve() == REPO / "train_sb3.py" and tokens[2:] == [*argv, "--overwrite"]
    args = train_sb3.resolve(train_sb3.parse_args(tokens[2:]))  # the hinted command passes every check
    hyper = {**train_sb3.presets.hyperparameters(args.preset, args.algo),
             **train_sb3.presets.parse_overrides(args.algo, args.hp)}
    train_sb3.check_args(args, hyper, tokens[2:])
    assert args.overwrite and hyper["policy_kwargs"] == {"net_arch": [8]} and args.output_dir == "r"


# -- --env-urls: the server command a refused URL names ---------------------------------------------

def hinted_serve(message: str, port: int) -> list[str]:
    """The serve command a refused-URL message names, as argv (checked).

    ``carla-gym serve --port P`` where that script is this environment's on PATH, else this
    interpreter with ``-m carla_gym.cli serve --port P``.
    """
    tokens = shlex.split(re.search(r"start a server there \(([^)]*)\)", message).group(1))
    script = shutil.which("carla-gym")
    if script and Path(script).absolute().parent == Path(sys.executable).absolute().parent:
        assert tokens == ["carla-gym", "serve", "--port", str(port)]
    else:
        assert tokens[1:] == ["-m", "carla_gym.cli", "serve", "--port", str(port)]
        assert shutil.which(tokens[0]) and Path(shutil.which(tokens[0])).samefile(sys.executable)
    return tokens


def test_a_refused_server_url_names_a_serve_command_that_binds_that_port(monkeypatch):
    """The fast half of the check below: the hinted command, run in-process, would serve on that port."""
    import uvicorn

    from carla_gym.cli_args import check_url

    port = free_port()
    with pytest.raises(SystemExit) as info:
        check_url(f"http://127.0.0.1:{port}")
    tokens = hinted_serve(str(info.value.code), port)
    served = []

    class Recording:  # uvicorn's server, recording where it would listen instead of listening
        def __init__(self, config):
            served.append(config)
            self.started, self.servers = True, []

        async def serve(self):
            pass

    monkeypatch.setattr(uvicorn, "Server", Recording)
    cli.main(tokens[tokens.index("serve"):])
    assert [(config.host, config.port) for config in served] == [("127.0.0.1", port)]


@pytest.mark.slow
def test_a_refused_server_url_names_the_serve_command_that_makes_it_work(tmp_path):
    import socket
    import subprocess
    import time

    from carla_gym.cli_args import check_url

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(SystemExit) as info:
        check_url(url)
    tokens = hinted_serve(str(info.value.code), port)
    server = subprocess.Popen(tokens, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # as printed
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
                time.sleep(0.2)
        check_url(url)  # no SystemExit: the hinted server is what the URL needed
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()


def test_every_missing_extra_is_named_with_one_command_for_all(monkeypatch):
    monkeypatch.setitem(hints.EXTRA_MODULES, "first_missing", ("no_such_module_a",))
    monkeypatch.setitem(hints.EXTRA_MODULES, "second_missing", ("no_such_module_b",))
    with pytest.raises(SystemExit) as info:
        hints.exit_without_extras("sb3", "first_missing", "second_missing", prefix="study: ")
    message = str(info.value.code)
    assert message.startswith("study: missing extras (first_missing: no module named 'no_such_module_a'; "
                              "second_missing: no module named 'no_such_module_b'). Install them: ")
    assert message.endswith(hints.install_command("first_missing,second_missing"))
    assert message.endswith("[first_missing,second_missing]'")  # pip install -e '<clone>[a,b]', quoted for the shell
    with pytest.raises(SystemExit) as info:  # one missing extra: its own message, as before
        hints.exit_without_extras("sb3", "second_missing")
    assert str(info.value.code).startswith("No module named 'no_such_module_b'. Install the second_missing extra: ")
    with pytest.raises(ValueError, match="'nope': not an extra"):
        hints.install_command("sb3,nope")
