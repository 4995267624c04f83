"""The OpenAI-compatible proxy: app factory, protocol adapters and the shared chat core."""
