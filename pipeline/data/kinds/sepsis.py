"""PhysioNet/CinC Challenge 2019 sepsis prediction, as Kidger et al. (2020) prepare it.

Sources
    Reyna et al. (2019), "Early prediction of sepsis from clinical data: the PhysioNet/Computing
    in Cardiology Challenge 2019", https://physionet.org/content/challenge-2019/1.0.0/
    Raw files: the two training-set zips at the addresses the reference code downloads,
        https://archive.physionet.org/users/shared/challenge-2019/training_setA.zip  (training/*.psv)
        https://archive.physionet.org/users/shared/challenge-2019/training_setB.zip  (training_setB/*.psv)
    20,336 + 20,000 = 40,336 ICU stays, one pipe-separated .psv file each, one row per hour.
    Reference preprocessing: patrick-kidger/NeuralCDE experiments/datasets/sepsis.py and
    common.py (Kidger et al. 2020, "Neural Controlled Differential Equations for Irregular Time
    Series"), reused unchanged by IDSIA/neuraldiffeq-fwp (Irie et al. 2022) and by the temporal
    weights experiments (Kohan et al.).

What this module does, with the reference's constants
    * Header: exactly the 41 columns of the challenge (34 time-varying, Age, Gender, Unit1,
      Unit2, HospAdmTime, ICULOS, SepsisLabel); any other header is a DataError naming the file.
    * Rows are kept up to the first one with ICULOS > 72 (`max_hours`): "keep at most the first
      three days". Missing values stay NaN.
    * Label (`task: stay`, the default): 1 if SepsisLabel is 1 in any kept row (the reference
      takes the maximum over the rows it reads, i.e. over the truncated stay, not the whole
      stay). A SepsisLabel other than 0/1 anywhere in a file is a DataError.
    * Times: ICULOS in hours (the reference's grid is torch.linspace(1, L, L) with row i at
      ICULOS i + 1, so its times are the ICULOS values).
    * A stay is kept when the reference's hourly grid for it (ICULOS 1 .. last kept ICULOS,
      gaps filled) has more than 2 rows (`if len(time) > 2`).
    * Static features Age, Gender, Unit1, Unit2, HospAdmTime, appended as the last channels
      (pipeline.data.contract); a missing Unit1/Unit2/HospAdmTime becomes 0 as in the
      reference. With `intensity` (the reference's "observational intensity", its
      static_intensity and time_intensity flags) the cumulative count of observations of each
      of the 34 time-varying channels is added (common.preprocess_data: cumsum of ~isnan along
      time) and two static flags Unit1_observed, Unit2_observed.
    * Split: stratified 70/15/15 (contract.stratified_split; the reference's split_data is the
      same two stratified sklearn calls, seeds 0 and 1). Standardised with train statistics.

The per-hour task (`task: hourly`; Kohan et al. 2022, "Temporal Weights", Sec. 3.4 and Table 5)
    The stays, rows, channels and split are exactly the per-stay task's; only y changes: one
    label per kept hour, y (N, L) int64, with mask (N, L) marking the hours that are scored
    (every kept row of the file; padding is False and its y is 0). Meta: binary, per_step,
    AUROC over all scored hours pooled (contract: metrics.score on y[mask]).
    * Label decision: y at an hour is that row's SepsisLabel, unchanged. TW's wording, "at every
      hour, predict whether the patient will have sepsis within the next 6 to 12 hours", is the
      challenge's framing, not a different label:
        - the challenge (Reyna et al. 2019; physionet.org/content/challenge-2019/1.0.0, column
          SepsisLabel): "For sepsis patients, SepsisLabel is 1 if t >= t_sepsis - 6 and 0 if
          t < t_sepsis - 6. For non-sepsis patients, SepsisLabel is 0." So the label already
          looks 6 hours ahead, and stays 1 after onset;
        - the challenge's scoring (physionetchallenges/evaluation-2019 evaluate_sepsis_score.py:
          dt_early = -12, dt_optimal = -6, dt_late = 3, t_sepsis = first SepsisLabel-1 hour + 6)
          rewards positive predictions from 12 h before onset, fully from 6 h before: TW's
          "6 to 12 hours";
        - TW Sec. 3.4: "Each hour is labeled whether or not an onset of sepsis occurred", i.e.
          the given hourly label; and TW's Table 7 sets its results beside baselines "FROM HORN
          ET AL. [2020]", whose PhysioNet 2019 task is online, one prediction per hour
          (BorgwardtLab/Set_Functions_for_Time_Series seft/tasks.py: physionet2019 ->
          OnlineBinaryClassification), on the SepsisLabel column as read from the files
          (ExpectationMax/medical_ts_datasets physionet_2019.py, target 'Sepsis').
      Worked example: clinical onset t_sepsis = 20 h -> the file's SepsisLabel, hence y, is 0 at
      ICULOS 1..13 and 1 from ICULOS 14 on (tests/test_data_sepsis_hourly.py).
      Post-onset hours are scored too, as in the challenge's AUROC and Horn et al.'s.
    * Prevalence: TW's "around 7.3%" is per patient (2,932 septic of 40,336 stays = 7.27%; the
      challenge paper's counts), not per hour: positive hours are about 1.8% of all hours of the
      two training sets (public counts, not verified here), and the share in the kept first
      `max_hours` hours differs again. Class weighting (train `class_weight` / `pos_weight`)
      therefore matters more here than on the per-stay task.
    * Truncation: the same `max_hours` (72) as the per-stay task by default. TW does not say how
      much of a stay it uses; Horn et al. use whole stays (up to 336 h). A larger max_hours is
      allowed but pads every stay to the longest kept one (N x max_hours x 39 float32).
    * Split: stratified on the per-stay label (SepsisLabel ever 1 in the kept rows), so with the
      same seed the three splits hold exactly the per-stay task's stays. TW gives no split.

Deviations from the reference, and why
    * No gap filling. The reference puts every stay on one hourly grid and fills missing hours
      with all-NaN rows; here the rows of the file are the steps and their times are ICULOS, so
      gaps are simply longer time steps (the processed format is irregular by design). The
      intensity counts at the kept rows are the same either way.
    * The reference appends time as a channel and puts intensity channels before the values;
      here times are in `t`, and the order is values, counts, statics (statics must be last).
    * Intensity counts and the Unit*_observed flags are standardised with the other channels
      (the reference leaves the flags unscaled); the statics are standardised as channels of x
      with train statistics, as the reference normalises them with train statistics.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
from tqdm import tqdm

from pipeline.config import SepsisParams
from pipeline.data.contract import Dataset, Meta, Split, pad_sequences, standardise, stratified_split
from pipeline.data.download import RawFile
from pipeline.errors import DataError

URL_BASE = "https://archive.physionet.org/users/shared/challenge-2019/"
ZIPS = ("training_setA.zip", "training_setB.zip")

TIME_VARYING = [
    "HR", "O2Sat", "Temp", "SBP", "MAP", "DBP", "Resp", "EtCO2", "BaseExcess", "HCO3", "FiO2", "pH",
    "PaCO2", "SaO2", "AST", "BUN", "Alkalinephos", "Calcium", "Chloride", "Creatinine",
    "Bilirubin_direct", "Glucose", "Lactate", "Magnesium", "Phosphate", "Potassium",
    "Bilirubin_total", "TroponinI", "Hct", "Hgb", "PTT", "WBC", "Fibrinogen", "Platelets",
]
STATIC = ["Age", "Gender", "Unit1", "Unit2", "HospAdmTime"]
COLUMNS = TIME_VARYING + STATIC + ["ICULOS", "SepsisLabel"]  # the .psv header, in this order
_N_TV, _ICULOS, _LABEL = len(TIME_VARYING), len(COLUMNS) - 2, len(COLUMNS) - 1
MIN_GRID = 3  # the reference keeps a stay only if its hourly grid has more than 2 rows


class Stay(NamedTuple):
    """One kept stay as parsed: values (n, 34) float32 NaN where missing, times (n,) float32 =
    ICULOS, static (5,) raw Age..HospAdmTime, hourly (n,) int64 SepsisLabel of each kept row."""

    values: np.ndarray
    times: np.ndarray
    static: np.ndarray
    hourly: np.ndarray


def raw_files(p: SepsisParams) -> list[RawFile]:
    """The two training-set zips (PhysioNet publishes no checksum for them)."""
    return [RawFile(URL_BASE + name, name) for name in ZIPS]


def _bad_cell(name: str, body: list[str]) -> DataError:
    """The first row/cell that does not parse, found the slow way once the fast path failed."""
    for i, line in enumerate(body):
        cells = line.split("|")
        if len(cells) != len(COLUMNS):
            return DataError(f"{name}: line {i + 2} has {len(cells)} fields, expected {len(COLUMNS)}")
        for column, cell in zip(COLUMNS, cells):
            try:
                float(cell)
            except ValueError:
                return DataError(f"{name}: line {i + 2}: {column} = {cell!r} is not a number")
    return DataError(f"{name}: cannot parse its rows")


def parse_psv(name: str, data: bytes, max_hours: int) -> Stay | None:
    """One stay -> Stay(values (n, 34), times (n,) = ICULOS, static (5,) raw, hourly (n,)), or None if dropped.

    Rows after the first one with ICULOS > max_hours are ignored; `name` labels errors.
    """
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{name}: not a UTF-8 text file ({exc})") from exc
    header = lines[0].strip().split("|") if lines else []
    if header != COLUMNS:
        missing = [c for c in COLUMNS if c not in header]
        extra = [c for c in header if c not in COLUMNS]
        problems = ([f"missing columns {missing}"] if missing else []) + ([f"unexpected columns {extra}"] if extra else [])
        raise DataError(
            f"{name}: header is not the challenge's 41 columns ({'; '.join(problems) or 'columns out of order'}); "
            f"expected {'|'.join(COLUMNS)}"
        )
    body = [line for line in lines[1:] if line.strip()]
    if not body:
        return None
    cells = "|".join(body).split("|")
    if len(cells) != len(body) * len(COLUMNS):
        raise _bad_cell(name, body)
    try:
        rows = np.array(cells, dtype=np.float64).reshape(len(body), len(COLUMNS))
    except ValueError:
        raise _bad_cell(name, body) from None

    labels, iculos = rows[:, _LABEL], rows[:, _ICULOS]
    bad = np.flatnonzero((labels != 0) & (labels != 1))
    if len(bad):
        raise DataError(f"{name}: line {bad[0] + 2}: SepsisLabel {labels[bad[0]]:g} is not 0 or 1")
    bad = np.flatnonzero(~np.isfinite(iculos) | (iculos != np.round(iculos)))
    if len(bad):
        raise DataError(f"{name}: line {bad[0] + 2}: ICULOS {iculos[bad[0]]:g} is not a whole number of hours")
    over = np.flatnonzero(iculos > max_hours)
    n_keep = int(over[0]) if len(over) else len(rows)  # the reference stops at the first such row
    if n_keep == 0:
        return None
    kept = iculos[:n_keep]
    steps = np.diff(np.concatenate([[0.0], kept]))
    if n_keep > 1 and (steps[1:] <= 0).any():
        i = int(np.flatnonzero(steps[1:] <= 0)[0]) + 1
        raise DataError(f"{name}: line {i + 2}: ICULOS {kept[i]:g} does not increase (previous {kept[i - 1]:g})")
    grid = n_keep + int(np.maximum(steps - 1, 0).sum())  # rows of the reference's gap-filled grid
    if grid < MIN_GRID:
        return None
    values = rows[:n_keep, :_N_TV].astype(np.float32)
    return Stay(values, kept.astype(np.float32), rows[0, _N_TV:_ICULOS].copy(), labels[:n_keep].astype(np.int64))


def static_features(raw: np.ndarray, intensity: bool) -> np.ndarray:
    """Age, Gender, Unit1, Unit2, HospAdmTime with the reference's fill (NaN -> 0 for the last
    three), plus Unit1_observed, Unit2_observed when `intensity`."""
    age, gender, unit1, unit2, hosp = raw
    out = [age, gender, 0.0 if np.isnan(unit1) else unit1, 0.0 if np.isnan(unit2) else unit2,
           0.0 if np.isnan(hosp) else hosp]
    if intensity:
        out += [float(not np.isnan(unit1)), float(not np.isnan(unit2))]
    return np.asarray(out, np.float32)


def stay_channels(values: np.ndarray, static: np.ndarray, intensity: bool) -> np.ndarray:
    """(n, 34) values -> (n, C): values, [cumulative observation counts], statics repeated."""
    parts = [values]
    if intensity:
        parts.append(np.cumsum(~np.isnan(values), axis=0, dtype=np.float32))
    parts.append(np.broadcast_to(static, (len(values), len(static))))
    return np.concatenate(parts, axis=1).astype(np.float32, copy=False)


def channel_names(intensity: bool) -> tuple[list[str], list[str]]:
    statics = STATIC + (["Unit1_observed", "Unit2_observed"] if intensity else [])
    counts = [f"{c}_count" for c in TIME_VARYING] if intensity else []
    return TIME_VARYING + counts + statics, statics


def read_stays(zip_path: Path, p: SepsisParams,
               seen: set[str]) -> Iterator[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Yield (member name, channels (n, C), times (n,), hourly SepsisLabel (n,) int64) for each
    kept stay of one zip, reading one member at a time."""
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{zip_path}: not a readable zip archive ({exc})") from exc
    with archive:
        members = sorted((m for m in archive.infolist() if m.filename.endswith(".psv") and not m.is_dir()),
                         key=lambda m: m.filename)
        if not members:
            raise DataError(f"{zip_path}: holds no .psv files")
        for member in tqdm(members, desc=zip_path.name, unit="stay", disable=None):
            stem = member.filename.rsplit("/", 1)[-1]
            if stem in seen:
                raise DataError(f"{zip_path}: {member.filename}: a stay named {stem} was already read")
            seen.add(stem)
            try:
                data = archive.read(member)
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
                raise DataError(f"{zip_path}: member {member.filename} is corrupt ({exc})") from exc
            stay = parse_psv(f"{zip_path.name}:{member.filename}", data, p.max_hours)
            if stay is not None:
                channels = stay_channels(stay.values, static_features(stay.static, p.intensity), p.intensity)
                yield member.filename, channels, stay.times, stay.hourly


