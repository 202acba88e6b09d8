"""Speech Commands v0.02: a small tar.gz of synthetic .wav clips in the archive's exact layout,
served over HTTP and prepared through the real fetch + build path."""

from __future__ import annotations

import io
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest
from scipy.io import wavfile

from pipeline.config import SpeechCommandsParams
from pipeline.data.contract import load_dataset, stratified_split
from pipeline.data.prepare import prepare
from pipeline.data.kinds.speech_commands import FILENAME, KEYWORDS, mfcc
from pipeline.errors import DataError

PER_WORD = 10  # 100 clips: enough for a stratified 70/15/15 split of 10 classes
PROBE = "./left/probe000_nohash_0.wav"  # the clip whose MFCCs are computed by hand below


def wav_bytes(samples: np.ndarray, rate: int = 16_000) -> bytes:
    buf = io.BytesIO()
    wavfile.write(buf, rate, samples)
    return buf.getvalue()


def clip(rng: np.random.Generator, label: int, n: int = 16_000) -> np.ndarray:
    """A tone whose pitch depends on the class, plus noise: int16."""
    t = np.arange(n) / 16_000
    tone = 0.3 * np.sin(2 * np.pi * (200 + 150 * label) * t + rng.uniform(0, 2 * np.pi))
    return np.clip((tone + 0.05 * rng.standard_normal(n)) * 2**15, -(2**15), 2**15 - 1).astype(np.int16)


def members(seed: int = 0) -> dict[str, bytes]:
    """name -> content, in the layout of the real archive (./<word>/<hash>_nohash_<n>.wav)."""
    rng = np.random.default_rng(seed)
    out: dict[str, bytes] = {"./README.md": b"Speech Commands\n", "./testing_list.txt": b"yes/a_nohash_0.wav\n"}
    for label, word in enumerate(KEYWORDS):
        for i in range(PER_WORD):
            out[f"./{word}/{i:08x}_nohash_{i % 3}.wav"] = wav_bytes(clip(rng, label))
    out.pop(f"./left/{0:08x}_nohash_0.wav")
    out[PROBE] = wav_bytes(clip(rng, KEYWORDS.index("left")))
    out["./yes/short000_nohash_0.wav"] = wav_bytes(clip(rng, 0, n=15_999))  # dropped: 15,999 samples
    out["./bed/00000000_nohash_0.wav"] = wav_bytes(clip(rng, 3))  # not one of the ten keywords
    out["./_background_noise_/white_noise.wav"] = wav_bytes(clip(rng, 0, n=48_000))
    return out


