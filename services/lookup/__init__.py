"""The lookup service: a FastAPI app serving one feature store read-only over HTTP (Arrow IPC).

``main.create_app`` builds the app; ``server.run_server`` runs it under uvicorn
(``featurecache serve STORE``). Settings come from ``FEATURECACHE_*`` environment variables.
"""
