from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A worker loads Django before it starts: its announcement hooks are connected by then.
        from .sweeps import worker_host

        worker_host.connect_worker_hooks()
