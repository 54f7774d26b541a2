"""Every background call of the IDE has a key of its own: a result one call left unread is never
read by another call with the same arguments (which then killed its own running job as a
'cached result'), nor by another browser."""

from __future__ import annotations

import diskcache
from dash import DiskcacheManager

from app.background import PrivateDiskcacheManager


def _tune(clicks, state):
    return clicks, state


ARGS = [1, {"op": "softmax", "sizes": {"R": 64, "C": 64}}]


def test_dash_alone_keys_two_calls_with_the_same_arguments_alike(tmp_path):
    manager = DiskcacheManager(diskcache.Cache(str(tmp_path)))
    assert manager.build_cache_key(_tune, ARGS, [], None) == \
        manager.build_cache_key(_tune, ARGS, [], None)


def test_the_ide_keys_each_call_afresh(tmp_path):
    manager = PrivateDiskcacheManager(diskcache.Cache(str(tmp_path)))
    keys = {manager.build_cache_key(_tune, ARGS, [], None) for _ in range(20)}
    assert len(keys) == 20 and all(len(key) == 64 for key in keys)


def test_a_result_left_unread_is_not_the_next_calls(tmp_path):
    manager = PrivateDiskcacheManager(diskcache.Cache(str(tmp_path)))
    first = manager.build_cache_key(_tune, ARGS, [], None)
    manager.handle.set(first, ["the first page's tune"])  # its page reloaded: never read
    second = manager.build_cache_key(_tune, ARGS, [], None)
    assert manager.get_result(second, None) is manager.UNDEFINED
    assert manager.get_result(first, None) == ["the first page's tune"]
