"""The turn pipeline: one path from a translated request to turn events, for every protocol.

``ChatJob`` in (:mod:`~tether.turns.events`), then the stages composed once by the app
factory (:mod:`~tether.turns.stages`: server-side tools, compaction; workflow sessions come
from the layer above, :mod:`tether.workflows.stage`), then one guarded generation
(:mod:`~tether.turns.core`, or :mod:`~tether.turns.chat_core` for a chat backend), whose guard
regenerates on the same scheduler (:mod:`~tether.turns.regenerate`). ``collect`` folds the
events into a reply.

Import from the submodules; this package module imports nothing.
"""
