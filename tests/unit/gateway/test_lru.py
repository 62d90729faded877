"""BoundedLru, the map behind the master's read caches, reply cache and JSON memo."""

from __future__ import annotations

import threading

from services.common.lru import BoundedLru


def test_the_least_recently_used_entries_go_first() -> None:
    lru: BoundedLru[str, int] = BoundedLru(3)
    lru.put_many({"a": 1, "b": 2, "c": 3})
    assert lru.get("a") == 1  # "a" is now the most recent
    lru.put("d", 4)
    assert lru.get("b") is None
    assert [lru.get(k) for k in ("a", "c", "d")] == [1, 3, 4]


def test_entries_are_bounded_by_their_total_cost() -> None:
    lru: BoundedLru[str, bytes] = BoundedLru(10, cost=lambda _key, value: len(value))
    lru.put("a", b"xxxx")
    lru.put("b", b"yyyy")
    lru.put("c", b"zzzz")  # 12 > 10: "a" goes
    assert lru.get("a") is None
    assert len(lru) == 2
    assert lru.total_cost == 8
    lru.put("b", b"y")  # replacing an entry counts its new cost only
    lru.put("d", b"ww")
    assert [lru.get(k) for k in ("b", "c", "d")] == [b"y", b"zzzz", b"ww"]


def test_an_entry_larger_than_the_bound_is_not_kept() -> None:
    lru: BoundedLru[str, bytes] = BoundedLru(4, cost=lambda _key, value: len(value))
    lru.put("big", b"x" * 5)
    assert lru.get("big") is None
    assert len(lru) == 0


def test_concurrent_hits_and_inserts_keep_the_bound() -> None:
    lru: BoundedLru[int, int] = BoundedLru(50)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(2000):
                key = (i * 7 + offset) % 200
                if lru.get(key) is None:
                    lru.put(key, key)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert len(lru) <= 50
    assert all(lru.get(k) in (None, k) for k in range(200))
