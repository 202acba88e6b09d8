"""A user's own copy of a dataset's raw files that the publisher's checksums cannot vouch for (issue
30): refused unless the user says so (`--unverified-copy`, CTSWEEP_UNVERIFIED_COPY), then marked in
data/raw.lock and carried into meta.json's provenance. Real files, a real local HTTP server as the
publisher, the real CLI; small generated archives in the PhysioNet 2012 format."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Physionet2012Params
from pipeline.data.contract import load_meta
from pipeline.data.download import RawFile, fetch
from pipeline.data.prepare import prepare
from pipeline.errors import ConfigError, DownloadError
from tests.conftest import default_params, write_params
from tests.test_data_physionet2012 import SPECIAL, filler, write_fixture

STAYS = {**SPECIAL, **filler(22)}  # 25 stays
OPTION = r"--unverified-copy \(or set CTSWEEP_UNVERIFIED_COPY=1\)"


def _zip(n: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", "x" * n)
    return buf.getvalue()


def _listed(name: str) -> RawFile:
    """A file whose publisher lists its checksum in SHA256SUMS.txt (as PhysioNet does)."""
    return RawFile(f"https://example.org/1.0/{name}", name, checksums_url="https://example.org/1.0/SHA256SUMS.txt")


def _mirror(folder: Path, files: dict[str, bytes], sums: dict[str, bytes] | None = None) -> str:
    """A local copy holding `files`; with `sums`, the publisher's SHA256SUMS.txt of those contents."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if sums is not None:
        lines = [f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in sums.items()]
        (folder / "SHA256SUMS.txt").write_text("".join(lines))
    return str(folder)


def _entry(lock: Path, f: RawFile) -> dict:
    return json.loads(lock.read_text())[f.url]


# ------------------------------------------------------------------------------------ download


