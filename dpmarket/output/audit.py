"""An audit's directory and its text: the table, every run's score, the ROC figure, the verdict.

``dpmarket audit`` writes, whole or not at all (:mod:`dpmarket.output.directories`):

| file | content |
| --- | --- |
| ``scenario.toml`` | the resolved scenario audited |
| ``summary.json`` | the owner, its claimed (ε, δ), the canary, each adversary's bound, the verdict |
| ``audit.csv`` | the table: one row per adversary (error counts, rates and their exact upper bounds, ε) |
| ``scores.csv`` | every run's score by each adversary (world, run, half: threshold or count) |
| ``audit_roc.png`` | each adversary's ROC curve against the claimed (ε, δ) frontier |
"""

from __future__ import annotations

import csv
from pathlib import Path

from dpmarket.output.directories import Identity, default_directory, run_directory
from dpmarket.output.figures.painter import Painter
from dpmarket.privacy import auditing
from dpmarket.runs.audit import AuditResult, ViewAudit
from dpmarket.system import files

# Exit status of an audit whose lower bound exceeds the claim (0: it does not; 2: a user error).
VIOLATION = 3


def identity(result_or_scenario, facts: dict) -> Identity:
    """What an audit directory holds: its kind, the resolved scenario and the audit's settings."""
    scenario = getattr(result_or_scenario, "scenario", result_or_scenario)
    return Identity("audit", scenario.to_toml(), facts)


def settings(owner: int | None, runs: int, view: str, method: str, confidence: float) -> dict:
    """The audit's own settings (summary.json keys), which a directory's identity includes."""
    return {"owner_asked": owner, "runs": runs, "view": view, "method": method, "confidence": confidence}


def default_dir(scenario, facts: dict) -> Path:
    """``outputs/NAME-audit-seedSEED``, or ``-2``…: the first holding this very audit, or free."""
    return default_directory(Path("outputs") / f"{scenario.name}-audit-seed{scenario.seed}",
                             identity(scenario, facts))


def summary(result: AuditResult, facts: dict) -> dict:
    """``summary.json`` of an audit."""
    return {"scenario": result.scenario.name, "seed": result.scenario.seed, **facts,
            "owner": result.owner, "name": result.name, "epsilon_claimed": result.epsilon,
            "delta": result.delta, "mechanism": result.mechanism, "accountant_used": result.accountant,
            "answer_cap": result.answers_allowed, "noise_scale": result.noise_scale,
            "sensitivity": result.sensitivity, "answers_seen_per_run": result.answers_seen,
            "neighbouring": "replace-one: the two worlds differ in one record of this owner, n_i unchanged",
            "canary": result.canary, "epsilon_lower": result.epsilon_lower,
            "passed": result.passed, "verdict": result.verdict, "adversaries": result.rows()}


def write(result: AuditResult, out: Path, facts: dict, plots: bool = True) -> None:
    """The audit's directory (see the module's table), written whole or not at all."""
    with run_directory(out, identity(result, facts)) as staging:
        (staging / "scenario.toml").write_text(result.scenario.to_toml(), encoding="utf-8")
        (staging / "summary.json").write_text(files.dumps(summary(result, facts), indent=2) + "\n",
                                              encoding="utf-8")
        _csv(staging / "audit.csv", result.rows())
        _csv(staging / "scores.csv", score_rows(result))
        curves = roc_data(result)
        if plots and curves["curves"]:
            painter = Painter(enabled=False)
            painter.paint("audit_roc", curves, str(staging))


def score_rows(result: AuditResult) -> list[dict]:
    """Every run's score by each adversary of a two-world audit (none for the audit by one run)."""
    rows = []
    for a in result.audits:
        if not isinstance(a, ViewAudit):
            continue
        for world, scores in enumerate(a.scores):
            for run, score in enumerate(scores.tolist()):
                rows.append({"view": a.view, "world": world, "run": run,
                             "half": "threshold" if run < a.calibration else "count", "score": score})
    return rows


def roc_data(result: AuditResult) -> dict:
    """The plain lists ``audit_roc.png`` draws (:mod:`dpmarket.output.figures.audit`)."""
    curves = []
    for a in result.audits:
        if not isinstance(a, ViewAudit):
            continue
        fpr, tpr = auditing.roc(*a.evaluated())
        r = a.rates
        curves.append({"view": a.view, "fpr": fpr.tolist(), "tpr": tpr.tolist(), "runs": r.negatives,
                       "point": [r.false_positive_rate, 1.0 - r.false_negative_rate],
                       "fpr_upper": r.false_positive_upper, "fnr_upper": r.false_negative_upper,
                       "epsilon_lower": a.epsilon_lower})
    title = (f"{result.scenario.name}: audit of owner {result.owner} ({result.name}), "
             f"{result.runs:,} runs per world")
    return {"title": title, "epsilon": result.epsilon, "delta": result.delta, "curves": curves}


def _csv(path: Path, rows: list[dict]) -> None:
    """Rows of dicts as CSV (floats as repr: every digit), columns in order of first appearance."""
    header: list[str] = []
    for row in rows:
        header += [k for k in row if k not in header]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow([_cell(row.get(k, "")) for k in header])


def _cell(value):
    return repr(value) if isinstance(value, float) else value


def table(result: AuditResult, out: Path | None = None) -> str:
    """The audit as terminal text: the claim, one line per adversary, the verdict."""
    lines = [f"audit         {result.scenario.name} (seed {result.scenario.seed}): owner {result.owner} "
             f"({result.name}), {result.mechanism} noise, {result.accountant} accountant, m_i = "
             f"{result.answers_allowed}",
             f"claimed       (ε, δ) = ({result.epsilon:g}, {result.delta:g}), replace-one neighbours",
             f"canary        {result.canary}",
             f"runs          {result.runs:,}" + (" per world" if result.method == "worlds" else "")
             + f"; the owner answered {result.answers_seen:.3g} times per run on average"
             if result.method == "worlds" else f"runs          {result.runs:,} ({result.method})",
             ""]
    if result.method == "worlds":
        lines.append(f"{'adversary':<10} {'FP':>11} {'FN':>11} {'FPR <=':>8} {'FNR <=':>8} "
                     f"{'eps (est.)':>10} {'eps >= (conf.)':>16}")
    for a in result.audits:
        if isinstance(a, ViewAudit):
            r = a.rates
            lines.append(f"{a.view:<10} {r.false_positives:>5}/{r.negatives:<5} {r.false_negatives:>5}/"
                         f"{r.positives:<5} {r.false_positive_upper:>8.4f} {r.false_negative_upper:>8.4f} "
                         f"{r.epsilon_estimate:>10.4g} {a.epsilon_lower:>8.4g} ({1 - r.level:.1%})")
        else:
            lines.append(f"by one run  {a.correct:,} of {a.guesses:,} canaries guessed right: ε ≥ "
                         f"{a.epsilon_lower:.4g} ({1 - a.level:.0%} confidence)")
    lines += ["", f"verdict       {result.verdict}"]
    if out is not None:
        lines.append(f"written to    {out}")
    return "\n".join(lines)


def exit_status(result: AuditResult) -> int:
    """0 when the lower bound does not exceed the claim, :data:`VIOLATION` when it does."""
    return 0 if result.passed else VIOLATION