def write_archive(path: Path, contents: dict[str, bytes], order: list[str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name in order or list(contents):
            info = tarfile.TarInfo(name)
            info.size = len(contents[name])
            tar.addfile(info, io.BytesIO(contents[name]))
    return path


def run_prepare(tmp_path: Path, server, params: SpeechCommandsParams | None = None, tag: str = "sc"):
    p = params or SpeechCommandsParams(kind="speech_commands")
    out = tmp_path / "processed" / tag
    meta = prepare(tag, p, out_dir=out, raw_dir=tmp_path / "raw" / tag, lock_path=tmp_path / f"{tag}.lock",
                   source=server.url)
    return meta, load_dataset(out)


def reference_mfcc(samples: np.ndarray, n_fft: int = 200, n_mels: int = 64, n_mfcc: int = 20) -> np.ndarray:
    """torchaudio's MFCC(log_mels=True) written out in float64 numpy: reflect-padded frames,
    periodic Hann, |rfft|^2, HTK triangles (torchaudio's melscale_fbanks formula), log(+1e-6),
    orthonormal DCT-II matrix (torchaudio's create_dct)."""
    x = samples.astype(np.float64) / 2**15
    hop, half = n_fft // 2, n_fft // 2
    padded = np.pad(x, half, mode="reflect")
    starts = np.arange(0, len(padded) - n_fft + 1, hop)
    frames = padded[starts[:, None] + np.arange(n_fft)]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # (T, F)
    freqs = np.linspace(0, 8000, n_fft // 2 + 1)
    mel = np.linspace(0, 2595 * math.log10(1 + 8000 / 700), n_mels + 2)
    f_pts = 700 * (10 ** (mel / 2595) - 1)
    slopes = f_pts[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / np.diff(f_pts)[:-1]
    up = slopes[:, 2:] / np.diff(f_pts)[1:]
    fb = np.maximum(0, np.minimum(down, up))  # (F, n_mels)
    log_mel = np.log(power @ fb + 1e-6)
    n, k = np.arange(n_mels), np.arange(n_mfcc)[:, None]
    dct = np.cos(np.pi / n_mels * (n + 0.5) * k)
    dct[0] /= math.sqrt(2)
    dct *= math.sqrt(2 / n_mels)
    return log_mel @ dct.T  # (T, n_mfcc)


def test_prepare_keywords_mfcc_shapes_split_and_one_clip_by_hand(tmp_path, http_server):
    contents = members()
    write_archive(http_server.root / FILENAME, contents)
    meta, ds = run_prepare(tmp_path, http_server)

    n = 10 * PER_WORD  # the 15,999-sample clip, bed/ and _background_noise_/ are not in it
    parts = stratified_split(np.repeat(np.arange(10), PER_WORD), 0)  # sizes depend only on the counts
    assert meta.sizes == {k: len(v) for k, v in parts.items()} and sum(meta.sizes.values()) == n
    assert abs(meta.sizes["train"] - 70) <= 1 and abs(meta.sizes["test"] - 15) <= 1
    assert meta.classes == list(KEYWORDS) and meta.output_size == 10 and not meta.per_step
    assert meta.channels == [f"mfcc{i}" for i in range(20)] and "1 of other lengths dropped" in meta.source
    for s in ds.splits.values():
        assert s.x.shape == (len(s), 161, 20) and s.x.dtype == np.float32 and np.isfinite(s.x).all()
        assert s.mask.all() and (s.t == np.arange(161, dtype=np.float32)).all()
    # Stratified: every keyword in every split, 10 clips each in all.
    counts = {k: np.bincount(s.y, minlength=10) for k, s in ds.splits.items()}
    assert sum(counts.values()).tolist() == [PER_WORD] * 10
    assert set(counts["train"]) <= {6, 7, 8} and counts["val"].min() >= 1 and counts["test"].min() >= 1
    # Standardised with train statistics.
    train = ds.splits["train"].x.reshape(-1, 20)
    np.testing.assert_allclose(train.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(train.std(0), 1, rtol=1e-3)

    # One clip by hand: its un-standardised MFCCs equal the numpy formula, and its label is "left".
    _, probe = wavfile.read(io.BytesIO(contents[PROBE]))
    want = reference_mfcc(probe)
    mean, std = np.asarray(meta.norm_mean), np.asarray(meta.norm_std)
    rows = [(k, i) for k, s in ds.splits.items() for i in range(len(s))]
    raw = np.concatenate([s.x for s in ds.splits.values()]) * std + mean
    dist = np.abs(raw - want).max(axis=(1, 2))
    k, i = rows[int(dist.argmin())]
    assert dist.min() < 1e-3 and np.sort(dist)[1] > 1.0  # one clip matches, and only one
    assert KEYWORDS[ds.splits[k].y[i]] == "left"


def test_split_does_not_depend_on_member_order(tmp_path, http_server):
    contents = members(seed=1)
    names = list(contents)
    write_archive(http_server.root / FILENAME, contents)
    _, first = run_prepare(tmp_path, http_server, tag="a")
    rng = np.random.default_rng(7)
    write_archive(http_server.root / FILENAME, contents, order=[names[i] for i in rng.permutation(len(names))])
    _, second = run_prepare(tmp_path, http_server, tag="b")
    for k in first.splits:
        np.testing.assert_array_equal(first.splits[k].y, second.splits[k].y)
        np.testing.assert_allclose(first.splits[k].x, second.splits[k].x, rtol=1e-5, atol=1e-5)


def test_mfcc_matches_torch_stft_pipeline():
    """The batch function against torchaudio's steps written with torch.stft (float32, as torchaudio)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    audio = (0.2 * rng.standard_normal((3, 16_000))).astype(np.float32)
    ours = mfcc(audio)
    spec = torch.stft(torch.from_numpy(audio), 200, hop_length=100, win_length=200, window=torch.hann_window(200),
                      center=True, pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    power = spec.abs().pow(2)  # (B, 101, 161)
    freqs = torch.linspace(0, 8000, 101)
    f_pts = 700 * (10 ** (torch.linspace(0, 2595 * math.log10(1 + 8000 / 700), 66) / 2595) - 1)
    slopes = f_pts[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / (f_pts[1:-1] - f_pts[:-2])
    up = slopes[:, 2:] / (f_pts[2:] - f_pts[1:-1])
    fb = torch.clamp(torch.minimum(down, up), min=0)
    log_mel = torch.log(power.transpose(1, 2) @ fb + 1e-6)
    n, k = torch.arange(64.0), torch.arange(20.0)[:, None]
    dct = torch.cos(math.pi / 64 * (n + 0.5) * k)
    dct[0] /= math.sqrt(2)
    dct *= math.sqrt(2 / 64)
    want = (log_mel @ dct.T).numpy()
    assert ours.shape == want.shape == (3, 161, 20)
    np.testing.assert_allclose(ours, want, atol=1e-3)
    np.testing.assert_allclose(ours[:, -1], want[:, -1], atol=1e-3)  # the last frame too (reflect at the end)


@pytest.mark.parametrize("bad, words", [
    (b"not a wav file at all", "not a readable .wav"),
    (wav_bytes(np.zeros(16_000, np.float32)), "expected 16-bit PCM"),
    (wav_bytes(np.zeros((16_000, 2), np.int16)), "expected mono"),
    (wav_bytes(np.zeros(16_000, np.int16))[:-1000], "truncated"),
    (wav_bytes(np.zeros(16_000, np.int16), rate=8_000), "8000 Hz"),
])
def test_bad_member_is_a_data_error_naming_it(tmp_path, http_server, bad, words):
    contents = members()
    contents["./stop/deadbeef_nohash_0.wav"] = bad
    write_archive(http_server.root / FILENAME, contents)
    with pytest.raises(DataError, match=rf"stop/deadbeef_nohash_0\.wav.*{words}"):
        run_prepare(tmp_path, http_server)
    assert not (tmp_path / "processed").exists() or not any((tmp_path / "processed").iterdir())


def test_bad_member_outside_the_keywords_is_ignored(tmp_path, http_server):
    contents = members()
    contents["./bed/deadbeef_nohash_0.wav"] = b"garbage"
    write_archive(http_server.root / FILENAME, contents)
    meta, _ = run_prepare(tmp_path, http_server)
    assert sum(meta.sizes.values()) == 10 * PER_WORD


def test_n_mfcc_above_n_mels_is_refused():
    with pytest.raises(ValueError, match="n_mfcc"):
        SpeechCommandsParams(kind="speech_commands", n_mfcc=65, n_mels=64)
