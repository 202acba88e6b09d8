"""The UCR/UEA time series classification archives: any dataset aeon lists, by name.

Names: the 30 of the UEA multivariate archive (Bagnall et al. 2018, pinned below) and the 128 of
the UCR univariate archive (Dau et al. 2019), as aeon lists them (aeon.datasets.tsc_datasets
.multivariate and .univariate; the univariate list is read from the installed aeon, pinned at 1.6
by the project). A univariate dataset is a multivariate one with one channel: everything below
applies to both.

Source, by name:
  * the copies the aeon package ships (aeon/datasets/data/<Name>/<Name>_TRAIN.ts, _TEST.ts):
    BasicMotions and JapaneseVowels (multivariate), ACSF1, ArrowHead, GunPoint, ItalyPowerDemand,
    OSULeaf and PickupGestureWiimoteZ (univariate); nothing is downloaded.
  * every other name: the archive's per-dataset zip, https://timeseriesclassification.com/aeon-toolkit/
    <Name>.zip, the address aeon 1.6's own loader downloads from (aeon/datasets/_data_loaders.py,
    `download_dataset` and `_load_tsc_dataset`); it holds <Name>_TRAIN.ts and <Name>_TEST.ts (at the
    top level, which is where aeon looks after extracting it into <Name>/; a top folder is also
    accepted). Kidger et al. (patrick-kidger/NeuralCDE, experiments/datasets/uea.py) and Morrill et
    al. (jambo6/neuralRDEs, get_data/uea.py) download the whole archive instead,
    http://www.timeseriesclassification.com/Downloads/Archives/Multivariate2018_ts.zip (and _arff.zip),
    which is about 1 GB for the two datasets they use.
The .ts files are parsed by aeon's `load_from_ts_file` (the member is copied out of the zip into a
temporary folder, which is removed at once). aeon lower-cases the class labels.

Preprocessing:
  * A step where no channel is observed is not an observation: rows that are NaN in every channel
    (the padding some unequal-length files carry, and fully missing steps) are removed, and every
    kept row keeps its original index as its time, t = 0, 1, ..., as Kidger et al.'s
    `torch.linspace(0, L - 1, L)`. Values missing in only some channels stay NaN.
  * `drop_fraction` (Kidger et al. 2020, Section 4.2, CharacterTrajectories at 30/50/70%): each
    series loses int(L_i * drop_fraction) of its L_i observed steps, all channels at once, at
    random positions, keeping the original times of the rest, so the series become irregularly
    sampled. Series of the train file draw from one seeded stream and series of the test file from
    another (numpy SeedSequence(seed).spawn(2)), one permutation per series in file order.
  * `resplit: true` pools the train and test files and splits 70/15/15, stratified by class
    (contract.stratified_split), as Kidger et al. (common.py, `split_data`) do for
    CharacterTrajectories and Morrill et al. (experiments/ingredients/prepare_data.py,
    val_frac = test_frac = 0.15) for EigenWorms. Otherwise the archive's test file is the test
    split and `val_fraction` of the train file, stratified, is the validation split.
  * Classes are the sorted labels of the train file; a label outside the file header's
    @classLabel list, or a test label that no train series has, is a DataError.
  * Channels are standardised with train statistics (contract.standardise).

Deviations from the references, and why:
  * Kidger et al. pad unequal-length series (CharacterTrajectories) with their last value before
    dropping, so the dropped count, int(max length * rate), is the same for every series and
    counts padded steps; here padding is never an observation, so a series of L_i steps loses
    int(L_i * rate) of them (EigenWorms, equal length: the same count for every series).
  * Kidger et al. draw the dropped positions with torch.randperm and the generator seed 56789
    (the default `seed` here, which also seeds the split); numpy's streams differ, so the exact
    positions differ. Their split seeds are 0 and 1; here both stages of the split use `seed`.
  * Kidger et al.'s code reads the train file twice (`test_X, test_y = ..._TRAIN.ts`), a known
    slip; here the test file is read.

EigenWorms as in Morrill et al. 2021 (259 series of 17,984 steps, 6 channels, 5 classes), with its
log-signature windows built once in prepare (the nrde family's inputs, pipeline/data/inputs.py):

    eigenworms:
      kind: uea
      name: EigenWorms
      resplit: true
      precompute:
        - {family: nrde, args: {logsig_depth: 1, logsig_step: 4}}
        - {family: nrde, args: {logsig_depth: 2, logsig_step: 4}}

CharacterTrajectories as in Kidger et al. 2020 (2,858 series of 60-182 steps, 3 channels, 20
classes): `{kind: uea, name: CharacterTrajectories, resplit: true, drop_fraction: 0.3}` (0.5, 0.7).
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from pipeline.data.contract import Dataset, Meta, Split, carve_validation, pad_sequences, standardise, stratified_split, take
from pipeline.data.download import RawFile
from pipeline.errors import ConfigError, DataError

if TYPE_CHECKING:
    from pipeline.config import UeaParams

# The 30 datasets of the UEA multivariate archive (Bagnall et al. 2018, "The UEA multivariate time
# series classification archive, 2018", Table 1; aeon.datasets.tsc_datasets.multivariate).
UEA_MULTIVARIATE = (
    "ArticularyWordRecognition", "AtrialFibrillation", "BasicMotions", "CharacterTrajectories",
    "Cricket", "DuckDuckGeese", "EigenWorms", "Epilepsy", "EthanolConcentration", "ERing",
    "FaceDetection", "FingerMovements", "HandMovementDirection", "Handwriting", "Heartbeat",
    "InsectWingbeat", "JapaneseVowels", "Libras", "LSST", "MotorImagery", "NATOPS", "PenDigits",
    "PEMS-SF", "PhonemeSpectra", "RacketSports", "SelfRegulationSCP1", "SelfRegulationSCP2",
    "SpokenArabicDigits", "StandWalkJump", "UWaveGestureLibrary",
)
# Those aeon 1.6 ships inside its package (aeon/datasets/data/<Name>/ holds both .ts files): no
# download. Pinned rather than looked up, so which files a dataset fetches never depends on what
# else happens to lie in that folder (it also holds forecasting and anomaly-detection data).
AEON_BUNDLED = ("BasicMotions", "JapaneseVowels")  # multivariate
AEON_BUNDLED_UNIVARIATE = ("ACSF1", "ArrowHead", "GunPoint", "ItalyPowerDemand", "OSULeaf", "PickupGestureWiimoteZ")
BUNDLED = AEON_BUNDLED + AEON_BUNDLED_UNIVARIATE
ARCHIVE_URL = "https://timeseriesclassification.com/aeon-toolkit/{name}.zip"
FILE_SPLITS = ("TRAIN", "TEST")


def ucr_univariate() -> tuple[str, ...]:
    """The UCR univariate archive's 128 names as the installed aeon lists them (imported on use:
    aeon.datasets takes a second to import)."""
    from aeon.datasets.tsc_datasets import univariate

    return tuple(univariate)


def archive_names() -> tuple[str, ...]:
    """Every name the `uea` kind accepts: the UEA multivariate and UCR univariate archives."""
    return UEA_MULTIVARIATE + ucr_univariate()


def check_name(name: str) -> None:
    """ConfigError unless `name` is a dataset of either archive (spelt as the archive does)."""
    if name not in UEA_MULTIVARIATE and name not in ucr_univariate():
        raise ConfigError(f"unknown UCR/UEA dataset {name!r}; valid: {sorted(archive_names(), key=str.lower)}")


def raw_files(p: UeaParams) -> list[RawFile]:
    """The archive's zip of the dataset; nothing for the ones aeon ships."""
    check_name(p.name)
    if p.name in BUNDLED:
        return []
    return [RawFile(url=ARCHIVE_URL.format(name=p.name), filename=f"{p.name}.zip")]


