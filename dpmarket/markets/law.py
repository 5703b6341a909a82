"""The forecast law: ψ̂ of any coalition from N, T, ρ, the answer caps and the budgets.

Theorem 2's form (dpmarket/markets/forecast.py) has one floor for coalitions of every size and
noise that falls as Σε⁻²/n²; with the capped split and ρ = "auto" neither holds, so a market
that extrapolates from it buys badly. The law follows Algorithm 1 instead. For a coalition S of
N members with n records, share_i = n_i/n, clock-rate share π_i = λ_i/Σ_S λ, step ρ_S (the given
number, or ``auto_rho`` with S's largest share), m_i = ``answer_cap(split, T, π_i, cap_i, quantile)``,
Laplace scale b_i = 2Ξm_i/(n_iε_i) and η = ρ_S/(T²σ(N+1)), σ = 2λ:

- **floor** F_S = ``floor_law(ρ_S, N, T, λ, h, w, shares)``: the N+1 copies' mean is a gradient flow
  of length ηT, which leaves Σ_j w_j exp(−2ηTh_jκ_j) of ψ(0), κ_j ≤ 1 the slowdown of unequal shares
  (a member with most of the records moves its own copy most of the way, and θ_L learns of it only
  at their meetings: dpmarket/learning/stepsize.py ``floor_slowdown``, from the members' largest
  share, Σ share² and Σ share³) (h_j from the public proxy; w_j, which
  θ*'s draw sets, in expectation over the populations a synthetic scenario's generator declares —
  one twin's θ* is another draw than the owners' — dpmarket/data/proxy.py ``population_weights``);
- **bias** B_S = Σ_i (share_i^S − n_i/n_all)² g_i: a coalition converges to its own optimum θ*_S,
  not to everyone's. With owner deviations δ_i drawn independently, θ*_S − θ* = Σ_i (share_i^S −
  share_i)δ_i, whose expected ψ is that sum with g_i = E δ_iᵀHδ_i/(2f*); g_i is estimated from the
  proxy's owners, pooled across owners in proportion to their declared heterogeneity (synthetic
  data with shifts: a·shift_i² + b/n_i, the declared shift plus the sampling error of n_i records,
  a and b fitted to the proxy's owners; otherwise — a table's hold-out split, or no shift — 1/n_i,
  sampling noise alone), because one proxy draw per owner is too noisy to tell owners apart;
- **noise** V_S: each update moves the copies' mean by Nη·share_i·(gradient + w_i), w_i Laplace
  with variance 2b_i² per coordinate (Gaussian: σ_i²), i asked with probability π_i, so per step the
  mean takes noise of variance q = (Nη)² Σ_i π_i share_i² 2b_i², and in eigen-mode j after T steps
  Var_j = q(1 − r_j^T)/(1 − r_j), r_j = (1 − ηh_j)². The published model is θ_L, not the mean:
  θ_L has just been averaged with the copy of the owner asked last, which carries that owner's
  whole last noise step ((N+1)² times q). Solving the stationary second moments of the copies'
  offsets for uniform selection gives Var(θ_L − mean) = q·N(N²+N+2)/(2(N+1)) and
  2Cov(mean, θ_L − mean) = −4qN/(N+1) (both checked by Monte Carlo): for N = 10 that jitter is
  about half the mean's variance at ρ = "auto", for N = 86 four times it. V_S = Σ_j h_j(Var_j +
  jitter)/(2f*);
- **selection** S_S: without any noise the copy of owner i still moves along its own data term's
  gradient g_i(θ*), which differs from owner to owner. With owners drawn at random these are
  zero-mean kicks Nη·share_i·g_i to the mean, which accumulate like the noise; but an owner's kick
  is the same at each of its exchanges, so its copy sits at a persistent offset and θ_L takes half
  of it whenever that owner is asked — a kick on θ_L itself, which jitters it by (N+1)² more (in
  units of q) than a noise draw entering a copy, and which the copy's own pull a_j = (N+1)ηh_j
  shrinks by 1 + a_j (``selection_modes``; the stationary second moments, solved exactly): S_S =
  Σ_j h_j (Nη)² Σ_i π_i share_i² Γ^S_ij (Var_j/q + jitter + (N+1)²)/((1 + a_j)²·2f*). The copies
  settle at the coalition's own optimum θ*_S, so a member's kick is its gradient there, of expected
  square Γ^S_ij = (1 − 2share_i)Γ_ij + Σ_k share_k²Γ_kj (``kicks_at_optimum``), with Γ_ij =
  E(v_jᵀg_i)² the gradient of owner i's own deviation, pooled from the proxy's owners like g_i: a
  member with most of the records kicks little (taking Γ_ij for it forecast twice the noise-free ψ of
  six owners with a leader of 75 %), equal members (1 − 1/N) as much. Counted as noise draws, S_S fell
  to half the simulated noise-free ψ at N = 40. It is what remains of the noise-free ψ once the floor has
  decayed (small owners, owners that differ) — most of ψ under logistic loss, whose answers carry
  little noise.

With an RDP or PLD accountant, or Gaussian answers (dpmarket/privacy/accounting.py), the noise is not b_i =
2Ξm_i/(n_iε_i) but z(m_i, ε_i, δ_i)·2Ξ/n_i, z the multiplier that makes m_i answers compose to
(ε_i, δ_i), Ξ in the mechanism's norm; the noise term takes that z (from the shared interpolation
tables, within 10⁻³ of the owners' exact calibration) in place of m_i/ε_i, so one market can be
compared under basic and tight accounting. Owners sell ε at the scenario's δ_i.

**The box** Θ = {‖θ‖∞ ≤ θmax} bounds what noise can do: when noise swamps every answer each copy
is clipped to a face of Θ after its step, and θ_L, which is averaged with the copy it meets at every
exchange (θ_L ← (θ_L + θ_i)/2: θ_L = Σ_k 2⁻ᵏ of the copies it met), is Σ 2⁻ᵏ·(±θmax) per coordinate —
uniform on Θ: ψ tends to ψ_box = ψ(0) + θmax²·tr(H)/(6f*) (measured where V exceeds ψ_box 300-fold:
0.93–1.19 ψ_box on eight coalitions of 4 to 40 owners). On the way there (``forecast.saturated``),
a copy of second moment u·θmax² per coordinate gives θ_L u/3 unclipped, so u = V/(ψ_box − ψ(0));
clipped, the copy keeps g(u) = E Π_Θ(X)² for X of the answers' noise (Laplace or Gaussian) and θ_L a
third of that; the faces, centred on 0 rather than θ*, pull θ_L's mean back to 0 by the clipped share
P(u), which costs P²·ψ(0). Copy by copy (``copy_spread``: an owner that sells little ε has a copy
far noisier than the others', clipped while theirs are not), with θ_L meeting copy i at a share π_i:
sat(V) = (ψ_box − ψ(0))·Σ_i π_i g(u_i) + ψ(0)·(Σ_i π_i P(u_i))². It approaches ψ_box as 1/sqrt(V) —
a copy lands inside Θ with a probability of about θmax over its noise scale — where the harmonic
1/ψ = 1/V + 1/ψ_box used before approached it as 1/V and overshot simulations by up to ×1.7 (a
market's 14 equal banks) and ×2.8 (13 banks selling different ε). Checked against a scalar
Monte Carlo of Algorithm 1's copies (``benchmarks/bench_forecast_markets.py --saturation``: one
coordinate, 4 to 22 owners, their noise equal or spread as owners selling different ε, 60 settings):
the simulated E θ_L²/(θmax²/3) over the law's is 0.76–1.49, median 1.01, 54 of 60 within ×1.25 (the
harmonic: 0.34–1.06, 16 of 60). At u = 0.1 it lowers V by 6 % (Laplace answers; 0.3 % Gaussian),
exponentially less below.

**The copies' shared mean** (``forecast.blended``, ``shared_parts``): that picture redraws every copy at
each exchange, right when one copy's noise step swamps Θ. When a step is small against Θ (few owners, a
weak pull towards θ*) the copies follow their slowly wandering mean, and the box clips that mean: the
copies alone forecast 16–19 % too little there (policies with ψ̂ at 0.1–0.6 ψ_box on eleven
development designs). Where the mean's unclipped variance exceeds 0.01 θmax², its density is the
stationary one of its clipped moves (``forecast.shared_mean``), θ_L given the mean in closed form, and
the two pictures are weighed by the share of one step the box clips (``forecast.step_lost``).

**Updates.** A coalition makes at most U_S = min(T, Σ_{i∈S} m_i) updates: with the capped split and
caps given, every member may run out of answers well before T (4 owners of 3 answers each stop at
12 updates of T = 100,000), and the run ends there. The floor, the mean's variance and the
selection kicks then run over U_S updates of the step η the learner was planned with for T (the
step depends on T, the run's length on the caps); U_S = T otherwise, and the law is as above.

ψ̂_S = c₀·(F_S + B_S + S_S) + sat(c₂·V_S), with multipliers c₀, c₂ ≥ 0: 1 and 1 for the uncalibrated
law (``market.forecast = "law"``), or fitted to pilot runs on the public proxy (dpmarket/runs/pilots.py):
the pilots train on one twin, so they are fitted with the law on that twin's w_j (``LawInputs.on_twin``)
and applied to the expectation.
Everything the law reads is public: sizes, clock rates, caps, T, λ, Ξ, ρ's recipe and the proxy's
summary (dpmarket/data/proxy.py); never the owners' records.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from dpmarket.errors import CalibrationError, ScenarioError
from dpmarket.learning.stepsize import auto_rho, copy_step, floor_law
from dpmarket.markets.forecast import member_masks, saturated
from dpmarket.markets.members import Prefixes, Subsets, as_members
from dpmarket.privacy.cohort import sensitivity
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.privacy.mechanisms import answer_caps

ROOM = 1e300  # as dpmarket/data/magnitudes.py: the largest magnitude a derived quantity may reach
CHUNK = 2048  # coalitions evaluated at once: bounds the (K, N) and (K, p) temporaries
FLOOR_ROWS = 256  # calls of at most this many coalitions look their floors up (coalition_floors)
FLOOR_BLOCK = 4096  # coalitions whose floors are solved at once: (rows, p) temporaries of a few 100 kB
FLOOR_CACHE = 200_000  # floors kept per law's inputs (each cache) before it starts afresh


@dataclass(frozen=True, eq=False)
class LawInputs:
    """The public arrays (one entry per owner) and scalars the law needs, validated finite."""

    clock_rates: np.ndarray  # λ_i
    caps: np.ndarray  # cap_i of [[owners]] or privacy.cap; NaN where none is given
    heterogeneity: np.ndarray  # g_i (module docstring)
    selection: np.ndarray  # (N, p) Γ_ij: owner i's squared data-term gradient at θ* along mode j
    iterations: int  # T
    lam: float  # λ
    sensitivity: float  # Ξ
    split: str  # privacy.split
    quantile: float  # privacy.cap_quantile
    rho: float | None  # the given ρ; None for "auto" (then ``auto`` holds its recipe)
    auto: tuple[float, float, float, float]  # (curvature L̂, h_min, decay, fraction) for ρ = "auto"
    inverse_frequency: bool  # learner.weighting = "inverse_frequency": answers scaled by 1/(Nπ_i)
    eigenvalues: np.ndarray  # h_j of the proxy's ∇²f
    floor_weights: np.ndarray  # w_j of the floor law
    f_star: float  # f* of the proxy
    source: str  # the proxy these came from
    noise: NoiseModel | None = None  # (ε, δ) answers; None: Laplace under basic composition (m_i/ε_i)
    box: float = np.inf  # ψ_box: ψ of a model spread uniformly over Θ (module docstring); inf: no box
    sampling: np.ndarray | None = None  # per owner, the share of g_i, Γ_i that sampling its n_i records
    #                                     makes (the rest: its declared shift); None: all of it
    drawn_weights: np.ndarray | None = None  # w_j of the one twin the pilots ran on, where floor_weights
    #                                           are their expectation over the populations; None: the same

    def on_twin(self) -> LawInputs:
        """These inputs with the floor weights of the one twin the pilots train on (and its ψ_box):
        what the pilots' ψ is measured against, so what the multipliers are fitted with. The
        market's forecast keeps the expectation over the populations (module docstring)."""
        if self.drawn_weights is None:
            return self
        box = self.box - self.box_zero + float(np.sum(self.drawn_weights))
        return replace(self, floor_weights=self.drawn_weights, box=box, drawn_weights=None)

    @property
    def box_zero(self) -> float:
        """ψ(0) = Σ_j w_j: the part of ψ_box that θ*'s offset makes (forecast.saturated)."""
        return float(np.sum(self.floor_weights))

    @property
    def noise_shape(self) -> str:
        """The answers' noise, which shapes how a clipped copy spreads (forecast.saturated)."""
        return "laplace" if self.noise is None else self.noise.mechanism

    @cached_property
    def rate_values(self) -> np.ndarray:
        """The distinct clock rates, ascending (owners of one rate share m in a coalition)."""
        return np.unique(self.clock_rates)

    @cached_property
    def floors(self) -> dict:
        """Floors computed so far, by coalition (:func:`coalition_floors`): a market asks for the same
        coalitions again and again, at other ε (price searches; the lab's misreports and splits
        re-settle every policy), and a floor — a root per mode — does not depend on ε."""
        return {}

    @cached_property
    def floor_blocks(self) -> dict:
        """Floors of large calls computed so far, by block of coalitions (:func:`coalition_floors`):
        the lab asks for the same subsets again at each policy's ε (Shapley values, the welfare
        search, a procurement's misreports)."""
        return {}


