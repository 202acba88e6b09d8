"""PhysioNet/CinC Challenge 2012 in-hospital mortality, as the latent ODE and CfC code prepare it.

Sources
    Silva et al. (2012), "Predicting in-hospital mortality of ICU patients: the PhysioNet/
    Computing in Cardiology Challenge 2012", https://physionet.org/content/challenge-2012/1.0.0/
    Raw files (the reference code's addresses), under https://physionet.org/files/challenge-2012/1.0.0/:
        set-a.tar.gz?download  set-a/<RecordID>.txt        Outcomes-a.txt  RecordID,...,In-hospital_death
        set-b.tar.gz?download  set-b/<RecordID>.txt        Outcomes-b.txt
        set-c.tar.gz?download  set-c/<RecordID>.txt        Outcomes-c.txt
    each set 4,000 ICU stays, the first 48 hours of each, one "Time,Parameter,Value" line per
    measurement with Time as HH:MM since ICU admission. PhysioNet publishes the outcomes of all
    three sets (b and c were the challenge's hidden test sets; their outcomes came out after it).
    `sets` (params.yaml) says which are fetched and pooled: [a] by default, the set the reference
    code and the CfC paper use (Hasani et al. 2022); [a, b, c] gives the 12,000 stays of the
    temporal weights experiments (Kohan et al.). Only the listed sets are read, whatever else lies
    in data/raw/physionet2012/, so the dataset follows params.yaml. Record IDs are unique across
    the sets; one found twice is an error.
    Every file is verified against PhysioNet's SHA256SUMS.txt (download.py); a copy that lacks
    some records (a rebuilt archive) is prepared from what it holds, and meta.json's provenance
    says how many of its Outcomes files' records it read ("3,996 of 4,000 records"), and any
    descriptor the records lack or give twice with different values (descriptor_notes: the copy
    in ../shared/data has no ICUType line at all and up to four Age lines in 381 records).
    Reference preprocessing: YuliaRubanova/latent_ode physionet.py (Rubanova et al. 2019), as
    used by raminmh/CfC duv_physionet.py + train_physio.py (Hasani et al. 2022, the AUROC task)
    and by the temporal weights experiments (Kohan et al.).

What this module does, with the reference's constants
    * The reference's 41 parameters: the general descriptors Age, Gender, Height, ICUType, Weight
      and 36 time series; with Weight, which is also measured over time, the challenge's 37
      time-series variables. RecordID lines are skipped. Any other parameter name is an error,
      as in the reference (`assert param == 'RecordID'`), here a DataError naming file and line.
    * Times in hours (HH + MM / 60), rounded to multiples of `quantization` = 0.016 h, CfC's
      setting (duv_physionet.get_physio; the latent ODE default is 0.1). Measurements at the
      same rounded time are merged into one step, several values of one parameter averaged
      (the reference's reduce="average"). Every stay has a step at time 0 (the reference starts
      each stay with tt = [0.]), which is where the descriptors are recorded.
    * Only measurements at most `max_hours` = 48 h after admission are kept (set-a holds the
      first 48 hours already, so this changes nothing on the real files).
    * Label: In-hospital_death of the set's Outcomes file (the reference's labels[4]), 0 survived, 1 died.

Deviations from the reference, and why
    * The descriptors are static channels (the last channels of x, repeated at every step,
      see pipeline.data.contract), not time series observed once at time 0: Age, Gender,
      Height, ICUType, and Weight_admission (the Weight line at 00:00 among the descriptors; any
      other Weight line is a measurement of the time-varying Weight channel). The challenge
      documents -1 as "missing" for descriptors, so -1 there becomes NaN; the reference keeps
      -1 as a value. Time-series values are kept as they are, as in the reference.
    * Split: stratified 70/15/15 (contract.stratified_split, seed `seed`) to have a validation
      set; CfC shuffles set-a into 80% train / 20% test (random_state=42, not stratified, no
      validation set), as the latent ODE code does.
    * Standardised with train statistics (contract.standardise) by default; `scaling: min_max`
      is CfC's (x - min) / max (contract.min_max_scale), with the training stays' minimum and
      maximum where CfC takes them over every stay, test included. The CPU reproduction of
      CfC's Table 5 uses it: cfc is 0.01-0.02 AUROC lower with standardised inputs
      (docs/benchmarks/physionet.md).
"""

from __future__ import annotations

import tarfile
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pipeline.config import Physionet2012Params
from pipeline.data.contract import (Dataset, Meta, Split, min_max_scale, pad_sequences, standardise,
                                    stratified_split)
