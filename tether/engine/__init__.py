"""Inference engines behind one ``Engine`` Protocol, and the scheduler that shares them."""

from tether.engine.base import Done, Engine, EngineInfo, LogitsProcessor, SamplingParams, Token
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine

__all__ = [
    "Done",
    "Engine",
    "EngineInfo",
    "LogitsProcessor",
    "SamplingParams",
    "Scheduler",
    "ScriptedEngine",
    "Token",
]