def coalition_rho(inputs: LawInputs, owners: np.ndarray, share_max: np.ndarray) -> np.ndarray:
    """ρ_S per coalition: the given ρ, or ρ = "auto" for its N and largest share (as a run derives it)."""
    if inputs.rho is not None:
        return np.full(np.shape(owners), inputs.rho)
    curvature, h_min, decay, fraction = inputs.auto
    return np.asarray(auto_rho(owners, inputs.iterations, inputs.lam, share_max, curvature, h_min=h_min,
                               decay=decay, fraction=fraction), dtype=float)


def jitter(owners: np.ndarray) -> np.ndarray:
    """Var(θ_L − mean) + 2Cov(mean, θ_L − mean) in units of q (module docstring), per coalition size."""
    N = np.asarray(owners, dtype=float)
    return N * (N * N + N + 2) / (2 * (N + 1)) - 4 * N / (N + 1)


def mean_variance(eta: np.ndarray, eigenvalues: np.ndarray, iterations: int | np.ndarray) -> np.ndarray:
    """Σ_{t<T} (1 − ηh_j)^{2t} per coalition and mode: the mean's noise variance in units of q
    (``iterations``: T, or U_S per coalition)."""
    r = (1.0 - eta[:, None] * eigenvalues[None, :]) ** 2
    steps = iterations if np.ndim(iterations) == 0 else np.asarray(iterations, dtype=float)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(r == 1.0, np.broadcast_to(steps, r.shape).astype(float), (1.0 - r**steps) / (1.0 - r))


