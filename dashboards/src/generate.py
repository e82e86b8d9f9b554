"""Writes the dashboards' JSON: python3 generate.py OUTDIR; or prints the
Grafana alert rules made from a Prometheus rules file given as JSON:
python3 generate.py --alerts RULES.json (see ../generate.sh)."""

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder

import alerts
import drilldown
import fleet
import overview

DASHBOARDS = {
    "slowpath-overview.json": overview.build,
    "slowpath-drilldown.json": drilldown.build,
    "slowpath-fleet.json": fleet.build,
}


def render(build):
    # Through the SDK's encoder and back, so the file is sorted and stable.
    data = json.loads(json.dumps(build(), cls=JSONEncoder))
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv):
    if len(argv) == 3 and argv[1] == "--alerts":
        rules = json.loads(Path(argv[2]).read_text())
        dashboards = {d["uid"]: d for d in (json.loads(render(build)) for build in DASHBOARDS.values())}
        print(json.dumps(alerts.build(rules, dashboards), indent=1, ensure_ascii=False))
        return 0
    if len(argv) != 2:
        print("usage: generate.py OUTDIR | generate.py --alerts RULES.json", file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (out / name).write_text(render(build))
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
