"""The guard's steps, one module each, run in order on every call of a reply.

:mod:`.context` holds what they share (:class:`~.context.GuardContext`, the :data:`~.context.Step`
seam, the requests and verdicts); :data:`tether.guardrails.pipeline.STEPS` puts them in order:
:mod:`.rescue_gate`, :mod:`.names`, :mod:`.arguments`, :mod:`.grounding`, :mod:`.duplicates`,
:mod:`.mentioned`. The package imports none of them itself, so each step function keeps its
module's name without hiding the module.
"""

from __future__ import annotations

__all__: list[str] = []