def owner_weights(inputs: LawInputs) -> np.ndarray:
    """a_i with π_i·w_i² = a_i·F_S for a member i of S (:func:`clock_factor` gives F_S).

    π_i = λ_i/Λ_S is how often i is asked and w_i the factor on its answer: 1, or 1/(Nπ_i) with
    ``learner.weighting = "inverse_frequency"`` (Remark 4's reweighting), where π_i·w_i² = Λ_S/(N²λ_i).
    """
    return 1.0 / inputs.clock_rates if inputs.inverse_frequency else inputs.clock_rates


def cap_groups(inputs: LawInputs) -> np.ndarray:
    """(N, R + 1): per distinct clock rate r, its owners without a cap of their own (they share
    m(r/Λ_S) in a coalition); last column, cap_i² of the owners whose cap is given (m = cap)."""
    given = ~np.isnan(inputs.caps) if inputs.split == "capped" else np.zeros(len(inputs.caps), bool)
    groups = (inputs.clock_rates[:, None] == inputs.rate_values[None, :]) & ~given[:, None]
    return np.column_stack([groups, np.where(given, np.nan_to_num(inputs.caps) ** 2, 0.0)])


@dataclass(frozen=True)
class NoiseModel:
    """How owners' noise follows (m_i, ε_i) when it is not Theorem 1's m_i/ε_i: the mechanism, the
    accountant and each owner's δ_i (dpmarket/privacy/accounting.py's tables give the multiplier z)."""

    mechanism: str
    accountant: str
    deltas: np.ndarray  # δ_i per owner
    reference_epsilon: float  # where procurement's noise weights are read (z² ∝ ε⁻² only roughly)

    @property
    def variance_factor(self) -> float:
        """Per-coordinate variance over (z·Δ)², halved: 1 for Laplace (2b²), ½ for Gaussian (σ²);
        the law's 8Ξ²/n² already holds Laplace's 2."""
        return 1.0 if self.mechanism == "laplace" else 0.5

    def squared(self, answers: np.ndarray, epsilons: np.ndarray,
                deltas: np.ndarray | None = None) -> np.ndarray:
        """variance_factor·z² per entry of (m, ε, δ) arrays (δ: the owners' δ_i, owners along the last
        axis, unless given)."""
        from dpmarket.privacy.accounting import multipliers

        deltas = self.deltas if deltas is None else deltas
        z = multipliers(self.mechanism, self.accountant, answers, epsilons, deltas)
        return self.variance_factor * z * z


@dataclass(frozen=True)
class Coalitions:
    """Per coalition: its size, records, clock rates, ρ, η and the sums over its members the law needs.

    Every sum over members comes from one product of the mask with a matrix of per-owner columns
    (BLAS), or from running sums along orders for prefixes (members.py), never a (coalitions ×
    owners) loop: sampled Shapley values ask for tens of thousands of coalitions of 86 owners.
    """

    owners: np.ndarray  # N_S
    records: np.ndarray  # n_S
    totals: np.ndarray  # Λ_S = Σ_S λ: the members' clock rates added up
    rho: np.ndarray  # ρ_S
    eta: np.ndarray  # η_S = ρ_S/(T²σ(N_S+1))
    shares: tuple  # (largest share, Σ_S share_i², Σ_S share_i³) of the members' records: what slows the floor
    bias: np.ndarray  # (K, 2): Σ_S n_i²g_i, Σ_S n_i s_i g_i
    kicks: np.ndarray  # (K, p): Σ_S a_i n_i² Γ^S_ij, the members' kicks at θ*_S (kicks_at_optimum)
    noise: np.ndarray | None  # (K, R + 1): Σ_S a_i ε_i⁻² per cap group (None: no ε given)
    members: object = None  # the coalitions (Masks or Prefixes), for (ε, δ) noise
    epsilons: np.ndarray | None = None  # ε as given, for (ε, δ) noise
    answers: np.ndarray | None = None  # (K, R + 1): members per rate without a cap, Σ_S given caps


def coalitions_of(inputs: LawInputs, records: np.ndarray, coalitions,
                  epsilons: np.ndarray | None = None) -> Coalitions:
    """What the law needs to know about each coalition (a mask's non-empty rows, or prefixes of
    orders: dpmarket/markets/members.py) at ``epsilons`` ((N,) or (K, N); non-members' unused)."""
    members = as_members(coalitions)
    a, s, g = owner_weights(inputs), records / records.sum(), inputs.heterogeneity
    columns = [np.ones_like(records), records, inputs.clock_rates, records**2, records**3, records**2 * g,
               records * s * g,
               (a * records**2)[:, None] * inputs.selection, (a * records**3)[:, None] * inputs.selection,
               (records**2)[:, None] * inputs.selection, a * records**2]
    inverse = None
    if epsilons is not None:
        eps = np.asarray(epsilons, dtype=float)
        inverse = 1.0 / np.square(np.where(eps > 0, eps, 1.0))  # 0 (declined) for non-members: unused
        if inverse.ndim == 1:  # one ε per owner for every coalition: a column like the others
            columns.append((a * inverse)[:, None] * cap_groups(inputs))
    counted = inputs.split == "capped"  # only caps can end a run before T (the horizon split's m_i = T)
    if counted:  # last columns: members per rate without a cap of their own, and their given caps
        groups = cap_groups(inputs)
        columns.append(np.column_stack([groups[:, :-1], np.sqrt(groups[:, -1])]))
    sums = members.sums(np.column_stack(columns))
    answers = sums[:, -(len(inputs.rate_values) + 1):] if counted else None
    owners, n, totals, p = sums[:, 0], sums[:, 1], sums[:, 2], len(inputs.eigenvalues)
    noise = None
    if inverse is not None:  # Σ_S a_i ε_i⁻² per cap group
        groups = len(inputs.rate_values) + 1
        noise = (sums[:, 8 + 3 * p:8 + 3 * p + groups] if inverse.ndim == 1 else
                 members.weighted_sums(inverse, a[:, None] * cap_groups(inputs)))
    share_max = members.largest(records) / n
    rho = coalition_rho(inputs, owners, share_max)
    eta = copy_step(rho, owners, inputs.iterations, inputs.lam)
    return Coalitions(owners, n, totals, rho, eta, (share_max, sums[:, 3] / n**2, sums[:, 4] / n**3),
                      sums[:, 5:7], kicks_at_optimum(sums[:, 7:8 + 3 * p], n, p), noise, members,
                      None if epsilons is None else np.asarray(epsilons, dtype=float), answers)