def test_a_copy_without_the_publishers_list_is_refused_naming_the_option(tmp_path: Path) -> None:
    f, lock, raw = _listed("h.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    source = _mirror(tmp_path / "copy", {"h.zip": _zip(10)})
    with pytest.raises(DownloadError, match=OPTION) as err:
        fetch([f], raw, lock, source=source)
    message = str(err.value)
    assert "\n" not in message and f"no published checksum list at {source}/SHA256SUMS.txt" in message
    assert "h.zip" in message and str(lock) in message
    assert list(raw.iterdir()) == [] and not lock.exists()  # nothing half-written, nothing recorded


def test_an_accepted_copy_is_marked_and_used_again_without_the_option(tmp_path: Path, capsys) -> None:
    f, lock, raw = _listed("h.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    data = _zip(10)
    source = _mirror(tmp_path / "copy", {"h.zip": data})
    assert fetch([f], raw, lock, source=source, allow_unverified=True)["h.zip"].read_bytes() == data
    entry = _entry(lock, f)
    assert entry["unverified"] == f"no published checksum list at {source}/SHA256SUMS.txt"
    assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["first_from"] == f"{source}/h.zip"
    capsys.readouterr()
    # Later runs (`ctsweep prepare`, `dvc repro`) need no option: the mark is in the lock file and stays.
    fetch([f], raw, lock, source=source)
    assert "using the copy accepted as unverified" in capsys.readouterr().err
    (tmp_path / "copy" / "h.zip").unlink()  # nor the copy itself, once it is in data/raw
    fetch([f], raw, lock, source=source)
    assert _entry(lock, f) == entry


def test_a_copy_that_differs_from_the_publishers_checksum_says_so(tmp_path: Path, monkeypatch) -> None:
    f, lock, raw = _listed("h.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    published = _zip(20)
    source = _mirror(tmp_path / "copy", {"h.zip": _zip(10)}, sums={"h.zip": published})  # a rebuilt archive
    with pytest.raises(DownloadError, match=r"sha256 differs from the publisher's [0-9a-f]{64} .*" + OPTION):
        fetch([f], raw, lock, source=source)
    monkeypatch.setenv("CTSWEEP_UNVERIFIED_COPY", "1")  # as `dvc repro` is told
    fetch([f], raw, lock, source=source)
    entry = _entry(lock, f)
    theirs = hashlib.sha256(published).hexdigest()
    assert entry["unverified"] == f"sha256 differs from the publisher's {theirs} ({source}/SHA256SUMS.txt)"
    assert entry["publisher_sha256"] == theirs


def test_a_bad_environment_value_names_the_variable(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CTSWEEP_UNVERIFIED_COPY", "maybe")
    with pytest.raises(ConfigError, match="CTSWEEP_UNVERIFIED_COPY is 'maybe'; allowed: 1, true"):
        fetch([_listed("h.zip")], tmp_path / "raw", tmp_path / "raw.lock", source=str(tmp_path))


def test_a_later_verified_fetch_drops_the_mark(tmp_path: Path) -> None:
    f, lock, raw = _listed("h.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    copy, real = _zip(10), _zip(20)
    fetch([f], raw, lock, source=_mirror(tmp_path / "copy", {"h.zip": copy}), allow_unverified=True)
    assert "unverified" in _entry(lock, f)
    # The user gets the publisher's file, with its list: it replaces the copy, and the mark goes.
    fetch([f], raw, lock, source=_mirror(tmp_path / "real", {"h.zip": real}, sums={"h.zip": real}))
    assert (raw / "h.zip").read_bytes() == real
    entry = _entry(lock, f)
    assert "unverified" not in entry and "publisher_sha256" not in entry
    assert entry["sha256"] == hashlib.sha256(real).hexdigest()


def test_the_mark_goes_when_the_publishers_list_vouches_for_the_copy_after_all(tmp_path: Path) -> None:
    f, lock, raw = _listed("h.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    data = _zip(10)
    source = _mirror(tmp_path / "copy", {"h.zip": data})
    fetch([f], raw, lock, source=source, allow_unverified=True)
    _mirror(tmp_path / "copy", {}, sums={"h.zip": data})  # the list, found later: the copy is the publisher's
    fetch([f], raw, lock, source=source)
    assert "unverified" not in _entry(lock, f)


def test_another_copy_replaces_an_accepted_one_only_with_the_option(tmp_path: Path, capsys) -> None:
    f, lock, raw = _listed("h.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    first, second = _zip(10), _zip(30)
    source = _mirror(tmp_path / "copy", {"h.zip": first})
    fetch([f], raw, lock, source=source, allow_unverified=True)
    _mirror(tmp_path / "copy", {"h.zip": second})
    capsys.readouterr()
    fetch([f], raw, lock, source=source)  # the accepted copy stays usable; the new one is named, not taken
    assert (raw / "h.zip").read_bytes() == first
    assert "--unverified-copy" in capsys.readouterr().err
    fetch([f], raw, lock, source=source, allow_unverified=True)
    assert (raw / "h.zip").read_bytes() == second and _entry(lock, f)["sha256"] == hashlib.sha256(second).hexdigest()
    assert "unverified" in _entry(lock, f)


def test_files_without_a_publisher_checksum_keep_trust_on_first_use(tmp_path: Path) -> None:
    f, lock = RawFile("https://example.org/n.zip", "n.zip"), tmp_path / "raw.lock"
    fetch([f], tmp_path / "raw", lock, source=_mirror(tmp_path / "copy", {"n.zip": _zip(10)}))
    assert "unverified" not in _entry(lock, f)


def test_a_copy_without_a_publisher_checksum_is_marked_when_the_user_says_so(tmp_path: Path, capsys) -> None:
    # Walker2d's case: the publisher gives no checksum, and the user's copy is a rebuilt zip of the
    # authors' files. Nothing refuses it, but with the user's word it must not pass as the publisher's.
    f, lock, raw = RawFile("https://example.org/n.zip", "n.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    data = _zip(10)
    source = _mirror(tmp_path / "copy", {"n.zip": data})
    assert fetch([f], raw, lock, source=source, allow_unverified=True)["n.zip"].read_bytes() == data
    entry = _entry(lock, f)
    assert entry["unverified"] == "the publisher lists no checksum for n.zip; a mirror's copy"
    assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["first_from"] == f"{source}/n.zip"
    capsys.readouterr()
    fetch([f], raw, lock, source=source)  # later runs need no option, and the mark stays
    assert _entry(lock, f)["unverified"] == entry["unverified"]
    # a copy already in place, first recorded now, is marked the same way
    lock2 = tmp_path / "raw2.lock"
    fetch([f], raw, lock2, source=source, allow_unverified=True)
    assert _entry(lock2, f)["unverified"] == entry["unverified"]


def test_the_option_leaves_files_from_the_publishers_own_url_unmarked(http_server, tmp_path: Path) -> None:
    (http_server.root / "n.zip").write_bytes(_zip(10))
    f, lock = RawFile(http_server.url + "n.zip", "n.zip"), tmp_path / "raw.lock"
    fetch([f], tmp_path / "raw", lock, allow_unverified=True)
    assert "unverified" not in _entry(lock, f)


def test_the_publishers_own_file_replaces_an_accepted_copy_of_a_file_without_a_checksum(
        http_server, tmp_path: Path, capsys) -> None:
    # Walker2d's case, later: the user (or a collaborator with the same data/raw.lock) gets the
    # publisher's walker.zip. Its own URL is the reference for a file with no checksum: it replaces
    # the rebuilt copy without the option (which is refused without a mirror) and the mark goes.
    published, rebuilt = _zip(20), _zip(10)
    (http_server.root / "n.zip").write_bytes(published)
    f, lock, raw = RawFile(http_server.url + "n.zip", "n.zip"), tmp_path / "raw.lock", tmp_path / "raw"
    fetch([f], raw, lock, source=_mirror(tmp_path / "copy", {"n.zip": rebuilt}), allow_unverified=True)
    assert "unverified" in _entry(lock, f)
    fetch([f], raw, lock)  # the copy in place is still the accepted one: used, with a note
    assert (raw / "n.zip").read_bytes() == rebuilt and "using the copy accepted" in capsys.readouterr().err
    (raw / "n.zip").unlink()  # a fresh clone, or the copy removed to get the publisher's
    fetch([f], raw, lock)
    assert (raw / "n.zip").read_bytes() == published
    entry = _entry(lock, f)
    assert "unverified" not in entry and entry["sha256"] == hashlib.sha256(published).hexdigest()
    assert "the publisher's own file replaces the copy accepted as unverified" in capsys.readouterr().err
    fetch([f], raw, lock)  # and from then on it is the recorded file: no note, nothing fetched
    assert capsys.readouterr().err == "" and _entry(lock, f) == entry


def test_the_publishers_own_url_keeps_trust_on_first_use(http_server, tmp_path: Path, capsys) -> None:
    # No mirror: the file comes from its canonical URL, whose list cannot be read (as when PhysioNet's
    # SHA256SUMS.txt is unreachable). As before: a warning, and the checksum recorded on first use.
    (http_server.root / "p.zip").write_bytes(_zip(10))
    f = RawFile(http_server.url + "p.zip", "p.zip", checksums_url=http_server.url + "SHA256SUMS.txt")
    lock = tmp_path / "raw.lock"
    fetch([f], tmp_path / "raw", lock)
    assert "no published checksum list at" in capsys.readouterr().err
    assert "unverified" not in _entry(lock, f)


# ------------------------------------------------------------------------------------ prepare


def _copy_of_set_a(folder: Path, missing: int = 140007) -> str:
    """A user's rebuilt set-a: one record left out of the archive, Outcomes-a.txt complete, no
    SHA256SUMS.txt (the publisher's list is not part of the copy)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_fixture(folder, {k: v for k, v in STAYS.items() if k != missing}, listed=STAYS)
    (folder / "SHA256SUMS.txt").unlink()
    return str(folder)


def _prepare(root: Path, source: str | None, allow: bool = False):
    out = root / "processed" / "icu"
    return prepare("icu", Physionet2012Params(kind="physionet2012"), out, root / "raw" / "icu", root / "raw.lock",
                   source, allow), out


def test_prepare_records_the_copy_and_its_missing_records_in_meta_json(tmp_path: Path) -> None:
    source = _copy_of_set_a(tmp_path / "copy")
    with pytest.raises(DownloadError, match=OPTION):
        _prepare(tmp_path, source)
    assert not (tmp_path / "processed").exists() or not any((tmp_path / "processed").iterdir())
    meta, out = _prepare(tmp_path, source, allow=True)
    note = "local copy, not verified against the publisher (Outcomes-a.txt, set-a.tar.gz); 24 of 25 records"
    assert meta.provenance == note and load_meta(out).provenance == note
    assert json.loads((out / "meta.json").read_text())["provenance"] == note
    assert sum(meta.sizes.values()) == 24
    meta, _ = _prepare(tmp_path, source)  # `dvc repro` later: no option, the marks hold
    assert meta.provenance == note


def test_verified_complete_data_has_no_provenance_note(tmp_path: Path, http_server) -> None:
    write_fixture(http_server.root, STAYS)  # with the publisher's list
    meta, out = _prepare(tmp_path, http_server.url)
    assert meta.provenance == "" and "provenance" not in json.loads((out / "meta.json").read_text())
    assert load_meta(out).provenance == ""  # meta.json without the key (as before it existed) loads


def test_verified_but_incomplete_data_says_how_many_records(tmp_path: Path, http_server) -> None:
    write_fixture(http_server.root, {k: v for k, v in STAYS.items() if k != 140003}, listed=STAYS)
    meta, _ = _prepare(tmp_path, http_server.url)
    assert meta.provenance == "24 of 25 records"


# ------------------------------------------------------------------------------------ CLI

RUNNER = CliRunner()


def _project(tmp_path: Path) -> Path:
    params = default_params()
    params["prepare"] = {"icu": {"kind": "physionet2012"}}
    params["datasets"] = ["icu"]
    tmp_path.mkdir(parents=True, exist_ok=True)
    write_params(tmp_path, params)
    return tmp_path


def test_cli_refuses_in_one_line_naming_the_option_then_accepts_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CTSWEEP_UNVERIFIED_COPY", raising=False)
    root = _project(tmp_path / "project")
    source = _copy_of_set_a(tmp_path / "copy")
    refused = RUNNER.invoke(app, ["fetch", "icu", "--source", source, "--root", str(root)])
    assert refused.exit_code == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ctsweep: error: ") and "--unverified-copy" in lines[0]
    accepted = RUNNER.invoke(app, ["fetch", "icu", "--source", source, "--unverified-copy", "--root", str(root)])
    assert accepted.exit_code == 0, accepted.output
    assert "2 of them unverified copies (Outcomes-a.txt, set-a.tar.gz" in accepted.stdout
    prepared = RUNNER.invoke(app, ["prepare", "icu", "--root", str(root)])  # as dvc.yaml runs it: no option
    assert prepared.exit_code == 0, prepared.output
    assert "data: local copy, not verified against the publisher" in prepared.stdout
    assert "24 of 25 records" in prepared.stdout


def test_cli_prepare_takes_the_environment_variable(tmp_path: Path, monkeypatch) -> None:
    root = _project(tmp_path / "project")
    monkeypatch.setenv("CTSWEEP_DATA_SOURCE", _copy_of_set_a(tmp_path / "copy"))
    monkeypatch.setenv("CTSWEEP_UNVERIFIED_COPY", "1")
    result = RUNNER.invoke(app, ["prepare", "icu", "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert "unverified" in json.loads((root / "data" / "raw.lock").read_text())[
        "https://physionet.org/files/challenge-2012/1.0.0/set-a.tar.gz?download"]


@pytest.mark.parametrize("command", ["fetch", "prepare"])
def test_the_option_without_a_mirror_is_refused_in_one_line(tmp_path: Path, monkeypatch, command: str) -> None:
    """--unverified-copy accepts a mirror's copy: without --source it would change nothing, so it is
    refused (it was ignored, exit 0), before anything is fetched or written."""
    for name in ("CTSWEEP_UNVERIFIED_COPY", "CTSWEEP_DATA_SOURCE"):
        monkeypatch.delenv(name, raising=False)
    root = _project(tmp_path / "project")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    refused = RUNNER.invoke(app, [command, "icu", "--unverified-copy", "--root", str(root)])
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [
        "ctsweep: error: --unverified-copy accepts a mirror's copy, and no mirror is given: add --source "
        "DIR|FILE|URL (or set CTSWEEP_DATA_SOURCE), or leave the option out to download from the publisher"]
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_a_bad_environment_value_is_one_line_from_the_command(tmp_path: Path, monkeypatch) -> None:
    """Not Typer's usage box: the variable's own one-line refusal, exit status 2, nothing written."""
    monkeypatch.setenv("CTSWEEP_UNVERIFIED_COPY", "maybe")
    root = _project(tmp_path / "project")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    refused = RUNNER.invoke(app, ["fetch", "icu", "--source", str(tmp_path), "--root", str(root)])
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [
        "ctsweep: error: environment variable CTSWEEP_UNVERIFIED_COPY is 'maybe'; allowed: 1, true, yes, on "
        "(accept unverified copies) or 0, false, no, off, empty"]
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


# ------------------------------------------------------------------------------------ the shared copy

SHARED = Path("/work/shared/data/physionet2012")


@pytest.mark.skipif(not (SHARED / "set-a.tar.gz").is_file(),
                    reason="the shared PhysioNet 2012 copy is not on this machine")
def test_the_shared_rebuilt_set_a_is_refused_then_counted(tmp_path: Path) -> None:
    # The real rebuilt set-a (3,996 of 4,000 records, no SHA256SUMS.txt): read in place, never copied
    # into the project.
    with pytest.raises(DownloadError, match=OPTION):
        _prepare(tmp_path, str(SHARED))
    meta, _ = _prepare(tmp_path, str(SHARED), allow=True)
    # ... and unlike the challenge's files it has no ICUType line and several Age lines in 381 records
    assert meta.provenance == ("local copy, not verified against the publisher (Outcomes-a.txt, set-a.tar.gz); "
                               "3,996 of 4,000 records; Age given twice or more with different values in 381 "
                               "records (the first kept); ICUType absent from every record")
