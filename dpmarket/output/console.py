"""The text printed after a run: key figures, and warnings that name the lever to pull."""

from __future__ import annotations

from pathlib import Path

from dpmarket.output.summary import summary
from dpmarket.run import RunResult
from dpmarket.scenario import BUDGET_KEYS


def summary_table(result: RunResult, out: Path) -> str:
    """A short human-readable summary of a run, for the terminal."""
    s = summary(result)
    eps = sorted({o.epsilon for o in result.owners})
    eps_text = f"{eps[0]:g}" if len(eps) == 1 else f"{eps[0]:g}…{eps[-1]:g}"
    sizes = result.consortium.sizes
    lines = [
        f"scenario      {s['scenario']} (seed {s['seed']})",
        f"owners        {s['owners']}  records {s['records']:,}  "
        f"(per owner {sizes.min():,}…{sizes.max():,})",
        f"model         {s['loss']} loss, {s['algorithm']} learner, ε = {eps_text}, "
        f"Ξ = {s['sensitivity']:.4g} ({s['sensitivity_norm']})",
        f"privacy       {s['guarantee']}" + (f"; δ = {s['delta']:g}" if s["delta"] else ""),
        f"iterations    {s['iterations']} of {s['iterations_planned']} ({s['stop_reason']}); "
        f"queries {s['queries']}, refusals {s['refusals']}",
        *_network_lines(s),
        *_data_lines(s.get("data")),
        f"psi final     {s['psi_final']:.4g}   (untrained θ = 0: {s['psi_zero']:.4g}; median own-data ψ "
        f"{s['own_psi_median']:.4g}; {s['owners_benefiting']} of {s['owners']} owners benefit)",
        f"max ε spent   {s['epsilon_spent_max']:.4g}",
        *_market_lines(s),
        *_learner_lines(s),
        *_yardstick_warning(s["psi_final"], s["psi_zero"], s.get("policy")),
        *_stability_warning(s["step_curvature_max"]),
        f"time          {s['simulated_time']:.4g} simulated, {s['wall_seconds']:.2f} s wall",
        f"written to    {out}",
    ]
    return "\n".join(lines)


def _market_lines(s: dict) -> list[str]:
    if "policy" not in s:
        return []
    return [f"market        {s['policy']}: {s['participants']} of {s['owners']} owners take part, "
            f"total payment {s['total_payment']:.4g}, learner surplus {s['learner_surplus']:.4g}",
            f"forecast      psi {s['psi_forecast']:.4g} forecast vs {s['psi_simulated']:.4g} simulated "
            f"({s['forecast']['source']})", *_dynamic_lines(s)]


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
    floor = "" if s["psi_floor_predicted"] is None else (
        f"; noise-free floor (law) {s['psi_floor_predicted']:.3g}")
    lines = [f"step          ρ = {s['rho']:.4g} ({s['rho_source'].split(' from ')[0]}){stability}{floor}"]
    if "clip_bound" in s:
        lines.append(f"clipping      {s['sensitivity_norm']} bound {s['clip_bound']:.4g}; "
                     f"{s['clipped_share']:.3%} of per-example gradients clipped at the final model")
    return lines


def _yardstick_warning(psi_final: float, psi_zero: float, policy: str | None) -> list[str]:
    warning = yardstick_warning(psi_final, psi_zero, policy)
    return [] if warning is None else [f"warning       {warning}"]


def _stability_warning(curvature: float | None) -> list[str]:
    if curvature is None or curvature <= 2.0:
        return []
    return [f"warning       largest owner step x curvature = {curvature:.3g} > 2: the largest "
            f"owners' copies oscillate; lower learner.rho"]