from pipeline.data.download import RawFile
from pipeline.errors import DataError

URL_BASE = "https://physionet.org/files/challenge-2012/1.0.0/"

def archive_name(letter: str) -> str:
    """set-<letter>.tar.gz: the records of one set."""
    return f"set-{letter}.tar.gz"


def outcomes_name(letter: str) -> str:
    """Outcomes-<letter>.txt: the outcomes of one set's records."""
    return f"Outcomes-{letter}.txt"

# The reference's 41 parameters, in its order: five descriptors, then the time series.
PARAMS = [
    "Age", "Gender", "Height", "ICUType", "Weight", "Albumin", "ALP", "ALT", "AST", "Bilirubin", "BUN",
    "Cholesterol", "Creatinine", "DiasABP", "FiO2", "GCS", "Glucose", "HCO3", "HCT", "HR", "K", "Lactate",
    "Mg", "MAP", "MechVent", "Na", "NIDiasABP", "NIMAP", "NISysABP", "PaCO2", "PaO2", "pH", "Platelets",
    "RespRate", "SaO2", "SysABP", "Temp", "TroponinI", "TroponinT", "Urine", "WBC",
]
DESCRIPTORS = ["Age", "Gender", "Height", "ICUType", "Weight"]
TIME_SERIES = [p for p in PARAMS if p not in DESCRIPTORS[:4]]  # 37, Weight first
STATIC = ["Age", "Gender", "Height", "ICUType", "Weight_admission"]
HEADER = "Time,Parameter,Value"

_RECORD_ID = -1
# parameter -> code: 0..36 a time series, 100 + i the i-th descriptor other than Weight.
_CODES = {name: i for i, name in enumerate(TIME_SERIES)}
_CODES.update({name: 100 + i for i, name in enumerate(DESCRIPTORS[:4])})
_CODES["RecordID"] = _RECORD_ID
_WEIGHT = _CODES["Weight"]


def raw_files(p: Physionet2012Params) -> list[RawFile]:
    """Each listed set and its outcomes, verified against the SHA256SUMS.txt PhysioNet publishes with
    every project (not pinned here: no checksum is written down that was not computed from the file)."""
    sums = URL_BASE + "SHA256SUMS.txt"
    files = []
    for letter in p.sets:
        files += [RawFile(URL_BASE + archive_name(letter) + "?download", archive_name(letter), checksums_url=sums),
                  RawFile(URL_BASE + outcomes_name(letter), outcomes_name(letter), checksums_url=sums)]
    return files


def _bad_line(name: str, body: list[tuple[int, str]]) -> DataError:
    """The first malformed line, found the slow way once the fast path failed."""
    for number, line in body:
        fields = line.split(",")
        if len(fields) != 3:
            return DataError(f"{name}: line {number}: expected 'HH:MM,Parameter,Value', got {line!r}")
        hm = fields[0].split(":")
        if len(hm) != 2 or not all(h.strip().isdigit() for h in hm) or int(hm[1]) >= 60:
            return DataError(f"{name}: line {number}: time {fields[0]!r} is not HH:MM")
        try:
            float(fields[2])
        except ValueError:
            return DataError(f"{name}: line {number}: value {fields[2]!r} is not a number")
    return DataError(f"{name}: cannot parse its lines")


