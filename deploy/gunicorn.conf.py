"""gunicorn for kvlab's web process: `gunicorn -c deploy/gunicorn.conf.py kvlab.wsgi`."""

import multiprocessing
import os

bind = os.environ.get("KVLAB_BIND", "127.0.0.1:8000")  # behind nginx or another TLS proxy
workers = int(os.environ.get("KVLAB_WEB_WORKERS", 2 * multiprocessing.cpu_count() + 1))
threads = 2
timeout = 120  # uploads of large bench files are parsed in the request
accesslog = "-"
forwarded_allow_ips = os.environ.get("KVLAB_FORWARDED_ALLOW_IPS", "127.0.0.1")
