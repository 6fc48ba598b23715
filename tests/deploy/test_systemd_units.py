"""`systemd-analyze verify` on every unit in deploy/systemd, offline: no running systemd is
needed. Each unit is checked inside a throwaway root holding the stock system units, the
example env files installed where the units expect them, and stand-ins for the executables
the units run, so a unit that names a missing program, a file that is not there, an unknown
key or a bad value fails the check (verify's warnings count as failures)."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNIT_DIR = os.path.join(ROOT, "deploy", "systemd")
UNITS = sorted(f for f in os.listdir(UNIT_DIR) if f.endswith(".service"))
ANALYZE = shutil.which("systemd-analyze")
STOCK_UNITS = "/usr/lib/systemd/system"


def directives(text, key):
    return [m.group(1).strip() for m in re.finditer(rf"^{key}=(.*)$", text, re.M)]


def make_root(tmp, units):
    """A root with `units` (name -> text) installed, and everything they refer to."""
    root = tmp / "root"
    shutil.copytree(STOCK_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/peregrine").mkdir(parents=True)
    for env in os.listdir(os.path.join(UNIT_DIR, "env")):
        shutil.copy(os.path.join(UNIT_DIR, "env", env), root / "etc/peregrine" / env)
    for name, text in units.items():
        (root / "etc/systemd/system" / name).write_text(text)
        for key in ("ExecStart", "ExecStartPost", "ExecStop", "ExecReload"):
            for command in directives(text, key):
                program = root / command.split()[0].lstrip("-@:+!").lstrip("/")
                if program.exists():
                    continue
                program.parent.mkdir(parents=True, exist_ok=True)
                # Only programs this repository installs get a stand-in; the others must be
                # real files of the system (copied in, so a misspelt path still fails).
                real = "/" + str(program.relative_to(root))
                if real == "/usr/local/bin/peregrine":
                    program.write_text("#!/bin/sh\n")
                    program.chmod(0o755)
                elif os.path.exists(real):
                    shutil.copy(real, program)
    return root


def verify(root, name):
    unit = root / "etc/systemd/system" / name
    r = subprocess.run([ANALYZE, "verify", f"--root={root}", str(unit)], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


@pytest.fixture(autouse=True)
def need_systemd_analyze():
    if ANALYZE is None:
        pytest.fail("systemd-analyze not found (tools/setup.sh installs the systemd package)")


def read(name):
    with open(os.path.join(UNIT_DIR, name)) as f:
        return f.read()


def test_the_units_are_there():
    assert set(UNITS) >= {"peregrine.service", "peregrine-prefill.service", "peregrine-decode.service",
                          "peregrine-router.service"}


@pytest.mark.parametrize("name", UNITS)
def test_unit_verifies_cleanly(tmp_path, name):
    root = make_root(tmp_path, {n: read(n) for n in UNITS})
    rc, output = verify(root, name)
    assert rc == 0 and output == "", output


@pytest.mark.parametrize("name", UNITS)
def test_unit_has_its_env_file_and_drains_on_sigterm(name):
    text = read(name)
    envs = directives(text, "EnvironmentFile")
    assert envs, "no EnvironmentFile"
    for env in envs:
        assert env.startswith("/etc/peregrine/") and env.endswith(".env"), env
        assert os.path.exists(os.path.join(UNIT_DIR, "env", os.path.basename(env))), env
    assert directives(text, "KillSignal") == ["SIGTERM"]
    assert directives(text, "Restart") == ["on-failure"]
    # The server never calls sd_notify: readiness is the ExecStartPost wait on /health.
    assert directives(text, "Type") == ["exec"]
    assert any("/health" in c for c in directives(text, "ExecStartPost"))


@pytest.mark.parametrize("mutation", [
    ("\nType=exec\n", "\nType=exec\nRestartMode=sometimes\n"),         # unknown key
    ("Restart=on-failure", "Restart=sometimes"),                       # bad value
    ("/usr/local/bin/peregrine", "/usr/local/bin/peregrin"),           # missing program
    ("[Unit]", "[Unit]\nRequires=peregrine-missing.target"),           # missing dependency
])
def test_a_broken_unit_fails(tmp_path, mutation):
    old, new = mutation
    text = read("peregrine.service")
    assert old in text
    broken = text.replace(old, new, 1)
    root = make_root(tmp_path, {"peregrine.service": broken})
    rc, output = verify(root, "peregrine.service")
    print(output)
    assert rc != 0 or output != "", f"verify accepted a broken unit ({new!r})"