# ---------------------------------------------------------------------------------- reading


def read_ts(path: Path, where: str, targets_ok: bool = False) -> tuple[list[np.ndarray], np.ndarray]:
    """A .ts file -> its series as (L_i, C) float32 arrays and their string labels.

    `where` names the file in errors (for a zip member: "<zip>:<member>"). With `targets_ok`, a
    regression file (`@targetLabel true`) is read too, its targets returned as float64.
    """
    from aeon.datasets import load_from_ts_file

    try:
        data, labels, header = load_from_ts_file(str(path), return_meta_data=True)
    except (OSError, ValueError, IndexError, KeyError) as exc:
        raise DataError(f"{where}: not a readable .ts file: {' '.join(str(exc).split())}") from exc
    if targets_ok and header.get("targetlabel"):
        if len(labels) == 0:
            raise DataError(f"{where}: no series after @data")
        return [np.asarray(s, np.float32).T for s in data], np.asarray(labels, np.float64)
    if not header.get("classlabel") or not header.get("class_values"):
        raise DataError(f"{where}: the header has no `@classLabel true <labels>` line; not a classification file")
    if len(labels) == 0:
        raise DataError(f"{where}: no series after @data")
    labels = np.asarray(labels).astype(str)
    outside = sorted(set(labels.tolist()) - set(header["class_values"]))
    if outside:
        raise DataError(f"{where}: labels {outside} are not in the header's @classLabel list {header['class_values']}")
    return [np.asarray(s, np.float32).T for s in data], labels


