"""Benchmark of the prepare stage: wall time and peak memory of each dataset kind at full size.

Each dataset's `pipeline.data.prepare.prepare(name, params, out_dir, raw_dir, lock_path, source=<dir>)`
runs in a fresh Python process, so no dataset's memory shows in another's figure. Measured:
  * prepare (s): that call alone, timed in the child (interpreter start-up excluded): copying the raw
    files from the local source and checksumming them, parsing, splitting, writing .npz and inputs;
  * peak RSS: the child's own ru_maxrss, from os.wait4 (RUSAGE_CHILDREN is the maximum over all
    children so far), checked against the 8 GB requirement (8e9 bytes = 7,629 MiB);
  * raw size, examples per split, (N, L, C) of train, processed size on disk.
THE RAW DATA ARE SYNTHETIC (no internet here): random values in the exact raw formats, at the real
datasets' full sizes (clips, stays, series, rows, rollouts, lengths, missingness); time and memory
follow the sizes, not the values. They are cached under --work, so a rerun skips generation.
Usage: python benchmarks/datasets/prepare.py [--only sepsis,speech_commands] [--work DIR] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import numpy as np
from scipy.io import wavfile

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
LIMIT_MIB = 8e9 / 2**20  # the 8 GB requirement, in MiB


def speech_commands(src: Path, rng: np.random.Generator) -> str:
    """speech_commands_v0.02.tar.gz of ./<word>/<hash>_nohash_0.wav (16 kHz int16 mono), as the real 2.3 GB one:
    a voiced burst over faint noise, which gzips to ~0.68 of its size as real speech does."""
    from pipeline.data.kinds.speech_commands import KEYWORDS

    others = ("bed bird cat dog eight five four happy house marvin nine one seven sheila six three tree two "
              "wow zero backward follow forward learn visual").split()
    clips = [(KEYWORDS[i % 10], 16_000) for i in range(34_975)]
    clips += [(KEYWORDS[i % 10], int(rng.integers(6_000, 16_000))) for i in range(3_571)]
    clips += [(others[i % len(others)], 16_000 if i % 10 else 12_000) for i in range(67_283)]
    clips.sort(key=lambda c: c[0])  # one folder after another, as a tar of the folder tree
    idx = np.arange(16_000)
    with tarfile.open(src / "speech_commands_v0.02.tar.gz", "w:gz", compresslevel=6) as tar:
        _add(tar, "./README.md", b"Speech Commands v0.02 (synthetic)\n")
        for k in range(6):
            _add(tar, f"./_background_noise_/noise{k}.wav", _wav(rng.normal(0, 300, 960_000)))
        for start in range(0, len(clips), 512):
            batch = clips[start:start + 512]
            n, onset = len(batch), rng.integers(0, 8_000, (len(batch), 1))
            f0, phase = rng.uniform(100, 300, (n, 1)), rng.uniform(0, 6.3, (n, 1))
            voice = sum(np.sin(2 * np.pi * k * f0 * idx / 16_000 + phase) / k for k in (1, 2, 3, 4))
            env = np.exp(-0.5 * ((idx - onset - 4_000) / 1_400) ** 2)
            audio = 6_000 * env * voice * (1 + 0.3 * rng.standard_normal((n, 16_000)))
            audio += 4 * rng.standard_normal((n, 16_000))
            for j, (word, length) in enumerate(batch):
                _add(tar, f"./{word}/{start + j:08x}_nohash_0.wav", _wav(audio[j, :length]))
    return f"{len(clips):,} clips: 34,975 keyword clips of 16,000 samples, 3,571 shorter (dropped), 67,283 other words"


def _wav(samples: np.ndarray) -> bytes:
    buf = io.BytesIO()
    wavfile.write(buf, 16_000, np.clip(samples, -32768, 32767).astype(np.int16))
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


SEPSIS_OBSERVED = [  # fraction of hours each time-varying column is observed: ~80% of cells NaN, as real
    .90, .87, .34, .85, .88, .69, .85, .04, .05, .04, .08, .07, .06, .03, .02, .07, .02,
                   .06, .05, .06, .002, .17, .03, .06, .04, .09, .015, .01, .09, .07, .03, .06, .007, .06]


def sepsis(src: Path, rng: np.random.Generator) -> str:
    """training_setA.zip (training/, 20,336 stays) and training_setB.zip (training_setB/, 20,000):
    one .psv per stay, the challenge's 41-column header, hourly rows, 7.3% septic."""
    import pandas as pd

    from pipeline.data.kinds.sepsis import COLUMNS

    n = 40_336
    lengths = np.clip(rng.gamma(4, 10, n), 8, 336).astype(int)
    long = rng.random(n) < 0.02  # the tail of long stays, up to 336 h
    lengths[long] = rng.integers(100, 337, long.sum())
    rows = int(lengths.sum())
    values = np.round(rng.normal(80, 20, (rows, 34)), 2)
    values[rng.random((rows, 34)) >= np.asarray(SEPSIS_OBSERVED)] = np.nan
    stay = np.repeat(np.arange(n), lengths)
    start = np.cumsum(lengths) - lengths
    iculos = np.arange(rows) - start[stay] + 1
    statics = np.column_stack([rng.integers(18, 91, n), rng.integers(0, 2, n), rng.integers(0, 2, n),
                               np.zeros(n), np.round(-rng.exponential(50, n), 2)]).astype(float)
    statics[:, 3] = 1 - statics[:, 2]
    statics[rng.random(n) < 0.4, 2:4] = np.nan
    onset = np.where(rng.random(n) < 0.073, rng.integers(1, lengths + 1), 10**6)
    label = (iculos >= onset[stay]).astype(int)
    frame = pd.DataFrame(np.column_stack([values, statics[stay], iculos, label]), columns=COLUMNS)
    lines = frame.to_csv(sep="|", na_rep="NaN", header=False, index=False, float_format="%g").split("\n")
    for name, folder, first, ids in (("training_setA.zip", "training", 1, range(20_336)),
                                     ("training_setB.zip", "training_setB", 100_001, range(20_336, n))):
        with zipfile.ZipFile(src / name, "w", zipfile.ZIP_DEFLATED) as z:
            for k, i in enumerate(ids):
                z.writestr(f"{folder}/p{first + k:06d}.psv",
                           "\n".join(["|".join(COLUMNS), *lines[start[i]:start[i] + lengths[i]]]) + "\n")
    return f"{n:,} stays, {rows:,} hourly rows"


