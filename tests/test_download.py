"""Raw downloads over a real local HTTP server: resumed, verified, recorded, never half-written."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest

from pipeline.data.download import RawFile, fetch
from pipeline.errors import DataError, DownloadError


def _zip_bytes(n_members: int = 3) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(n_members):
            z.writestr(f"set/p{i:05d}.psv", f"HR|O2Sat\n{i}|97\n" * 2000)
    return buf.getvalue()


def _file(server, name: str, data: bytes) -> RawFile:
    (server.root / name).write_bytes(data)
    return RawFile(url=f"https://example.org/data/{name}", filename=name)


def test_first_download_is_recorded_and_not_repeated(http_server, tmp_path: Path) -> None:
    data = _zip_bytes()
    f = _file(http_server, "a.zip", data)
    lock, raw = tmp_path / "raw.lock", tmp_path / "raw"
    paths = fetch([f], raw, lock, source=http_server.url)
    assert paths["a.zip"].read_bytes() == data
    entry = json.loads(lock.read_text())[f.url]  # keyed by the canonical URL, not the mirror
    assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["size"] == len(data)
    n = len(http_server.requests)
    fetch([f], raw, lock, source=http_server.url)
    assert len(http_server.requests) == n  # verified in place, nothing downloaded again
    assert sorted(p.name for p in raw.iterdir()) == ["a.zip"]  # no .part left behind


def test_dropped_connection_resumes_with_a_range_request(http_server, tmp_path: Path) -> None:
    data = _zip_bytes(6)
    f = _file(http_server, "b.zip", data)
    http_server.faults["b.zip"] = len(data) // 3
    path = fetch([f], tmp_path / "raw", tmp_path / "raw.lock", source=http_server.url)["b.zip"]
    assert path.read_bytes() == data
    ranges = [r for p, r in http_server.requests if p.endswith("b.zip")]
    resumed_at = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert ranges[0] is None and 0 < resumed_at <= len(data) // 3 and len(ranges) == 2


def test_checksum_mismatch_is_reported_and_the_verified_file_is_kept(http_server, tmp_path: Path) -> None:
    lock, raw = tmp_path / "raw.lock", tmp_path / "raw"
    good = _zip_bytes()
    f = _file(http_server, "c.zip", good)
    fetch([f], raw, lock, source=http_server.url)
    (raw / "c.zip").write_bytes(b"tampered")  # a local copy gone bad ...
    (http_server.root / "c.zip").write_bytes(_zip_bytes(4))  # ... and a source that changed
    with pytest.raises(DownloadError, match=r"c\.zip.*does not match"):
        fetch([f], raw, lock, source=http_server.url, retries=2)
    assert (raw / "c.zip").read_bytes() == b"tampered"  # not replaced by an unverified file
    assert sorted(p.name for p in raw.iterdir()) == ["c.zip"]


def test_pinned_checksum_wins(http_server, tmp_path: Path) -> None:
    data = _zip_bytes()
    (http_server.root / "d.zip").write_bytes(data)
    wrong = RawFile("https://example.org/d.zip", "d.zip", sha256="0" * 64)
    with pytest.raises(DownloadError, match="differs from the publisher's 0000.*--unverified-copy"):
        fetch([wrong], tmp_path / "raw", tmp_path / "raw.lock", source=http_server.url, retries=1)
    assert not (tmp_path / "raw" / "d.zip").exists() and not (tmp_path / "raw.lock").exists()
    right = RawFile("https://example.org/d.zip", "d.zip", sha256=hashlib.sha256(data).hexdigest())
    assert fetch([right], tmp_path / "raw", tmp_path / "raw.lock", source=http_server.url)["d.zip"].exists()


def test_corrupt_archive_on_first_use_is_never_moved_into_place(http_server, tmp_path: Path) -> None:
    data = bytearray(_zip_bytes())
    data[200:260] = b"x" * 60  # damage a member: the zip still opens, its CRC fails
    f = _file(http_server, "e.zip", bytes(data))
    with pytest.raises(DownloadError, match=r"e\.zip.*(CRC|corrupt)"):
        fetch([f], tmp_path / "raw", tmp_path / "raw.lock", source=http_server.url, retries=2)
    assert list((tmp_path / "raw").iterdir()) == [] and not (tmp_path / "raw.lock").exists()


def test_missing_file_names_the_url(http_server, tmp_path: Path) -> None:
    f = RawFile("https://example.org/Nope.zip", "Nope.zip")
    with pytest.raises(DownloadError, match=r"Nope\.zip.*404"):
        fetch([f], tmp_path / "raw", tmp_path / "raw.lock", source=http_server.url)
    assert len(http_server.requests) == 1  # not found is not retried


def test_local_mirror_directory_and_env_variable(http_server, tmp_path: Path, monkeypatch) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    data = _zip_bytes()
    (mirror / "f.zip").write_bytes(data)
    monkeypatch.setenv("CTSWEEP_DATA_SOURCE", str(mirror))
    path = fetch([RawFile("https://example.org/f.zip", "f.zip")], tmp_path / "raw", tmp_path / "raw.lock")["f.zip"]
    assert path.read_bytes() == data and http_server.requests == []
    with pytest.raises(DataError, match="g.zip"):
        fetch([RawFile("https://example.org/g.zip", "g.zip")], tmp_path / "raw", tmp_path / "raw.lock")


def test_a_mirror_lacking_several_files_names_them_and_what_it_holds_in_one_line(tmp_path: Path) -> None:
    # e.g. a PhysioNet 2012 copy with set-a only, for a profile that lists sets a, b and c:
    # every file is tried, then one line says which are absent and which were found
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "a.zip").write_bytes(_zip_bytes())
    files = [RawFile(f"https://example.org/{n}.zip", f"{n}.zip") for n in ("a", "b", "c")]
    with pytest.raises(DownloadError) as caught:
        fetch(files, tmp_path / "raw", tmp_path / "raw.lock", source=str(mirror))
    message = str(caught.value)
    assert "\n" not in message and "2 of the 3 files" in message and "b.zip, c.zip; found: a.zip" in message
    assert (tmp_path / "raw" / "a.zip").exists()


def test_published_checksum_list_is_checked(http_server, tmp_path: Path) -> None:
    data = _zip_bytes()
    (http_server.root / "h.zip").write_bytes(data)
    f = RawFile("https://example.org/1.0/h.zip", "h.zip", checksums_url="https://example.org/1.0/SHA256SUMS.txt")
    # A mirror without the list: refused (test_unverified_copy.py covers accepting it).
    with pytest.raises(DownloadError, match=r"no published checksum list at .*SHA256SUMS\.txt.*--unverified-copy"):
        fetch([f], tmp_path / "raw0", tmp_path / "lock0", source=http_server.url)
    listing = http_server.root / "SHA256SUMS.txt"
    listing.write_text(f"{'1' * 64}  other.txt\n{hashlib.sha256(data).hexdigest()}  h.zip\n")
    assert fetch([f], tmp_path / "raw1", tmp_path / "lock1", source=http_server.url)["h.zip"].read_bytes() == data
    n = len(http_server.requests)
    fetch([f], tmp_path / "raw1", tmp_path / "lock1", source=http_server.url)
    assert len(http_server.requests) == n  # a recorded, matching file needs no network, not even the list
    listing.write_text(f"{'a' * 64}  sub/h.zip\n")  # the source says otherwise: refused
    with pytest.raises(DownloadError, match=r"h\.zip.*differs from the publisher's aaaa"):
        fetch([f], tmp_path / "raw2", tmp_path / "lock2", source=http_server.url, retries=1)
    assert not (tmp_path / "raw2" / "h.zip").exists()


def test_a_sibling_dataset_s_verified_copy_is_reused(http_server, tmp_path: Path) -> None:
    data = _zip_bytes()
    f = _file(http_server, "i.zip", data)
    lock = tmp_path / "raw.lock"
    fetch([f], tmp_path / "raw" / "sepsis", lock, source=http_server.url)
    n = len(http_server.requests)
    path = fetch([f], tmp_path / "raw" / "sepsis_intensity", lock, source=http_server.url)["i.zip"]
    assert path.read_bytes() == data and len(http_server.requests) == n  # copied, not downloaded