def kicks_at_optimum(sums: np.ndarray, records: np.ndarray, p: int) -> np.ndarray:
    """(K, p): Σ_S a_i n_i² Γ^S_ij, member i's squared gradient along mode j at the coalition's own
    optimum θ*_S, from the member sums Σ a n²Γ_j, Σ a n³Γ_j, Σ n²Γ_j and Σ a n² (``sums``, in that
    order; n the coalition's records).

    Γ_ij is how far owner i's own optimum lies from the population's, δ_i, seen as a gradient: the
    owners' draws are independent (module docstring). The copies settle at θ*_S, where member i's data
    term has the gradient H(θ*_S − θ*_i) = H(Σ_k s_kδ_k − δ_i), s_k = n_k/n over the members: of
    expected square (1 − 2s_i)Γ_ij + Σ_k s_k²Γ_kj, not Γ_ij. A member with most of the records has its
    own optimum nearly where the coalition's is and kicks little; equal members kick (1 − 1/N) as
    much.
    """
    direct, cubes, squares = sums[:, :p], sums[:, p:2 * p], sums[:, 2 * p:3 * p]
    weights = sums[:, 3 * p:3 * p + 1]
    n = np.asarray(records, dtype=float)[:, None]
    # each member's term is (1 − s_i)²Γ_ij + Σ_{k≠i} s_k²Γ_kj ≥ 0: only rounding goes below
    return np.maximum(direct - 2.0 * cubes / n + weights * squares / (n * n), 0.0)


def coalition_updates(inputs: LawInputs, c: Coalitions) -> np.ndarray | None:
    """U_S = min(T, Σ_{i∈S} m_i) per coalition: the updates its members' answers allow (module
    docstring); None where no cap can end a run before T."""
    if c.answers is None:
        return None
    allowed = np.sum(c.answers[:, :-1] * cap_grid(inputs, c), axis=1) + c.answers[:, -1]
    return np.minimum(allowed, float(inputs.iterations))


def clock_factor(inputs: LawInputs, c: Coalitions) -> np.ndarray:
    """F_S with π_i·w_i² = a_i·F_S (:func:`owner_weights`): 1/Λ_S, or Λ_S/N² with inverse frequency."""
    return c.totals / c.owners**2 if inputs.inverse_frequency else 1.0 / c.totals


def cap_grid(inputs: LawInputs, c: Coalitions) -> np.ndarray:
    """M (K, R): m of an owner of the r-th distinct clock rate without a cap, in each coalition.

    π = r/Λ_S takes few values (one per rate and coalition total), so m is computed on that grid by
    :func:`answer_caps` — the very numbers each owner budgets with.
    """
    if len(c.totals) == 1:  # one coalition (a price search asks hundreds of times): no sorting
        totals, which = c.totals, np.zeros(1, dtype=np.intp)
    else:
        totals, which = np.unique(c.totals, return_inverse=True)
    shares = np.minimum(inputs.rate_values[:, None] / totals[None, :], 1.0)  # > 1 only for owners outside
    grid = answer_caps(inputs.split, inputs.iterations, shares, np.nan, inputs.quantile)
    return grid[:, np.ravel(which)].T


def caps_of(inputs: LawInputs, c: Coalitions) -> np.ndarray:
    """m_i of every owner in every coalition (K, N), as a member would budget them (mask the others)."""
    m = cap_grid(inputs, c)[:, np.searchsorted(inputs.rate_values, inputs.clock_rates)]
    return m if inputs.split != "capped" else np.where(np.isnan(inputs.caps), m, inputs.caps)


def noise_per_step(inputs: LawInputs, c: Coalitions) -> np.ndarray:
    """q per coalition: the variance per coordinate the copies' mean takes at one exchange.

    q = (Nη)² Σ_i π_i w_i² share_i² 2b_i², and share_i·b_i = 2Ξm_i/(n_S ε_i), so
    q = (Nη)² (8Ξ²/n_S²) F_S Σ_i a_i m_i² ε_i⁻², the sum taken per cap group (m shared, or a cap).
    With (ε, δ) noise m_i/ε_i becomes z(m_i, ε_i, δ_i) (times ½ for the Gaussian's σ² against 2b²).
    """
    if inputs.noise is None:
        total = np.sum(c.noise[:, :-1] * cap_grid(inputs, c) ** 2, axis=1) + c.noise[:, -1]
    else:
        total = composed_noise(inputs, c)
    scale = (c.owners * c.eta) ** 2 * 8.0 * inputs.sensitivity**2 / c.records**2
    return scale * clock_factor(inputs, c) * total


def composed_noise(inputs: LawInputs, c: Coalitions) -> np.ndarray:
    """Σ_{i∈S} a_i·variance_factor·z(m_i, ε_i, δ_i)² per coalition, m_i as each member budgets it."""
    return owner_noise(inputs, c, member_masks(c.members, len(inputs.clock_rates))).sum(axis=1)


def owner_noise(inputs: LawInputs, c: Coalitions, masks: np.ndarray) -> np.ndarray:
    """(K, N): each member's term of the noise sum (a_i·(m_i/ε_i)², or a_i·variance_factor·z_i² for
    (ε, δ) noise; 0 outside the coalition), m_i as each member budgets it."""
    eps = np.broadcast_to(c.epsilons, masks.shape)
    caps = caps_of(inputs, c)
    if inputs.noise is None:  # dense arithmetic: cheaper than picking the members out
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.square(caps / eps) * owner_weights(inputs)
        return np.where(masks, values, 0.0)
    deltas = np.broadcast_to(inputs.noise.deltas, masks.shape)[masks]
    per_owner = np.zeros(masks.shape)
    per_owner[masks] = inputs.noise.squared(caps[masks], eps[masks], deltas)  # members only
    return per_owner * owner_weights(inputs)


def alike_copies(inputs: LawInputs, c: Coalitions) -> bool:
    """Whether every member's copy is as spread as any other's in every coalition (r_i = 1 in
    :func:`copy_spread`): one clock rate, one cap (or none), one ε for all who take part and one δ.
    The box then saturates the sum itself, without the (coalitions × owners) arrays that
    :func:`copy_spread` builds (a market's offers and the pilots ask at one ε)."""
    eps = np.asarray(c.epsilons, dtype=float)
    positive = eps[eps > 0]
    caps = inputs.caps if inputs.split == "capped" else np.full(len(inputs.caps), np.nan)
    return bool(np.ptp(inputs.clock_rates) == 0 and positive.size and np.ptp(positive) == 0
                and (np.isnan(caps).all() or (not np.isnan(caps).any() and np.ptp(caps) == 0))
                and (inputs.noise is None or np.ptp(inputs.noise.deltas) == 0))


