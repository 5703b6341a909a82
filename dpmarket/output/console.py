"""The text printed after a command: a run's key figures and the warnings that name the lever to pull,
an experiment's short summary read from its output files, and an audit's table and verdict."""

from __future__ import annotations

import csv
from pathlib import Path

from dpmarket.output.summary import summary
from dpmarket.runs.audit import AuditResult, ViewAudit
from dpmarket.runs.run import RunResult
from dpmarket.scenario.checks import BUDGET_KEYS


def summary_table(result: RunResult, out: Path, oracle: bool = True) -> str:
    """A short human-readable summary of a run, for the terminal (without ``oracle``, none of the
    oracle measurements: ψ, own-data ψ, who benefits)."""
    s = summary(result, oracle)
    eps = sorted({o.epsilon for o in result.owners})
    eps_text = f"{eps[0]:g}" if len(eps) == 1 else f"{eps[0]:g}…{eps[-1]:g}"
    sizes = result.consortium.sizes
    lines = [
        f"scenario      {s['scenario']} (seed {s['seed']})",
        f"owners        {s['owners']}  records {s['records']:,}  "
        f"(per owner {sizes.min():,}…{sizes.max():,})",
        f"model         {s['loss']} loss, {s['algorithm']} learner, ε = {eps_text}, "
        f"Ξ = {s['sensitivity']:.4g} ({s['sensitivity_norm']})",
        f"privacy       {s['guarantee']}" + (f"; δ = {s['delta']:g}" if s["delta"] else "")
        + ("; noise from the system's secure generator (not reproducible)"
           if s.get("noise", "").startswith("system") else ""),
        f"iterations    {s['iterations']} of {s['iterations_planned']} ({s['stop_reason']}); "
        f"queries {s['queries']}, refusals {s['refusals']}",
        *_network_lines(s),
        *_data_lines(s.get("data")),
        *_psi_lines(s),
        f"max ε spent   {s['epsilon_spent_max']:.4g}",
        *_market_lines(s),
        *_learner_lines(s),
        *diagnostic_lines(s["diagnostics"]),
        f"time          {s['simulated_time']:.4g} simulated, {s['wall_seconds']:.2f} s wall",
        f"written to    {out}",
    ]
    return "\n".join(lines)


def _psi_lines(s: dict) -> list[str]:
    """ψ against its yardsticks (oracle measurements), or why they are not shown."""
    if "psi_final" not in s:
        return ["psi           not written (--no-oracle: ψ, own-data ψ and who benefits are oracle "
                "measurements)"]
    return [f"psi final     {s['psi_final']:.4g}   (untrained θ = 0: {s['psi_zero']:.4g}; median own-data ψ "
            f"{s['own_psi_median']:.4g}; {s['owners_benefiting']} of {s['owners']} owners benefit; "
            "oracle measurements)"]


def _market_lines(s: dict) -> list[str]:
    if "policy" not in s:
        return []
    simulated = f" vs {s['psi_simulated']:.4g} simulated" if "psi_simulated" in s else ""
    source = s["forecast"]["source"] if "forecast" in s else "oracle: left out"
    return [f"market        {s['policy']}: {s['participants']} of {s['owners']} owners take part, "
            f"total payment {s['total_payment']:.4g}, learner surplus {s['learner_surplus']:.4g}",
            f"forecast      psi {s['psi_forecast']:.4g} forecast{simulated} ({source})", *_dynamic_lines(s)]


def _dynamic_lines(s: dict) -> list[str]:
    if s.get("market_mode") != "dynamic":
        return []
    return [f"in time       {s['rule']} price {s['price_opening']:.4g} -> {s['price_final']:.4g}, paid "
            f"{s['payment']}: {s['joins']} joins, {s['leaves']} leaves, {s['arrivals']} arrivals, "
            f"{s['payment_lost']:.4g} unpaid for lost answers"]


def _network_lines(s: dict) -> list[str]:
    if s["network_mode"] == "ideal":
        return []
    use = ", ".join(f"{u:.1%}" for u in s["channel_utilisation"][:8])
    more = " …" if len(s["channel_utilisation"]) > 8 else ""
    return [f"network       {s['network_mode']}: collisions {s['collisions']}, losses {s['losses']}, "
            f"dropouts {s['dropouts']}, idle slots {s['idle_slots']}; channel use {use}{more}"]


