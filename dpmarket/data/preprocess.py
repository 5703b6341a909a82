"""The public transform: category codes, standardisation and PCA fitted on the hold-out alone.

Every constant that all owners apply to their records (the category code tables, the means and
standard deviations, the PCA dictionary, the label's centre and scale) is a release about the
data it was computed from. Computed from owners' rows it would leak outside the DP accounting,
so it is fitted only on the public hold-out (the papers' "last ten thousand entries", which no
owner contributes) and then applied unchanged by every owner.

The whole feature pipeline (encode → standardise → project → scale) is affine in the encoded
record, so it is stored as one map ``offset + Σ numeric·W + Σ lookup_c[code_c]``: one-hot
columns are never materialised for the owners (a 400-level diagnosis code costs one gather).
Values are then clipped into the declared bounds by the caller, so the sensitivity holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpmarket.errors import DataError
from dpmarket.scenario.schema import Table

TINY = 1e-12  # variances below this carry no information (a constant column or component)


@dataclass(frozen=True)
class Columns:
    """Some records as parsed columns: numeric features, categorical values, labels.

    A categorical value is stored as an index into its column's table of distinct values, so
    text is never copied per record (a 339,000-row file has a few hundred distinct diagnoses).
    """

    numeric: np.ndarray  # (n, q) floats
    categorical: np.ndarray  # (n, c) ints: row r, column j holds values[j][categorical[r, j]]
    values: tuple[np.ndarray, ...]  # per categorical column: its distinct values in the file
    labels: np.ndarray

    def text(self, j: int) -> np.ndarray:
        """Categorical column ``j`` as text, one value per record."""
        return self.values[j][self.categorical[:, j]]

    def take(self, rows: np.ndarray) -> Columns:
        """The records ``rows``."""
        return Columns(self.numeric[rows], self.categorical[rows], self.values, self.labels[rows])


@dataclass(frozen=True)
class PublicTransform:
    """Affine map from parsed records to features and labels, fitted on the hold-out only."""

    names: tuple[str, ...]  # encoded input columns, in order (numeric, then categorical levels)
    categories: tuple[tuple[str, ...], ...]  # per categorical column: its hold-out levels, sorted
    weights: np.ndarray  # (q, p): numeric columns → features
    lookups: tuple[np.ndarray, ...]  # per categorical column (levels + 1, p); last row: unseen
    offset: np.ndarray  # (p,)
    label_center: float
    label_scale: float
    sign_positive: tuple[str, ...] | None  # label = "sign": the classes mapped to +1
    variance_explained: float | None  # PCA: share of the hold-out's variance kept
    constant_columns: tuple[str, ...]  # encoded columns constant in the hold-out (scale 1 used)

    @property
    def p(self) -> int:
        """Number of features the owners' records have after the transform."""
        return len(self.offset)

    def codes(self, cols: Columns) -> np.ndarray:
        """Codes (n, c) of the records' categories; a level absent from the hold-out → len(levels)."""
        out = np.empty(cols.categorical.shape, dtype=np.int64)
        for j, levels in enumerate(self.categories):
            out[:, j] = level_codes(cols.values[j], levels)[cols.categorical[:, j]]
        return out

    def features(self, cols: Columns, codes: np.ndarray | None = None) -> np.ndarray:
        """Features (n, p) before clipping: offset + numeric·W + the categorical levels' rows."""
        out = cols.numeric @ self.weights + self.offset
        codes = self.codes(cols) if codes is None else codes
        for j, lookup in enumerate(self.lookups):
            out += lookup[codes[:, j]]
        return out

    def labels(self, raw: np.ndarray) -> np.ndarray:
        """Labels before clipping: ±1 classes, or the (log-)label centred and scaled."""
        if self.sign_positive is not None:
            return np.where(np.isin(raw, np.asarray(self.sign_positive, dtype=object)), 1.0, -1.0)
        return (raw.astype(float) - self.label_center) / self.label_scale


def level_codes(values: np.ndarray, levels: tuple[str, ...]) -> np.ndarray:
    """Index of each value in ``levels`` (hash lookup), ``len(levels)`` for a value not in it."""
    codes = pd.Index(list(levels), dtype=object).get_indexer(values).astype(np.int64)
    return np.where(codes < 0, len(levels), codes)


