"""Benchmark jobs: the llama-server client, running a job on a worker, submitting and following it."""
