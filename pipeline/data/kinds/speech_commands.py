"""Speech Commands v0.02, the ten keywords as MFCC sequences, as Kidger et al. (2020) prepare it.

Sources
    Warden (2018), "Speech Commands: A Dataset for Limited-Vocabulary Speech Recognition",
    arXiv:1804.03209. Raw file: the archive at the address the reference code downloads,
        http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz
    (~2.3 GB; 105,829 one-second 16 kHz 16-bit mono .wav clips in ./<word>/<hash>_nohash_<n>.wav,
    plus _background_noise_/, README.md, LICENSE, validation_list.txt, testing_list.txt).
    No checksum is published beside it, so the lock file records it on first download.
    Reference preprocessing: patrick-kidger/NeuralCDE experiments/datasets/speech_commands.py and
    common.py (Kidger et al. 2020, "Neural Controlled Differential Equations for Irregular Time
    Series"), reused unchanged by IDSIA/neuraldiffeq-fwp speech_and_physionet/experiments/datasets/
    speech_commands.py (Irie et al. 2022, "Neural Differential Equations for Learning to Program
    Neural Nets Through Continuous Learning Rules"; torchaudio 0.11 in its requirements.txt).

What this module does, with the reference's constants
    * Classes, in this order (label = index): yes no up down left right on off stop go. A clip's
      class is the folder it is in; every other folder (the 25 other words, _background_noise_)
      and every non-.wav member is skipped.
    * Each clip is read as 16-bit PCM and scaled by 1 / 2**15 (the reference: `load_wav(...,
      normalization=False)` then `audio / 2 ** 15`). A member that is not a readable mono 16-bit
      PCM .wav at 16 kHz (or whose data chunk is cut short) is a DataError naming the member.
    * Only clips of exactly 16,000 samples are kept ("A few samples are shorter than the full
      length; for simplicity we discard them"): 34,975 clips in the real archive (the reference
      asserts this number).
    * Features: torchaudio.transforms.MFCC(log_mels=True, n_mfcc=20, melkwargs=dict(n_fft=200,
      n_mels=64)) at its default sample_rate 16000, reproduced with numpy / librosa / scipy
      (torchaudio is not installed). The settings matched, read from torchaudio's source
      (src/torchaudio/transforms/_transforms.py Spectrogram / MelScale / MelSpectrogram / MFCC,
      src/torchaudio/functional/functional.py spectrogram / melscale_fbanks /
      _create_triangular_filterbank / create_dct; the same in the 2019-20 releases the reference
      ran, torchaudio/functional.py create_fb_matrix / create_dct):
        - STFT: n_fft = win_length = 200, hop_length = win_length // 2 = 100, periodic Hann window
          (torch.hann_window; librosa's "hann" is scipy's fftbins=True, also periodic),
          center=True with pad_mode="reflect": the clip is reflect-padded by n_fft // 2 = 100
          samples each side with np.pad and librosa.stft runs with center=False (librosa's own
          centring pads the tail slice separately, which for 16,000 samples and hop 100 alters
          the last sample of the last frame; see `mfcc`), pad=0, normalized=False, onesided:
          101 frequency bins x 1 + 16000 // 100 = 161 frames.
        - power 2: |STFT|**2.
        - Mel filterbank: 64 triangular filters, HTK mel scale (2595 log10(1 + f / 700)), f_min 0,
          f_max = sample_rate // 2 = 8000, norm=None (peak 1, no area normalisation), bins at
          linspace(0, 8000, 101) (= librosa's rfftfreq): librosa.filters.mel(htk=True, norm=None)
          builds the same matrix. With 101 bins of 80 Hz, the lowest filters are narrower than a
          bin and some are all zero, as in torchaudio (which warns); they give log(1e-6).
          (For an odd n_fft librosa puts the top bin at rfftfreq's value, just under 8000, where
          torchaudio puts it at 8000; the default n_fft is even, where the two agree.)
        - log(mel + 1e-6) (log_mels=True; the dB path with top_db is not used).
        - DCT-II with norm="ortho" over the 64 log-mels, first n_mfcc = 20 coefficients
          (scipy.fft.dct(type=2, norm="ortho") = torchaudio's create_dct(..., "ortho")).
      Result (N, 161, 20) float32, frame k at time k: times 0..160 (torch.linspace(0, 160, 161)),
      every step observed.
    * Standardised per channel with train statistics only (contract.standardise), as the
      reference's common.normalise_data does (mean and std of each channel over the train split).
    * Split: stratified 70/15/15 by class (contract.stratified_split, seed `seed`: train carved
      first, the rest halved, as the reference's common.split_data does with random_state 0, 1).

Deviations from the reference, and why
    * The reference appends time as an extra first channel; here times are in `t`.
    * Examples are ordered by member path before splitting (the reference walks os.listdir order,
      which depends on the file system), so the split is reproducible from the archive alone.
      Its split is therefore not the reference's row for row, only in distribution.
    * Standardisation divides by the population std (the reference: unbiased std + 1e-5); the
      difference is below 1e-4 relative for ~24,000 x 161 values per channel.
    * The reference extracts the archive to disk; here it is streamed member by member and the
      MFCCs computed in batches of BATCH clips, so memory holds the features (34,975 x 161 x 20
      float32 = 450 MB) and one batch of audio, never all the audio (2.2 GB as float32).
"""

