"""An owner's privacy guarantee as one value: the mechanism, the accountant, ε and δ.

What an owner promises is that its m_i answers *together* are (ε_i, δ_i)-DP, with Laplace (L1
sensitivity) or Gaussian (L2) noise, composed by basic composition or by an RDP or PLD accountant.
These four travel together everywhere — into the calibration of the noise, the ledger, the forecast
and every output's statement of the guarantee — so they are one frozen value (as dp-accounting's
``DpEvent`` objects are), hashable so that owners with equal guarantees share their calibration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpmarket.scenario.schema import Privacy, Scenario

MECHANISMS = ("laplace", "gaussian")
ACCOUNTANTS = ("basic", "rdp", "pld")
NORMS = {"laplace": "L1", "gaussian": "L2"}  # the sensitivity each mechanism is calibrated to
ACCOUNTANT_NAMES = {"rdp": "RDP", "pld": "PLD (privacy-loss distribution)"}
STATEMENT_KEYS = ("mechanism", "accountant", "delta", "sensitivity_norm", "guarantee", "neighbouring")
# The neighbouring relation every guarantee here is stated for (Theorem 1: one answer's sensitivity is
# the largest shift between two such datasets). Add/remove is not covered: n_i is published (owners.csv,
# the learner's weights n_i/n) and sets the noise scale 2Ξm_i/(n_iε_i), so adding a record is visible.
NEIGHBOURING = ("replace-one: two datasets are neighbours when they differ in one record of one owner, "
                "every owner's number of records n_i being public and the same in both (add/remove "
                "neighbours are not covered: n_i is published and sets the noise)")
MISSING_DROP = ("data.table.missing = 'drop': rows with a missing value are left out before the owners are "
                "formed, so the guarantee covers the records that remain; whether a row was complete is "
                "treated as public, as n_i is (a record that turns incomplete changes n_i, which is "
                "published)")
SMALL_DROP = ("data.table.small_owners = 'drop' leaves out owners by their number of records alone: public "
              "under this relation, it reveals nothing more")


@dataclass(frozen=True)
class Guarantee:
    """m answers compose to (``epsilon``, ``delta``)-DP with ``mechanism`` noise under ``accountant``."""

    mechanism: str
    accountant: str
    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        # floats, so that equal guarantees hash alike whatever numeric type built them (caches)
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))

    @classmethod
    def of(cls, privacy: Privacy, epsilon: float = 1.0, delta: float | None = None) -> Guarantee:
        """A scenario's ``[privacy]`` guarantee at ``epsilon`` (an owner's own δ instead of the
        scenario's, when given)."""
        return cls(privacy.mechanism, privacy.accountant, epsilon, privacy.delta if delta is None else delta)

    @property
    def pure(self) -> bool:
        """Whether answers are pure ε-DP with an exact rational ledger: Laplace under basic composition,
        the papers' set-up (its noise, ledger and output bytes are those of Theorem 1 exactly)."""
        return self.mechanism == "laplace" and self.accountant == "basic"

    @property
    def norm(self) -> str:
        """The norm the sensitivity Ξ bounds (and clipping uses): L1 for Laplace, L2 for Gaussian."""
        return NORMS[self.mechanism]

    def at(self, epsilon: float) -> Guarantee:
        """The same guarantee at another ε."""
        return replace(self, epsilon=epsilon)

    def using(self, accountant: str) -> Guarantee:
        """The same (ε, δ) proved by another accountant."""
        return replace(self, accountant=accountant)

    def statement(self) -> dict:
        """The guarantee as every output states it (a run's, a replicated run's and a policy
        comparison's ``summary.json``, each cell of a sweep): the keys of :data:`STATEMENT_KEYS`,
        δ = 0 for pure ε-DP (the scenario's δ is not used there)."""
        if self.pure:
            text = "pure ε-DP: Laplace answers, basic composition (each of m_i answers spends ε_i/m_i)"
        elif self.accountant == "basic":
            text = (f"(ε, δ)-DP: {self.mechanism} answers, basic composition (each of m_i answers "
                    "spends ε_i/m_i and δ_i/m_i)")
        else:
            text = (f"(ε, δ)-DP: m_i {self.mechanism} answers composed by dp-accounting's "
                    f"{ACCOUNTANT_NAMES[self.accountant]} accountant")
        return {"mechanism": self.mechanism, "accountant": self.accountant,
                "delta": 0.0 if self.pure else self.delta, "sensitivity_norm": self.norm, "guarantee": text,
                "neighbouring": NEIGHBOURING}


NOISE = {
    "seeded": ("seeded: every draw comes from the run's seed, which scenario.toml and summary.json publish, "
               "so anyone holding them regenerates the noise (a simulator's reproducibility, not a "
               "deployment's secrecy; privacy.noise = 'system' draws from the operating system instead); "
               "numpy's textbook floating-point samplers (docs/how-to/privacy.md: Mironov 2012)"),
    "system": ("system: every draw comes from the operating system's secure generator (os.urandom), which "
               "nothing published regenerates; the run is not reproducible bit for bit; textbook "
               "floating-point samplers still (docs/how-to/privacy.md: Mironov 2012)"),
}


def stated(scenario: Scenario) -> dict:
    """A scenario's guarantee as its outputs state it (:meth:`Guarantee.statement`), the neighbouring
    relation with what a table's drop options mean for it, and where the noise comes from."""
    statement = Guarantee.of(scenario.privacy).statement()
    statement["noise"] = NOISE[scenario.privacy.noise or "seeded"]
    table = scenario.data.table if scenario.data.source == "table" else None
    notes = [n for n, on in ((MISSING_DROP, table is not None and table.missing == "drop"),
                             (SMALL_DROP, table is not None and table.small_owners == "drop")) if on]
    if notes:
        statement["neighbouring"] = "; ".join([NEIGHBOURING, *notes])
    return statement
