"""Panels made from the signals' declarations (`slowpath signals` in the
form deploy/signals.py gives the chart's signals.json; ../generate.sh makes
it): a signal the dashboards have no hand-written row for gets its rows
here, in Overview and Drill-down, from its recorded rates (family, selector, title, meaning), its alert
(threshold, name, runbook section) and its cost (the node gauge one event is
charged at). A new signal appears with no edit under dashboards/.

The hand-written rows (HAND_WRITTEN) add what a declaration does not say:
node context, heatmaps, signatures such as query vs setmask."""

from dataclasses import dataclass

from common import OPS, RATIO, SIGNALS

# Signals whose rows Overview and Drill-down write by hand.
HAND_WRITTEN = frozenset({"clock", "sigmask", "sleep", "timer", "memory", "tzfile"})


@dataclass(frozen=True)
class Rate:
    """One declared recorded rate, as the dashboards use it."""

    family: str  # the counter
    selector: str  # its label matchers ('' for all its series)
    title: str  # e.g. "Close sweeps"
    meaning: str  # what one unit is and why it matters
    unit: str  # OPS, or RATIO for seconds per second
    alert: str | None  # the alert on this rate, with its
    threshold: float | None  # default threshold (per process)
    runbook: str | None  # section of docs/runbook.md
    cost_gauge: str | None  # node gauge of one event's cost (seconds), if costed so


def rates(signal):
    """The declared recorded rates of one signal (a signals.json entry)."""
    alert = signal.get("alert") or {}
    costs = {c["recorded"]: c for c in signal.get("cost", [])}
    out = []
    for r in signal["recorded"]:
        fleet = r.get("fleet") or {}
        mine = alert.get("rate") == r["name"]
        cost = costs.get(r["name"], {})
        out.append(Rate(
            family=r["family"], selector=r["selector"],
            title=fleet.get("title") or r["name"].removeprefix("slowpath_").replace("_", " ").capitalize(),
            meaning=fleet.get("meaning") or signal["summary"],
            unit=RATIO if r["family"].endswith("_seconds_total") else OPS,
            alert=alert.get("name") if mine else None,
            threshold=float(alert["threshold"]["default"]) if mine else None,
            runbook=alert.get("runbook") if mine else None,
            cost_gauge=cost.get("gauge") or None if cost.get("kind") == "gauge" else None,
        ))
    return out


def generated_signals():
    """The signals whose rows come from here, in the agent's order."""
    return [s for s in SIGNALS if s["name"] not in HAND_WRITTEN]


def cases():
    """Every declared signal's case (the README's name of its slow path), in
    declaration order, as one phrase: "vDSO fallback, ..., and yield spins"."""
    names = [s["case"] for s in SIGNALS]
    return ", ".join(names[:-1]) + ", and " + names[-1]


def row_title(signal):
    first = rates(signal)[0]
    return f"{first.title}: {signal['summary']}"


def alert_sentence(rate):
    if not rate.alert:
        return ""
    return (f" {rate.alert} fires above {rate.threshold:g}/s per process (`slowpath doctor --pid` names the call "
            f"site and the fix; docs/runbook.md#{rate.runbook}).")


def series(rate):
    """The counter and its selector, as a description names them."""
    return f"{rate.family}{{{rate.selector}}}" if rate.selector else rate.family
