"""Owners from a table of real records (data.source = "table"): every option, every bad-data message.

The tables are small and written by the tests themselves; the SPARCS extract in ../shared/data is
run end to end only when it is present.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import ROOT

from dpmarket.cli import main
from dpmarket.data import build_consortium
from dpmarket.data.table import load_owners
from dpmarket.errors import DataError
from dpmarket.learning.objective import make_loss
from dpmarket.privacy.cohort import sensitivity
from dpmarket.scenario.loading import load, validate

SITES = {"A": 80, "B": 50, "C": 30, "D": 10}  # private rows per site, interleaved in the file
HOLDOUT = 40
SHARED = ROOT.parent / "shared" / "data"


def records(seed: int = 0) -> pd.DataFrame:
    """170 private rows (sites interleaved) then 40 hold-out rows; every column has a use."""
    gen = np.random.default_rng(seed)
    sites = np.repeat(list(SITES), list(SITES.values()))
    gen.shuffle(sites)
    sites = np.concatenate([sites, gen.choice(list(SITES), HOLDOUT)])
    n = len(sites)
    a, b = gen.normal(5.0, 2.0, n), gen.uniform(0.0, 10.0, n)
    cat = gen.choice(["low", "mid", "high"], n)
    y = 1.0 + 0.5 * a - 0.2 * b + (cat == "high") + gen.normal(0, 0.3, n)
    return pd.DataFrame({"row": np.arange(n), "site": sites, "a": a, "b": b, "cat": cat,
                         "y": y, "stay": np.exp(gen.normal(1.0, 0.5, n)),
                         "cls": np.where(y > np.median(y), "yes", "no")})


def write(df: pd.DataFrame, path: Path) -> Path:
    """Write ``df`` in the format the suffix names."""
    if path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path


def market_scenario(directory: Path, table: str, market: str) -> Path:
    """``directory/m.toml``: a market on :func:`records` (partitioned by site, T = 40), with ``table``
    added to its ``[data.table]`` section and ``market`` as its ``[market]`` section (TOML lines)."""
    data = write(records(), directory / "t.csv")
    path = directory / "m.toml"
    path.write_text(
        f'name = "t"\nseed = 1\n[data]\nsource = "table"\npath = "{data}"\n'
        f'[data.table]\ntarget = "y"\nnumeric = ["a", "b"]\npartition = "site"\n{table}'
        f'[learner]\niterations = 40\nrho = 1.0\n[output]\nplots = false\n[market]\n{market}')
    return path


def scenario(path: Path, model: dict | None = None, data: dict | None = None, **table):
    """A small table scenario over ``path``; keyword arguments go to [data.table]. The papers'
    privacy set-up (Ξ from the declared bounds), whose guarantee the clipping tests check."""
    spec = {"target": "y", "numeric": ["a", "b"], "partition": "site", "holdout": HOLDOUT, **table}
    return validate({"name": "t", "seed": 1,
                     "data": {"source": "table", "path": str(path), "table": spec, **(data or {})},
                     "model": model or {}, "privacy": {"preset": "paper"},
                     "learner": {"iterations": 40, "rho": 1.0},
                     "output": {"metric_points": 5, "plots": False}}, "test")


@pytest.fixture
def csv(tmp_path) -> Path:
    return write(records(), tmp_path / "loans.csv")


# --- schema ---------------------------------------------------------------------------------


def test_synthetic_default_unchanged_and_table_round_trips(csv, tmp_path):
    synthetic = validate({"name": "t"}, "s")
    assert synthetic.data.source == "synthetic" and "path" not in synthetic.to_toml()
    s = scenario(csv, categorical=["cat"])
    text = s.to_toml()
    data = tomllib.loads(text)["data"]
    assert not set(data) & {"kind", "owners", "records", "features", "shift", "seed"}  # not shown
    (tmp_path / "again.toml").write_text(text)
    assert load(tmp_path / "again.toml") == s


# --- loading and owners ---------------------------------------------------------------------

def test_csv_compressed_csv_and_parquet_give_the_same_owners(tmp_path):
    df = records()
    blocks = []
    for name in ("t.csv", "t.csv.gz", "t.parquet"):
        path = tmp_path / name
        df.to_csv(path, index=False) if ".csv" in name else write(df, path)
        blocks.append(load_owners(scenario(path, categorical=["cat"])).blocks)
    for other in blocks[1:]:
        for x, y in zip(blocks[0], other, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)


def test_partition_owners_largest_first_with_their_own_rows(csv):
    loaded = load_owners(scenario(csv, standardize=False, numeric=["row"],
                                  data={"feature_bound": 1000.0, "label_bound": 1000.0}))
    assert loaded.names == ["A", "B", "C", "D"]
    assert [b.shape[1] for b in loaded.blocks] == list(SITES.values())
    df = records()
    for name, block in zip(loaded.names, loaded.blocks, strict=True):
        expected = df["row"][(df["site"] == name) & (df["row"] < len(df) - HOLDOUT)]
        np.testing.assert_array_equal(block[0], expected.to_numpy())  # file order, no hold-out row
        np.testing.assert_allclose(block[2], df["y"][expected.index])


def test_blocks_are_contiguous_rows_in_file_order(csv):
    loaded = load_owners(scenario(csv, partition=None, blocks=3, standardize=False, numeric=["row"],
                                  data={"feature_bound": 1000.0, "label_bound": 1000.0}))
    rows = np.concatenate([b[0] for b in loaded.blocks])
    np.testing.assert_array_equal(rows, np.arange(len(records()) - HOLDOUT))
    assert loaded.names == ["block-1", "block-2", "block-3"]
    assert [b.shape[1] for b in loaded.blocks] == [57, 57, 56]


def test_small_owners_are_an_error_unless_dropped_and_then_counted(csv):
    with pytest.raises(DataError, match=r"loans\.csv: column 'site': 2 owners have fewer than "
                                        r"min_records = 40 rows \(C 30, D 10\); set"):
        load_owners(scenario(csv, min_records=40))
    loaded = load_owners(scenario(csv, min_records=40, small_owners="drop"))
    assert loaded.names == ["A", "B"]
    r = loaded.report
    assert (r["owners_below_min_records"], r["rows_below_min_records"]) == (2, 40)
    assert r["owners_left_out"] == ["C", "D"]


def test_no_owner_left_and_an_empty_hold_out_are_errors(tmp_path, csv):
    with pytest.raises(DataError, match=r"column 'site': no owner has min_records = 500 rows"):
        load_owners(scenario(csv, min_records=500, small_owners="drop"))
    df = records()
    df.loc[len(df) - HOLDOUT:, "a"] = np.nan
    with pytest.raises(DataError, match=r"all 40 hold-out rows have missing values"):
        load_owners(scenario(write(df, tmp_path / "t.csv"), missing="drop"))


def test_max_owners_keeps_the_largest_and_counts_the_rest(csv):
    loaded = load_owners(scenario(csv, max_owners=2))
    assert loaded.names == ["A", "B"]
    r = loaded.report
    assert (r["owners_beyond_max_owners"], r["rows_beyond_max_owners"]) == (2, 40)
    assert r["rows_read"] == (r["holdout_rows"] + r["rows_dropped_missing"]
                              + r["rows_below_min_records"] + r["rows_beyond_max_owners"]
                              + sum(b.shape[1] for b in loaded.blocks))


def test_codes_follow_the_hold_out_levels_and_standardise_with_its_moments(csv):
    s = scenario(csv, numeric=[], categorical=["cat"], spread=2.0)
    loaded = load_owners(s)
    df = records()
    public = df["cat"].iloc[-HOLDOUT:]
    levels = sorted(public.unique())
    assert loaded.transform.categories == (tuple(levels),)
    codes = public.map({v: i for i, v in enumerate(levels)}).to_numpy(float)
    mu, sd = codes.mean(), codes.std()
    own = df[(df.site == "A") & (df.row < len(df) - HOLDOUT)]["cat"].map(levels.index).to_numpy()
    expected = np.clip((own - mu) / (2.0 * sd), -1.0, 1.0)  # 2 sds map to the bound X = 1
    np.testing.assert_allclose(loaded.blocks[0][0], expected)


def test_onehot_has_one_feature_per_hold_out_level_and_unseen_levels_are_counted(tmp_path):
    df = records()
    df.loc[:9, "cat"] = "rare"  # ten owner rows with a level the hold-out never shows
    loaded = load_owners(scenario(write(df, tmp_path / "t.csv"), numeric=[], categorical=["cat"],
                                  encoding="onehot", standardize=False))
    assert loaded.transform.p == 3
    assert loaded.report["unseen_categories"] == {"cat": 10}
    Z = np.hstack([b[:3] for b in loaded.blocks]).T
    assert set(Z.sum(axis=1)) == {0.0, 1.0} and int(np.sum(Z.sum(axis=1) == 0)) == 10


def test_pca_dictionary_whitens_the_hold_out_exactly(csv):
    loaded = load_owners(scenario(csv, numeric=["a", "b", "stay"], categorical=["cat"],
                                  components=2, spread=4.0))
    t = loaded.transform
    from dpmarket.data.table import parse, read, used_columns

    spec = scenario(csv, numeric=["a", "b", "stay"], categorical=["cat"], components=2).data.table
    parsed = parse(read(str(csv), used_columns(spec)), spec, str(csv))
    n = len(records())
    Fh = t.features(parsed.take(np.arange(n - HOLDOUT, n)))
    cov = np.cov(Fh.T, ddof=1)
    np.testing.assert_allclose(cov, (1.0 / 4.0) ** 2 * np.eye(2), atol=1e-12)  # whitened, 4 sds → X
    np.testing.assert_allclose(Fh.mean(axis=0), 0.0, atol=1e-12)
    E = np.column_stack([parsed.columns.numeric[n - HOLDOUT:],
                         t.codes(parsed.take(np.arange(n - HOLDOUT, n)))])
    S = (E - E.mean(0)) / E.std(0)
    eig = np.linalg.eigvalsh(np.cov(S.T))[::-1]
    assert t.variance_explained == pytest.approx(eig[:2].sum() / eig.sum(), rel=1e-10)


def test_sign_labels_train_an_svm_end_to_end(csv):
    s = scenario(csv, target="cls", label="sign", positive=["yes"], model={"loss": "hinge"})
    c = build_consortium(s)
    df = records()
    own = df[(df.site == "A") & (df.row < len(df) - HOLDOUT)]
    np.testing.assert_array_equal(c.owners[0].y, np.where(own.cls == "yes", 1.0, -1.0))
    assert c.y_max == 1.0


def test_log_label_is_log_then_standardised_by_the_hold_out(csv):
    loaded = load_owners(scenario(csv, target="stay", label="log", spread=3.0,
                                  data={"label_bound": 100.0}))
    df = records()
    logs = np.log(df["stay"])
    mu, sd = logs.iloc[-HOLDOUT:].mean(), logs.iloc[-HOLDOUT:].std(ddof=0)
    own = logs[(df.site == "A") & (df.row < len(df) - HOLDOUT)]
    np.testing.assert_allclose(loaded.blocks[0][-1], (own - mu) / (3.0 * sd / 100.0))


# --- privacy: the public transform, the hold-out, the bounds --------------------------------

def test_hold_out_rows_never_enter_an_owner(csv):
    loaded = load_owners(scenario(csv, standardize=False, numeric=["row"],
                                  data={"feature_bound": 1e6, "label_bound": 1e6}))
    rows = np.concatenate([b[0] for b in loaded.blocks])
    assert rows.max() < len(records()) - HOLDOUT
    assert len(rows) == len(set(rows)) == len(records()) - HOLDOUT


def test_owners_rows_do_not_move_the_transform_but_the_hold_out_does(tmp_path):
    opts = {"numeric": ["a", "b"], "categorical": ["cat"], "components": 2, "target": "stay",
            "label": "log"}
    base = records()
    changed = base.copy()
    private = slice(0, len(base) - HOLDOUT - 1)  # .loc is inclusive
    changed.loc[private, ["a", "b", "stay"]] *= 7.0
    changed.loc[private, "cat"] = "other"
    t0 = load_owners(scenario(write(base, tmp_path / "a.csv"), **opts)).transform
    t1 = load_owners(scenario(write(changed, tmp_path / "b.csv"), **opts)).transform
    assert _same_transform(t0, t1)
    held = base.copy()
    held.loc[len(base) - 1, "a"] += 1.0  # one hold-out value: the check must notice
    t2 = load_owners(scenario(write(held, tmp_path / "c.csv"), **opts)).transform
    assert not _same_transform(t0, t2)


def _same_transform(s, t) -> bool:
    arrays = [(s.weights, t.weights), (s.offset, t.offset)] + list(zip(s.lookups, t.lookups,
                                                                        strict=True))
    return (s.categories == t.categories and s.label_center == t.label_center
            and s.label_scale == t.label_scale and all(np.array_equal(x, y) for x, y in arrays))


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_clipping_keeps_every_record_in_the_declared_bounds_and_xi_holds(tmp_path, loss):
    df = records()
    df.loc[:20, "a"] = 1e9  # wild values in owners' rows
    df.loc[21:40, "y"] = -1e9
    path = write(df, tmp_path / "t.csv")
    opts = {"target": "cls", "label": "sign", "positive": ["yes"]} if loss != "squared" else {}
    s = scenario(path, categorical=["cat"], model={"loss": loss, "intercept": True}, **opts,
                 data={"feature_bound": 0.5, "label_bound": 2.0})
    loaded = load_owners(s)
    Z = np.hstack([b[:-2] for b in loaded.blocks])
    y = np.concatenate([b[-1] for b in loaded.blocks])
    assert np.abs(Z).max() <= 0.5 and np.abs(y).max() <= 2.0
    assert loaded.report["records_with_clipped_features"] >= 21
    if loss == "squared":
        assert loaded.report["labels_clipped"] >= 20
    c = build_consortium(s)
    xi = sensitivity(s, c)
    assert _largest_gradient(loss, Z, y) <= xi
    # The deliberately wrong input: the same records before clipping break the bound.
    from dpmarket.data.table import parse, read, used_columns

    spec = s.data.table
    parsed = parse(read(str(path), used_columns(spec)), spec, str(path))
    raw = parsed.take(np.arange(len(df) - HOLDOUT))
    raw_y = loaded.transform.labels(raw.labels)
    assert _largest_gradient(loss, loaded.transform.features(raw).T, raw_y) > xi


def _largest_gradient(loss: str, Z: np.ndarray, y: np.ndarray) -> float:
    """max over records and 50 corners of Θ (where the L1 norm peaks) of ‖∇ℓ(θ; z, y)‖₁."""
    design = np.vstack([Z, np.ones(Z.shape[1])]).T
    gen = np.random.default_rng(0)
    worst = 0.0
    for theta in gen.choice([-1.0, 1.0], size=(50, design.shape[1])):
        grads = make_loss(loss).per_example_grads(theta, design, y)
        worst = max(worst, float(np.abs(grads).sum(axis=1).max()))
    return worst


# --- bad data: one line naming the file, the column and the rows ----------------------------

def test_missing_column_names_the_file_and_the_column(csv):
    with pytest.raises(DataError, match=r"loans\.csv: column 'nope': no such column \(the file has 8"):
        load_owners(scenario(csv, numeric=["a", "nope"]))


def test_non_numeric_values_are_counted_with_their_rows(tmp_path):
    df = records().astype({"a": object})
    df.loc[[2, 16, 30], "a"] = "n/a?"
    with pytest.raises(DataError, match=r"t\.csv: column 'a': 3 non-numeric values "
                                        r"\(rows 3, 17, 31\), e\.g\. 'n/a\?'"):
        load_owners(scenario(write(df, tmp_path / "t.csv")))


def test_missing_values_are_an_error_or_dropped_and_counted(tmp_path):
    df = records().astype({"b": object})
    df.loc[[0, 1, 2, 3, 4, 5, 6], "b"] = ["", "NA", "NaN", "", "", "null", ""]
    df.loc[[6, 8], "cat"] = None
    df.loc[[9], "cat"] = "None"  # a real category, not a missing value
    path = write(df, tmp_path / "t.csv")
    with pytest.raises(DataError, match=r"column 'b': 7 missing values \(rows 1, 2, 3, 4, 5, …\); "
                                        r"set data\.table\.missing = 'drop'"):
        load_owners(scenario(path, categorical=["cat"]))
    r = load_owners(scenario(path, categorical=["cat"], missing="drop")).report
    assert r["rows_dropped_missing"] == 8 and r["missing_by_column"] == {"b": 7, "cat": 2}


@pytest.mark.parametrize("table, message", [
    ({"target": "stay", "label": "log"}, r"column 'stay': 2 values <= 0 cannot take label = 'log'"),
    ({"holdout": 500}, r"holdout = 500 rows but the file has only 210 rows"),
    ({"components": 3}, r"components = 3 but the features encode to only 2 columns"),
])
def test_impossible_requests_are_one_line_data_errors(tmp_path, table, message):
    df = records()
    df.loc[[3, 4], "stay"] = [0.0, -1.0]
    with pytest.raises(DataError, match=message):
        load_owners(scenario(write(df, tmp_path / "t.csv"), **table))


@pytest.mark.parametrize("name, content, message", [
    ("t.txt", b"a,b\n1,2\n", r"unknown format"),
    ("t.csv.gz", b"not gzip at all", r"cannot read as CSV: Not a gzipped file"),
    ("t.csv.bz2", b"not bzip2 at all", r"cannot read as CSV: Invalid data stream"),
    ("t.csv.xz", b"not xz at all", r"cannot read as CSV: Input format not supported by decoder"),
    ("t.csv.zip", b"not zip at all", r"cannot read as CSV: File is not a zip file"),
    ("t.parquet", b"not parquet", r"cannot read as Parquet"),
])
def test_unreadable_files_are_data_errors(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match=message):
        load_owners(scenario(tmp_path / name))


def test_values_beyond_the_largest_magnitude_are_counted_with_their_rows(tmp_path):
    df = records().astype({"b": object, "y": object})
    df.loc[[4, 9], "b"] = ["1e308", "-inf"]
    df.loc[[200], "y"] = "1.0000000000000002e100"  # a hold-out row: the same rule
    with pytest.raises(DataError, match=r"t\.csv: column 'b': 2 values beyond ±1e\+100 \(rows 5, 10\), "
                                        r"e\.g\. '1e308': too large to compute with"):
        load_owners(scenario(write(df, tmp_path / "t.csv")))
    df.loc[[4, 9], "b"] = ["1e100", "-1e100"]  # the largest accepted
    with pytest.raises(DataError, match=r"column 'y': 1 value beyond ±1e\+100 \(row 201\)"):
        load_owners(scenario(write(df, tmp_path / "t.csv")))
    df.loc[[200], "y"] = "5e-324"  # subnormals are ordinary values
    assert load_owners(scenario(write(df, tmp_path / "t.csv"))).report["feature_values_clipped"] >= 2
    numbers = records()
    numbers.loc[[7], "a"] = np.inf  # Parquet holds numbers, not text: the same rule
    with pytest.raises(DataError, match=r"t\.parquet: column 'a': 1 value beyond ±1e\+100 \(row 8\), "
                                        r"e\.g\. inf: too large"):
        load_owners(scenario(write(numbers, tmp_path / "t.parquet")))


def test_rows_with_extra_fields_name_their_line(tmp_path):
    text = records().to_csv(index=False).splitlines()
    text[3] += ",surplus"
    (tmp_path / "t.csv").write_text("\n".join(text) + "\n")
    message = r"t\.csv: cannot read as CSV: line 4 has 9 fields but the header has 8"
    with pytest.raises(DataError, match=message):
        load_owners(scenario(tmp_path / "t.csv"))


def test_a_used_column_twice_in_the_header_is_an_error(tmp_path):
    (tmp_path / "t.csv").write_text("a,b,a,y\n" + "1,2,3,4\n" * 50)
    spec = {"target": "y", "numeric": ["a"], "blocks": 2, "holdout": 10}
    s = validate({"name": "t", "data": {"source": "table", "path": str(tmp_path / "t.csv"), "table": spec}},
                 "test")
    with pytest.raises(DataError, match=r"column 'a': 2 columns of the header have this name"):
        load_owners(s)


def test_more_owner_tables_than_owners_is_an_error(csv):
    table = scenario(csv).model_dump(mode="json", exclude_none=True)
    s = validate({**table, "owners": [{"epsilon": 2.0}] * 5}, "test")
    with pytest.raises(DataError, match=r"5 \[\[owners\]\] tables but the table yields 4 owners"):
        load_owners(s)


def test_cli_bad_data_is_one_line_exit_2_and_leaves_nothing(csv, tmp_path, capsys):
    toml = tmp_path / "s.toml"
    toml.write_text(f'name = "t"\n[data]\nsource = "table"\npath = "{csv}"\n[data.table]\n'
                    'target = "y"\nnumeric = ["a", "missing_col"]\nblocks = 2\nholdout = 10\n')
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "loans.csv: column 'missing_col': no such column" in err
    assert {p.name for p in tmp_path.iterdir()} == {"loans.csv", "s.toml"}  # no (staging) run dir


@pytest.mark.parametrize("case", ["hostile value", "extra field", "garbage xz"])
def test_cli_hostile_files_are_one_line_exit_2_and_leave_nothing(tmp_path, case):
    """In a process of its own: no traceback, no numpy warning on stderr, no (staging) directory."""
    df = records()
    if case == "hostile value":
        path = tmp_path / "t.csv"
        df.loc[5, ["a", "b"]] = 1e308
        write(df, path)
    elif case == "extra field":
        path = tmp_path / "t.csv"
        lines = df.to_csv(index=False).splitlines()
        lines[1] += ",9"  # the first data row: pandas alone would shift every column by one
        path.write_text("\n".join(lines) + "\n")
    else:
        path = tmp_path / "t.csv.xz"
        path.write_bytes(b"\xfd7zXZ\x00 and then garbage")
    toml = tmp_path / "s.toml"
    toml.write_text(f'name = "t"\n[data]\nsource = "table"\npath = "{path}"\n[data.table]\ntarget = "y"\n'
                    'numeric = ["a", "b"]\npartition = "site"\nholdout = 40\n[output]\nplots = false\n')
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "dpmarket", "run", str(toml), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    expected = {"hostile value": "column 'a': 1 value beyond ±1e+100 (row 6), e.g. '1e+308'",
                "extra field": "cannot read as CSV: line 2 has 9 fields but the header has 8",
                "garbage xz": "cannot read as CSV: Corrupt input data"}[case]
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"dpmarket: error: {path}: {expected}" in done.stderr
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "s.toml"])


def test_cli_run_reports_what_was_dropped_and_clipped(tmp_path, capsys):
    df = records()
    df.loc[[0, 1], "b"] = np.nan
    path = write(df, tmp_path / "t.csv")
    toml = tmp_path / "s.toml"
    toml.write_text(f'name = "t"\n[data]\nsource = "table"\npath = "{path}"\n[data.table]\n'
                    'target = "y"\nnumeric = ["a", "b"]\npartition = "site"\nholdout = 40\n'
                    'missing = "drop"\nmin_records = 20\nsmall_owners = "drop"\n'
                    '[learner]\niterations = 30\n[output]\nplots = false\nmetric_points = 4\n')
    for run in ("r1", "r2"):
        assert main(["run", str(toml), "--out", str(tmp_path / run), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "dropped 2 with missing values; left out 1 owners (10 rows)" in printed
    summary = json.loads((tmp_path / "r1" / "summary.json").read_text())
    assert summary["data"]["rows_dropped_missing"] == 2 and summary["owners"] == 3
    for name in ("owners.csv", "metrics.csv", "events.csv"):
        assert (tmp_path / "r1" / name).read_bytes() == (tmp_path / "r2" / name).read_bytes()


# --- the real extract -----------------------------------------------------------------------

@pytest.mark.skipif(not (SHARED / "sparcs2020_survivors.csv.gz").is_file(),
                    reason="the SPARCS extract ../shared/data/sparcs2020_survivors.csv.gz is not "
                           "beside this checkout")
def test_sparcs_counties_end_to_end(tmp_path, capsys):
    scenario_file = ROOT / "scenarios" / "ny_counties_sparcs.toml"
    out = tmp_path / "run"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet",
                 "--set", "learner.iterations=200", "--set", "output.plots=false"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    d = summary["data"]
    assert summary["owners"] == 11 and d["rows_read"] == 339_006 and d["holdout_rows"] == 20_000
    assert d["missing_by_column"] == {"deathrisk": 4}
    assert d["owners_below_min_records"] == 43  # of 55 counties: Schoharie is only in the hold-out
    assert d["rows_read"] == (d["holdout_rows"] + d["rows_dropped_missing"]
                              + d["rows_below_min_records"] + summary["records"])
    owners = pd.read_csv(out / "owners.csv")
    assert owners["name"].iloc[0] == "Manhattan" and owners["records"].min() >= 10_000
    assert np.isfinite(summary["psi_final"]) and summary["psi_final"] > 0


def test_a_components_sign_does_not_depend_on_the_last_bits_of_tied_entries():
    """Two standardised columns give a component (1/√2, −1/√2): which entry is the larger is decided by
    the last bits, another on each CPU. Its sign is the first tied entry's, whatever those bits; the rule
    before (the sign of the computed largest, the wrong input) flips it."""
    from dpmarket.data.preprocess import _signs

    half = np.sqrt(0.5)
    column = np.array([[half], [-half]])
    nudged = [column * np.array([[1.0], [1.0 + k * np.finfo(float).eps]]) for k in (-2, -1, 1, 2)]
    assert all(np.array_equal(_signs(v), _signs(column)) for v in nudged) and _signs(column)[0] == 1.0
    old = [np.sign(v[np.argmax(np.abs(v), axis=0), 0]) for v in nudged]
    assert len(set(np.ravel(old))) == 2
    assert _signs(np.array([[0.1, 0.0], [-0.9, 0.3]])).tolist() == [-1.0, 1.0]