from __future__ import annotations

import io
import tarfile
import warnings
import zlib
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator

import numpy as np
from tqdm import tqdm

from pipeline.config import SpeechCommandsParams
from pipeline.data.contract import Dataset, Meta, Split, standardise, stratified_split, take
from pipeline.data.download import RawFile
from pipeline.errors import ConfigError, DataError

URL = "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz"
FILENAME = "speech_commands_v0.02.tar.gz"
KEYWORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
SAMPLE_RATE = 16_000
CLIP_SAMPLES = 16_000  # one second; other lengths are dropped
LOG_OFFSET = 1e-6  # torchaudio MFCC(log_mels=True): log(mel + 1e-6)
BATCH = 512  # clips per vectorised MFCC call: 512 x 16000 float32 = 33 MB of audio


def raw_files(p: SpeechCommandsParams) -> list[RawFile]:
    """The one archive (no checksum is published for it)."""
    return [RawFile(URL, FILENAME)]


# ---------------------------------------------------------------------------------- features


def n_frames(n_samples: int, n_fft: int) -> int:
    """Frames of a centred STFT with hop n_fft // 2: 161 for 16,000 samples and n_fft 200."""
    half = n_fft // 2
    return 1 + (n_samples + 2 * half - n_fft) // half


@lru_cache(maxsize=8)
def _mel_dct(n_fft: int, n_mels: int, n_mfcc: int, sample_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """The (n_mels, n_fft // 2 + 1) HTK filterbank and the (n_mfcc, n_mels) orthonormal DCT-II."""
    import librosa
    import scipy.fft

    with warnings.catch_warnings():  # "Empty filters detected": expected, as torchaudio warns too
        warnings.simplefilter("ignore", UserWarning)
        fb = librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=0.0,
                                 fmax=sample_rate / 2, htk=True, norm=None, dtype=np.float32)
    dct = scipy.fft.dct(np.eye(n_mels), type=2, norm="ortho", axis=0)[:n_mfcc]  # row k = basis k
    return fb, dct.astype(np.float32)


