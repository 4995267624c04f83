"""Sentence embeddings: a BERT-family GGUF on llama.cpp (``LlamaEmbedder``) and the converter that
makes the bundled all-MiniLM-L6-v2 one (``python -m tether.engine.embedding.convert``).

Importing this package loads neither llama.cpp nor ``gguf``; ``LlamaEmbedder`` does when built.
"""

from tether.engine.embedding.base import Embedder, EmbeddingInput, Embeddings, LruCache
from tether.engine.embedding.llama import LlamaEmbedder

__all__ = ["Embedder", "EmbeddingInput", "Embeddings", "LlamaEmbedder", "LruCache"]