def _member(z: zipfile.ZipFile, filename: str, where: str) -> str:
    """The zip member whose base name is `filename` (at the top level or in one folder)."""
    found = [
        m for m in z.namelist()
        if m.rsplit("/", 1)[-1] == filename and not m.startswith("__MACOSX/")
    ]
    if len(found) != 1:
        what = "no member" if not found else f"{len(found)} members"
        raise DataError(f"{where}: {what} named {filename} (members: {sorted(z.namelist())[:12]})")
    return found[0]


def load_file_split(name: str, split: str, raw_dir: Path | None) -> tuple[list[np.ndarray], np.ndarray]:
    """One of the archive's files ("TRAIN" or "TEST") of dataset `name`: series (L_i, C) and labels."""
    check_name(name)
    filename = f"{name}_{split}.ts"
    if name in BUNDLED:
        import aeon.datasets

        path = Path(aeon.datasets.__file__).parent / "data" / name / filename
        if not path.exists():
            raise DataError(f"{path}: missing from the installed aeon package (expected aeon 1.6's bundled copy)")
        return read_ts(path, str(path))
    if raw_dir is None:
        raise DataError(f"UEA {name}: no raw folder given; its zip must be fetched first")
    zip_path = raw_dir / f"{name}.zip"
    if not zip_path.exists():
        raise DataError(f"{zip_path}: missing; run the fetch stage (or prepare) to download it")
    try:
        with zipfile.ZipFile(zip_path) as z, tempfile.TemporaryDirectory(prefix="uea-") as tmp:
            member = _member(z, filename, str(zip_path))
            where = f"{zip_path}:{member}"
            out = Path(tmp) / filename
            with z.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return read_ts(out, where)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise DataError(f"{zip_path}: not a readable zip ({exc}); delete it and fetch again") from exc


