"""The turn pipeline: one path from a translated request to turn events, for every protocol.

``ChatJob`` in (:mod:`~tether.turns.events`), then the stages composed once by the app
factory (:mod:`~tether.turns.stages`: sessions, server-side tools, compaction), then one
guarded generation (:mod:`~tether.turns.core`), whose guard regenerates on the same
scheduler (:mod:`~tether.turns.regenerate`). ``collect`` folds the events into a reply.

Import from the submodules; this package module imports nothing, so that the workflow
layer can use the job and event types without pulling in the stages that use it.
"""
