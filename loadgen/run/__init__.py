"""A replay run start to finish: options, session, shards and workers, the recorder,
``run.json``, Prometheus scraping, the endpoint probe and sweeps.
"""
