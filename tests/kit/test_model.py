"""The kit's model of the spec judges summarizer calls and blames the rule they break."""

from __future__ import annotations

from typing import Any

from stm_conformance.checks import config, turn
from stm_conformance.model import SpecModel


def _model(total: int = 0) -> SpecModel:
    """Five turns, window of one: u0..u3 pending; with ``total``, the oldest hidden."""
    model = SpecModel(config(full_zone_turns=1, summary_max_tokens=10, total_max_tokens=total))
    for i in range(5):
        model.add(turn(i, pad=40))
    return model


def _payload(model: SpecModel, users: list[str]) -> dict[str, Any]:
    rendered = {t.rendered["user"]: t.rendered for t in model.turns}
    return {"previous_summary": model.summary, "turns": [rendered[u] for u in users]}


def _u(i: int) -> str:
    return turn(i, pad=40).user_message


def test_a_call_sent_the_oldest_pending_turns_in_order_is_legal() -> None:
    model = _model()
    assert model.check_call(_payload(model, [_u(0), _u(1), _u(2), _u(3)])) is None
    # How many of them is the backend's choice.
    assert model.check_call(_payload(model, [_u(0), _u(1)])) is None


def test_leaving_out_turns_the_budget_hid_blames_wm006() -> None:
    model = _model(total=60)
    assert model.hidden >= 1, "the budget must hide the oldest pending turn"
    hidden = [t.rendered["user"] for t in model.pending[: model.hidden]]
    rest = [t.rendered["user"] for t in model.pending[model.hidden :]]
    rule, why = model.check_call(_payload(model, rest))  # type: ignore[misc]
    assert rule == "WM-006", why
    assert str(hidden) in why


def test_leaving_out_a_visible_pending_turn_blames_wm004() -> None:
    model = _model()
    rule, _ = model.check_call(_payload(model, [_u(0), _u(2)]))  # type: ignore[misc]
    assert rule == "WM-004"


def test_turns_out_of_order_or_foreign_blame_wm004() -> None:
    model = _model(total=60)
    assert model.check_call(_payload(model, [_u(1), _u(0)]))[0] == "WM-004"  # type: ignore[index]
    assert model.check_call(_payload(model, [_u(4)]))[0] == "WM-004"  # type: ignore[index]


def test_one_failure_with_no_retries_allowed_degrades() -> None:
    for retries, health in ((0, "degraded"), (1, "retry")):
        model = SpecModel(config(full_zone_turns=1, total_max_tokens=0, retry_attempts=retries))
        for i in range(3):
            model.add(turn(i))
        model.fail_once()
        assert model.health == health
        assert [t.place for t in model.turns[:2]] == (
            ["backlog", "backlog"] if retries == 0 else ["pending", "pending"]
        )
