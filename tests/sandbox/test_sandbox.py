"""One sandbox, built by bubblewrap and joined as a kernel joins it
(:mod:`nbcast.sandbox`): what it shows and hides, its network, its end (killed, or its
worker gone: every process in it ends), a join that would land in the wrong sandbox,
and the unprivileged mode, run as a user that is not root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbcast.sandbox.launcher import Sandbox
from nbcast.sandbox.limits import resource_limits
from nbcast.sandbox.policy import Network, SandboxSpec
from nbcast.sandbox.support import sandbox_support

UID = 1_500_009_001
REPO = Path(__file__).resolve().parents[2]


def spec(**changes: object) -> SandboxSpec:
    values: dict[str, object] = {"tenant": "acme", "uid": UID, "gid": UID, **changes}
    return SandboxSpec(**values)  # type: ignore[arg-type]


@pytest.fixture
def folder() -> Iterator[Path]:
    """A run folder under a short private root (sockets live in run folders)."""
    root = Path(tempfile.mkdtemp(prefix="nbsb-"))
    made = root / "run"
    made.mkdir(mode=0o700)
    os.chown(made, UID, UID)
    yield made
    subprocess.run(["rm", "-rf", str(root)], check=False)


def inside(
    sandbox: Sandbox, command: list[str], **options: object
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``sandbox`` the way a non-forked kernel is started."""
    plan = sandbox.plan(limits=resource_limits(sandbox.spec, mode=sandbox.mode))
    return subprocess.run(
        [sys.executable, "-I", "-m", "nbcast.sandbox.enter", json.dumps(plan), "--", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        **options,  # type: ignore[arg-type]
    )


def uid_processes(uid: int) -> list[int]:
    listing = subprocess.run(["ps", "-eo", "uid=,pid="], capture_output=True, text=True).stdout
    return [
        int(pid)
        for owner, pid in (line.split() for line in listing.splitlines())
        if int(owner) == uid
    ]


def test_it_shows_its_run_folder_and_hides_what_is_nbcasts_even_under_a_shown_folder(
    folder: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    (lake / "home").mkdir(parents=True)
    (lake / "orders.parquet").write_text("rows")
    (lake / "home" / "signing-keys.json").write_text("k1:secret")
    (lake / "keyfile").write_text("secret")
    sandbox = Sandbox.start(
        spec(readonly=(str(lake),)),
        str(folder),
        mode="privileged",
        hidden=[str(lake / "home"), str(lake / "keyfile"), str(tmp_path / "nothing-there")],
    )
    try:
        script = (
            "import os, json\n"
            f"lake = {str(lake)!r}\n"
            "print(json.dumps({'lake': sorted(os.listdir(lake)),"
            " 'home': os.listdir(lake + '/home'), 'keyfile': open(lake + '/keyfile').read(),"
            " 'root': sorted(os.listdir('/')), 'tmp': os.listdir('/tmp'),"
            " 'uid': [os.getuid(), os.getgid(), os.getgroups()], 'cwd': os.getcwd(),"
            " 'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}))\n"
            "open('written-here', 'w').write('x')\n"
        )
        done = inside(sandbox, [sys.executable, "-c", script])
    finally:
        sandbox.kill()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["lake"] == ["home", "keyfile", "orders.parquet"]
    assert (seen["home"], seen["keyfile"]) == ([], "")  # covered: an empty folder, /dev/null
    # A private /tmp: the parents of the run folder and of the lake shown, nothing else.
    parents = {folder.parent.name}
    if lake.is_relative_to("/tmp"):
        parents.add(lake.relative_to("/tmp").parts[0])
    assert set(seen["tmp"]) == parents
    assert seen["uid"] == [UID, UID, []]
    assert seen["cwd"] == str(folder)
    assert seen["pids"] == [1, 2, 3]  # bubblewrap's init, its stub, this process
    assert (folder / "written-here").stat().st_uid == UID


def test_network_none_leaves_only_loopback_of_its_own(folder: Path) -> None:
    probe = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 5432), timeout=2).close(); print('reached')\n"
        "except OSError as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )
    seen = {}
    for network in (Network.host, Network.none):
        sandbox = Sandbox.start(spec(network=network), str(folder), mode="privileged")
        try:
            seen[network] = inside(sandbox, [sys.executable, "-c", probe]).stdout.strip()
        finally:
            sandbox.kill()
    assert seen[Network.host] == "reached"  # the machine's PostgreSQL, as the worker's
    assert seen[Network.none] == "refused ConnectionRefusedError"