def physionet2012(src: Path, rng: np.random.Generator) -> str:
    """set-a.tar.gz (set-a/<RecordID>.txt, "Time,Parameter,Value") and Outcomes-a.txt, 4,000 stays:
    ~75 measurement times in 48 h with ~8 parameters each, 14% deaths."""
    from pipeline.data.kinds.physionet2012 import TIME_SERIES

    outcomes = ["RecordID,SAPS-I,SOFA,Length_of_stay,Survival,In-hospital_death"]
    with tarfile.open(src / "set-a.tar.gz", "w:gz") as tar:
        for rid in range(132_539, 136_539):
            lines = ["Time,Parameter,Value", f"00:00,RecordID,{rid}", f"00:00,Age,{rng.integers(16, 91)}",
                     f"00:00,Gender,{rng.integers(0, 2)}",
                     f"00:00,Height,{rng.uniform(150, 195) if rng.random() < 0.53 else -1:.1f}",
                     f"00:00,ICUType,{rng.integers(1, 5)}", f"00:00,Weight,{rng.uniform(40, 150):.1f}"]
            for m in np.sort(rng.integers(0, 48 * 60 + 1, rng.poisson(75))):
                for p in rng.choice(TIME_SERIES, rng.integers(1, 16), replace=False):
                    lines.append(f"{m // 60:02d}:{m % 60:02d},{p},{rng.normal(50, 10):.1f}")
            _add(tar, f"set-a/{rid}.txt", ("\n".join(lines) + "\n").encode())
            outcomes.append(f"{rid},{rng.integers(5, 25)},{rng.integers(0, 15)},{rng.integers(2, 40)},-1,"
                            f"{int(rng.random() < 0.14)}")
    (src / "Outcomes-a.txt").write_text("\n".join(outcomes) + "\n")
    return "4,000 stays"