def parse_record(name: str, data: bytes, max_hours: float, quantization: float,
                 anomalies: Counter[str] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One stay -> (values (S, 37) NaN where unobserved, times (S,) hours, statics (5,)).

    Step 0 is time 0; the others are the distinct rounded measurement times up to max_hours.
    `anomalies` counts what the challenge's records never do: a descriptor line missing
    ("absent <name>"), or given twice with different values ("conflicting <name>"; the first kept).
    """
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{name}: not a UTF-8 text file ({exc})") from exc
    if not lines or lines[0].strip() != HEADER:
        first = repr(lines[0][:60]) if lines else "missing (empty file)"
        raise DataError(f"{name}: line 1 is {first}, expected the header {HEADER!r}")
    body = [(i + 1, line.strip()) for i, line in enumerate(lines) if i > 0 and line.strip()]
    n = len(body)
    fields = ",".join(line for _, line in body).split(",") if n else []
    if len(fields) != 3 * n:
        raise _bad_line(name, body)
    clock = ":".join(fields[0::3]).split(":") if n else []
    try:
        if len(clock) != 2 * n:
            raise ValueError
        hm = np.array(clock, dtype=np.int64).reshape(n, 2)
        values = np.array(fields[2::3], dtype=np.float64)
    except ValueError:
        raise _bad_line(name, body) from None
    if n and ((hm < 0).any() or (hm[:, 1] >= 60).any()):
        raise _bad_line(name, body)
    codes = np.array([_CODES.get(p, -2) for p in fields[1::3]], dtype=np.int64)
    unknown = np.flatnonzero(codes == -2)
    if len(unknown):
        number, line = body[unknown[0]]
        raise DataError(f"{name}: line {number}: unknown parameter {fields[3 * unknown[0] + 1]!r} "
                        f"(known: RecordID and {PARAMS})")
    minutes = hm[:, 0] * 60 + hm[:, 1]

    statics = np.full(len(STATIC), np.nan)
    for i in range(4):
        found = np.flatnonzero(codes == 100 + i)
        if len(found):
            statics[i] = values[found[0]]
        if anomalies is not None and (not len(found) or len(set(values[found].tolist())) > 1):
            anomalies[f"{'conflicting' if len(found) else 'absent'} {DESCRIPTORS[i]}"] += 1
    is_series = (codes >= 0) & (codes < 100)
    weights = np.flatnonzero(codes == _WEIGHT)
    if len(weights) and minutes[weights[0]] == 0:  # the descriptor, not a measurement
        statics[4] = values[weights[0]]
        is_series[weights[0]] = False
    statics[statics == -1] = np.nan  # the challenge's marker of a missing descriptor

    hours = minutes / 60.0
    keep = is_series & (hours <= max_hours)
    bins = np.rint(hours[keep] / quantization).astype(np.int64)
    steps = np.unique(np.concatenate([[0], bins]))
    flat = np.searchsorted(steps, bins) * len(TIME_SERIES) + codes[keep]
    size = len(steps) * len(TIME_SERIES)
    total = np.bincount(flat, weights=values[keep], minlength=size)
    count = np.bincount(flat, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        merged = np.where(count > 0, total / count, np.nan).reshape(len(steps), len(TIME_SERIES))
    return merged.astype(np.float32), (steps * quantization).astype(np.float32), statics.astype(np.float32)


def read_outcomes(path: Path) -> dict[str, int]:
    """Outcomes-a.txt -> {RecordID: In-hospital_death}."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from exc
    header = lines[0].strip().split(",") if lines else []
    missing = [c for c in ("RecordID", "In-hospital_death") if c not in header]
    if missing:
        raise DataError(f"{path}: header {header} lacks the columns {missing}")
    rid, died = header.index("RecordID"), header.index("In-hospital_death")
    outcomes: dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.strip().split(",")
        if len(fields) != len(header):
            raise DataError(f"{path}: line {number} has {len(fields)} fields, expected {len(header)}: {line!r}")
        try:
            label = float(fields[died])
        except ValueError:
            label = None
        if label not in (0.0, 1.0):
            raise DataError(f"{path}: line {number}: In-hospital_death {fields[died]!r} is not 0 or 1")
        key = fields[rid].strip()
        if key in outcomes:
            raise DataError(f"{path}: line {number}: RecordID {key} appears twice")
        outcomes[key] = int(label)
    return outcomes


def read_records(path: Path, p: Physionet2012Params, anomalies: Counter[str] | None = None):
    """Yield (RecordID, values, times, statics) for each .txt member, one member at a time
    (`anomalies`: see parse_record)."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in tqdm(archive, desc=path.name, unit="stay", disable=None):
                if not (member.isfile() and member.name.endswith(".txt")):
                    continue
                reader = archive.extractfile(member)
                data = reader.read() if reader is not None else b""
                record_id = member.name.rsplit("/", 1)[-1].removesuffix(".txt")
                yield (record_id, *parse_record(f"{path.name}:{member.name}", data, p.max_hours, p.quantization,
                                                   anomalies))
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise DataError(f"{path}: not a readable tar.gz archive ({exc}); the download is corrupt") from exc


def _read_set(name: str, raw_dir: Path, letter: str, p: Physionet2012Params,
              stays: dict[str, tuple[np.ndarray, np.ndarray, int]], origin: dict[str, str],
              anomalies: Counter[str]) -> tuple[int, int]:
    """Add one set's stays to `stays` {RecordID: (x, times, label)} and their archive to `origin`;
    return (records read, records its Outcomes file lists)."""
    archive, outcomes_path = raw_dir / archive_name(letter), raw_dir / outcomes_name(letter)
    for path in (archive, outcomes_path):
        if not path.is_file():  # fetch puts every listed set's files here; a hand-made raw folder may not
            raise DataError(f"{path}: no such file; prepare.{name}.sets lists {letter!r}, whose files "
                            f"`ctsweep fetch {name}` brings")
    outcomes = read_outcomes(outcomes_path)
    read = 0
    for record_id, values, times, statics in read_records(archive, p, anomalies):
        if record_id in origin:
            where = "" if origin[record_id] == archive.name else f" (also in {origin[record_id]})"
            raise DataError(f"{archive}: record {record_id} appears twice{where}; record IDs are unique across "
                            f"the challenge's sets")
        if record_id not in outcomes:
            raise DataError(f"{archive}: record {record_id} has no line in {outcomes_path}")
        x = np.concatenate([values, np.broadcast_to(statics, (len(values), len(statics)))], axis=1)
        stays[record_id], origin[record_id] = (x, times, outcomes[record_id]), archive.name
        read += 1
    if not read:
        raise DataError(f"{archive}: holds no <RecordID>.txt files")
    return read, len(outcomes)


def descriptor_notes(anomalies: Counter[str], records: int) -> str:
    """What the records' descriptor lines say about the copy, for meta.json's provenance: ""
    for the challenge's own files (every stay has each descriptor once), else e.g. "ICUType absent
    from every record; Age given twice or more with different values in 381 records (the first kept)"."""
    notes = []
    for name in DESCRIPTORS[:4]:
        absent, conflicting = anomalies.get(f"absent {name}", 0), anomalies.get(f"conflicting {name}", 0)
        if absent:
            notes.append(f"{name} absent from {'every record' if absent == records else f'{absent:,} records'}")
        if conflicting:
            notes.append(f"{name} given twice or more with different values in {conflicting:,} records (the first kept)")
    return "; ".join(notes)


def completeness(counts: dict[str, tuple[int, int]]) -> str:
    """"" when every listed record was read; else "3,996 of 4,000 records", with the sets that fall
    short named when several sets are pooled."""
    read, listed = sum(r for r, _ in counts.values()), sum(n for _, n in counts.values())
    if read == listed:
        return ""
    note = f"{read:,} of {listed:,} records"
    if len(counts) > 1:
        note += " (" + ", ".join(f"set-{s}: {r:,} of {n:,}" for s, (r, n) in counts.items() if r != n) + ")"
    return note


def build(name: str, p: Physionet2012Params, raw_dir: Path) -> Dataset:
    """The listed sets with their outcomes -> stratified 70/15/15 splits of the first `max_hours` hours."""
    raw_dir = Path(raw_dir)
    stays: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}
    origin: dict[str, str] = {}
    anomalies: Counter[str] = Counter()
    counts = {letter: _read_set(name, raw_dir, letter, p, stays, origin, anomalies) for letter in p.sets}
    ids = sorted(stays)
    y = np.asarray([stays[i][2] for i in ids], np.int64)
    try:
        parts = stratified_split(y, p.seed)
    except ValueError as exc:
        files = ", ".join(str(raw_dir / outcomes_name(letter)) for letter in p.sets)
        raise DataError(f"{files}: stays per class {np.bincount(y, minlength=2).tolist()} (survived, died) cannot "
                        f"be split 70/15/15 with stratification: {exc}") from exc
    length = max(len(stays[i][1]) for i in ids)
    splits = {}
    for split_name, idx in parts.items():
        x, t, mask = pad_sequences([stays[ids[i]][0] for i in idx], [stays[ids[i]][1] for i in idx], length)
        splits[split_name] = Split(x, t, mask, y[idx])
    splits, mean, std = (min_max_scale if p.scaling == "min_max" else standardise)(splits)
    sets = ", ".join(f"set-{letter}" for letter in p.sets)
    outcomes = ", ".join(outcomes_name(letter).removesuffix(".txt") for letter in p.sets)
    meta = Meta(
        name=name, task="binary", per_step=False, output_size=1, metric="auroc", channels=TIME_SERIES + STATIC,
        source=(f"PhysioNet/CinC 2012 {sets} with {outcomes} ({URL_BASE}), in-hospital death, first "
                f"{p.max_hours:g} h, times rounded to {p.quantization:g} h (Rubanova et al. 2019; "
                f"Hasani et al. 2022), stratified 70/15/15 seed {p.seed}"
                f"{', scaled (x - min) / max with training statistics' if p.scaling == 'min_max' else ''}"),
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=["survived", "died"], static_channels=list(STATIC), provenance="; ".join(filter(None, [completeness(counts), descriptor_notes(anomalies, len(stays))])),
    )
    return Dataset(meta, splits)
