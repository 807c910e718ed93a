"""Kernels forked from a zygote, with real processes: they run code, are isolated from
each other, match a normally started kernel, obey signals, outlive a killed zygote and
never outlive the worker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from nbcast.executor.kernels.environment import kernel_environment
from nbcast.executor.kernels.forked import (
    ZygoteKernelManager,
    ZygoteProvisioner,
    _fork_plan,
    zygote_kernel_manager,
)
from nbcast.executor.kernels.zygote import (
    DEFAULT_INTERPRETER_OPTIONS,
    Zygote,
    ZygoteError,
    ZygoteUnavailable,
    _defaults,
    default_zygote,
    shutdown_default_zygote,
)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """One zygote shared by the tests that do not stop it."""
    with Zygote() as z:
        yield z


def state(pid: int) -> str | None:
    """The /proc state letter of ``pid`` (``Z`` for a zombie), ``None`` if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2]


def children(pid: int | None) -> set[int]:
    """The pids of ``pid``'s children (its main thread's)."""
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def kernel_pid(km: AsyncKernelManager) -> int:
    """The pid of ``km``'s kernel, which must have been forked by a zygote."""
    provisioner = km.provisioner
    assert isinstance(provisioner, ZygoteProvisioner)
    assert provisioner.forked is not None
    return provisioner.forked.pid


def wait_dead(pid: int, within: float = 10.0) -> bool:
    """Whether ``pid`` has exited (maybe a zombie of someone else's) within ``within`` s."""
    deadline = time.monotonic() + within
    while state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.02)
    return state(pid) in (None, "Z")


def wait_gone(pid: int, within: float = 10.0) -> bool:
    """Whether ``pid`` has exited *and been reaped* (no zombie) within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if state(pid) is None:
            return True
        time.sleep(0.02)
    return False


@asynccontextmanager
async def running(km: AsyncKernelManager, **start: Any) -> AsyncIterator[AsyncKernelClient]:
    """Start ``km``'s kernel (``start``: its arguments), yield a ready client, shut the
    kernel down afterwards."""
    await km.start_kernel(**start)
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        yield kc
    finally:
        kc.stop_channels()
        if km.has_kernel:
            await km.shutdown_kernel(now=True)


async def execute(kc: AsyncKernelClient, code: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``code``; return the execute_reply content and the IOPub messages it produced."""
    messages: list[dict[str, Any]] = []
    reply = await kc.execute_interactive(code, output_hook=messages.append, timeout=60)
    return reply["content"], messages


async def printed(kc: AsyncKernelClient, code: str) -> str:
    """What ``code`` printed to stdout (it must succeed)."""
    reply, messages = await execute(kc, code)
    assert reply["status"] == "ok", reply
    return "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")


def test_runs_code_in_a_child_of_the_zygote(zygote: Zygote) -> None:
    async def scenario() -> None:
        km = zygote_kernel_manager(zygote=zygote)
        async with running(km) as kc:
            assert await printed(kc, "print(6 * 7)") == "42\n"
            facts = json.loads(
                await printed(
                    kc,
                    "import os, sys, json\n"
                    "from ipykernel.kernelapp import IPKernelApp\n"
                    "print(json.dumps([os.getpid(), os.getppid(), os.getpgid(0), os.getsid(0),\n"
                    "    os.environ['JPY_PARENT_PID'], IPKernelApp.instance().parent_handle,\n"
                    "    'pandas' in sys.modules, 'pd' in globals(), 'pandas' in globals()]))",
                )
            )
            pid = kernel_pid(km)
            # its own session and process group; parent = the zygote; no ipykernel parent
            # poller (1): the kernel watches the worker, i.e. this process
            assert facts[:6] == [pid, zygote.pid, pid, pid, str(os.getpid()), 1]
            # preloaded, but nothing bound in the user namespace
            assert facts[6:] == [True, False, False]
            assert pid in children(zygote.pid)
            assert km.provisioner is not None
            info = await km.provisioner.get_provisioner_info()
            assert info["forked"]["pid"] == pid
        assert not await km.is_alive()

    asyncio.run(scenario())


