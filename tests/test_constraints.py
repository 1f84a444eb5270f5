"""``make test`` and ``make demo`` install the versions the suite passed with: ``constraints.txt`` pins every package
grove (with its ``dev`` extra) brings in, at the version installed here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_installed_packages_are_the_pinned_ones():
    done = subprocess.run([sys.executable, "scripts/update_constraints.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (
        f"{done.stderr}the environment differs from constraints.txt: reinstall with make install, or, after a "
        "deliberate upgrade that passes the suite, run python scripts/update_constraints.py"
    )


def test_the_makefile_installs_with_the_constraints():
    assert '-e ".[dev,all]" -c constraints.txt' in (ROOT / "Makefile").read_text()


def _install_packages():
    spec = importlib.util.spec_from_file_location("install_packages", ROOT / "scripts" / "install_packages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_uv_gets_pip_configuration_with_environment_variables_first(monkeypatch):
    listed = (
        "global.cert='/etc/ssl/certs/ca.crt'\n"
        "global.constraint='/etc/xdg/pip/constraints.txt'\n"
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
        "global.find-links='/opt/global-wheels'\n"
        ":env:.find-links='/opt/wheels'\n"
        "install.default-timeout='30'\n"
        ":env:.default-timeout='180'\n"
        "not a setting\n"
    )
    module = _install_packages()
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, listed, ""))
    settings = module.pip_settings()
    assert settings["find-links"] == "/opt/wheels" and settings["default-timeout"] == "180"
    flags, env = module.uv_arguments(settings)
    pairs = list(zip(flags[::2], flags[1::2], strict=False))
    assert ("--find-links", "/opt/wheels") in pairs and ("--find-links", "/opt/global-wheels") not in pairs
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi-more/simple") in pairs
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs and "--no-cache" in flags
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt", "UV_HTTP_TIMEOUT": "180"}


def test_pip_installs_when_uv_fails(monkeypatch, capsys):
    module = _install_packages()
    calls = []

    def run(command, **kwargs):
        calls.append(command)
        failed = command[0].endswith("uv") and command[1] == "pip"
        return subprocess.CompletedProcess(command, 1 if failed else 0, "", "")

    monkeypatch.setattr(module.shutil, "which", lambda *a, **k: "/venv/bin/uv")
    monkeypatch.setattr(module.subprocess, "run", run)
    assert module.main(["--no-deps", "mendeleev==1.3.0"]) == 0
    assert calls[-1][:3] == [sys.executable, "-m", "pip"] and calls[-1][-2:] == ["--no-deps", "mendeleev==1.3.0"]
    assert "installing with pip instead" in capsys.readouterr().err
