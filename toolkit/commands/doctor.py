"""``npuscope doctor``: the environment baseline checked against the supported versions."""

from __future__ import annotations

from toolkit.signoff import doctor


def doctor_command(model: str | None = None, as_json: bool = False) -> dict:
    """Check the environment against the compatibility table; with ``model``, also its opset and IR version
    (toolkit.signoff.doctor.doctor_command; ``exit_code`` in the result)."""
    return doctor.doctor_command(model, as_json)