def test_consecutive_kernels_share_nothing(zygote: Zygote) -> None:
    probe = "import random, numpy\nprint(random.random(), numpy.random.random())"

    async def scenario() -> None:
        first = zygote_kernel_manager(zygote=zygote)
        async with running(first) as kc:
            await printed(kc, "secret = 42\nimport numpy as np")
            first_random = await printed(kc, probe)
            first_pid = kernel_pid(first)
        assert first_pid is not None
        assert wait_gone(first_pid)  # exited and reaped: no zombie
        second = zygote_kernel_manager(zygote=zygote)
        async with running(second) as kc:
            assert kernel_pid(second) != first_pid
            seen = await printed(kc, "print('secret' in globals(), 'np' in globals())")
            assert seen == "False False\n"
            assert await printed(kc, probe) != first_random  # both RNGs reseeded per kernel

    asyncio.run(scenario())


FINGERPRINT = """
import json, os, sys, signal
import matplotlib, pandas
from IPython import get_ipython
ip = get_ipython()
print(json.dumps({
    "path": sys.path, "cwd": os.getcwd(), "xoptions": sys._xoptions, "argv0": sys.argv[0],
    "orig_argv": sys.orig_argv[:4],
    "backend": matplotlib.get_backend(), "mplbackend": os.environ.get("MPLBACKEND"),
    "max_columns": pandas.get_option("display.max_columns"),
    "env": sorted(os.environ), "sigint": repr(signal.getsignal(signal.SIGINT)),
    "user_ns": sorted(k for k in ip.user_ns if not k.startswith("_")),
    "formatters": sorted(k for k, f in ip.display_formatter.formatters.items() if f.enabled),
}))
"""


def test_looks_like_a_normally_started_kernel(zygote: Zygote) -> None:
    async def fingerprint(km: AsyncKernelManager, **start: Any) -> dict[str, Any]:
        async with running(km, **start) as kc:
            found: dict[str, Any] = json.loads(await printed(kc, FINGERPRINT))
            # pyplot's inline integration is live: a figure shows without plt.show()
            _, messages = await execute(kc, "import matplotlib.pyplot as plt\nplt.plot([1, 2])")
            found["figure"] = any(
                "image/png" in m["content"].get("data", {})
                for m in messages
                if m["msg_type"] == "display_data"
            )
            found["plt_ns"] = "plt" in await printed(kc, "print(dir())")
            return found

    async def scenario() -> None:
        # Started as nbcast starts kernels: without its secrets in the environment.
        normal = await fingerprint(
            AsyncKernelManager(kernel_name="python3"), env=kernel_environment()
        )
        forked = await fingerprint(zygote_kernel_manager(zygote=zygote))
        assert forked == normal
        assert normal["figure"]
        assert normal["max_columns"] == 20

    asyncio.run(scenario())


def test_interrupt_then_kill(zygote: Zygote) -> None:
    async def scenario() -> None:
        km = zygote_kernel_manager(zygote=zygote)
        async with running(km) as kc:
            pid = kernel_pid(km)
            msg_id = kc.execute("while True: pass")
            await asyncio.sleep(0.5)
            assert state(pid) == "R"  # spinning
            await km.interrupt_kernel()
            reply = await kc.get_shell_msg(timeout=10)
            assert reply["parent_header"]["msg_id"] == msg_id
            assert reply["content"]["status"] == "error"
            assert reply["content"]["ename"] == "KeyboardInterrupt"
            # ipykernel aborts requests that reach it while it still clears its queue
            # after the error (stop_on_error): ask again until one is not aborted.
            for _ in range(20):
                again, _messages = await execute(kc, "print('still here')")
                if again["status"] != "aborted":
                    break
                await asyncio.sleep(0.1)
            assert again["status"] == "ok", again
            assert await printed(kc, "print('still here')") == "still here\n"
            await km.shutdown_kernel(now=True)  # SIGKILL to the process group
            assert not await km.is_alive()
        assert wait_gone(pid)
        assert zygote.exit_code(pid) == -signal.SIGKILL

    asyncio.run(scenario())


def test_restart_forks_a_new_kernel(zygote: Zygote) -> None:
    async def scenario() -> None:
        km = zygote_kernel_manager(zygote=zygote)
        async with running(km) as kc:
            before = kernel_pid(km)
            await printed(kc, "x = 1")
            await km.restart_kernel(now=True)
            await kc.wait_for_ready(timeout=30)
            after = kernel_pid(km)
            assert after != before
            assert after in children(zygote.pid)
            assert await printed(kc, "print('x' in globals())") == "False\n"

    asyncio.run(scenario())


