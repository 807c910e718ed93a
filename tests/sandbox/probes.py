"""What a hostile author tries from a report's kernel, as cells that must fail.

Each :class:`Probe` is one report whose body is one attack. In a sandbox every attack
fails, inside the kernel, with the exception the probe names — and the run records
it (FAILED, that ``ename``). Without a sandbox most of them succeed: the run then
SUCCEEDS and prints what it got, which the tests show for a control case.

The attacks are those of the hostile review (issue 20): read another process's
environment (the worker's, the server's, any), open the home, the database, the
signing keys, the worker's run folders, another run's folder, the server's runtime
folder (``jpserver-*.json``, the cookie secret), write to the database, signal the
worker, become root, change the Python environment, fork without end, allocate past
the tenant's memory.

The notebooks learn what to aim at from parameters (the worker's and the server's
pids, the paths): an attacker would guess or scan for them; here they are exact, so a
probe fails for the right reason.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PARAMETERS", "PROBES", "Probe"]

PARAMETERS = """\
worker_pid = 0
server_pid = 0
home = ""
database = ""
runs = ""
runtime = ""
memory_mb = 0
"""
"""The probes' parameters cell; the tests pass the real values."""


@dataclass(frozen=True)
class Probe:
    """One attack: the cell's code and the exceptions a sandbox makes it raise."""

    name: str
    code: str
    raises: frozenset[str]
    says: str = ""
    """Text the error's value contains (the reason it failed), when it matters."""


def probe(name: str, code: str, *raises: str, says: str = "") -> Probe:
    return Probe(name, "import os, signal, time\n" + code, frozenset(raises), says)


PROBES: tuple[Probe, ...] = (
    probe(
        "worker_environ",
        "print(open(f'/proc/{worker_pid}/environ', 'rb').read())",
        "FileNotFoundError",
    ),
    probe(
        "server_environ",
        "print(open(f'/proc/{server_pid}/environ', 'rb').read())",
        "FileNotFoundError",
    ),
    probe(
        "any_environ",
        """
secrets = ('NBCAST_SMTP_URL', 'NBCAST_SLACK_TOKEN', 'NBCAST_SIGNING_KEYS', 'NBCAST_DATABASE_URL',
           'NBCAST_WEBHOOK_SECRET', 'JUPYTER_TOKEN', 'PGPASSWORD')
found = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            data = open(f'/proc/{pid}/environ', 'rb').read()
        except OSError:
            continue
        for name in secrets:
            if name.encode() + b'=' in data:
                found.append((pid, name))

if not found:
    raise LookupError('no process shows an environment with a secret')
print(found)
""",
        "LookupError",
    ),
    probe("home", "print(os.listdir(home))", "FileNotFoundError"),
    probe(
        "database",
        """
import sqlite3
con = sqlite3.connect(f'file:{database}?mode=rw', uri=True)
con.execute('CREATE TABLE pwned (x)')
con.commit()
""",
        "OperationalError",
        says="unable to open database file",
    ),
    probe(
        "signing_keys",
        "print(open(os.path.join(home, 'signing-keys.json')).read())",
        "FileNotFoundError",
    ),
    probe("runs_folder", "print(os.listdir(runs))", "FileNotFoundError"),
    probe(
        "other_run_folders",
        """
here = os.path.basename(os.getcwd())
beside = [name for name in os.listdir('..') if name != here]
if not beside:
    raise LookupError('no other run folder is visible')
print(beside)
""",
        "LookupError",
    ),
    probe("server_runtime", "print(os.listdir(runtime))", "FileNotFoundError"),
    probe("signal_worker", "os.kill(worker_pid, signal.SIGTERM)", "ProcessLookupError"),
    probe("signal_server", "os.kill(server_pid, signal.SIGKILL)", "ProcessLookupError"),
    probe("become_root", "os.setuid(0)", "PermissionError"),
    probe(
        "change_python",
        "open(os.__file__, 'a').write('# was here')",
        "PermissionError",  # not the tenant's file; and a read-only mount besides
        "OSError",
    ),
    probe(
        "fork_bomb",
        """
spawned = 0
while True:
    if os.fork() == 0:  # each child forks for ever and never returns to the kernel
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
    spawned += 1
""",
        "BlockingIOError",
    ),
    probe("memory", "block = bytearray(2 * memory_mb * 2**20)", "MemoryError"),
)
