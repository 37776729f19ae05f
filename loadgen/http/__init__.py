"""The private HTTP/1.1 stack of the replay client: pool, connection, deadlines, stamping.

Response bytes are stamped on arrival (``stamping``); the C chunked decoder
(``_chunked``) is optional. Imports no polars, no analyzers, no simulator.
"""