def eigenworms(src: Path, rng: np.random.Generator) -> str:
    """EigenWorms.zip with EigenWorms_TRAIN.ts (131) and _TEST.ts (128): 6 x 17,984 smooth series, 5 classes."""
    with zipfile.ZipFile(src / "EigenWorms.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for split, ids in (("TRAIN", range(131)), ("TEST", range(131, 259))):
            body = ["@problemName EigenWorms\n@timeStamps false\n@missing false\n@univariate false\n@dimensions 6"
                    "\n@equalLength true\n@seriesLength 17984\n@classLabel true 1 2 3 4 5\n@data"]
            for i in ids:
                walk = np.cumsum(rng.normal(0, 0.01, (6, 17_984)), axis=1)
                body.append(":".join(",".join(f"{v:.6g}" for v in ch) for ch in walk) + f":{i % 5 + 1}")
            z.writestr(f"EigenWorms_{split}.ts", "\n".join(body) + "\n")
    return "259 series x 17,984 steps x 6 channels"


def person_activity(src: Path, rng: np.random.Generator) -> str:
    """ConfLongDemo_JSI.txt: 164,860 tag readings in 25 recordings (A01..E05) of 4 tags, ~27 ms apart."""
    from pipeline.data.kinds.person_activity import CLASS_OF, TAGS

    activities, tags = list(CLASS_OF), list(TAGS)
    lines, tick = [], 633_790_226_051_280_329
    for r, n in enumerate(rng.multinomial(164_860, np.full(25, 1 / 25))):
        ticks = tick + np.cumsum(rng.exponential(270_000, n)).astype(np.int64)
        tick = int(ticks[-1]) + 10**10
        stamps = np.datetime64("0001-01-01") + (ticks // 10).astype("timedelta64[us]")
        acts = np.repeat(rng.integers(0, len(activities), n // 100 + 1), 100)[:n]
        xyz = (np.cumsum(rng.normal(0, 0.02, (n, 3)), axis=0) + [2.5, 1.5, 0.5]).tolist()
        for i, s in enumerate(np.datetime_as_string(stamps, unit="ms")):
            date = f"{s[8:10]}.{s[5:7]}.{s[:4]} {s[11:19]}:{s[20:23]}"
            lines.append(f"{'ABCDE'[r // 5]}{r % 5 + 1:02d},{tags[rng.integers(4)]},{ticks[i]},{date},"
                         f"{xyz[i][0]!r},{xyz[i][1]!r},{xyz[i][2]!r},{activities[acts[i]]}")
    (src / "ConfLongDemo_JSI.txt").write_text("\n".join(lines) + "\n")
    return f"{len(lines):,} rows, 25 recordings"


def walker2d(src: Path, rng: np.random.Generator) -> str:
    """walker.zip: walker/rollout_000.npy .. rollout_399.npy, (900..1000, 17) float64 each."""
    with zipfile.ZipFile(src / "walker.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(400):
            arr = np.cumsum(rng.normal(0, 0.05, (int(rng.integers(900, 1001)), 17)), axis=0)
            arr[:, 0] += 1.25
            with z.open(f"walker/rollout_{i:03d}.npy", "w") as f:
                np.save(f, arr)
    return "400 rollouts"


NRDE = [{"family": "nrde", "args": {"logsig_depth": d, "logsig_step": 4}} for d in (1, 2)]
DATASETS = {  # name -> (raw folder under --work/raw, its writer, params as in params.yaml)
    "speech_commands": ("speech_commands", speech_commands, dict(kind="speech_commands")),
    "sepsis": ("sepsis", sepsis, dict(kind="sepsis")),
    "sepsis_intensity": ("sepsis", sepsis, dict(kind="sepsis", intensity=True)),
    "physionet2012": ("physionet2012", physionet2012, dict(kind="physionet2012")),
    "eigenworms": ("eigenworms", eigenworms, dict(kind="uea", name="EigenWorms", resplit=True, precompute=NRDE)),
    "person_activity": ("person_activity", person_activity, dict(kind="person_activity")),
    "walker2d": ("walker2d", walker2d, dict(kind="walker2d")),
}


def raw_folder(name: str, work: Path, here: bool = False) -> Path:
    """`name`'s raw files; the first time (no `.done` yet) they are written by a subprocess, unless
    `here`: an exec'd child's ru_maxrss starts at its parent's high-water mark, so the parent stays small."""
    folder, writer, _ = DATASETS[name]
    src = work / "raw" / folder
    if here:  # in the --generate subprocess
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        t0, what = time.perf_counter(), writer(src, np.random.default_rng(0))
        (src / ".done").write_text(what + "\n")
        print(f"generated {folder}: {what} in {time.perf_counter() - t0:.0f} s", flush=True)
    elif not (src / ".done").exists():
        subprocess.run([sys.executable, __file__, "--generate", name, "--work", str(work)], check=True)
    return src


def child(name: str, work: Path) -> None:
    """Runs in the measured subprocess: one prepare, its seconds and split sizes to result.json."""
    from pydantic import TypeAdapter
    from pipeline.config import DatasetParams  # SpeechCommandsParams(kind="speech_commands"), ...
    from pipeline.data.prepare import prepare

    run, (folder, _, settings) = work / "runs" / name, DATASETS[name]
    p, t0 = TypeAdapter(DatasetParams).validate_python(settings), time.perf_counter()
    meta = prepare(name, p, run / "processed", run / "raw", run / "raw.lock", source=str(work / "raw" / folder))
    (run / "result.json").write_text(json.dumps({"seconds": time.perf_counter() - t0, "sizes": meta.sizes}))


def measure(name: str, work: Path) -> dict:
    src, run = raw_folder(name, work), work / "runs" / name
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    pid = os.posix_spawn(sys.executable, [sys.executable, __file__, "--child", name, "--work", str(work)], os.environ)
    _, status, usage = os.wait4(pid, 0)  # this child's own rusage
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{name}: prepare failed (exit status {os.waitstatus_to_exitcode(status)})")
    shutil.rmtree(run / "raw")  # the copy prepare fetched; the source stays for the next run
    processed = run / "processed"
    return {**json.loads((run / "result.json").read_text()), "dataset": name,
            "peak_mib": usage.ru_maxrss / 1024,  # Linux: KiB
            "raw": (src / ".done").read_text().strip(),
            "raw_mb": sum(f.stat().st_size for f in src.iterdir() if f.name != ".done") / 1e6,
            "processed_mb": sum(f.stat().st_size for f in processed.rglob("*") if f.is_file()) / 1e6,
            "train_shape": npz_shape(processed / "train.npz", "x")}


def npz_shape(path: Path, key: str) -> tuple[int, ...]:
    """An array's shape from its .npy header inside the .npz, without loading it."""
    with zipfile.ZipFile(path) as z, z.open(f"{key}.npy") as f:
        major, _ = np.lib.format.read_magic(f)
        return getattr(np.lib.format, f"read_array_header_{major}_0")(f)[0]


def table(rows: list[dict]) -> str:
    lines = ["| dataset | raw (MB) | examples (train / val / test) | train (N, L, C) | prepare (s) "
             "| peak RSS (MiB) | < 8 GB | processed (MB) |", "|---|--:|--:|---|--:|--:|:-:|--:|"]
    for r in rows:
        s = r["sizes"]
        lines.append(f"| {r['dataset']} | {r['raw_mb']:,.1f} | {sum(s.values()):,} ({s['train']:,} / {s['val']:,} / "
                     f"{s['test']:,}) | ({', '.join(f'{d:,}' for d in r['train_shape'])}) | {r['seconds']:,.1f} "
                     f"| {r['peak_mib']:,.0f} | {'yes' if r['peak_mib'] < LIMIT_MIB else '**NO**'} "
                     f"| {r['processed_mb']:,.1f} |")
    return "\n".join(lines)


def report(rows: list[dict], total: float, command: str) -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    raws = "\n".join(f"- {r['dataset']}: {r['raw']}" for r in rows)
    return (f"# Dataset prepare benchmark\n\nSYNTHETIC raw files of the real full size, in the exact raw "
            f"formats (`benchmarks/datasets/prepare.py`); each prepare in its own process.\n\n"
            f"Requirement: preparing must fit in 8 GB of RAM; the `< 8 GB` column checks peak RSS against "
            f"8e9 bytes = {LIMIT_MIB:,.0f} MiB.\n\n{table(rows)}\n\nRaw files:\n{raws}\n\n"
            f"Machine: {os.uname().machine}, {os.cpu_count()} CPUs, {mem:.0f} GiB RAM, Python "
            f"{sys.version.split()[0]}. Command: `{command}`; {total:.0f} s in all, generation of missing raw "
            f"files included.\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(DATASETS), help="comma-separated, from: " + ", ".join(DATASETS))
    ap.add_argument("--work", type=Path, default=Path("/tmp/ctsweep-bench-data"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "datasets.md")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--generate", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.work = args.work.resolve()
    if args.child or args.generate:  # the subprocesses
        child(args.child, args.work) if args.child else raw_folder(args.generate, args.work, here=True)
        return
    names = [n for n in args.only.replace(" ", "").split(",") if n]
    if set(names) - set(DATASETS):
        ap.error(f"unknown datasets {sorted(set(names) - set(DATASETS))}; valid: {list(DATASETS)}")
    t0, rows = time.perf_counter(), []
    for name in names:
        rows.append(measure(name, args.work))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = report(rows, time.perf_counter() - t0, "python " + " ".join(sys.argv))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
