"""The client's append-only spool: order, acknowledgement across reopen, torn tails."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.client.spool import Spool, SpoolBusy, SpoolFull


def _drain(spool: Spool, step: int = 3) -> list[bytes]:
    out: list[bytes] = []
    while spool.pending:
        payloads, offset = spool.peek(step)
        out.extend(payloads)
        spool.ack(offset, len(payloads))
    return out


def test_records_come_back_in_order_and_the_file_resets(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "audit.spool")
    spool.append([b"a", b"bb", b""])
    spool.append([b"dddd"])
    assert spool.pending == 4
    assert _drain(spool) == [b"a", b"bb", b"", b"dddd"]
    assert (spool.pending, spool.size_bytes) == (0, 0)
    assert (tmp_path / "audit.spool").stat().st_size == 0
    spool.close()


def test_acknowledged_position_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "audit.spool"
    spool = Spool(path)
    spool.append([f"e{i}".encode() for i in range(10)])
    payloads, offset = spool.peek(4)
    spool.ack(offset, len(payloads))
    spool.close()
    again = Spool(path)
    assert again.pending == 6
    assert _drain(again) == [f"e{i}".encode() for i in range(4, 10)]
    again.close()


def test_unacknowledged_peek_is_replayed(tmp_path: Path) -> None:
    path = tmp_path / "audit.spool"
    spool = Spool(path)
    spool.append([b"x", b"y"])
    assert spool.peek(10)[0] == [b"x", b"y"]
    spool.close()  # died before the service acknowledged
    again = Spool(path)
    assert _drain(again) == [b"x", b"y"]
    again.close()


@pytest.mark.parametrize("cut", [1, 5, 9])
def test_torn_tail_is_cut_and_earlier_records_kept(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "audit.spool"
    spool = Spool(path)
    spool.append([b"first", b"second-record"])
    spool.close()
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size - cut)
    again = Spool(path)
    assert again.pending == 1
    again.append([b"third"])
    assert _drain(again) == [b"first", b"third"]
    again.close()


def test_corrupt_record_is_not_replayed_as_data(tmp_path: Path) -> None:
    path = tmp_path / "audit.spool"
    spool = Spool(path)
    spool.append([b"good", b"evil"])
    spool.close()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # flip a payload bit of the last record
    path.write_bytes(bytes(data))
    again = Spool(path)
    assert _drain(again) == [b"good"]
    again.close()


def test_damaged_position_file_replays_everything(tmp_path: Path) -> None:
    path = tmp_path / "audit.spool"
    spool = Spool(path)
    spool.append([b"a", b"b"])
    payloads, offset = spool.peek(1)
    spool.ack(offset, 1)
    spool.close()
    (tmp_path / "audit.spool.ack").write_text("not a number")
    again = Spool(path)
    assert _drain(again) == [b"a", b"b"]
    again.close()


def test_size_limit_refuses_whole_appends(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "audit.spool", max_bytes=40)
    spool.append([b"x" * 10])
    with pytest.raises(SpoolFull):
        spool.append([b"y" * 10, b"z" * 10])
    assert spool.pending == 1
    assert _drain(spool) == [b"x" * 10]
    spool.close()


def test_a_spool_has_one_writer_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "audit.spool"
    first = Spool(path)
    with pytest.raises(SpoolBusy):
        Spool(path)
    first.close()
    second = Spool(path)
    second.close()


def test_acknowledged_prefix_is_compacted_away_and_survives_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stockade.client.spool as spool_module

    monkeypatch.setattr(spool_module, "COMPACT_BYTES", 1000)
    path = tmp_path / "audit.spool"
    spool = Spool(path)
    spool.append([b"x" * 100 for _ in range(20)])  # 2,160 bytes
    payloads, offset = spool.peek(18)
    spool.ack(offset, len(payloads))  # 1,944 acknowledged, 216 left: rewritten
    assert spool.compactions == 1
    assert path.stat().st_size == 216 and spool.pending == 2
    spool.append([b"new"])
    spool.close()
    again = Spool(path)
    assert _drain(again) == [b"x" * 100, b"x" * 100, b"new"]
    again.close()


def test_a_failed_append_leaves_no_torn_record(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "audit.spool", max_bytes=100)
    spool.append([b"a" * 40])
    with pytest.raises(SpoolFull):
        spool.append([b"b" * 40, b"c" * 40])  # all or none
    spool.append([b"d" * 10])
    assert _drain(spool) == [b"a" * 40, b"d" * 10]
    spool.close()