def mfcc(audio: np.ndarray, n_fft: int = 200, n_mels: int = 64, n_mfcc: int = 20,
         sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """torchaudio.transforms.MFCC(sample_rate, n_mfcc, log_mels=True, melkwargs={n_fft, n_mels})
    of a batch of clips (B, n) in [-1, 1): (B, frames, n_mfcc) float32, time-major.

    The settings are listed in the module docstring.
    """
    import librosa

    if n_mfcc > n_mels:
        raise ConfigError(f"n_mfcc ({n_mfcc}) cannot exceed n_mels ({n_mels})")
    fb, dct = _mel_dct(n_fft, n_mels, n_mfcc, sample_rate)
    # torch.stft(center=True, pad_mode="reflect") reflects the whole clip by n_fft // 2 each side.
    # librosa.stft(center=True) pads the tail slice on its own, and when that slice is exactly
    # n_fft // 2 long (16,000 samples, hop 100) numpy's reflect wraps around inside it, which
    # changes the last sample of the last frame; so pad here and call it with center=False.
    half = n_fft // 2
    padded = np.pad(np.asarray(audio, dtype=np.float32), ((0, 0), (half, half)), mode="reflect")
    spec = librosa.stft(padded, n_fft=n_fft, hop_length=half, win_length=n_fft, window="hann",
                        center=False)  # (B, n_fft // 2 + 1, frames) complex64
    del padded
    power = spec.real**2 + spec.imag**2
    del spec
    log_mel = np.log(np.einsum("mf,bft->btm", fb, power, optimize=True) + np.float32(LOG_OFFSET))
    return (log_mel @ dct.T).astype(np.float32)  # (B, T, n_mfcc)


# ---------------------------------------------------------------------------------- archive


class _Progress(io.RawIOBase):
    """A read-only file that advances a tqdm bar by the compressed bytes read."""

    def __init__(self, f: BinaryIO, bar: tqdm) -> None:
        self._f, self._bar = f, bar

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        n = self._f.readinto(b)
        self._bar.update(n or 0)
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._bar.update(len(data))
        return data


def read_wav(data: bytes, member: str) -> np.ndarray:
    """The int16 samples of a mono 16-bit PCM 16 kHz .wav; anything else is a DataError."""
    from scipy.io import wavfile

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", wavfile.WavFileWarning)
        try:
            rate, samples = wavfile.read(io.BytesIO(data))
        except Exception as exc:  # scipy raises ValueError, struct.error, EOFError, ...
            raise DataError(f"{FILENAME}: member {member!r} is not a readable .wav ({exc})") from exc
    for w in caught:
        if "EOF" in str(w.message):  # the data chunk is shorter than its header says
            raise DataError(f"{FILENAME}: member {member!r} is truncated ({w.message})")
    if samples.dtype != np.int16:
        raise DataError(f"{FILENAME}: member {member!r} is {samples.dtype} audio, expected 16-bit PCM")
    if samples.ndim != 1:
        raise DataError(f"{FILENAME}: member {member!r} has {samples.shape[1]} channels, expected mono")
    if rate != SAMPLE_RATE:
        raise DataError(f"{FILENAME}: member {member!r} is sampled at {rate} Hz, expected {SAMPLE_RATE}")
    return samples


def keyword_of(member_name: str) -> str | None:
    """The keyword whose folder holds this .wav member, or None for every other member."""
    path = PurePosixPath(member_name)
    if path.suffix.lower() != ".wav" or len(path.parts) < 2:
        return None
    folder = path.parts[-2]
    return folder if folder in KEYWORDS else None


def iter_clips(archive: Path) -> Iterator[tuple[str, int, np.ndarray | None]]:
    """(member name, label, int16 samples or None when the clip is not 16,000 samples long)
    for every keyword clip, streaming the tar.gz member by member (nothing is extracted)."""
    size = archive.stat().st_size
    try:
        with open(archive, "rb") as raw, tqdm(total=size, unit="B", unit_scale=True, desc=FILENAME,
                                               disable=None) as bar:
            stream = io.BufferedReader(_Progress(raw, bar), buffer_size=1 << 20)
            with tarfile.open(fileobj=stream, mode="r|gz") as tar:
                for member in tar:
                    word = keyword_of(member.name)
                    if word is None or not member.isfile():
                        continue
                    f = tar.extractfile(member)
                    samples = read_wav(f.read() if f is not None else b"", member.name)
                    yield member.name, KEYWORDS.index(word), samples if len(samples) == CLIP_SAMPLES else None
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise DataError(f"{archive}: not a readable tar.gz ({exc}); fetch it again") from exc


def load_features(archive: Path, p: SpeechCommandsParams) -> tuple[np.ndarray, np.ndarray, list[str], int]:
    """MFCCs (N, frames, n_mfcc) float32 and labels (N,) of the kept clips, ordered by member
    name; also the member names and the number of keyword clips dropped for their length."""
    chunks: list[np.ndarray] = []
    names: list[str] = []
    labels: list[int] = []
    buffer = np.empty((BATCH, CLIP_SAMPLES), dtype=np.float32)
    filled, dropped = 0, 0

    def flush() -> None:
        chunks.append(mfcc(buffer[:filled], p.n_fft, p.n_mels, p.n_mfcc))

    for name, label, samples in iter_clips(archive):
        if samples is None:
            dropped += 1
            continue
        np.multiply(samples, np.float32(1.0 / 2**15), out=buffer[filled])
        names.append(name)
        labels.append(label)
        filled += 1
        if filled == BATCH:
            flush()
            filled = 0
    if filled:
        flush()
    if not names:
        raise DataError(f"{archive}: no clip of {CLIP_SAMPLES} samples in any of the folders {list(KEYWORDS)}")
    x = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    del chunks
    order = np.array(sorted(range(len(names)), key=names.__getitem__))
    if not np.array_equal(order, np.arange(len(order))):
        x = x[order]
    return x, np.asarray(labels, dtype=np.int64)[order], [names[i] for i in order], dropped


def build(name: str, p: SpeechCommandsParams, raw_dir: Path) -> Dataset:
    archive = raw_dir / FILENAME
    if not archive.exists():
        raise DataError(f"{archive} is missing; run the fetch stage")
    x, y, _, dropped = load_features(archive, p)
    counts = np.bincount(y, minlength=len(KEYWORDS))
    if (counts < 2).any():  # a stratified split needs every class at least twice
        few = {KEYWORDS[k]: int(c) for k, c in enumerate(counts) if c < 2}
        raise DataError(f"{archive}: too few clips of {CLIP_SAMPLES} samples for {few}")
    n, length, _ = x.shape
    t = np.broadcast_to(np.arange(length, dtype=np.float32), (n, length))
    full = Split(x, t, np.ones((n, length), dtype=bool), y)
    splits = {k: take(full, idx) for k, idx in stratified_split(y, p.seed).items()}
    del full, x
    splits, mean, std = standardise(splits)
    meta = Meta(
        name=name, task="classification", per_step=False, output_size=len(KEYWORDS), metric="accuracy",
        channels=[f"mfcc{i}" for i in range(p.n_mfcc)],
        source=(f"Speech Commands v0.02 ({URL}): {n} clips of the 10 keywords with exactly "
                f"{CLIP_SAMPLES} samples ({dropped} of other lengths dropped); MFCC(log_mels, n_mfcc={p.n_mfcc}, "
                f"n_fft={p.n_fft}, n_mels={p.n_mels}) as torchaudio (Kidger et al. 2020); seed {p.seed}"),
        sizes={k: len(v) for k, v in splits.items()}, norm_mean=mean.tolist(), norm_std=std.tolist(),
        classes=list(KEYWORDS),
    )
    return Dataset(meta, splits)