def test_closing_the_zygote_kills_its_kernels_and_their_children() -> None:
    async def scenario() -> None:
        with Zygote() as own:
            km = zygote_kernel_manager(zygote=own)
            async with running(km) as kc:
                code = "import subprocess\nprint(subprocess.Popen(['sleep', '60']).pid)"
                grandchild = int(await printed(kc, code))
                kernel = kernel_pid(km)
                assert state(kernel) not in (None, "Z")
                assert state(grandchild) not in (None, "Z")
                zygote_pid = own.pid or 0
                own.close()
                assert wait_gone(kernel, 5)
                assert wait_gone(zygote_pid, 5)
                assert state(grandchild) in (None, "Z")  # killed (its parent is gone)
                assert not await km.is_alive()
                with pytest.raises(ZygoteError, match="not running"):
                    own.spawn("kernel.json")

    asyncio.run(scenario())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_kernel_outlives_its_zygote(signum: int) -> None:
    """A report can kill its kernel's parent; that must end no kernel (the zygote's
    SIGTERM handler used to kill them all, ipykernel's parent poller within 1 s)."""

    async def scenario() -> None:
        own = Zygote().start()
        km = zygote_kernel_manager(zygote=own)
        try:
            async with running(km) as kc:
                kernel = kernel_pid(km)
                zygote_pid = own.pid or 0
                code = f"import os, signal\nos.kill(os.getppid(), {int(signum)})\nprint('sent')"
                assert await printed(kc, code) == "sent\n"
                assert wait_dead(zygote_pid)
                await asyncio.sleep(2.5)  # ipykernel's poller checked its parent twice
                assert state(kernel) not in (None, "Z")
                assert await printed(kc, "import os\nprint(os.getppid() != 0)") == "True\n"
                assert await km.is_alive()
        finally:
            own.close()
        assert wait_gone(kernel)

    asyncio.run(scenario())


WORKER = """
import sys, time
from jupyter_client.connect import write_connection_file
from nbcast.executor.kernels.zygote import Zygote
zygote = Zygote().start()
write_connection_file(sys.argv[1])
print(zygote.pid, zygote.spawn(sys.argv[1]), flush=True)
time.sleep(60)
"""


def test_zygote_and_kernels_go_when_the_worker_dies(tmp_path: Path) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tmp_path / "kernel.json")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        zygote_pid, kernel = map(int, worker.stdout.readline().split())
        assert state(kernel) not in (None, "Z")
    finally:
        worker.kill()  # no chance to clean up: the zygote sees end-of-file
        worker.wait()
    assert wait_dead(zygote_pid, 5)
    assert wait_dead(kernel, 5)


def test_a_kernel_whose_zygote_is_gone_still_ends_with_the_worker(tmp_path: Path) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tmp_path / "kernel.json")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        zygote_pid, kernel = map(int, worker.stdout.readline().split())
        os.kill(zygote_pid, signal.SIGKILL)  # nobody left to kill the kernel for it
        assert wait_dead(zygote_pid, 5)
        assert state(kernel) not in (None, "Z")
    finally:
        worker.kill()
        worker.wait()
    assert wait_dead(kernel, 5)  # its own watch of the worker


def test_setup_errors_are_raised_by_spawn(zygote: Zygote, tmp_path: Path) -> None:
    with pytest.raises(ZygoteError, match="FileNotFoundError"):
        zygote.spawn(str(tmp_path / "kernel.json"), cwd=str(tmp_path / "missing"))
    assert zygote.alive
    assert zygote.exit_code(2**22 + 1) is None  # still answering


def test_only_this_interpreters_ipykernel_is_forked() -> None:
    exe = sys.executable
    options = list(DEFAULT_INTERPRETER_OPTIONS)
    cmd = [exe, *options, "-m", "ipykernel_launcher", "-f", "k.json", "--x=1"]
    assert _fork_plan(cmd, {}) == (options, ["-f", "k.json", "--x=1"])
    assert _fork_plan([exe, "-m", "ipykernel", "-f", "k.json"], {}) == ([], ["-f", "k.json"])
    assert _fork_plan(["/bin/sh", "-m", "ipykernel_launcher", "-f", "k.json"], {}) is None
    assert _fork_plan([exe, "-m", "other_kernel", "-f", "k.json"], {}) is None
    assert _fork_plan([exe, "-m", "ipykernel_launcher"], {}) is None
    assert _fork_plan([exe, "x.py", "-m", "ipykernel_launcher", "-f", "k"], {}) is None
    assert _fork_plan(cmd, {"stdout": sys.stdout}) is None