def copy_spread(inputs: LawInputs, c: Coalitions) -> tuple[np.ndarray, np.ndarray]:
    """(π_i, r_i) per coalition and owner (K, N; 0 outside it) for the box's saturation.

    θ_L meets owner i's copy at a share π_i = λ_i/Λ_S of the exchanges, and that copy carries owner
    i's own noise steps: its share s_i of the noise sum (:func:`owner_noise`) over π_i, r_i = s_i/π_i,
    is how much more (or less) spread it is than the average copy. An owner that sells little ε has
    a copy far noisier than the others', which the box clips to its faces while the others' stay
    inside: saturating the sum as if every copy were alike overshot ψ by up to ×2 where owners sold
    different ε (forecast.saturated).
    """
    masks = member_masks(c.members, len(inputs.clock_rates))
    per_owner = owner_noise(inputs, c, masks)
    rates = inputs.clock_rates
    total, noise = masks @ rates, per_owner.sum(axis=1)  # Λ_S and the noise sum
    total, noise = np.where(total > 0, total, 1.0), np.where(noise > 0, noise, 1.0)  # empty rows: 0s
    pi = masks * (rates[None, :] / total[:, None])
    ratio = per_owner * (total / noise)[:, None] / rates[None, :]  # s_i/π_i; 0 outside
    if np.ndim(c.epsilons) != 1:
        return pi, ratio
    # Owners of one ε, clock rate, cap and δ have one r in every coalition: merged into one column
    # (Σ π, the common r), the saturation's sums Σ_i π_i F(r_i) are the same over fewer columns — 86
    # hospitals' coalitions have a handful, and sampled Shapley values ask for 344,000 at once.
    classes = owner_classes(inputs, np.asarray(c.epsilons, dtype=float))
    if classes.shape[1] >= len(rates):
        return pi, ratio
    members = masks @ classes
    return pi @ classes, (ratio @ classes) / np.where(members > 0, members, 1.0)


def owner_classes(inputs: LawInputs, epsilons: np.ndarray) -> np.ndarray:
    """(N, G) one-hot: the owners whose copies are alike in every coalition (one ε, clock rate, cap and
    δ; :func:`copy_spread` merges them)."""
    caps = inputs.caps if inputs.split == "capped" else np.full(len(inputs.caps), np.nan)
    deltas = np.zeros(len(caps)) if inputs.noise is None else inputs.noise.deltas
    keys = np.column_stack([epsilons, inputs.clock_rates, np.nan_to_num(caps, nan=-1.0), deltas])
    _, which = np.unique(keys, axis=0, return_inverse=True)
    which = np.ravel(which)
    return (which[:, None] == np.arange(which.max() + 1)[None, :]).astype(float)


def shared_parts(c: Coalitions, modes: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, ...]:
    """(the mean's share of θ_L's unclipped second moment, one copy's noise step over that moment, N)
    per coalition, from the h-weighted sums over modes (``modes``: mean variance + jitter in units of
    q): what the box's saturation needs for the copies' shared mean (forecast.blended). A copy's step
    carries its owner's whole noise step, (N + 1)²·q per coordinate, and the modes weigh it as the box
    does (ψ_box − ψ(0) ∝ tr H)."""
    total = modes @ h
    owners = np.asarray(c.owners, dtype=float)
    share = (modes - jitter(owners)[:, None]) @ h / total
    kick = (owners + 1.0) ** 2 * np.sum(h) / total
    return np.clip(share, 0.0, 1.0), kick, owners


