"""The benchmark client: talks to llama-server over HTTP, safely and fast.

target.py   which servers may be contacted (SSRF guard), resolved once
stream.py   one streamed /completion request → its measured outcome
probe.py    /health, /props, /slots, /metrics, /tokenize
"""
