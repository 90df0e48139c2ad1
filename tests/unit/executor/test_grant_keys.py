"""Grant public keys re-read from their files (a rotation without a restart): a file that
now holds another valid key puts it in force and drops the one it held; a file that turns
unreadable, empty or invalid keeps its last good key and says why (fail closed: nothing
new is accepted, nothing known is lost). Files are laid out as a Kubernetes Secret volume
lays them out (``key.pem`` → ``..data/key.pem``, ``..data`` → a timestamped directory,
swapped atomically)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from stockade.contract.grant import GrantInvalid, key_id
from stockade.decision.grants import GrantSigner
from stockade.errors import GrantReplayed, InvalidArgument
from stockade.executor.core import CallSpec
from stockade.executor.grants import (
    MAX_KEY_FILE,
    GrantKeyFiles,
    StoreGrantCheck,
    grant_check_from_settings,
    grant_layer,
)
from stockade.executor.inspect import Inspection
from stockade.executor.settings import ExecutorSettings
from tests.secretvolume import SecretVolume


def _pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _settings(tmp_path: Path, *paths: Path) -> ExecutorSettings:
    return ExecutorSettings(
        workspace=tmp_path,
        grant_public_key_file=paths[0],
        grant_public_key_files=list(paths[1:]),
    )


CALL = CallSpec("s", "c1", "read_file", {"file_path": "a.txt"})
NO_FINDINGS = Inspection(
    tool_name="read_file",
    rules=(),
    inside_working_dir=True,
    read_only=True,
    risk="low",
    explanation="reads a file",
)


def _grant(key: Ed25519PrivateKey, call: CallSpec = CALL) -> tuple[bytes, bytes]:
    signed = GrantSigner(key).sign(
        session_id=call.session_id,
        call_id=call.call_id,
        tool_name=call.tool_name,
        arguments=call.arguments,
    )
    return signed.payload, signed.signature


async def test_a_swapped_secret_puts_the_new_key_in_force_and_drops_the_old(
    tmp_path: Path,
) -> None:
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    volume = SecretVolume(tmp_path / "grant")
    volume.publish({"grant-signing.pub": _pem(old)})
    check = grant_check_from_settings(_settings(tmp_path, volume.path("grant-signing.pub")))
    assert isinstance(check, StoreGrantCheck) and check.key_files is not None
    assert await check.reload_keys() == (set(), set())  # nothing changed

    old_unused = _grant(old)
    volume.publish({"grant-signing.pub": _pem(new)})
    added, removed = await check.reload_keys()
    assert added == {key_id(new.public_key())} and removed == {key_id(old.public_key())}
    # A grant of the removed key is refused even though it was never used and is unexpired.
    with pytest.raises(GrantInvalid, match="does not accept"):
        await check(CALL, *old_unused, NO_FINDINGS)
    fresh = _grant(new)
    await check(CALL, *fresh, NO_FINDINGS)
    with pytest.raises(GrantReplayed):  # reloading keys does not forget spent grants
        await check(CALL, *fresh, NO_FINDINGS)


def _ec_key() -> bytes:
    return (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


BAD_CONTENTS = {
    "empty": b"",
    "half-written": b"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA",
    "garbage": b"\x00\xff not a key",
    "another kind of key": _ec_key(),
    "a private key": Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ),
    "too large": b"-----BEGIN PUBLIC KEY-----\n" + b"A" * (MAX_KEY_FILE + 10),
}


@pytest.mark.parametrize("kind", sorted(BAD_CONTENTS))
async def test_a_bad_new_content_keeps_the_last_good_key_and_says_why(
    tmp_path: Path, kind: str
) -> None:
    good = Ed25519PrivateKey.generate()
    volume = SecretVolume(tmp_path / "grant")
    volume.publish({"k.pub": _pem(good)})
    check = grant_check_from_settings(_settings(tmp_path, volume.path("k.pub")))
    assert isinstance(check, StoreGrantCheck) and check.key_files is not None

    volume.publish({"k.pub": BAD_CONTENTS[kind]})
    assert await check.reload_keys() == (set(), set())
    problems = check.key_files.problems
    assert list(problems) == [volume.path("k.pub")]
    assert str(volume.path("k.pub")) in problems[volume.path("k.pub")]
    layer = grant_layer(check)
    assert layer.active and "KEY FILE PROBLEM" in layer.detail
    await check(CALL, *_grant(good), NO_FINDINGS)  # the last good key still verifies

    # Fixed with another key: that key now, the problem gone, the old key refused.
    other = Ed25519PrivateKey.generate()
    volume.publish({"k.pub": _pem(other)})
    assert (await check.reload_keys())[0] == {key_id(other.public_key())}
    assert check.key_files.problems == {}
    call = CallSpec("s", "c2", "read_file", {"file_path": "a.txt"})
    with pytest.raises(GrantInvalid, match="does not accept"):
        await check(call, *_grant(good, call), NO_FINDINGS)
    await check(call, *_grant(other, call), NO_FINDINGS)


async def test_a_vanished_or_unreadable_file_keeps_its_last_good_key(tmp_path: Path) -> None:
    good = Ed25519PrivateKey.generate()
    volume = SecretVolume(tmp_path / "grant")
    volume.publish({"k.pub": _pem(good)})
    files = GrantKeyFiles([volume.path("k.pub")])
    volume.publish({"other.pub": _pem(Ed25519PrivateKey.generate())})  # k.pub now dangles
    assert files.reload() is False
    assert "cannot read" in files.problems[volume.path("k.pub")]
    assert [key_id(k) for k in files.keys()] == [key_id(good.public_key())]
    # A directory where the file was.
    plain = tmp_path / "plain.pub"
    plain.write_bytes(_pem(good))
    files = GrantKeyFiles([plain])
    plain.unlink()
    plain.mkdir()
    assert files.reload() is False and plain in files.problems


async def test_one_file_rotated_while_another_is_broken(tmp_path: Path) -> None:
    """Each file answers for its own key: the rotated one drops its old key even while
    the other file is broken (which keeps its own last good key)."""
    a_old, a_new, b = (Ed25519PrivateKey.generate() for _ in range(3))
    volume = SecretVolume(tmp_path / "grant")
    volume.publish({"a.pub": _pem(a_old), "b.pub": _pem(b)})
    files = GrantKeyFiles([volume.path("a.pub"), volume.path("b.pub")])
    volume.publish({"a.pub": _pem(a_new), "b.pub": b""})
    assert files.reload() is True
    assert [key_id(k) for k in files.keys()] == [
        key_id(a_new.public_key()),
        key_id(b.public_key()),
    ]
    assert list(files.problems) == [volume.path("b.pub")]


def test_a_bad_key_file_still_stops_the_start(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pub"
    empty.write_bytes(b"")
    with pytest.raises(InvalidArgument, match="not a PEM public key"):
        grant_check_from_settings(_settings(tmp_path, empty))
    with pytest.raises(InvalidArgument, match="cannot read"):
        grant_check_from_settings(_settings(tmp_path, tmp_path / "missing.pub"))


def test_the_poll_interval_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOCKADE_EXECUTOR_GRANT_KEY_POLL_S", "0.5")
    assert ExecutorSettings().grant_key_poll_s == 0.5
    monkeypatch.setenv("STOCKADE_EXECUTOR_GRANT_KEY_POLL_S", "0")
    with pytest.raises(ValueError, match="greater than 0"):
        ExecutorSettings()


def test_a_key_file_grown_past_the_bound_is_refused_unread(tmp_path: Path) -> None:
    good = Ed25519PrivateKey.generate()
    path = tmp_path / "k.pub"
    path.write_bytes(_pem(good))
    files = GrantKeyFiles([path])
    with open(path, "wb") as f:
        f.truncate(10 * MAX_KEY_FILE)
    assert files.reload() is False
    assert "larger than" in files.problems[path]
    assert [key_id(k) for k in files.keys()] == [key_id(good.public_key())]