def _data_lines(report: dict | None) -> list[str]:
    """Table data: rows held out, dropped on purpose and clipped, so no change goes unseen."""
    if report is None:
        return []
    if "feature_values_clipped" not in report:  # --no-oracle: the counts that read the private rows
        return [f"data          {report['rows_read']:,} rows read; hold-out {report['holdout_rows']:,}; "
                f"{report['features']} features (counts of the private rows: oracle, not written)"]
    left_out = report["owners_below_min_records"] + report["owners_beyond_max_owners"]
    rows_out = report["rows_below_min_records"] + report["rows_beyond_max_owners"]
    unseen = sum(report["unseen_categories"].values())
    return [f"data          {report['rows_read']:,} rows read; hold-out {report['holdout_rows']:,}; "
            f"dropped {report['rows_dropped_missing']:,} with missing values; left out {left_out} "
            f"owners ({rows_out:,} rows)",
            f"              {report['features_encoded']} encoded columns -> {report['features']} "
            f"features; clipped {report['feature_values_clipped']:,} feature values "
            f"({report['records_with_clipped_features']:,} records), {report['labels_clipped']:,} "
            f"labels; {unseen:,} category values unseen in the hold-out"]


def yardstick_warning(psi_final: float, psi_zero: float, policy: str | None = None) -> str | None:
    """The sentence saying that training did not beat the untrained model θ = 0, or None.

    A private model is only worth training where its ψ is below ψ(0); at or above it, the noise
    (or too large a step) has outweighed everything the owners' answers taught the learner. The
    advice names the lever on the budgets: privacy.epsilon, or in a market run (``policy``) the
    market's own key, since a market scenario refuses privacy.epsilon.
    """
    if not psi_final >= psi_zero:  # also None when either is NaN
        return None
    lever = "raise privacy.epsilon" if policy is None else budget_lever(policy)
    return (f"the trained model is no better than the untrained θ = 0 (psi {psi_final:.4g} ≥ "
            f"{psi_zero:.4g}): {lever} or revisit learner.rho")


def budget_lever(policy: str) -> str:
    """What buys larger budgets under market ``policy`` (the wording of the refusal of privacy.epsilon)."""
    return f"{BUDGET_KEYS[policy]} (market.policy = {policy!r} sets the budgets)"


def _learner_lines(s: dict) -> list[str]:
    """ρ with its stability number and the floor law's ψ; clipping's bound and share."""
    stability = "" if s["stability_number"] is None else (
        f", stability number {s['stability_number']:.3g} (limit {s['stability_limit']:g})")
    floor = "" if s.get("psi_floor_predicted") is None else (
        f"; noise-free floor (law) {s['psi_floor_predicted']:.3g}")
    lines = [f"step          ρ = {s['rho']:.4g} ({s['rho_source'].split(' from ')[0]}){stability}{floor}"]
    if "clip_bound" in s and "clipped_share" in s:
        lines.append(f"clipping      {s['sensitivity_norm']} bound {s['clip_bound']:.4g}; "
                     f"{s['clipped_share']:.3%} of per-example gradients clipped at the final model (oracle)")
    return lines


def warned(result: RunResult) -> bool:
    """Whether a diagnostic of ``result`` warns (``run --strict`` exits with status 3 then)."""
    from dpmarket.runs.diagnostics import after_run, warnings_in

    return warnings_in(after_run(result)) > 0


def diagnostic_lines(diagnostics: list[dict]) -> list[str]:
    """One line per diagnostic of summary.json (:mod:`dpmarket.runs.diagnostics`): its severity, what
    is wrong and what to change, its code, and "oracle figure" where it read the private records."""
    return [f"{d['severity']:<14}{d['message']} [{d['code']}{', oracle figure' if d['oracle'] else ''}]"
            for d in diagnostics]


# --- experiments (run --replications, sweep) ------------------------------------------------------

def _g(value: str) -> str:
    """A CSV number shortened for the terminal (text left as it is)."""
    try:
        return f"{float(value):.4g}"
    except ValueError:
        return value


def sweep_text(out: Path, meta: dict, figures: list[Path]) -> str:
    """The sweep's cells (swept values, ψ median and quartiles, own-data ψ, forecast) and the fit."""
    with open(out / "sweep.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    keys = [g["key"] for g in meta["grid"]]
    cols = ["cell", *keys, "psi_median", "psi_q25", "psi_q75", "own_psi_first", "forecast"]
    table = [cols] + [[_g(r[c]) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(cols))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)) for line in table]
    fit = meta["forecast"]
    fit_line = (f"forecast      c1 = {fit['c1']:.4g}, c2 = {fit['c2']:.4g}, R² (log) = {fit['r2']:.3f}, "
                f"rms relative error = {fit['rms_relative_error']:.3f} over {fit['points']} cells"
                if "c1" in fit else f"forecast      not fitted: {fit['error']}")
    return "\n".join([
        f"sweep         {meta['scenario']}: {meta['cells']} cells x {meta['replications']} replications "
        f"(seed {meta['seed']}, data seed {meta['data_seed']}; {meta['reused_replications']} reused)",
        *lines, *_privacy_lines(meta.get("privacy", [])), fit_line, _figures_line(figures),
        f"time          {meta['wall_seconds']:.2f} s wall on {_where(meta)}",
        f"written to    {out}"])


