"""What the terminal shows after an experiment: a short summary read from its output files."""

from __future__ import annotations

import csv
from pathlib import Path


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
        f"stopped by    {', '.join(f'{k} ({v})' for k, v in s['stop_reasons'].items())}",
        _figures_line(figures),
        f"time          {s['wall_seconds']:.2f} s wall on {_where(s)}",
        f"written to    {out}"])


def _guarantee_text(facts: dict) -> str:
    """The guarantee (:func:`dpmarket.privacy.guarantee`) with its δ when there is one."""
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