def fit(spec: Table, public: Columns, numeric_names: list[str], categorical_names: list[str],
        x_bound: float, *, y_bound: float, source: str = "") -> PublicTransform:
    """Fit the transform of ``spec`` on the hold-out records ``public`` (and nothing else).

    ``source`` names the file in the error raised when PCA asks for more components than
    there are encoded columns.
    """
    categories = tuple(tuple(sorted(public.values[j][np.unique(public.categorical[:, j])].tolist()))
                       for j in range(public.categorical.shape[1]))
    names, E = _encoded(spec, public, categories, numeric_names, categorical_names)
    if spec.components > E.shape[1]:
        raise DataError(source, None, f"data.table.components = {spec.components} but the "
                        f"features encode to only {E.shape[1]} columns")
    mu, sd, constant = _moments(spec, E, names)
    # Extreme declared bounds or spread can overflow the constants below; the caller checks
    # them (the values entering are bounded, see table.MAX_MAGNITUDE), so numpy stays quiet.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        V, D, explained = _projection(spec, (E - mu) / sd, x_bound)
        M = (V / sd[:, None]) * D  # (d, p): encoded column → feature
        offset = -(mu / sd) @ V * D
        lookups = _lookups(spec, categories, M, public.numeric.shape[1])
    center, scale = _label_constants(spec, public.labels, y_bound)
    sign = tuple(spec.positive) if spec.label == "sign" else None
    return PublicTransform(tuple(names), categories, M[:public.numeric.shape[1]].copy(), lookups,
                           offset, center, scale, sign, explained, constant)


def _lookups(spec: Table, categories, M: np.ndarray, q: int) -> tuple[np.ndarray, ...]:
    """Per categorical column, the feature vector of each hold-out level (rows of M after the
    ``q`` numeric ones), and a last row for a level the hold-out never showed."""
    lookups, row = [], q
    for levels in categories:
        if spec.encoding == "codes":  # one encoded column: the code times its row
            lookups.append(np.arange(len(levels) + 1)[:, None] * M[row])
            row += 1
        else:  # one column per level; an unseen level is the all-zero one-hot vector
            lookups.append(np.vstack([M[row:row + len(levels)], np.zeros(M.shape[1])]))
            row += len(levels)
    return tuple(lookups)


def _encoded(spec: Table, public: Columns, categories, numeric_names, categorical_names):
    """The hold-out's encoded design matrix and its column names (it is small: built whole)."""
    parts, names = [public.numeric], list(numeric_names)
    for j, levels in enumerate(categories):
        codes = level_codes(public.values[j], levels)[public.categorical[:, j]]
        if spec.encoding == "codes":
            parts.append(codes[:, None].astype(float))
            names.append(categorical_names[j])
        else:
            parts.append((codes[:, None] == np.arange(len(levels))).astype(float))
            names.extend(f"{categorical_names[j]}={v}" for v in levels)
    return names, np.hstack(parts)


def _moments(spec: Table, E: np.ndarray, names: list[str]):
    """Hold-out means and standard deviations (0 and 1 when not standardising)."""
    d = E.shape[1]
    if not spec.standardize:
        return np.zeros(d), np.ones(d), ()
    mu, sd = E.mean(axis=0), E.std(axis=0)
    flat = sd < np.sqrt(TINY)
    return mu, np.where(flat, 1.0, sd), tuple(n for n, f in zip(names, flat, strict=True) if f)


def _projection(spec: Table, S: np.ndarray, x_bound: float):
    """PCA dictionary V (d, p) and per-feature scale D: ``spread`` hold-out sds map to the bound X.

    Without PCA V is the identity; without standardisation D is 1 (raw values, then clipped).
    """
    d = S.shape[1]
    if spec.components == 0:
        scale = x_bound / spec.spread if spec.standardize else 1.0
        return np.eye(d), np.full(d, scale), None
    cov = S.T @ S / max(len(S) - 1, 1)
    values, vectors = np.linalg.eigh(cov)
    top = np.argsort(values)[::-1][: spec.components]
    V, lam = vectors[:, top], np.maximum(values[top], 0.0)
    V = V * _signs(V)
    D = x_bound / (spec.spread * np.sqrt(np.where(lam < TINY, 1.0, lam)))
    explained = float(lam.sum() / max(np.trace(cov), TINY))
    return V, D, explained


def _signs(V: np.ndarray) -> np.ndarray:
    """±1 per column of V making its largest entry positive, so that a component's sign does not depend
    on the eigensolver. Entries within 10⁻⁹ of the largest count as tied and the first of them decides:
    two standardised columns give entries ±1/√2, equal in exact arithmetic, and which one the last bits
    call the largest would flip the feature's sign (and θ's) by CPU."""
    size = np.abs(V)
    first = np.argmax(size >= size.max(axis=0) * (1.0 - 1e-9), axis=0)
    flip = np.sign(V[first, np.arange(V.shape[1])])
    return np.where(flip == 0, 1.0, flip)


def _label_constants(spec: Table, labels: np.ndarray, y_bound: float) -> tuple[float, float]:
    """Centre and scale of the regression label: ``spread`` hold-out sds map to the bound Y."""
    if spec.label == "sign" or not spec.standardize:
        return 0.0, 1.0
    y = labels.astype(float)
    sd = float(y.std())
    return float(y.mean()), spec.spread * (sd if sd > np.sqrt(TINY) else 1.0) / y_bound
