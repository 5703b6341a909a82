"""Fuzz suite of the data path (issue 13): hostile tables, hostile bytes, ragged rows, the answer path.

Each property is what the README promises: bad data ends as one DataError naming the file (and
the column, or the line), anything else is a run whose answers, θ and ψ are finite. Each is paired
with a deliberately wrong input — the same property checked with the guard taken out, on a known
bad case — so that a property that could not fail would show.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tempfile
import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dpmarket.data import magnitudes, table
from dpmarket.data.table import read
from dpmarket.errors import DataError, ScenarioError
from dpmarket.learning.objective import OwnerData, make_loss
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.privacy.owners import DataOwner, answer_bound
from dpmarket.runs.run import execute
from dpmarket.scenario.loading import validate

COLUMNS = ["a", "b", "c", "d"]
ROWS, HOLDOUT = 24, 8  # two owners of 8 rows, then 8 public rows

# Every float, the hostile ones drawn often: infinities, NaN, the largest finite values, subnormals
# and the edge of what the loader accepts.
HOSTILE = st.one_of(st.sampled_from([np.inf, -np.inf, np.nan, 1e308, -1e308, 1.7976931348623157e308,
                                     5e-324, -5e-324, 2.2e-308, 1e100, -1e100, 1.0000000000000002e100,
                                     0.0]),
                    st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def float_tables(draw) -> np.ndarray:
    """ROWS × 5 values (four features and a label): ordinary values from a drawn seed and scale,
    with up to six cells anywhere (owners' rows or the hold-out's) replaced by hostile floats."""
    gen = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = gen.normal(0.0, draw(st.sampled_from([1e-300, 1e-6, 1.0, 1e6, 1e99])), (ROWS, 5))
    for _ in range(draw(st.integers(0, 6))):
        values[draw(st.integers(0, ROWS - 1)), draw(st.integers(0, 4))] = draw(HOSTILE)
    return values


# --- hostile values in a table: one-line user error or a finite run ----------------------------

def _table_scenario(path: Path, loss: str, components: int, sensitivity: str, rho) -> object:
    classes = loss != "squared"
    spec = {"target": "cls" if classes else "y", "numeric": COLUMNS, "blocks": 2, "holdout": HOLDOUT,
            "components": components, **({"label": "sign", "positive": ["p"]} if classes else {})}
    privacy = {"sensitivity": sensitivity, **({"clip": 2.0} if sensitivity == "clip" else {})}
    return validate({"name": "fuzz", "seed": 1, "data": {"source": "table", "path": str(path), "table": spec},
                     "model": {"loss": loss}, "privacy": privacy,
                     "learner": {"iterations": 20, "rho": rho},
                     "output": {"metric_points": 3, "plots": False}}, "fuzz.toml")


def _write(values: np.ndarray, path: Path) -> Path:
    frame = pd.DataFrame(values[:, :4], columns=COLUMNS)
    frame["y"] = values[:, 4]
    frame["cls"] = np.where(np.arange(len(values)) % 3 == 0, "p", "n")
    frame.to_csv(path, index=False)  # NaN is written as an empty cell, ±inf as 'inf'/'-inf'
    return path


@contextmanager
def _recorded_answers():
    """Every answer any owner gives while inside, as returned to the learner."""
    answers, respond = [], DataOwner.respond

    def recording(self, theta):
        answer = respond(self, theta)
        if answer is not None:
            answers.append(answer)
        return answer

    DataOwner.respond = recording
    try:
        yield answers
    finally:
        DataOwner.respond = respond


def _holds(scenario, path: Path) -> bool:
    """The promise: a DataError naming the file and a column of the table, on one line; or a run
    whose every answer, θ, ψ and ψ(0) are finite, without a warning. Anything else (another
    exception included) fails."""
    with _recorded_answers() as answers, warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy warning would be a stray line on stderr
        try:
            result = execute(scenario)
        except DataError as exc:
            return (exc.column in COLUMNS + ["y", "cls"] and str(path) in str(exc)
                    and "\n" not in str(exc))
        except Exception:  # noqa: BLE001 — any other exception breaks the promise
            return False
    finite = [np.isfinite(a).all() for a in answers]
    return (bool(answers) and all(finite) and np.isfinite(result.training.learner.model).all()
            and np.isfinite(result.training.metrics.psi).all() and np.isfinite(result.psi_zero))


@given(values=float_tables(),
       loss=st.sampled_from(["squared", "logistic", "hinge"]), components=st.sampled_from([0, 1, 3]),
       sensitivity=st.sampled_from(["bounds", "clip"]), auto=st.booleans())
def test_any_float_table_is_a_one_line_error_or_a_finite_run(values, loss, components, sensitivity, auto):
    rho = "auto" if auto and loss != "hinge" else 1.0  # the hinge loss has no curvature for "auto"
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(values, Path(tmp) / "t.csv")
        assert _holds(_table_scenario(path, loss, components, sensitivity, rho), path)


def _issue_table(path: Path, where: int, value: float) -> Path:
    """The issue's case: four columns of tightly spread, pairwise opposed values (so the PCA
    direction mixes signs and scales them up), and one record of ``value`` in every column at
    row ``where`` (an owner's, or the public hold-out's)."""
    gen = np.random.default_rng(0)
    base = gen.normal(0.0, 0.01, ROWS)
    near = base + gen.normal(0, 1e-3, ROWS)
    values = np.column_stack([base, near, -base, -near, gen.normal(size=ROWS)])
    values[where, :4] = value
    return _write(values, path)


@pytest.mark.parametrize("where, value", [(3, 1e308), (ROWS - 2, np.inf)], ids=["owner", "holdout"])
def test_one_hostile_record_is_refused_naming_it_and_without_the_guard_breaks_dp(tmp_path, where, value,
                                                                                 monkeypatch):
    path = _issue_table(tmp_path / "t.csv", where, value)
    scenario = _table_scenario(path, "hinge", 1, "bounds", 1.0)
    with pytest.raises(DataError, match=rf"t\.csv: column 'a': 1 value beyond ±1e\+100 \(row {where + 1}\)"):
        execute(scenario)
    assert _holds(scenario, path)
    # The deliberately wrong input: the loader's guards taken out, the very same file. An owner's
    # 1e308 overflows in the projection: inf − inf = NaN, or ±inf where the CPU's BLAS adds the
    # terms in another order (the same file gives either, by machine). A NaN survives clipping and
    # every answer of that owner is NaN (the last-resort guard in respond stops the run); an inf is
    # clipped to the bound, an altered record the owner never held. The hold-out's inf makes its mean
    # inf and the PCA's covariance NaN (LinAlgError). A hold-out value of 1e308 would not even fail:
    # its standard deviation overflows to inf and the column silently drops out of the transform.
    monkeypatch.setattr(table, "MAX_MAGNITUDE", np.inf)
    monkeypatch.setattr(table, "_check_transform", lambda *args: None)
    with np.errstate(all="ignore"):
        assert not _holds(scenario, path)
    if where < ROWS - HOLDOUT:
        parsed = table.parse(table.read(str(path), table.used_columns(scenario.data.table)),
                             scenario.data.table, str(path))
        held = np.flatnonzero(np.arange(ROWS) >= ROWS - HOLDOUT)
        transform = table.preprocess.fit(scenario.data.table, parsed.take(held), COLUMNS, [], 1.0,
                                         y_bound=3.0)
        with np.errstate(all="ignore"):
            raw = transform.features(parsed.take(np.array([where])))
        # what the guard rules out, whichever IEEE value this machine's sum order gives
        assert not np.isfinite(raw).all()


# --- hostile bytes: a DataError naming the file, never another exception -----------------------

GOOD = ("a,b,y\n" + "\n".join(f"{i},{i % 7},{i % 3}" for i in range(40)) + "\n").encode()


def _zip(content: bytes, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        archive.writestr("t.csv", content)
    return buffer.getvalue()


def _parquet(content: bytes) -> bytes:
    buffer = io.BytesIO()
    pd.read_csv(io.BytesIO(content)).to_parquet(buffer)
    return buffer.getvalue()


VALID = {".csv": GOOD, ".csv.gz": gzip.compress(GOOD), ".csv.bz2": bz2.compress(GOOD),
         ".csv.xz": lzma.compress(GOOD), ".csv.zip": _zip(GOOD), ".parquet": _parquet(GOOD)}
ZIP_METHODS = [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]


@st.composite
def damaged(draw) -> tuple[str, bytes]:
    """A file name and its bytes: random bytes, or a valid file of that format truncated, with
    bytes overwritten, or with bytes inserted (far likelier to get past the magic numbers)."""
    suffix = draw(st.sampled_from(sorted(VALID)))
    valid = VALID[suffix] if suffix != ".csv.zip" else _zip(GOOD, draw(st.sampled_from(ZIP_METHODS)))
    how = draw(st.sampled_from(["random", "truncated", "overwritten", "inserted"]))
    if how == "random":
        return suffix, draw(st.binary(max_size=300))
    data = bytearray(valid)
    at = draw(st.integers(0, len(data) - 1))
    if how == "truncated":
        return suffix, bytes(data[:at])
    patch = draw(st.binary(min_size=1, max_size=16))
    if how == "overwritten":
        data[at:at + len(patch)] = patch
    else:
        data[at:at] = patch
    return suffix, bytes(data)


def _read_holds(path: Path) -> bool:
    """Read, or a one-line DataError naming the file; never any other exception."""
    try:
        frame = read(str(path), ["a", "y"])
    except DataError as exc:
        return str(path) in str(exc) and "\n" not in str(exc)
    except Exception:  # noqa: BLE001 — the promise is that nothing else escapes
        return False
    return list(frame.columns) == ["a", "y"]


@given(case=damaged())
def test_any_bytes_are_read_or_refused_naming_the_file(case):
    suffix, content = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"t{suffix}"
        path.write_bytes(content)
        assert _read_holds(path)


@pytest.mark.parametrize("suffix, content", [
    (".csv.xz", b"garbage, not xz"),
    (".csv.xz", lzma.compress(GOOD)[:40] + b"\x00" * 30 + lzma.compress(GOOD)[70:]),
    (".csv.zip", b"garbage, not zip"),
    (".csv.zip", b"PK\x03\x04" + b"\x00" * 60),
    (".csv.gz", gzip.compress(GOOD)[:30] + b"\xff" * 8 + gzip.compress(GOOD)[38:]),
])
def test_garbage_archives_are_one_line_errors_and_were_not_before(tmp_path, suffix, content, monkeypatch):
    path = tmp_path / f"t{suffix}"
    path.write_bytes(content)
    with pytest.raises(DataError, match=r"cannot read as CSV"):
        read(str(path), ["a", "y"])
    # The deliberately wrong input: the reader as it was, catching only what pandas raises itself.
    monkeypatch.setattr(table, "_read_errors", lambda: (ValueError, OSError, EOFError))
    assert not _read_holds(path)


# --- ragged rows: a row longer than the header is refused, naming its line ---------------------

ROW = st.lists(st.sampled_from(["1", "2.5", "-3", "x", ""]), min_size=1, max_size=6).filter(any)


@given(rows=st.lists(ROW, min_size=1, max_size=8))
def test_rows_longer_than_the_header_are_refused_naming_their_line(rows):
    first_long = next((i for i, row in enumerate(rows) if len(row) > 3), None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        path.write_text("a,b,y\n" + "\n".join(",".join(row) for row in rows) + "\n")
        try:
            frame = read(str(path), ["a", "y"])
        except DataError as exc:
            assert first_long is not None, str(exc)
            line, fields = first_long + 2, len(rows[first_long])
            assert f"line {line} has {fields} fields but the header has 3" in str(exc)
            return
    assert first_long is None
    padded = [row + [""] * (3 - len(row)) for row in rows]
    assert frame["a"].fillna("").tolist() == [row[0] for row in padded]
    assert frame["y"].fillna("").tolist() == [row[2] for row in padded]


def test_pandas_alone_truncates_or_shifts_long_rows_silently(tmp_path):
    """The deliberately wrong input for the property above: the reader before the fix (usecols,
    pandas' defaults) keeps a long later row truncated and shifts every value of a long first row."""
    later, first = tmp_path / "later.csv", tmp_path / "first.csv"
    later.write_text("a,b,y\n1,2,3\n4,5,6,7\n")
    first.write_text("a,b,y\n1,2,3,4,5\n6,7,8\n")
    assert pd.read_csv(later, usecols=["a", "y"], dtype=str)["y"].tolist() == ["3", "6"]
    assert pd.read_csv(first, usecols=["a", "y"], dtype=str)["a"].tolist() == ["3", "8"]  # shifted
    for path, line, saw in ((later, 3, 4), (first, 2, 5)):
        with pytest.raises(DataError, match=rf"line {line} has {saw} fields but the header has 3"):
            read(str(path), ["a", "y"])


# --- the answer path: records within the declared domain give finite answers -------------------

MAGNITUDE = st.sampled_from([1e-300, 1e-8, 1.0, 3.0, 1e8, 1e50, 1e100, 1e140, 1e150, 1e200, 1e300])


@st.composite
def owner_case(draw):
    """Declared bounds, a loss and a sensitivity, records anywhere in the domain (its corners and
    subnormals included) and a query point anywhere in Θ (its corners included)."""
    X, Y, theta_max, lam = draw(MAGNITUDE), draw(MAGNITUDE), draw(MAGNITUDE), draw(MAGNITUDE)
    loss, p, n = draw(st.sampled_from(["squared", "logistic", "hinge"])), draw(st.integers(1, 4)), \
        draw(st.integers(1, 40))
    edge = st.sampled_from([1.0, -1.0, 0.0, 5e-324, 0.5])
    Z = draw(arrays(np.float64, (n, p), elements=st.one_of(edge, st.floats(-1.0, 1.0)))) * X
    y = (draw(arrays(np.float64, n, elements=st.sampled_from([-1.0, 1.0]))) if loss != "squared"
         else draw(arrays(np.float64, n, elements=st.one_of(edge, st.floats(-1.0, 1.0)))) * Y)
    theta = draw(arrays(np.float64, p, elements=st.one_of(edge, st.floats(-1.0, 1.0)))) * theta_max
    clip = draw(st.sampled_from([None, 1e-3, 1.0, 1e100]))
    return X, Y, theta_max, lam, loss, Z, y, theta, clip


def _answer(X, Y, theta_max, lam, loss, Z, y, theta, clip, epsilon=1.0):
    """The owner's DP answer at θ, or None when the run refuses these bounds before any arithmetic."""
    n, p = Z.shape
    data = {"features": p, "feature_bound": X, "label_bound": Y,
            "kind": "interest_rate" if loss == "squared" else "card_fraud"}
    scenario = validate({"name": "f", "data": data,
                         "model": {"loss": loss, "theta_max": theta_max, "regularization": lam},
                         "learner": {"rho": 1.0}}, "f.toml")
    y_max = Y if loss == "squared" else 1.0
    try:
        magnitudes.check_bounds(scenario, n, p * X, y_max, p)
    except ScenarioError:
        return None
    xi = make_loss(loss).l1_sensitivity(p * X, y_max, theta_max) if clip is None else clip
    if not np.isfinite(answer_bound(xi, 2.0 * xi / (n * epsilon))):
        return None  # the run refuses such an ε (run._check_budget)
    block = np.vstack([Z.T, np.ones(n), y])
    data = OwnerData.from_block(block, False, keep_records=True)
    owner = DataOwner(0, "o", data, make_loss(loss), guarantee=Guarantee("laplace", "basic", epsilon),
                      answers=1, xi=xi, noise_rng=np.random.default_rng(0), theta_max=theta_max,
                      clip=clip)
    return owner.respond(theta)


@given(case=owner_case())
def test_answers_for_records_in_the_declared_domain_are_finite(case):
    answer = _answer(*case)
    assume(answer is not None)
    assert np.isfinite(answer).all()


def test_without_the_bounds_check_records_in_the_domain_overflow(monkeypatch):
    """The deliberately wrong input: bounds the check refuses (hinge loss, X = 1e307: Ξ = ‖z‖₁ is
    finite, but 40 records at the corner of the domain sum past the largest float), with the check
    taken out: the owner's exact answer is inf, and the last-resort guard in respond raises rather
    than let it out."""
    Z, y, theta = np.full((40, 1), 1e307), np.full(40, -1.0), np.array([1.0])
    case = (1e307, 1.0, 1.0, 1e-5, "hinge", Z, y, theta, None)
    assert _answer(*case, epsilon=1e10) is None  # refused by the check
    monkeypatch.setattr(magnitudes, "check_bounds", lambda *args: None)
    with np.errstate(all="ignore"), pytest.raises(FloatingPointError, match="non-finite answer"):
        _answer(*case, epsilon=1e10)