def replications_text(out: Path, s: dict, figures: list[Path]) -> str:
    """ψ_final over the replications against the own-data baselines."""
    return "\n".join([
        f"scenario      {s['scenario']} (seed {s['seed']}, data seed {s['data_seed']}): "
        f"{s['replications']} replications, {s['reused_replications']} reused",
        f"owners        {s['owners']}  records {s['records']:,}",
        f"psi final     median {s['psi_median']:.4g} [25-75 %: {s['psi_q25']:.4g} … {s['psi_q75']:.4g}]"
        f"  mean {s['psi_mean']:.4g}  (untrained θ = 0: {s['psi_zero']:.4g})",
        f"own-data psi  first owner {s['own_psi_first']:.4g}, median {s['own_psi_median']:.4g}; "
        f"share of owners benefiting {s['benefit_share_mean']:.1%} (mean over replications)",
        f"privacy       {_guarantee_text(s)}",
        f"stopped       {_stop_reasons(s['stop_reasons'], s['replications'])}",
        _figures_line(figures),
        f"time          {s['wall_seconds']:.2f} s wall on {_where(s)}",
        f"written to    {out}"])


# What each stop reason of a replication means, in words (the reason itself is in replications.csv).
STOP_WORDS = {"iterations": "at T (learner.iterations)", "budgets exhausted": "every budget spent before T",
              "horizon": "at network.horizon before T"}


def _stop_reasons(reasons: dict, replications: int) -> str:
    """``all 20 replications at T (learner.iterations)``, or each reason with its count of R."""
    if len(reasons) == 1:
        (reason, count), = reasons.items()
        every = "the one replication" if count == 1 else f"all {count} replications"
        return f"{every} {STOP_WORDS.get(reason, f'by {reason}')}"
    return "; ".join(f"{count} of {replications} replications {STOP_WORDS.get(reason, f'by {reason}')}"
                     for reason, count in reasons.items())


def _guarantee_text(facts: dict) -> str:
    """The guarantee (:func:`dpmarket.privacy.mechanisms.guarantee`) with its δ when there is one."""
    return facts["guarantee"] + (f"; δ = {facts['delta']:g}" if facts["delta"] else "")


def _privacy_lines(guarantees: list[dict]) -> list[str]:
    """The sweep's guarantee, or one line per distinct guarantee with the cells it covers."""
    if len(guarantees) == 1:
        return [f"privacy       {_guarantee_text(guarantees[0])}"]
    return [f"privacy       cells {','.join(map(str, g['cells']))}: {_guarantee_text(g)}" for g in guarantees]


def _figures_line(figures: list[Path]) -> str:
    return f"figures       {', '.join(p.name for p in figures) or 'none (output.plots = false)'}; report.html"


def _where(meta: dict) -> str:
    if meta["scheduler"]:
        return f"the Dask cluster at {meta['scheduler']}"
    return f"{meta['executor']} x {meta['workers']}"


# --- an audit (``dpmarket audit``) ----------------------------------------------------------------

# Exit status of an audit: 0 for a pass, VIOLATION when the lower bound exceeds the claim, INCONCLUSIVE
# when it does not but the runs could not have shown a violation near the claim (never 0: a script that
# tests the status must not read it as a pass); 2 is a user error.
VIOLATION = 3
INCONCLUSIVE = 4


def audit_table(result: AuditResult, out: Path | None = None) -> str:
    """The audit as terminal text: the claim, one line per adversary, the verdict."""
    lines = [f"audit         {result.scenario.name} (seed {result.scenario.seed}): owner {result.owner} "
             f"({result.name}), {result.mechanism} noise, {result.accountant} accountant, m_i = "
             f"{result.answers_allowed}",
             f"claimed       (ε, δ) = ({result.epsilon:g}, {result.delta:g}), replace-one neighbours",
             f"canary        {result.canary}",
             f"runs          {result.runs:,}" + (" per world" if result.method == "worlds" else "")
             + f"; the owner's answers per run: {result.answers_seen:.3g} on average"
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
    lines.append("")
    if result.power_measured:
        lines.append(f"detectable    {result.detectable}: the least violation these runs catch")
    lines.append(f"verdict       {result.conclusion}")
    if out is not None:
        lines.append(f"written to    {out}")
    return "\n".join(lines)


def audit_exit_status(result: AuditResult) -> int:
    """0 for a pass, :data:`VIOLATION` for a fail, :data:`INCONCLUSIVE` for an inconclusive audit."""
    return {"pass": 0, "fail": VIOLATION, "inconclusive": INCONCLUSIVE}[result.verdict]
