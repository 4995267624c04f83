"""Deciding and choosing: whether a reply should call a tool, and which offered tool fits.

Small models are worst at exactly these two choices. ``relevance`` scores how well each
offered tool matches the conversation (lexical, model-free); ``decision`` combines that
with the model's own log-odds at the point where its reply becomes a call or an answer.
Both feed layer 0 (:mod:`tether.grammar.constraint`), which applies them in the sampler.
"""
