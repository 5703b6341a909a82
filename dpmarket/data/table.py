"""Owners from a table of real records (CSV, compressed CSV or Parquet): ``data.source = "table"``.

The papers trained on real files split among owners: New York discharges by hospital, Lending
Club loans in contiguous blocks of rows among banks. This module reads such a file, checks every
value it will use, splits off the public hold-out (the last ``holdout`` rows, which no owner
contributes), forms the owners (distinct values of a partition column, or contiguous blocks),
and applies the public transform of :mod:`dpmarket.data.preprocess` fitted on the hold-out alone.
Features are then clipped into [−X, X] and regression labels into [−Y, Y], so the sensitivity
derived from those declared bounds holds for any file; every clipped value is counted.

Bad data is never repaired silently: a missing column, a non-numeric value, a missing value (unless
``missing = "drop"``), an owner below ``min_records`` (unless ``small_owners = "drop"``) each stop
the run with one line naming the file, the column and the rows affected; whatever is dropped on
purpose is counted in the report that ends up in ``summary.json``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpmarket.data import preprocess
from dpmarket.data.magnitudes import ROOM
from dpmarket.data.preprocess import Columns, PublicTransform
from dpmarket.errors import DataError, ScenarioError
from dpmarket.scenario.schema import Scenario, Table

CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip")
PARQUET_SUFFIXES = (".parquet", ".pq")
SHOWN = 5  # rows or owners named in an error message before "…"
# What a CSV cell holding a missing value looks like (an empty cell, or a marker). Deliberately short:
# pandas' default list also takes "None" and "n/a", which can be real categories.
MISSING_MARKERS = ["", "NA", "N/A", "NaN", "nan", "NULL", "null"]
# Largest magnitude a numeric value may have. Beyond it sums of squares (the hold-out's moments)
# and the public transform could overflow, and inf − inf is NaN, which no clipping removes; no
# measurement is that large, so such a value is an error (infinities included), never clipped.
MAX_MAGNITUDE = 1e100


@dataclass(frozen=True)
class TableOwners:
    """The owners a table yields: names, record blocks (rows: p features, ones, labels), and more."""

    names: list[str]
    blocks: list[np.ndarray]
    transform: PublicTransform
    report: dict
    holdout: np.ndarray | None = None  # the public rows as one block, transformed and clipped


@dataclass(frozen=True)
class Parsed:
    """Every column the scenario uses, checked and parsed, and the rows kept after missing values."""

    columns: Columns
    partition: tuple[np.ndarray, np.ndarray] | None  # per row an index into the distinct values
    keep: np.ndarray  # bool per row: no missing value in a used column
    missing_by_column: dict[str, int]

    def take(self, rows: np.ndarray) -> Columns:
        """The parsed records of ``rows``."""
        return self.columns.take(rows)


def load_owners(scenario: Scenario) -> TableOwners:
    """Read ``data.path`` and turn it into owners as ``data.table`` says (see the module doc)."""
    d, spec = scenario.data, scenario.data.table
    path = d.path
    frame = read(path, used_columns(spec))
    n = len(frame)
    if spec.holdout >= n:
        raise DataError(path, None, f"holdout = {spec.holdout} rows but the file has only {n} rows")
    parsed = parse(frame, spec, path)
    del frame
    public = np.arange(n) >= n - spec.holdout
    transform, held = _fit_on_holdout(scenario, parsed, np.flatnonzero(public & parsed.keep))
    names, groups, dropped = form_owners(spec, path, parsed.partition,
                                         np.flatnonzero(~public & parsed.keep))
    records = parsed.take(np.concatenate(groups))
    codes = transform.codes(records)
    X, y, clipped = _transformed(transform, records, codes, d.feature_bound, d.label_bound,
                                 classes=spec.label == "sign")
    bounds = np.cumsum([0] + [len(g) for g in groups])
    blocks = [_block(X[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    public = parsed.take(np.flatnonzero(public & parsed.keep))
    hx, hy, _ = _transformed(transform, public, transform.codes(public), d.feature_bound,
                             d.label_bound, classes=spec.label == "sign")
    report = {"data_path": path, "rows_read": n, "holdout_rows": held,
              "rows_dropped_missing": int(np.sum(~parsed.keep)),
              "missing_by_column": parsed.missing_by_column, **dropped,
              "features_encoded": len(transform.names), "features": transform.p, **clipped,
              "unseen_categories": _unseen(transform, codes, spec.categorical),
              "constant_in_holdout": list(transform.constant_columns),
              "pca_variance_explained": transform.variance_explained}
    return TableOwners(_named(scenario, names, path), blocks, transform, report, _block(hx, hy))


def _fit_on_holdout(scenario: Scenario, parsed: Parsed, held: np.ndarray) -> tuple[PublicTransform, int]:
    """The public transform, from the hold-out rows ``held`` and nothing else; and their number."""
    d, spec = scenario.data, scenario.data.table
    if spec.holdout and len(held) == 0:
        raise DataError(d.path, None, f"all {spec.holdout} hold-out rows have missing values")
    transform = preprocess.fit(spec, parsed.take(held), spec.numeric, spec.categorical,
                               d.feature_bound, y_bound=d.label_bound, source=d.path)
    _check_transform(scenario, transform)
    return transform, int(len(held))


def _check_transform(scenario: Scenario, transform: PublicTransform) -> None:
    """Every value a file may hold (|v| ≤ MAX_MAGNITUDE) maps to a finite feature and label.

    The transform's gains grow with X/spread (features) and 1/(spread·Y) (labels) over the
    hold-out's standard deviations; checked before any record goes through it, so no sum in
    it can overflow (inf − inf would be NaN, which clipping into the bounds keeps).
    """
    d, spread = scenario.data, scenario.data.table.spread
    with np.errstate(over="ignore", invalid="ignore"):
        reach = (np.abs(transform.offset) + MAX_MAGNITUDE * np.abs(transform.weights).sum(axis=0)
                 + sum(np.abs(lookup).max(axis=0) for lookup in transform.lookups))
        label = 2.0 * MAX_MAGNITUDE / transform.label_scale
    if not np.all(reach <= ROOM):
        key, value = (("data.table.spread", spread) if 1.0 / spread > d.feature_bound
                      else ("data.feature_bound", d.feature_bound))
        raise ScenarioError(scenario.source, key, value, f"makes the public transform's features reach "
                            f"{float(np.max(reach)):.3g} for values up to ±{MAX_MAGNITUDE:.0e}: they would "
                            "overflow")
    if transform.sign_positive is None and not label <= ROOM:
        key, value = (("data.table.spread", spread) if 1.0 / spread > d.label_bound
                      else ("data.label_bound", d.label_bound))
        raise ScenarioError(scenario.source, key, value, f"makes the label scale {transform.label_scale!r}: "
                            f"labels up to ±{MAX_MAGNITUDE:.0e} would overflow")


def used_columns(spec: Table) -> list[str]:
    """Every column the scenario reads, each once, in a stable order."""
    cols = [spec.target, *spec.numeric, *spec.categorical]
    if spec.partition is not None:
        cols.append(spec.partition)
    return list(dict.fromkeys(cols))


def read(path: str, columns: list[str]) -> pd.DataFrame:
    """Read ``columns`` of the file (format from its suffix); CSV cells stay strings to be checked.

    This is the one place a data file is read, so whatever its bytes hold — a damaged archive, text
    that is not UTF-8, rows with more fields than the header — ends as a DataError naming the file.
    """
    csv = path.lower().endswith(CSV_SUFFIXES)
    if not csv and not path.lower().endswith(PARQUET_SUFFIXES):
        raise DataError(path, None, "unknown format: expected .csv, .csv.gz (.bz2, .xz, .zip) or .parquet")
    try:
        return _read_csv(path, columns) if csv else _read_parquet(path, columns)
    except _read_errors() as exc:
        raise DataError(path, None, f"cannot read as {'CSV' if csv else 'Parquet'}: {_reason(exc)}") from None


def _read_errors() -> tuple[type[BaseException], ...]:
    """What reading hostile bytes raises: pandas' and the decompressors' errors (deferred imports).

    Besides ValueError (parser, UTF-8, pyarrow's ArrowInvalid) and OSError (gzip, bz2, I/O) the
    decompressors have their own: ``zlib.error``, ``lzma.LZMAError``, ``zipfile.BadZipFile``, and
    NotImplementedError or RuntimeError for a zip member that is encrypted or uses an unknown method.
    """
    import lzma
    import zipfile
    import zlib

    import pyarrow

    return (ValueError, OSError, EOFError, NotImplementedError, RuntimeError, zlib.error,
            lzma.LZMAError, zipfile.BadZipFile, pyarrow.ArrowException)


def _reason(exc: BaseException) -> str:
    """The first line of an error, with pandas' field-count complaint said in the file's terms."""
    text = str(exc).strip()
    fields = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", text)
    if fields:
        expected, line, saw = fields.groups()
        return f"line {line} has {saw} fields but the header has {expected}"
    return text.splitlines()[0] if text else type(exc).__name__


def _read_csv(path: str, columns: list[str]) -> pd.DataFrame:
    """The CSV's ``columns``, every row checked to have no more fields than the header.

    pandas would otherwise repair such rows silently: ``usecols`` drops a row's extra fields, and
    a first data row longer than the header turns the leading columns into an index, shifting
    every value. So the header and the first row are read as plain rows (a longer first row is
    then a parser error), and the file is read whole (with ``usecols`` pandas skips the check).
    """
    head = pd.read_csv(path, header=None, nrows=2, dtype=str, keep_default_na=False, index_col=False)
    header = head.iloc[0].tolist() if len(head) else []
    _check_present(path, header, columns)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=MISSING_MARKERS,
                        index_col=False)
    return frame[columns]


def _read_parquet(path: str, columns: list[str]) -> pd.DataFrame:
    import pyarrow.parquet as pq  # deferred: only Parquet files need it

    _check_present(path, list(pq.read_schema(path).names), columns)
    return pd.read_parquet(path, columns=columns)


def _check_present(path: str, header: list[str], columns: list[str]) -> None:
    """Every used column is in the header exactly once (pandas would rename a second 'a' 'a.1')."""
    for column in columns:
        count = header.count(column)
        if count == 0:
            shown = ", ".join(header[:12]) + (", …" if len(header) > 12 else "")
            raise DataError(path, column, f"no such column (the file has {len(header)}: {shown})")
        if count > 1:
            raise DataError(path, column, f"{count} columns of the header have this name")


def parse(frame: pd.DataFrame, spec: Table, path: str) -> Parsed:
    """Check and parse every used column; non-numeric values always stop, missing ones by policy."""
    missing: dict[str, np.ndarray] = {}
    numeric = np.empty((len(frame), len(spec.numeric)))
    for j, col in enumerate(spec.numeric):
        numeric[:, j], missing[col] = _numeric(frame[col], path, col)
    categorical = np.empty((len(frame), len(spec.categorical)), dtype=np.int64)
    values = []
    for j, col in enumerate(spec.categorical):
        categorical[:, j], distinct, missing[col] = _strings(frame[col])
        values.append(distinct)
    if spec.label == "sign":
        codes, distinct, missing[spec.target] = _strings(frame[spec.target])
        labels = distinct[codes]
    else:
        labels, missing[spec.target] = _numeric(frame[spec.target], path, spec.target)
        if spec.label == "log":
            labels = _log(labels, missing[spec.target], path, spec.target)
    partition = None
    if spec.partition is not None:
        codes, distinct, missing[spec.partition] = _strings(frame[spec.partition])
        partition = (codes, distinct)
    keep = _missing_policy(missing, spec, path, len(frame))
    counts = {c: int(m.sum()) for c, m in missing.items() if m.any()}
    return Parsed(Columns(numeric, categorical, tuple(values), labels), partition, keep, counts)


def _numeric(series: pd.Series, path: str, col: str) -> tuple[np.ndarray, np.ndarray]:
    """Values as floats and the missing mask; a non-numeric, infinite or too large value is an error."""
    missing = series.isna().to_numpy()
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        values = series.to_numpy(dtype=float, na_value=np.nan)
    else:
        values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~missing & np.isnan(values)
    if bad.any():
        raise DataError(path, col, f"{_count(bad, 'non-numeric value')} ({_rows(bad)}), "
                        f"e.g. {series[bad].iloc[0]!r}")
    huge = ~missing & ~(np.abs(values) <= MAX_MAGNITUDE)
    if huge.any():
        raise DataError(path, col, f"{_count(huge, 'value')} beyond ±{MAX_MAGNITUDE:.0e} ({_rows(huge)}), "
                        f"e.g. {_shown(series[huge].iloc[0])}: too large to compute with")
    return np.where(missing, 0.0, values), missing


def _strings(series: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A text column (categories, owner names, classes) as indices into its distinct values.

    Returns (index per row, distinct values as text, missing mask); a missing cell's index
    points at an empty string. Nothing is normalised (no stripping, no case folding): " Bronx"
    and "Bronx" stay two values.
    """
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    distinct = np.array([str(u) for u in uniques] + [""], dtype=object)
    missing = (codes < 0) | np.isin(codes, np.flatnonzero(distinct[:-1] == ""))
    return np.where(codes < 0, len(distinct) - 1, codes).astype(np.int64), distinct, missing


def _log(labels: np.ndarray, missing: np.ndarray, path: str, col: str) -> np.ndarray:
    """Natural log of a positive label (length of stay); a value ≤ 0 cannot take it."""
    bad = ~missing & (labels <= 0)
    if bad.any():
        raise DataError(path, col, f"{int(bad.sum())} values <= 0 cannot take label = 'log' ({_rows(bad)})")
    return np.log(np.where(missing, 1.0, labels))


def _missing_policy(missing: dict[str, np.ndarray], spec: Table, path: str, n: int) -> np.ndarray:
    """Rows to keep: all, or (``missing = "drop"``) those without a missing value; else an error."""
    any_missing = np.zeros(n, dtype=bool)
    for col, mask in missing.items():
        if mask.any() and spec.missing == "error":
            raise DataError(path, col, f"{_count(mask, 'missing value')} ({_rows(mask)}); "
                            "set data.table.missing = 'drop' to leave those rows out")
        any_missing |= mask
    return ~any_missing


def _shown(value) -> str:
    """A cell as the message shows it: text quoted as in the file, a number (Parquet) as a float."""
    return repr(value) if isinstance(value, str) else repr(float(value))


def _count(mask: np.ndarray, noun: str) -> str:
    """'1 value' or '3 values': how many rows ``mask`` marks."""
    count = int(mask.sum())
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _rows(mask: np.ndarray) -> str:
    """'rows 3, 17, …' with 1-based data row numbers (the header is not a row)."""
    idx = np.flatnonzero(mask)[:SHOWN] + 1
    more = ", …" if mask.sum() > SHOWN else ""
    return ("row " if mask.sum() == 1 else "rows ") + ", ".join(map(str, idx)) + more


def form_owners(spec: Table, path: str, partition: tuple[np.ndarray, np.ndarray] | None,
                rows: np.ndarray) -> tuple[list[str], list[np.ndarray], dict]:
    """Owners' names and row indices (file order within each), and what was left out on purpose."""
    if spec.partition is None:
        groups = np.array_split(rows, spec.blocks)
        names = [f"block-{i + 1}" for i in range(spec.blocks)]  # not padded: the same for any count
    else:
        names, groups = _partitioned(partition[0][rows], partition[1], rows)
    sizes = np.array([len(g) for g in groups], dtype=np.int64)
    small = sizes < spec.min_records
    if small.any() and spec.small_owners == "error":
        listed = ", ".join(f"{names[i]} {sizes[i]}" for i in np.flatnonzero(small)[:SHOWN])
        more = ", …" if small.sum() > SHOWN else ""
        raise DataError(path, spec.partition, f"{int(small.sum())} owners have fewer than "
                        f"min_records = {spec.min_records} rows ({listed}{more}); "
                        "set data.table.small_owners = 'drop' to leave them out")
    kept = np.flatnonzero(~small)
    beyond = kept[spec.max_owners:] if spec.max_owners is not None else kept[:0]
    kept = kept[: spec.max_owners] if spec.max_owners is not None else kept
    if len(kept) == 0:
        raise DataError(path, spec.partition, f"no owner has min_records = {spec.min_records} rows")
    dropped = {"owners_below_min_records": int(small.sum()),
               "rows_below_min_records": int(sizes[small].sum()),
               "owners_beyond_max_owners": len(beyond),
               "rows_beyond_max_owners": int(sizes[beyond].sum()),
               "owners_left_out": [names[i] for i in np.flatnonzero(small)] + [names[i] for i in beyond]}
    return [names[i] for i in kept], [groups[i] for i in kept], dropped


def _partitioned(codes: np.ndarray, values: np.ndarray,
                 rows: np.ndarray) -> tuple[list[str], list[np.ndarray]]:
    """Groups of ``rows`` by partition value, largest first (ties by name), file order within.

    ``codes`` index ``values`` row by row; a value with no row here (say, seen only in the
    hold-out) is no owner.
    """
    sizes = np.bincount(codes, minlength=len(values))
    order = sorted(np.flatnonzero(sizes), key=lambda g: (-sizes[g], str(values[g])))
    perm = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)])
    groups = [rows[perm[starts[g]:starts[g + 1]]] for g in order]
    return [str(values[g]) for g in order], groups