def load_uea(name: str, split: str, raw_dir: Path | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """Series (L_i, C) and string labels of `split` ("train"/"test") of `name`, as in the archive."""
    return load_file_split(name, split.upper(), raw_dir)


# ---------------------------------------------------------------------------------- preprocessing


def observed_rows(series: list[np.ndarray], where: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Remove the rows that are NaN in every channel; return values and their original indices as times."""
    values, times = [], []
    for i, s in enumerate(series):
        keep = np.flatnonzero(~np.isnan(s).all(axis=1))
        if len(keep) == 0:
            raise DataError(f"{where}: series {i} has no observed value")
        values.append(s[keep])
        times.append(keep.astype(np.float32))
    return values, times


def drop_observations(
    values: list[np.ndarray], times: list[np.ndarray], fraction: float, rng: np.random.Generator
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Remove int(L_i * fraction) steps (all channels) from each (L_i, C) series, at random positions.

    What remains keeps its times, so it is irregularly sampled. At least one step is always kept.
    One permutation is drawn per series, in order, whatever the fraction (0 keeps everything).
    """
    out_values, out_times = [], []
    for v, t in zip(values, times):
        length = len(v)
        n_drop = min(int(length * fraction), length - 1)
        keep = np.sort(rng.permutation(length)[n_drop:])
        out_values.append(v[keep])
        out_times.append(t[keep])
    return out_values, out_times


def _trim(split: Split) -> Split:
    """Drop trailing columns that no series of the split observes (after taking a subset)."""
    length = int(np.flatnonzero(split.mask.any(axis=0)).max()) + 1
    return Split(split.x[:, :length], split.t[:, :length], split.mask[:, :length], split.y)


def build(name: str, p: UeaParams, raw_dir: Path | None = None) -> Dataset:
    """The dataset's train/val/test splits, standardised with train statistics."""
    check_name(p.name)
    loaded = {}
    for split in tqdm(FILE_SPLITS, desc=f"UEA {p.name}", disable=None):
        loaded[split] = load_file_split(p.name, split, raw_dir)
    (train_series, train_labels), (test_series, test_labels) = loaded["TRAIN"], loaded["TEST"]
    where = p.name if p.name in BUNDLED else str((raw_dir or Path()) / f"{p.name}.zip")

    channels = {s.shape[1] for s in train_series + test_series}
    if len(channels) != 1:
        raise DataError(f"{where}: series have different channel counts {sorted(channels)}")
    classes = sorted(set(train_labels.tolist()))
    unknown = sorted(set(test_labels.tolist()) - set(classes))
    if unknown:
        raise DataError(f"{where}: test labels {unknown} are not among the training classes {classes}")

    train_rng, test_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(p.seed).spawn(2))
    train_v, train_t = drop_observations(*observed_rows(train_series, f"{where} TRAIN"), p.drop_fraction, train_rng)
    test_v, test_t = drop_observations(*observed_rows(test_series, f"{where} TEST"), p.drop_fraction, test_rng)
    lookup = np.asarray(classes)
    train_y = np.searchsorted(lookup, train_labels).astype(np.int64)
    test_y = np.searchsorted(lookup, test_labels).astype(np.int64)

    try:
        if p.resplit:
            pooled = Split(*pad_sequences(train_v + test_v, train_t + test_t), np.concatenate([train_y, test_y]))
            index = stratified_split(pooled.y, p.seed)
            splits = {k: _trim(take(pooled, idx)) for k, idx in index.items()}
        else:
            train, val = carve_validation(Split(*pad_sequences(train_v, train_t), train_y), p.val_fraction, p.seed)
            splits = {"train": train, "val": val, "test": Split(*pad_sequences(test_v, test_t), test_y)}
    except ValueError as exc:  # sklearn: a class too small to stratify
        raise DataError(f"{where}: cannot split {len(train_y) + len(test_y)} series by class: {exc}") from exc
    splits, mean, std = standardise(splits)

    origin = "aeon's bundled copy" if p.name in BUNDLED else ARCHIVE_URL.format(name=p.name)
    how = ("train+test pooled, 70/15/15 stratified" if p.resplit
           else f"archive test split, {p.val_fraction:.0%} of train for validation")
    dropped = f", {p.drop_fraction:.0%} of observations dropped" if p.drop_fraction else ""
    meta = Meta(
        name=name, task="classification", per_step=False, output_size=len(classes), metric="accuracy",
        channels=[f"c{i}" for i in range(channels.pop())],
        source=f"{'UEA' if p.name in UEA_MULTIVARIATE else 'UCR'} {p.name} ({origin}; {how}{dropped}), seed {p.seed}",
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=classes,
    )
    return Dataset(meta, splits)