def test_killing_a_sandbox_ends_every_process_in_it(folder: Path) -> None:
    sandbox = Sandbox.start(spec(), str(folder), mode="privileged")
    plan = sandbox.plan(limits={})
    started = subprocess.Popen(
        [sys.executable, "-I", "-m", "nbcast.sandbox.enter", json.dumps(plan), "--", "sh", "-c",
         "sleep 600 & sleep 600 & echo up; wait"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert started.stdout is not None
    assert started.stdout.readline().strip() == "up"
    assert len(uid_processes(UID)) >= 3
    sandbox.kill()
    started.wait(10)
    deadline = time.monotonic() + 10
    while uid_processes(UID) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid_processes(UID) == []


def test_a_sandbox_ends_with_the_worker_that_made_it(folder: Path) -> None:
    """A worker killed outright (SIGKILL) leaves nothing running in its sandboxes."""
    worker = (
        "import json, subprocess, sys\n"
        "from nbcast.sandbox.launcher import Sandbox\n"
        "from nbcast.sandbox.policy import SandboxSpec\n"
        f"box = Sandbox.start(SandboxSpec(tenant='acme', uid={UID}, gid={UID}), {str(folder)!r},"
        " mode='privileged')\n"
        "plan = json.dumps(box.plan(limits={}))\n"
        "subprocess.Popen([sys.executable, '-I', '-m', 'nbcast.sandbox.enter', plan, '--',"
        " 'sleep', '600'])\n"
        "print('up', flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True, cwd=str(REPO)
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "up"
    deadline = time.monotonic() + 10
    while not uid_processes(UID) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid_processes(UID)
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while uid_processes(UID) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid_processes(UID) == []


def test_a_join_that_would_land_in_another_sandbox_is_refused(folder: Path, tmp_path: Path) -> None:
    sandbox = Sandbox.start(spec(), str(folder), mode="privileged")
    try:
        plan = sandbox.plan(limits={})
        plan["namespaces"] = {**plan["namespaces"], "mnt": plan["namespaces"]["mnt"] + 1}
        marker = tmp_path / "ran"
        done = subprocess.run(
            [sys.executable, "-I", "-m", "nbcast.sandbox.enter", json.dumps(plan), "--",
             "touch", str(marker)],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
    finally:
        sandbox.kill()
    assert done.returncode == 126
    assert "pid reused" in done.stderr
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the unprivileged mode as another user")
def test_the_unprivileged_mode_works_for_a_user_that_is_not_root(tmp_path: Path) -> None:
    """A worker that is not root (here: nobody, with Debian's own Python, since the
    project's interpreter is not readable to nobody): the sandbox makes a user
    namespace in which the kernel is the tenant's uid, shows only its folder, and
    the kernel has no capability outside it."""
    if sandbox_support().mode != "privileged":
        pytest.skip("needs root to become nobody")
    root = Path(tempfile.mkdtemp(prefix="nbsb-"))
    os.chown(root, 65534, 65534)  # the worker's own folder of run folders
    run = root / "run"
    run.mkdir()
    os.chown(run, 65534, 65534)
    script = f"""
import json, subprocess, sys
sys.path.insert(0, {str(REPO)!r})
from nbcast.sandbox.launcher import Sandbox
from nbcast.sandbox.policy import SandboxSpec
from nbcast.sandbox.support import sandbox_support
support = sandbox_support()
assert support.available and support.mode == "userns", support
box = Sandbox.start(SandboxSpec(tenant="acme", uid={UID}, gid={UID}), {str(run)!r}, mode="userns")
plan = json.dumps(box.plan(limits={{}}))
probe = ("import os, json, subprocess; status = open('/proc/self/status').read(); "
         "userns = subprocess.run(['unshare', '-U', 'true'], capture_output=True).returncode; "
         "print(json.dumps([os.getuid(), sorted(os.listdir('/tmp')), "
         "status.split('CapEff:')[1].split()[0], userns]))")
enter = ("import sys; sys.path.insert(0, {str(REPO)!r}); "
         "from nbcast.sandbox.enter import main; sys.exit(main(sys.argv[1:]))")
done = subprocess.run([sys.executable, "-S", "-c", enter, plan, "--", sys.executable, "-c", probe],
                      capture_output=True, text=True)
box.kill()
print(done.stdout.strip() or done.stderr.strip())
"""
    try:
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
             "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(root),
            env={"PATH": "/usr/bin:/bin", "HOME": str(root)},
        )  # fmt: skip
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("["), done.stdout
    uid, tmp, caps, userns = json.loads(last)
    assert uid == UID
    assert tmp == [root.name]
    assert int(caps, 16) == 0
    assert userns != 0  # no user namespace of its own: they count against the worker's