def test_papermill_runs_a_notebook_on_a_forked_kernel(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Py"}
    nb.cells = [
        nbformat.v4.new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import os, sys\nprint('pandas' in sys.modules, os.getppid())"),
        nbformat.v4.new_code_cell("import pandas as pd\nprint(len(pd.DataFrame({'x': range(n)})))"),
    ]
    source, output = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, source)
    try:
        papermill.execute_notebook(
            str(source),
            str(output),
            parameters={"n": 7},
            kernel_manager_class=ZygoteKernelManager,
            progress_bar=False,
        )
        zygote_pid = default_zygote(DEFAULT_INTERPRETER_OPTIONS).pid
    finally:
        shutdown_default_zygote()
    cells = nbformat.read(output, as_version=4).cells
    assert "injected-parameters" in cells[1].metadata["tags"]
    assert cells[1].source.strip().endswith("n = 7")
    assert cells[2].outputs[0]["text"] == f"True {zygote_pid}\n"
    assert cells[3].outputs[0]["text"] == "7\n"


PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def free_ports() -> dict[str, int]:
    """Five distinct ports that were free a moment ago (as jupyter_client picks them)."""
    sockets = [socket.socket() for _ in PORT_NAMES]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = {name: sock.getsockname()[1] for name, sock in zip(PORT_NAMES, sockets, strict=True)}
    for sock in sockets:
        sock.close()
    return ports


def listener(port: int) -> socket.socket:
    """Another process's stand-in: a socket listening on ``port``."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.mark.parametrize("taken", ["iopub_port", "shell_port"])
def test_a_kernel_whose_port_is_taken_exits(zygote: Zygote, tmp_path: Path, taken: str) -> None:
    """The stall once seen in a Ray worker: ipykernel's exit handler waits forever in
    zmq's Context.term() after a failed IOPub bind. A forked kernel exits anyway."""
    from jupyter_client.connect import write_connection_file

    ports = free_ports()
    with listener(ports[taken]):
        connection_file = str(tmp_path / "kernel.json")
        write_connection_file(connection_file, ip="127.0.0.1", key=b"k", **ports)
        pid = zygote.spawn(connection_file)
        assert wait_gone(pid, 30)
    assert zygote.exit_code(pid) == 1


def test_a_port_taken_before_the_kernel_binds_it_fails_the_start(zygote: Zygote) -> None:
    """post_launch sees another process listening on a kernel port: kernel killed at once
    (here the heartbeat port, which would leave a kernel that looks dead to clients)."""

    async def scenario() -> None:
        km = zygote_kernel_manager(zygote=zygote)
        km.cache_ports = False
        ports = free_ports()
        for name, port in ports.items():
            setattr(km, name, port)
        with listener(ports["hb_port"]):
            with pytest.raises(ZygoteError, match=f"port {ports['hb_port']} was taken"):
                await km.start_kernel()
            provisioner = km.provisioner
            assert isinstance(provisioner, ZygoteProvisioner)
            assert provisioner.forked is not None
            assert wait_dead(provisioner.forked.pid)
        await km.cleanup_resources()

    asyncio.run(scenario())


def test_a_stuck_zygote_is_killed_and_the_kernel_started_with_popen() -> None:
    async def scenario() -> None:
        own = Zygote(request_timeout=1.0).start()
        try:
            os.kill(own.pid or 0, signal.SIGSTOP)  # no answer to the fork request
            km = zygote_kernel_manager(zygote=own)
            async with running(km) as kc:
                assert await printed(kc, "print(6 * 7)") == "42\n"
                provisioner = km.provisioner
                assert isinstance(provisioner, ZygoteProvisioner)
                assert provisioner.forked is None
                assert isinstance(provisioner.process, subprocess.Popen)
                assert not own.alive  # killed, not left stopped
                with pytest.raises(ZygoteUnavailable):
                    own.spawn("kernel.json")
        finally:
            own.close()

    asyncio.run(scenario())


def test_the_shared_zygote_is_started_before_ports_are_chosen() -> None:
    async def scenario() -> None:
        shutdown_default_zygote()
        km = ZygoteKernelManager(kernel_name="python3")
        try:
            await km.pre_start_kernel()
            started = _defaults.get(DEFAULT_INTERPRETER_OPTIONS)
            assert started is not None
            assert started.alive
            assert km.shell_port  # chosen after it
        finally:
            await km.cleanup_resources()
            shutdown_default_zygote()

    asyncio.run(scenario())