def _named(scenario: Scenario, names: list[str], path: str) -> list[str]:
    """Owner names, with the ``[[owners]]`` overrides (applied to owners 1, 2, … in order)."""
    if len(scenario.owners) > len(names):
        raise DataError(path, None, f"the scenario has {len(scenario.owners)} [[owners]] tables "
                        f"but the table yields {len(names)} owners")
    return [scenario.owner_value(i, "name") or name for i, name in enumerate(names)]


def _transformed(transform: PublicTransform, cols: Columns, codes: np.ndarray, x_bound: float,
                 y_bound: float, *, classes: bool) -> tuple[np.ndarray, np.ndarray, dict]:
    """Owners' features and labels after the public transform, clipped into the declared bounds."""
    X, y = transform.features(cols, codes), transform.labels(cols.labels)
    outside = np.abs(X) > x_bound
    counts = {"feature_values_clipped": int(outside.sum()),
              "records_with_clipped_features": int(outside.any(axis=1).sum()),
              "labels_clipped": 0 if classes else int(np.sum(np.abs(y) > y_bound))}
    np.clip(X, -x_bound, x_bound, out=X)
    if not classes:
        np.clip(y, -y_bound, y_bound, out=y)
    return X, y, counts


def _block(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One owner's record block: p feature rows, a row of ones, the labels (as synthetic owners)."""
    p, n = X.shape[1], X.shape[0]
    block = np.empty((p + 2, n))
    block[:p] = X.T
    block[p] = 1.0
    block[p + 1] = y
    return block


def _unseen(transform: PublicTransform, codes: np.ndarray, names: list[str]) -> dict[str, int]:
    """Owners' values of each categorical column that the hold-out never showed (encoded as 'other')."""
    out = {}
    for j, levels in enumerate(transform.categories):
        count = int(np.sum(codes[:, j] == len(levels)))
        if count:
            out[names[j]] = count
    return out
