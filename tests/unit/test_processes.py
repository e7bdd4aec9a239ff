"""``fw run --processes N``: the instance id, and so the transactional id, of each child."""

from __future__ import annotations

import socket

import pytest

from framework.runtime.processes import child_ids


def test_children_without_an_id_are_named_after_their_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "node-a")
    on_a = child_ids(2, None)
    monkeypatch.setattr(socket, "gethostname", lambda: "node-b")
    on_b = child_ids(2, None)
    assert on_a == ["node-a-0", "node-a-1"] and on_b == ["node-b-0", "node-b-1"]
    assert not set(on_a) & set(on_b)  # two hosts never share a transactional id


def test_a_given_id_names_every_child() -> None:
    assert child_ids(3, "web") == ["web-0", "web-1", "web-2"]
