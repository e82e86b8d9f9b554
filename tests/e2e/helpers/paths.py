"""Where the repository and the tests' sources are."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WORKLOAD_SRC = REPO / "tests" / "workloads" / "sp-workload.c"
