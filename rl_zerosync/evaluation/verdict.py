"""The one plain verdict line that ends an evaluation, a walk-forward and a population report.

It reads the calibrated intervals already in the report (``evidence["intervals"]``:
``agent_minus_best_rule``, the agent's Sharpe minus that of the rule chosen on validation, and
``agent_minus_buy_and_hold``) and says, for each, whether the whole interval is above zero
("beats"), below zero ("below") or holds zero ("no edge over"). Nothing is computed here: no
interval, no verdict (the reason instead). The rule is always named as the rule chosen on
validation, never as the best rule on the reported segment.
"""
from __future__ import annotations

import math
from typing import Any, Mapping


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) for v in values)


def compare(interval: Mapping[str, Any], what: str) -> str:
    """``"beats <what>"`` / ``"below <what>"`` / ``"no edge over <what>"`` with ``interval [low, high]``
    (of a difference of Sharpes: agent minus ``what``)."""
    low, high = interval.get("low"), interval.get("high")
    if not _finite(low, high):
        return f"no interval for the agent minus {what}"
    shown = f"interval [{low:+.2f}, {high:+.2f}]"
    if low > 0.0:
        return f"beats {what}, {shown}"
    if high < 0.0:
        return f"below {what}, {shown}"
    return f"no edge over {what}, {shown}"


def verdict(evidence: Mapping[str, Any] | None, rule: str | None = None, segment: str | None = None) -> str:
    """The verdict line of ``evidence`` (a report's ``evidence``, or walk_forward.json's / a
    population's pooled one): against the rule chosen on validation (``rule``: its label), then
    against buy-and-hold, each with its 95% interval of the Sharpe difference."""
    evidence = evidence or {}
    intervals = evidence.get("intervals")
    where = segment or evidence.get("segment") or "test"
    if not isinstance(intervals, Mapping) or "agent_minus_best_rule" not in intervals:
        reason = evidence.get("reason") or "the report has no calibrated intervals"
        return f"verdict on {where}: none ({reason})"
    level = evidence.get("level")
    level_txt = f"{100 * level:.0f}% intervals" if _finite(level) else "intervals"
    chosen = "the rule chosen on validation" + (f" ({rule})" if rule else "")
    parts = [compare(intervals["agent_minus_best_rule"], chosen)]
    if "agent_minus_buy_and_hold" in intervals:
        parts.append(compare(intervals["agent_minus_buy_and_hold"], "buy-and-hold"))
    return f"verdict on {where} (agent's Sharpe minus theirs, {level_txt}): " + "; ".join(parts)
