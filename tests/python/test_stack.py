"""`scripts/stack.sh`, the stack without Docker, started for real: the broker, jurystream, the
demo producer and Prometheus (which scripts/test.sh installs) come up on free ports, jurystream
publishes and answers for the demo's projects, Prometheus scrapes it, and it all stops."""
import os
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_stack_comes_up_answers_and_stops():
    binary = ROOT / "target" / "debug" / "jurystream"
    if not binary.exists():
        subprocess.run(["cargo", "build", "--locked"], cwd=ROOT, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JURYSTREAM_")}
    env["STACK_BINARY"] = str(binary)
    run = subprocess.run([str(ROOT / "scripts" / "stack.sh"), "--check"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    said = "jurystream answers for the demo's projects"
    if shutil.which("prometheus"):
        said += " and Prometheus scrapes it"
    assert said in run.stdout, run.stdout + run.stderr


def test_the_stack_refuses_what_it_does_not_know():
    run = subprocess.run([str(ROOT / "scripts" / "stack.sh"), "--chek"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "usage: scripts/stack.sh [--check]" in run.stderr
