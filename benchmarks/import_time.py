"""Start-up cost: `import nbcast` and the imports every run pays, side by side.

Prints JSON: median wall seconds over N fresh interpreters for each statement, and
the ratio of ``import nbcast`` to a bare interpreter start.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

STATEMENTS = {
    "python": "pass",
    "import nbcast": "import nbcast",
    "import jsonschema": "import jsonschema",
    "import papermill": "import papermill",
    "nbcast cli module": "import nbcast.cli",
}


def measure(statement: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    results = {name: round(measure(code, repeat), 4) for name, code in STATEMENTS.items()}
    results["nbcast_over_bare_python"] = round(results["import nbcast"] / results["python"], 2)
    print(json.dumps({"benchmark": "import_time", "repeat": repeat, "seconds": results}))


if __name__ == "__main__":
    main()