def noise_weights(inputs: LawInputs, records: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """a_i m_i² per coalition, V_S ∝ Σ_i a_i m_i² ε_i⁻² (rows scaled to a largest weight of 1, empty
    rows 0): the weights a budget-constrained buyer should equalise, C_i'(ε_i)ε_i³ ∝ a_i m_i²
    (policies.budget_epsilons)."""
    masks = np.atleast_2d(np.asarray(masks, dtype=bool))
    some = masks.any(axis=1)
    c = coalitions_of(inputs, np.asarray(records, dtype=float), np.where(some[:, None], masks, True))
    caps = caps_of(inputs, c)
    if inputs.noise is not None:  # z² ε² at a reference ε stands for m²: z ∝ 1/ε only roughly
        reference = inputs.noise.reference_epsilon
        caps = np.sqrt(inputs.noise.squared(caps, np.full(caps.shape, reference))) * reference
    weights = np.where(masks, owner_weights(inputs) * caps ** 2, 0.0)
    scale = weights.max(axis=1, keepdims=True)
    return weights / np.where(scale > 0, scale, 1.0)


def distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of one entry per distinct value, each entry's position among them): values[first][which]
    == values. A single value is its own (no sorting: a price search asks for one coalition at a time)."""
    if len(values) == 1:
        return np.zeros(1, dtype=np.intp), np.zeros(1, dtype=np.intp)
    _, first, which = np.unique(values, return_index=True, return_inverse=True)
    return first, np.ravel(which)


def runs_of(inputs: LawInputs, c: Coalitions) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(first, which, updates): the coalitions whose mean variance is computed (first) and where
    each coalition finds its own (which), and U_S where caps end some run before T (else None).
    Without caps it depends on a coalition only through η_S (ρ_S/(N+1)), which takes few values
    (one per size when ρ is set by the floor's decay): exponentials once per distinct η. (The floor
    also depends on the members' shares: it is computed per coalition.)"""
    updates = coalition_updates(inputs, c)
    if updates is not None and np.any(updates < inputs.iterations):
        every = np.arange(len(c.eta))
        return every, every, updates
    first, which = distinct(c.eta)
    return first, which, None


def mode_variances(inputs: LawInputs, c: Coalitions, first: np.ndarray, which: np.ndarray,
                   updates: np.ndarray | None) -> np.ndarray:
    """(K, p): the mean's variance after the run plus θ_L's jitter, per coalition and mode, in units
    of q (module docstring), with :func:`runs_of`'s ``first``, ``which`` and ``updates``."""
    steps = inputs.iterations if updates is None else updates
    return mean_variance(c.eta[first], inputs.eigenvalues, steps)[which] + jitter(c.owners)[:, None]


def coalition_floors(inputs: LawInputs, c: Coalitions, updates: np.ndarray | None) -> np.ndarray:
    """F_S per coalition: the floor law at its ρ, N, U_S and members' shares — per coalition, not per
    distinct η as the mean's variance, since unequal shares slow each coalition's floor differently
    (``updates``, when given, is already per coalition).

    Calls of up to FLOOR_ROWS coalitions (a policy's settlement, a price search) look each distinct
    one up in ``inputs.floors`` and solve the others together; larger calls (every subset of some
    players, sampled orders) look up FLOOR_BLOCK of them at a time, whole, in ``inputs.floor_blocks``.
    Either way each floor is the same number, bit for bit (``stepsize.floor_slowdown``).
    """
    keys = np.column_stack([c.rho, c.owners, *c.shares, np.zeros_like(c.rho) if updates is None else updates])
    if len(keys) > FLOOR_ROWS:  # in blocks whose (rows, p) temporaries stay in cache
        return np.concatenate([_block_floors(inputs, keys[k:k + FLOOR_BLOCK])
                               for k in range(0, len(keys), FLOOR_BLOCK)])
    cache = inputs.floors
    names = [row.tobytes() for row in keys]
    missing = {name: k for k, name in enumerate(names) if name not in cache}  # first row of each
    if missing:
        if len(cache) > FLOOR_CACHE:  # a bound on memory: start afresh
            cache.clear()
        cache.update(zip(missing, _floors(inputs, keys[list(missing.values())]), strict=True))
    return np.array([cache[name] for name in names])


def _block_floors(inputs: LawInputs, keys: np.ndarray) -> np.ndarray:
    """The floors of one block of a large call, from ``inputs.floor_blocks`` when it was asked before."""
    cache, name = inputs.floor_blocks, keys.tobytes()
    if name not in cache:
        if len(keys) + sum(len(floors) for floors in cache.values()) > FLOOR_CACHE:  # a bound on memory
            cache.clear()
        cache[name] = _floors(inputs, keys)
    return cache[name]


def _floors(inputs: LawInputs, keys: np.ndarray) -> np.ndarray:
    """The floor law at each row (ρ, N, largest share, Σ s², Σ s³, U_S or 0 for T) of ``keys``."""
    updates = None if not np.any(keys[:, 5]) else keys[:, 5]
    return np.atleast_1d(floor_law(keys[:, 0], keys[:, 1], inputs.iterations, inputs.lam,
                                   inputs.eigenvalues, weights=inputs.floor_weights, updates=updates,
                                   shares=(keys[:, 2], keys[:, 3], keys[:, 4])))


def coalition_bias(inputs: LawInputs, records: np.ndarray, c: Coalitions) -> np.ndarray:
    """B_S = Σ_i (share_i^S − s_i)² g_i per coalition (module docstring), from the members' sums: the
    expected ψ of θ*_S, the coalition's own optimum, over the owners' draws of their deviations."""
    s, g = records / records.sum(), inputs.heterogeneity
    return c.bias[:, 0] / c.records**2 - 2.0 * c.bias[:, 1] / c.records + np.sum(s * s * g)


def selection_modes(owners: np.ndarray, eta: np.ndarray, modes: np.ndarray, h: np.ndarray) -> np.ndarray:
    """(K, p): what θ_L's selection kicks add up to per mode, in units of their q (module docstring).

    A noise draw enters the asked copy once; an owner's gradient offset enters its copy at every
    exchange, so the copy sits at a persistent offset 2k_i/(1 + a_j) (a_j = (N+1)ηh_j, the copy's own
    pull) and θ_L takes half of it at each exchange with that owner: kicks of k_i/(1 + a_j) on θ_L
    itself, not on a copy. Solving the stationary second moments of the copies and θ_L for uniform
    selection, kicks on θ_L jitter it by exactly (N+1)² more (in units of q) than kicks on a copy, for
    any pull (checked against a scalar Monte Carlo of Algorithm 1's copies in tests/markets/test_law.py,
    and against noise-free logistic coalitions by ``benchmarks/bench_forecast_markets.py --selection``)."""
    grown = (np.asarray(owners, dtype=float) + 1)[:, None]
    return (modes + grown**2) / (1.0 + grown * np.asarray(eta, dtype=float)[:, None] * h[None, :]) ** 2


def law_terms(inputs: LawInputs, epsilons: np.ndarray, records: np.ndarray,
              coalitions, c2: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(F_S + B_S + S_S, V_S) of every non-empty coalition at ``epsilons`` ((N,) or (K, N)); with
    ``c2``, the noise term is c₂·V_S as the box saturates it (forecast.saturated, copy by copy)."""
    records = np.asarray(records, dtype=float)
    c = coalitions_of(inputs, records, coalitions, epsilons)
    h, scale = inputs.eigenvalues, 2.0 * inputs.f_star
    first, which, updates = runs_of(inputs, c)
    floor = coalition_floors(inputs, c, updates)
    bias = coalition_bias(inputs, records, c)
    modes = mode_variances(inputs, c, first, which, updates)
    kicks = ((c.owners * c.eta) ** 2 * clock_factor(inputs, c) / c.records**2)[:, None] * c.kicks
    noise = noise_per_step(inputs, c) * (modes @ h) / scale
    if c2 is not None:
        noise = c2 * noise
        if np.isfinite(inputs.box):
            spread = None if alike_copies(inputs, c) else copy_spread(inputs, c)
            noise = saturated(noise, inputs.box, inputs.box_zero, inputs.noise_shape, spread,
                              shared=shared_parts(c, modes, h))
    selected = selection_modes(c.owners, c.eta, modes, h)
    return floor + bias + ((kicks * selected) @ h) / scale, noise


@dataclass(frozen=True)
class LawForecast:
    """ψ̂_S = c₀·(F_S + B_S + S_S) + sat(c₂·V_S) over any coalitions, with the fit it came from (if any)."""

    inputs: LawInputs = field(repr=False, compare=False)
    c0: float = 1.0
    c2: float = 1.0
    r2: float = float("nan")  # of log ψ̂ against log ψ over the pilots
    rms_relative_error: float = float("nan")
    points: int = 0
    by_size: tuple = ()  # per pilot coalition size: members, points, RMS relative error
    excluded: int = 0  # pilots left out of the fit: ψ above the untrained model's (the box clips)
    form = "law"

    def terms(self, epsilons: np.ndarray, records: np.ndarray, coalitions,
              c2: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The law's (noise-free, noise) terms per coalition, before the multipliers; inf when empty.
        With ``c2``, the noise term is c₂·V_S saturated by the box (:func:`law_terms`)."""
        members = as_members(coalitions)
        if isinstance(members, Prefixes):  # running sums: no (K, N) temporaries to bound
            return law_terms(self.inputs, epsilons, records, members, c2)
        if isinstance(members, Subsets):  # every subset of some players: blocks of codes (members.py)
            free, noise = np.full(members.count, np.inf), np.full(members.count, np.inf)
            for block in members.blocks(CHUNK):
                at = slice(block.start - members.start, block.end - members.start)
                free[at], noise[at] = law_terms(self.inputs, epsilons, records, block, c2)
            return free, noise
        eps = np.asarray(epsilons, dtype=float)
        eps = eps if eps.ndim < 2 else np.broadcast_to(eps, members.masks.shape)  # one ε vector, or per row
        free, noise = np.full(members.count, np.inf), np.full(members.count, np.inf)
        rows = np.flatnonzero(members.nonempty())
        for start in range(0, len(rows), CHUNK):
            part = rows[start:start + CHUNK]
            free[part], noise[part] = law_terms(self.inputs, eps if eps.ndim < 2 else eps[part], records,
                                                members.rows(part), c2)
        return free, noise

    def coalitions(self, epsilons: np.ndarray, records: np.ndarray, coalitions) -> np.ndarray:
        """ψ̂ of every coalition (a (K, N) boolean mask, or members.Prefixes) at the owners' ε;
        inf when empty.

        The one place the market computes ψ̂: every policy, the run summary, the ``forecast`` and
        ``market`` commands call this (through the forecast object they were given).
        """
        free, noise = self.terms(epsilons, records, coalitions, self.c2)
        some = np.isfinite(free)
        return np.where(some, self.c0 * np.where(some, free, 0.0) + np.where(some, noise, 0.0), np.inf)

    def bias(self, records: np.ndarray, coalitions) -> np.ndarray:
        """B_S of every coalition (a (K, N) mask, all rows non-empty), before the multipliers: the part
        of the noise-free term that the owners' draw of their deviations makes (:func:`coalition_bias`)."""
        records = np.asarray(records, dtype=float)
        return coalition_bias(self.inputs, records, coalitions_of(self.inputs, records, coalitions))

    def box_inputs(self, epsilons: np.ndarray, records: np.ndarray, masks: np.ndarray) -> tuple:
        """(spread, shared) of the coalitions ``masks`` (all non-empty) for the box's saturation:
        the copies' (π_i, r_i) (:func:`copy_spread`) and the shared mean's parts
        (:func:`shared_parts`) — what the fit saturates the pilots' noise terms with."""
        c = coalitions_of(self.inputs, np.asarray(records, dtype=float), masks, epsilons)
        modes = mode_variances(self.inputs, c, *runs_of(self.inputs, c))
        return copy_spread(self.inputs, c), shared_parts(c, modes, self.inputs.eigenvalues)

    def noise_weights(self, records: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Per coalition, the relative weight of each member's ε_i⁻² in ψ̂ (see :func:`noise_weights`)."""
        return noise_weights(self.inputs, records, masks)

    def describe(self) -> str:
        """The formula with its multipliers, for the terminal."""
        noise = self.inputs.noise
        args = "eps, m_i, N" if noise is None else (f"eps, delta, m_i, N: {noise.mechanism} answers, "
                                                     f"{noise.accountant} accountant")
        box = (f", saturating at the box's psi {self.inputs.box:.4g}" if np.isfinite(self.inputs.box)
               else "")
        return (f"psi = {self.c0:.4g} x (floor(N, T, rho) + bias + selection) + {self.c2:.4g} x "
                f"noise({args}){box} (law; public inputs from the {self.inputs.source})")

    def to_dict(self) -> dict:
        """A JSON-ready form: the multipliers and the fit (the inputs are rebuilt from the scenario)."""
        return {"form": "law", "c0": self.c0, "c2": self.c2, "r2": self.r2,
                "rms_relative_error": self.rms_relative_error, "points": self.points,
                "excluded": self.excluded, "by_size": [dict(row) for row in self.by_size]}

    @classmethod
    def from_dict(cls, data: dict, inputs: LawInputs) -> LawForecast:
        """Inverse of :meth:`to_dict`, given the inputs rebuilt from the scenario."""
        return cls(inputs, data["c0"], data["c2"], data["r2"], data["rms_relative_error"], data["points"],
                   tuple(data.get("by_size", ())), data.get("excluded", 0))


def law_unavailable(scenario) -> str | None:
    """Why the law cannot describe ``scenario``'s learner (None when it can)."""
    if scenario.learner.algorithm != "async":
        return "the law describes Algorithm 1 (learner.algorithm = 'async')"
    if scenario.model.loss == "hinge":
        return "the law needs a curvature (model.loss = 'squared' or 'logistic', not 'hinge')"
    return None


def build_inputs(scenario, consortium, info=None) -> LawInputs:
    """The law's public inputs for ``scenario``'s owners (their sizes come with each call).

    ``info`` is the public proxy's summary (dpmarket/data/proxy.py), computed when not given; tests
    pass the owners' own summary instead, to check the law apart from the proxy's error.
    """
    from dpmarket.data.proxy import population_weights, public_info  # deferred: builds the proxy when needed

    drawn, expected = None, None
    if info is None:
        info = public_info(scenario, consortium, owners=True)
        expected = population_weights(scenario, consortium)
    if expected is not None:  # the twin's draw for the pilots' fit, the expectation for the market
        drawn = info.floor_weights
        info = replace(info, floor_weights=expected,
                       source=f"{info.source}; psi(0) in expectation over the generator's draws")
    N, lr, p = len(consortium.owners), scenario.learner, scenario.privacy
    rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(N)], dtype=float)
    caps = np.array([np.nan if scenario.owner_value(i, "cap") is None else scenario.owner_value(i, "cap")
                     for i in range(N)], dtype=float)
    auto = (info.owner_curvature, float(info.eigenvalues[0]), lr.auto_decay, lr.auto_stability)
    declared, sampling = declared_heterogeneity(scenario, consortium.sizes, info)
    inputs = LawInputs(rates, caps, *heterogeneity(scenario, consortium.sizes, info, declared), lr.iterations,
                       scenario.model.regularization, sensitivity(scenario, consortium), p.split,
                       p.cap_quantile, None if lr.rho == "auto" else float(lr.rho), auto,
                       lr.weighting == "inverse_frequency", info.eigenvalues, info.floor_weights,
                       info.f_star, info.source, noise_model(scenario, N),
                       box_psi(info, scenario.model.theta_max), sampling, drawn)
    check_inputs(scenario, inputs, consortium.sizes)
    return inputs


def box_psi(info, theta_max: float) -> float:
    """ψ_box = ψ(0) + θmax²·tr(H)/(6f*) on the proxy: E(θ − θ*)ᵀH(θ − θ*)/(2f*) for θ uniform on Θ
    (each coordinate's second moment θmax²/3; ψ(0) = θ*ᵀHθ*/(2f*) is the floor law's Σ w_j)."""
    return float(np.sum(info.floor_weights) + theta_max**2 * np.sum(info.eigenvalues) / (6.0 * info.f_star))


def noise_model(scenario, owners: int) -> NoiseModel | None:
    """The scenario's (ε, δ) noise for the law, or None for Laplace answers under basic composition."""
    p = scenario.privacy
    if Guarantee.of(p).pure:
        return None
    deltas = np.array([scenario.owner_value(i, "delta") for i in range(owners)], dtype=float)
    return NoiseModel(p.mechanism, p.accountant, deltas, p.epsilon)


def declared_heterogeneity(scenario, sizes: np.ndarray, info) -> tuple[np.ndarray, np.ndarray]:
    """(v_i, the share of v_i that sampling makes): the shape of how owners differ, from public facts.

    Table owners, and synthetic owners without a shift: sampling alone, v_i = 1/n_i. Synthetic owners
    with shifts: v_i = a·shift_i² + b/n_i fitted to the proxy's owners (:func:`shift_and_sampling`).
    """
    _require_split(scenario, sizes, info)
    sizes = np.asarray(sizes, dtype=float)
    shifts = np.array([scenario.owner_value(i, "shift") for i in range(len(sizes))], dtype=float) ** 2
    if scenario.data.source == "synthetic" and shifts.any():
        return shift_and_sampling(shifts, sizes, info.deviations)
    return 1.0 / sizes, np.ones(len(sizes))


def _require_split(scenario, sizes: np.ndarray, info) -> None:
    """The proxy split into owners of the owners' sizes, or a ScenarioError naming the hold-out."""
    if info.deviations is None:
        raise ScenarioError(scenario.data.path or scenario.name, "data.table.holdout",
                            scenario.data.table.holdout,
                            f"the forecast needs the hold-out split into owners of the owners' sizes "
                            f"({int(np.sum(sizes)):,} rows) to estimate how owners differ: enlarge it, or "
                            "give market.forecast = {c0, c1, c2}")


def heterogeneity(scenario, sizes: np.ndarray, info,
                  declared: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(g_i, Γ_ij): each owner's expected δ_iᵀHδ_i/(2f*) and squared gradient per mode at θ*,
    pooled from the proxy's owners in proportion to the declared heterogeneity v_i.

    A proxy owner's deviation d_i = δ_i − Σ_k s_k δ_k has E d_iᵀHd_i = (1 − 2s_i)v_iκ + Σ_k s_k²v_kκ
    when E δ_iᵀHδ_i = κv_i, so κ is the ratio of the sums over owners (per mode for Γ). One proxy
    draw per owner is too noisy to tell owners apart; the declared shape is public
    (:func:`declared_heterogeneity`, unless given).
    """
    _require_split(scenario, sizes, info)
    sizes = np.asarray(sizes, dtype=float)
    s = sizes / sizes.sum()
    if declared is None:
        declared = declared_heterogeneity(scenario, sizes, info)[0]
    expected = np.sum((1.0 - 2.0 * s) * declared + np.sum(s * s * declared))
    return (np.sum(info.deviations) / expected * declared,
            np.outer(declared, np.sum(info.gradient_modes, axis=0) / expected))


def shift_and_sampling(shifts: np.ndarray, sizes: np.ndarray,
                       deviations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(v_i = a·shift_i² + b/n_i, the sampling share (b/n_i)/v_i), a, b ≥ 0 fitted to the proxy
    owners' deviations.

    An owner's optimum differs from the population's by its declared shift and by the sampling error
    of its n_i records; with unequal sizes the second varies from owner to owner (a bank of 10,000
    loans strays more than one of 800,000), which one shape alone cannot say. Each column is what a
    proxy owner's deviation d_i = δ_i − Σ_k s_kδ_k would be under that shape (heterogeneity's
    docstring); least squares on the N proxy owners splits the two (with equal sizes they cannot be
    told apart, and need not be).
    """
    from scipy.optimize import nnls  # deferred: scipy.optimize is slow to import

    s = sizes / sizes.sum()
    shapes = np.column_stack([shifts, 1.0 / sizes])
    columns = (1.0 - 2.0 * s)[:, None] * shapes + (s * s) @ shapes
    (a, b), _ = nnls(columns / np.mean(columns, axis=0), np.asarray(deviations, dtype=float))
    scale = np.mean(columns, axis=0)
    shift_part, sampling_part = (a / scale[0]) * shapes[:, 0], (b / scale[1]) * shapes[:, 1]
    v = shift_part + sampling_part
    if not v.any():  # the proxy's owners did not differ at all: the declared shifts' shape
        return shapes[:, 0], np.zeros(len(sizes))
    return v, sampling_part / v


def check_inputs(scenario, inputs: LawInputs, sizes: np.ndarray) -> None:
    """Every derived input finite, and ψ̂ finite for everyone and every owner alone at the smallest ε;
    else a ScenarioError naming the key that made it non-finite."""
    finite(inputs.f_star, "data.label_noise", scenario, "f* of the public proxy")
    if not inputs.f_star > 0:
        raise ScenarioError(scenario.name, "data.label_noise", scenario.data.label_noise,
                            f"the public proxy fits its labels exactly (f* = {inputs.f_star!r})")
    finite(inputs.eigenvalues, "model.regularization", scenario, "eigenvalues of the proxy's Hessian")
    finite(inputs.floor_weights, "model.regularization", scenario, "floor weights")
    finite(inputs.heterogeneity, "data.shift", scenario, "heterogeneity term")
    finite(inputs.selection, "data.shift", scenario, "selection term")
    check_sensitivity(scenario, inputs.sensitivity)
    N = len(sizes)
    masks = np.vstack([np.ones((1, N), bool), np.eye(N, dtype=bool)])
    rho = coalitions_of(inputs, np.asarray(sizes, dtype=float), masks).rho
    if not np.all(np.isfinite(rho) & (rho > 0)):
        raise ScenarioError(scenario.name, "learner.rho", scenario.learner.rho,
                            f"gives a step of {rho.min()!r} for some coalition: give a positive number")
    key = "market.epsilon_min" if scenario.market else "privacy.epsilon"
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # reported below, naming the key
        try:
            free, noise = smallest_terms(inputs, smallest_epsilons(scenario, N), sizes, masks)
        except CalibrationError as exc:  # no noise reaches (ε, δ)
            section, _, name = key.partition(".")
            raise ScenarioError(scenario.name, key, getattr(getattr(scenario, section), name),
                                f"the forecast's noise term: {exc}") from None
    finite(free, "learner.rho", scenario, "noise-free term")
    finite(noise, key, scenario, "noise term")


def smallest_terms(inputs: LawInputs, epsilons: np.ndarray, sizes: np.ndarray, masks: np.ndarray):
    """The law's terms for :func:`check_inputs`, which asks only whether they are finite.

    Under PLD the noise is read from the RDP accountant where it reaches (ε, δ): RDP bounds the same
    answers more loosely, so its noise is larger (2–7 % for ny_hospitals) and a finite noise term
    with it is finite with PLD's; it costs microseconds where PLD's tables cost tens of milliseconds
    per (m, ε) (ε_min's fine grid, and m = T for an owner alone). Where RDP cannot reach (ε, δ),
    PLD's own noise decides.
    """
    noise = inputs.noise
    if noise is not None and noise.accountant == "pld":
        try:
            return LawForecast(replace(inputs, noise=replace(noise, accountant="rdp"))).terms(
                epsilons, sizes, masks)
        except CalibrationError:
            pass  # RDP does not reach every (ε, δ) PLD does: PLD's own noise decides, below
    return LawForecast(inputs).terms(epsilons, sizes, masks)


def check_sensitivity(scenario, xi: float) -> None:
    """Refuse a Ξ whose square (the noise term's 8Ξ²) would overflow, naming the key behind Ξ: the
    clipping bound, or the largest declared bound (a run's own checks let Ξ itself reach ~1e300)."""
    if 8.0 * xi * xi <= ROOM:  # float products give inf, not OverflowError as ``**`` does
        return
    from dpmarket.data.magnitudes import largest_bound  # deferred, as build_inputs' imports

    p = scenario.privacy
    key, value = (("privacy.clip", p.clip) if p.sensitivity == "clip" and p.clip != "auto"
                  else largest_bound(scenario))
    raise ScenarioError(scenario.source, key, value,
                        f"makes the sensitivity Ξ = {xi:.3g}: the forecast's noise term 8Ξ² would exceed "
                        f"{ROOM:.0e}")


def smallest_epsilons(scenario, owners: int) -> np.ndarray:
    """The smallest budgets the forecast will be asked about: ε_min of a market, else the owners'."""
    if scenario.market is not None:
        return np.full(owners, scenario.market.epsilon_min)
    return np.array([scenario.owner_value(i, "epsilon") for i in range(owners)], dtype=float)


def finite(value, key: str, scenario, what: str):
    """``value`` if every entry is finite, else a ScenarioError naming the scenario ``key`` behind it."""
    flat = np.asarray(value, dtype=float).ravel()
    bad = flat[~np.isfinite(flat)]
    if len(bad):
        section, _, name = key.partition(".")
        current = getattr(getattr(scenario, section, None), name, None) if name else None
        raise ScenarioError(scenario.name, key, current,
                            f"makes the forecast's {what} non-finite ({float(bad[0])!r})")
    return value