def pad_hourly(hourly: list[np.ndarray], length: int) -> np.ndarray:
    """N label arrays (L_i,) -> (N, length) int64, 0 at padding (masked out, never scored)."""
    y = np.zeros((len(hourly), length), dtype=np.int64)
    for i, h in enumerate(hourly):
        y[i, : len(h)] = h
    return y


def build(name: str, p: SepsisParams, raw_dir: Path) -> Dataset:
    """Both training sets -> stratified 70/15/15 splits of the first `max_hours` hours.

    y is (N,) per stay (`task: stay`) or (N, L) per hour (`task: hourly`); see the module docstring.
    """
    xs: list[np.ndarray] = []
    ts: list[np.ndarray] = []
    hourly: list[np.ndarray] = []
    seen: set[str] = set()
    for zip_name in ZIPS:
        for _, x, t, h in read_stays(Path(raw_dir) / zip_name, p, seen):
            xs.append(x)
            ts.append(t)
            hourly.append(h)
    if not xs:
        raise DataError(f"{raw_dir}: no stay has more than {MIN_GRID - 1} hours within the first {p.max_hours}")
    # The per-stay label stratifies the split for both tasks, so both hold the same stays.
    y = np.asarray([int(h.max()) for h in hourly], np.int64)
    try:
        parts = stratified_split(y, p.seed)
    except ValueError as exc:
        raise DataError(f"{raw_dir}: stays per class {np.bincount(y, minlength=2).tolist()} (no sepsis, sepsis) "
                        f"cannot be split 70/15/15 with stratification: {exc}") from exc
    length = max(len(v) for v in xs)
    per_hour = p.task == "hourly"
    splits = {}
    for split_name, idx in parts.items():
        x, t, mask = pad_sequences([xs[i] for i in idx], [ts[i] for i in idx], length)
        labels = pad_hourly([hourly[i] for i in idx], length) if per_hour else y[idx]
        splits[split_name] = Split(x, t, mask, labels)
    del xs, ts, hourly
    splits, mean, std = standardise(splits)
    channels, statics = channel_names(p.intensity)
    meta = Meta(
        name=name, task="binary", per_step=per_hour, output_size=1, metric="auroc", channels=channels,
        source=_source(p), sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(),
        norm_std=std.tolist(), classes=["no_sepsis", "sepsis"], static_channels=statics,
    )
    return Dataset(meta, splits)


def _source(p: SepsisParams) -> str:
    """meta.source: the data, the task and the split, with the papers they follow."""
    intensity = "with observational intensity" if p.intensity else "without observational intensity"
    head = f"PhysioNet/CinC 2019 sepsis, training sets A+B ({URL_BASE}), first {p.max_hours} h, "
    split = f"stratified 70/15/15 seed {p.seed}"
    if p.task == "hourly":
        return (head + f"{intensity}; one label per hour: the challenge's SepsisLabel (1 from 6 h before onset), "
                f"every kept hour scored (Kohan et al. 2022 Table 5; Horn et al. 2020 online task); "
                f"stays and {split} as the per-stay task (Kidger et al. 2020)")
    return head + f"{intensity} (Kidger et al. 2020), {split}"


__all__ = ["raw_files", "build", "parse_psv", "Stay", "COLUMNS", "TIME_VARYING", "STATIC"]
