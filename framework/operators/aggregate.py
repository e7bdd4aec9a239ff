"""Rolling aggregations: one accumulator per key, the result emitted after every record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framework.errors import ProcessingError
from framework.operators.basic import user_error
from framework.state.keys import keyed, state_prefix

if TYPE_CHECKING:
    from framework.operators.context import TaskContext
    from framework.pipeline import steps as S

_MISSING = object()


def require_key(key: Any, step: str) -> None:
    raise ProcessingError("the record has no key, and this step keeps state per key", None, step,
                          fix="re-key the stream with key_by(...) before this step, or produce keyed records")


def build_aggregate(step: S.Aggregate, ctx: TaskContext, down: S.Push) -> S.Push:
    store = ctx.store(step.name)
    get, put = store.get, store.put
    ks = step.key_serde.serialize
    prefix = state_prefix("acc")
    init, add, result, name = step.init, step.add, step.result, step.name

    def push(k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, name)
        skey = keyed(prefix, ks(k))
        acc = get(skey, _MISSING)
        try:
            acc = add(init() if acc is _MISSING else acc, v)
            out = acc if result is None else result(acc)
        except Exception as exc:  # nothing stored yet: the record can be re-driven here
            raise user_error(name, exc, (k, v, ts)) from exc
        put(skey, acc)
        down(k, out, ts)

    return push
